"""bench/serving.py: the main process serving batches with chunks in flight, under each garbage-collector setting."""
from conftest import import_bench


def test_serving_bench_times_every_setting_against_the_collector_disabled(tiny_config, builtin_tokenizer, capsys):
  serving = import_bench('serving')
  summary = serving.main(['--source=builtin', f'--vocab={builtin_tokenizer.path}', '--in_flight=4', '--batch=64',
                          '--seconds=0.5', '--rounds=3', f'--tfds_data_dir={tiny_config.data.tfds_data_dir}'])
  assert set(summary) == {'frozen', 'python', 'disabled'}
  assert summary['disabled']['of_bound'] == 1.0
  # Disabled, no collection runs at all: the bench's own accounting of pauses reads zero there.
  assert summary['disabled']['gc_share'] == 0 and summary['disabled']['longest_gc_ms'] == 0
  assert all(s['batches_per_second'] > 0 for s in summary.values())
  printed = capsys.readouterr().out
  assert 'a chunk of' in printed and printed.count('x the bound') == 3
