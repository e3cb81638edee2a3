"""launch/sweep.py: expanding grids and zips, naming runs, and a real two-run local sweep with a follow-up
evaluation, collected into a table and a PNG plot."""
import json
import pathlib
import re

from absl import flags
from ml_collections import config_flags
import pytest

from albert_jax import paths
from launch import sweep

REPO = pathlib.Path(__file__).resolve().parent.parent

SHRINK = ['--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64',
          '--config.train.batch_size=8', '--config.train.num_steps=3', '--config.train.warmup_steps=1',
          '--config.train.eval_every=3', '--config.train.checkpoint_every=3', '--config.train.eval_batches=1',
          '--config.train.fill_mask_text=', '--config.train.fill_mask_word=']


def test_grid_zip_and_names():
  axes = sweep.parse_spec('model.embedding_size=16,32 config.model.sharing=all,none')
  assert axes == {'model.embedding_size': ['16', '32'], 'model.sharing': ['all', 'none']}
  grid = sweep.expand(axes, 'grid')
  assert len(grid) == 4 and grid[1] == {'model.embedding_size': '16', 'model.sharing': 'none'}
  assert sweep.expand(axes, 'zip') == [{'model.embedding_size': '16', 'model.sharing': 'all'},
                                       {'model.embedding_size': '32', 'model.sharing': 'none'}]
  assert sweep.run_name(grid[1]) == 'embedding_size=16,sharing=none'
  with pytest.raises(ValueError, match='one length'):
    sweep.expand({'a': [1, 2], 'b': [1]}, 'zip')
  with pytest.raises(ValueError, match='key=v1,v2'):
    sweep.parse_spec('model.embedding_size')


def test_shipped_sweep_files_reproduce_paper_tables():
  table4 = sweep.load_sweep_file('configs/sweeps/table4_embedding.py')
  assert [sweep.run_name(r) for r in sweep.expand(table4['axes'], table4['mode'])] == list(table4['paper'])
  table5 = sweep.load_sweep_file('configs/sweeps/table5_sharing.py')
  assert [r['model.sharing'] for r in sweep.expand(table5['axes'], 'grid')] == ['all', 'attention', 'ffn', 'none']
  table6 = sweep.load_sweep_file('configs/sweeps/table6_sentence_task.py')
  columns = set(sweep.METRICS) | set(sweep.follow_up_columns(table6))  # columns the report has
  assert set(table6['paper_metrics'].values()) <= columns and 'sop_mlm_accuracy' in columns
  assert set(table6['paper']) == {sweep.run_name(r) for r in sweep.expand(table6['axes'], 'grid')}


def test_real_text_table6_fine_tunes_on_the_shared_glue_folders():
  table6 = sweep.load_sweep_file('configs/sweeps/table6_real_text.py')
  assert set(table6['paper']) == {sweep.run_name(r) for r in sweep.expand(table6['axes'], 'grid')}
  assert sweep.finetune_columns(table6) == ['finetune_sst2', 'finetune_mrpc']  # named by the config's argument
  assert table6['finetune_seeds'] == [0, 1, 2]
  for spec in table6['finetune']:  # every override parses against its task's config, as finetune's flags do
    config_file, *overrides = spec.split()
    argv = ['finetune', f'--config={config_file}', *overrides]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file('config', flag_values=flag_values, sys_argv=argv)
    flag_values(argv)
    config = flag_values.config
    assert not config.task.test_predictions and config.train.num_steps > config.train.warmup_steps
    # The absolute GLUE folder is the one docs/downstream_results.md uses, holding this task's train and dev files.
    folder = pathlib.Path(config.task.data) / {'sst2': 'SST-2', 'mrpc': 'MRPC'}[config.task.name]
    assert folder.samefile(REPO.parent / 'shared' / 'data' / 'glue' / folder.name)
    assert (folder / 'train.tsv').is_file() and (folder / 'dev.tsv').is_file()


def test_local_sweep_runs_evaluates_and_reports(tiny_config, builtin_tokenizer, tmp_path, tmp_path_factory):
  """Two runs (each a training, an evaluation and a fine-tuning process): one without a sentence task, one with NSP,
  the task every other test leaves aside (SOP is the default there); the follow-up evaluation reads NSP pairs."""
  spec = tmp_path / 'spec.py'
  finetune = (f'configs/finetune/builtin.py --config.data.tfds_data_dir={tiny_config.data.tfds_data_dir} '
              '--config.train.num_steps=4 --config.train.warmup_steps=1 --config.train.checkpoint_every=2 '
              '--config.train.batch_size=8')
  spec.write_text("CONFIG = 'configs/tiny.py'\nSWEEP = {'data.sentence_task': ['none', 'nsp']}\n"
                  f"EVALUATE = [{{'data.sentence_task': 'nsp'}}]\nFINETUNE = [{finetune!r}]\n")
  root = tmp_path / 'runs'
  sweep.main([f'--sweep={spec}', f'--workdir={root}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
              *SHRINK])
  for task in ('none', 'nsp'):
    result = json.loads((root / f'sentence_task={task}' / 'result.json').read_text())
    assert result['step'] == 3
    # The console names the sentence task the run trains (an NSP run's accuracy is not SOP's); a run without one
    # gives no sentence figure for its own instances (single segments, all labelled 0), in the log or the result.
    log = (root / f'sentence_task={task}' / 'train.log').read_text()
    steps = [line for line in log.splitlines() if re.match(r'step \d+/3  ', line)]
    named = f'  {task}_acc [\\d.]+' if task != 'none' else ''
    assert re.match(rf'step 3/3  loss [\d.]+  mlm_acc [\d.]+{named}  [\d.]+ steps/s', steps[-1]), steps
    assert not [line for line in steps if re.search(r' (sop|nsp)_acc ', line) and f' {task}_acc ' not in line]
    held_out = [line for line in log.splitlines() if ' held-out: ' in line]
    assert held_out and all(('sop_accuracy' in line) == (task != 'none') for line in held_out), held_out
    assert ('eval_sop_accuracy' in result) == (task != 'none')
    evaluated = json.loads((root / f'sentence_task={task}' / 'eval-nsp.json').read_text())
    assert evaluated['step'] == 3
    if task == 'nsp':  # the same checkpoint on the same held-out batches: the training run's own final figures
      assert evaluated['eval_mlm_accuracy'] == pytest.approx(result['eval_mlm_accuracy'], abs=1e-6)
      assert evaluated['eval_sop_accuracy'] == pytest.approx(result['eval_sop_accuracy'], abs=1e-6)
  none = json.loads((root / 'sentence_task=none' / 'result.json').read_text())
  table = (root / 'report.md').read_text().splitlines()
  assert table[0] == ('| run | eval_mlm_accuracy | eval_sop_accuracy | eval_swap_accuracy | eval_random_accuracy '
                      '| eval_mlm_loss | nsp_accuracy | nsp_mlm_accuracy | finetune_builtin | finetune_average |')
  assert table[2].startswith(f'| sentence_task=none | {none["eval_mlm_accuracy"]:.4f} | n/a | '), table[2]
  assert table[3].startswith('| sentence_task=nsp | ' + f'{result["eval_mlm_accuracy"]:.4f} | '
                             f'{result["eval_sop_accuracy"]:.4f} (majority {result["eval_sop_majority"]:.3f}) | '
                             f'{result["eval_swap_accuracy"]:.4f} (majority 0.500) |')
  # A loss has no majority rate; the follow-up evaluation's MLM is the nsp run's own (same held-out instances).
  assert f'| {result["eval_mlm_loss"]:.4f} | {result["eval_sop_accuracy"]:.4f} (majority ' \
         f'{result["eval_sop_majority"]:.3f}) | {result["eval_mlm_accuracy"]:.4f} |' in table[3], table[3]
  # The fine-tuning follow-up: the best dev accuracy of the built-in task, from the run's own checkpoint.
  finetuned = json.loads((root / 'sentence_task=nsp' / 'finetune-builtin' / 'result.json').read_text())
  assert finetuned['metric'] == 'eval_accuracy' and finetuned['score'] == finetuned['eval_accuracy']
  assert table[3].endswith(f'| {finetuned["score"]:.4f} | {finetuned["score"]:.4f} |'), table[3]
  assert (root / 'report.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  # Run again: finished runs are not repeated; one without a result.json (as after SIGTERM) is resumed, here from
  # its last checkpoint, and reports the same figures.
  before = (root / 'sentence_task=none' / 'result.json').stat().st_mtime
  (root / 'sentence_task=nsp' / 'result.json').unlink()
  sweep.main([f'--sweep={spec}', f'--workdir={root}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
              *SHRINK])
  assert (root / 'sentence_task=none' / 'result.json').stat().st_mtime == before
  assert json.loads((root / 'sentence_task=nsp' / 'result.json').read_text()) == result


def test_tpu_target_dry_run_starts_each_run_on_the_pod(capsys):
  sweep.main(['--sweep=model.sharing=all,none', '--config=configs/base.py', '--workdir=gs://b/sweep',
              '--target=tpu', '--name=albert', '--zone=europe-west4-a', '--dry-run'])
  out = capsys.readouterr().out
  assert out.count("--worker=all '--command=mkdir -p") == 2
  assert '--workdir=gs://b/sweep/sharing=none --distributed --config.model.sharing=none' in out


def test_report_of_runs_in_a_bucket(bucket, capsys):
  """After a sweep on a pod (--target=tpu), --report collects the runs' results from their gs:// workdirs and
  writes the table and the plot there."""
  results = {'sharing=all': {'eval_mlm_accuracy': 0.25, 'eval_sop_accuracy': 0.75, 'eval_sop_majority': 0.5},
             'sharing=none': {'eval_mlm_accuracy': 0.5}}  # finished without a sentence figure, as task 'none' does
  for run, result in results.items():
    paths.path(f'{bucket}/sweep/{run}/result.json').write_text(json.dumps({'step': 3, **result}))
  sweep.main(['--sweep=model.sharing=all,none', '--config=configs/base.py', f'--workdir={bucket}/sweep', '--report'])
  table = paths.path(f'{bucket}/sweep/report.md').read_text().splitlines()
  assert table[0] == '| run | eval_mlm_accuracy | eval_sop_accuracy |'
  assert table[2:] == ['| sharing=all | 0.2500 | 0.7500 (majority 0.500) |',
                       '| sharing=none | 0.5000 | n/a |']
  assert paths.path(f'{bucket}/sweep/report.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert f'table: {bucket}/sweep/report.md' in capsys.readouterr().out


def test_a_sweep_into_a_missing_bucket_is_refused(gcs_server, capsys):
  with pytest.raises(SystemExit) as stop:
    sweep.main(['--sweep=model.sharing=all,none', '--config=configs/base.py', '--workdir=gs://no-such-bucket/s'])
  assert stop.value.code == 2 and 'bucket gs://no-such-bucket does not exist' in capsys.readouterr().err


def test_fine_tuning_seeds_run_each_task_per_seed_and_report_mean_and_error(tmp_path, capsys):
  """FINETUNE_SEEDS: one fine-tuning run per task and seed, each seed passed as train.seed; the report gives each
  task's mean over the seeds ± the standard error of that mean, and the Avg over the per-seed Avgs only once every
  task has every seed."""
  import statistics
  spec = tmp_path / 'spec.py'
  spec.write_text("CONFIG = 'configs/tiny.py'\nSWEEP = {'model.sharing': ['all', 'none']}\n"
                  "FINETUNE = ['configs/finetune/wiki_books_cpu_hour.py:sst2', "
                  "'configs/finetune/wiki_books_cpu_hour.py:mrpc']\nFINETUNE_SEEDS = [0, 3, 7]\n")
  root = tmp_path / 'runs'
  sweep.main([f'--sweep={spec}', f'--workdir={root}', '--dry-run'])
  commands = [line for line in capsys.readouterr().out.splitlines() if 'albert_jax.finetune' in line]
  assert len(commands) == 2 * 2 * 3
  for task in ('sst2', 'mrpc'):
    for seed, folder in ((0, f'finetune-{task}'), (3, f'finetune-{task}-seed3'), (7, f'finetune-{task}-seed7')):
      assert [c for c in commands if f'sharing=all/{folder} ' in c and c.endswith(f' --config.train.seed={seed}')]

  scores = {'all': {'sst2': {0: 0.80, 3: 0.82, 7: 0.81}, 'mrpc': {0: 0.70, 3: 0.66, 7: 0.71}},
            'none': {'sst2': {0: 0.75, 3: 0.77}, 'mrpc': {0: 0.69}}}  # the second run's seeds are not all done
  for run, tasks in scores.items():
    workdir = root / f'sharing={run}'
    workdir.mkdir(parents=True)
    (workdir / 'result.json').write_text(json.dumps({'step': 3, 'eval_mlm_accuracy': 0.1}))
    for task, by_seed in tasks.items():
      for seed, score in by_seed.items():
        folder = workdir / (f'finetune-{task}' + (f'-seed{seed}' if seed else ''))
        folder.mkdir()
        (folder / 'result.json').write_text(json.dumps({'score': score}))
  sweep.main([f'--sweep={spec}', f'--workdir={root}', '--report'])
  table = (root / 'report.md').read_text().splitlines()
  assert table[0] == '| run | eval_mlm_accuracy | finetune_sst2 | finetune_mrpc | finetune_average |'
  error = lambda values: statistics.stdev(values) / len(values) ** 0.5
  sst2, mrpc = scores['all']['sst2'], scores['all']['mrpc']
  averages = [(sst2[s] + mrpc[s]) / 2 for s in (0, 3, 7)]
  assert table[2] == (f'| sharing=all | 0.1000 | {statistics.mean(sst2.values()):.4f} ± {error(sst2.values()):.4f} '
                      f'(3 seeds) | {statistics.mean(mrpc.values()):.4f} ± {error(mrpc.values()):.4f} (3 seeds) | '
                      f'{statistics.mean(averages):.4f} ± {error(averages):.4f} (3 seeds) |')
  assert table[3] == '| sharing=none | 0.1000 | 0.7600 ± 0.0100 (2 seeds) | 0.6900 | not run |'

  spec.write_text(spec.read_text().replace('[0, 3, 7]', '[0, 3, 3]'))
  with pytest.raises(ValueError, match=r'FINETUNE_SEEDS \[0, 3, 3\]: write a list of distinct seeds'):
    sweep.load_sweep_file(str(spec))
