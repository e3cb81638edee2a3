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


# The paper's figures as the issue that asked for the sweep files quotes them from the paper (Tables 3, 4 and 7-12):
# each sweep file must carry the same.
PAPER_AVG = {
    'table4_embedding.py': {'sharing=all,embedding_size=64': 79.0, 'sharing=all,embedding_size=768': 79.8},
    'table7_layers.py': dict(zip([f'num_layers={n}' for n in (1, 3, 6, 12, 24, 48)],
                                 (52.9, 71.2, 77.2, 81.5, 82.1, 81.8))),
    'table8_width.py': dict(zip([f'hidden_size={h},num_heads={h // 64},intermediate_size={4 * h}'
                                 for h in (1024, 2048, 4096, 6144)], (71.2, 74.6, 76.3, 74.0))),
    'table9_equal_time.py': {'config=bert_large': 87.2, 'config=xxlarge': 88.7},
    'table10_depth.py': {'num_layers=12': 88.7, 'num_layers=24': 88.7},
    'table11_more_data.py': dict(zip(['source=wikipedia_20230601.en@3+pg19@1',
                                      'source=wikipedia_20230601.en@3+pg19@1+c4_en@36'], (80.1, 80.8))),
    'table12_dropout.py': {'dropout_rate=0.1,attention_dropout_rate=0.1': 90.4,
                           'dropout_rate=0.0,attention_dropout_rate=0.0': 90.7}}
SPEEDUP = {'bert_base': '17.7x', 'bert_large': '3.8x', 'bert_xlarge': '1.0', 'base': '21.1x', 'large': '6.5x',
           'xlarge': '2.4x', 'xxlarge': '1.2x'}


@pytest.mark.parametrize('name', sorted(p.name for p in (REPO / 'configs' / 'sweeps').glob('table*.py')))
def test_each_tables_dry_run_lists_the_papers_grid_with_its_figures(name, capsys):
  """Every sweep file's dry run lists its grid, one run per row of the paper's table, each with the paper's
  figures; its miniature lists as many runs, each standing for the paper's setting in the same place."""
  file = f'configs/sweeps/{name}'
  loaded = sweep.load_sweep_file(file)
  grid = [sweep.run_name(*r) for r in sweep.all_runs(loaded) if r[1] is None]
  assert set(loaded['paper']) == set(grid), (loaded['paper'], grid)
  for run, avg in PAPER_AVG.get(name, {}).items():
    assert loaded['paper'][run]['Avg'] == avg, run
  if name == 'table3_configs.py':
    assert {r.removeprefix('config='): loaded['paper'][r]['speedup'] for r in grid} == SPEEDUP
    assert loaded['speedup_of'] == 'config=bert_xlarge'
  sweep.main([f'--sweep={file}', '--workdir=/tmp/dry', '--dry-run'])
  out = capsys.readouterr().out
  assert out.splitlines()[0].endswith(': ' + ', '.join(sweep.run_name(*r) for r in sweep.all_runs(loaded)))
  assert out.count(' -m albert_jax.train ') == len(sweep.all_runs(loaded)) or loaded['train_hours']
  if loaded['miniature']:
    mini = sweep.in_miniature(loaded)
    assert [mini['paper'][sweep.run_name(*r)]['setting'] for r in sweep.all_runs(mini) if r[1] is None] == grid
    sweep.main([f'--sweep={file}', '--workdir=/tmp/dry', '--dry-run', '--miniature'])
    assert f'--config={mini["config"]}' in capsys.readouterr().out
  else:
    assert name in ('table3_configs.py', 'table9_equal_time.py', 'table6_real_text.py')


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
  # One run's held-out accuracy carries the binomial standard error of its count: sqrt(p (1 - p) / n).
  def se(r, name):
    p, n = r[f'eval_{name}_accuracy'], r[f'eval_{name}_count']
    return f'{(p * (1 - p) / n) ** 0.5:.4f}'
  assert table[2].startswith(f'| sentence_task=none | {none["eval_mlm_accuracy"]:.4f} ± {se(none, "mlm")} | n/a | '), \
      table[2]
  assert table[3].startswith('| sentence_task=nsp | ' + f'{result["eval_mlm_accuracy"]:.4f} ± {se(result, "mlm")} | '
                             f'{result["eval_sop_accuracy"]:.4f} (majority {result["eval_sop_majority"]:.3f}) ± '
                             f'{se(result, "sop")} | {result["eval_swap_accuracy"]:.4f} (majority 0.500) ± '
                             f'{se(result, "swap")} |'), table[3]
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


def test_a_branch_resumes_from_its_sources_checkpoint_and_the_report_draws_curves_and_speedup(tiny_config, tmp_path):
  """CONTINUED: a run with dropout branches from another's checkpoint of step 2 without it (Table 12's partway
  removal): it resumes there (steps 3-4 trained, 1-2 not), and its step 3 differs from its source's, dropout being
  off. The report's speedup column divides by the source's steps/s; curves.png draws each run's logged losses."""
  spec = tmp_path / 'spec.py'
  spec.write_text("CONFIG = 'configs/tiny.py'\nSWEEP = {'model.dropout_rate': [0.1]}\nFIXED = {'train.log_every': 1}\n"
                  "CONTINUED = [{'from': 'dropout_rate=0.1', 'step': 2, 'overrides': {'model.dropout_rate': 0.0}}]\n"
                  "SPEEDUP_OF = 'dropout_rate=0.1'\nCURVES = ['loss']\n")
  root = tmp_path / 'runs'
  shrink = [a for a in SHRINK if 'num_steps' not in a and 'checkpoint_every' not in a]
  sweep.main([f'--sweep={spec}', f'--workdir={root}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
              '--config.train.num_steps=4', '--config.train.checkpoint_every=2', *shrink])
  source, branch = root / 'dropout_rate=0.1', root / 'dropout_rate=0.0,from=dropout_rate=0.1@2'
  assert 'resumed from step 2' in (branch / 'train.log').read_text()
  assert json.loads((branch / 'result.json').read_text())['step'] == 4
  drawn = sweep.plot_curves(sweep.load_sweep_file(str(spec)), sweep.all_runs(sweep.load_sweep_file(str(spec))), root)
  losses = {run: dict(points) for run, points in drawn['loss'].items()}
  assert sorted(losses[source.name]) == [1, 2, 3, 4] and sorted(losses[branch.name]) == [3, 4]
  assert losses[branch.name][3] != losses[source.name][3]
  assert (root / 'curves.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  table = (root / 'report.md').read_text().splitlines()
  assert table[0].endswith('| steps | hours | steps_per_s | speedup |'), table[0]
  assert table[2].endswith(' | 4 | ' + table[2].split(' | ')[-3] + ' | ' + table[2].split(' | ')[-2] + ' | 1.00x |')
  # The table's steps/s are rounded to 3 significant digits (each within 0.5% of its value), its speedup to 2
  # decimals of the unrounded rates' ratio: equal within both roundings.
  rates = [float(row.split(' | ')[-2]) for row in table[2:4]]
  shown, ratio = float(table[3].split(' | ')[-1].rstrip('x |')), rates[1] / rates[0]
  assert abs(shown - ratio) <= 0.005 + 0.011 * ratio, (table[2], table[3])


def test_equal_time_gives_each_run_the_steps_its_measured_rate_fills(tmp_path, capsys):
  """Each run's probe logs its steps/s (here by TensorBoard's writer, as training does); the median of its windows
  times the hours is its num_steps, kept in equal_time.json: a second sweep measures nothing again, and another
  time budget is refused."""
  from albert_jax import metrics
  windows = {'config=bert_large': [2.0, 1.0, 3.0], 'config=xxlarge': [0.5, 0.7, 0.6, 0.4]}
  probed = []

  def probe(overrides, workdir):
    name = workdir.parent.name
    probed.append((name, overrides['train.num_steps']))
    writer = metrics.Writer(workdir, enabled=True)
    for step, rate in enumerate(windows[name], 2):
      writer.scalars(step, {'steps_per_sec': rate})
    writer.close()

  loaded = sweep.load_sweep_file('configs/sweeps/table9_equal_time.py')
  runs = sweep.all_runs(loaded)
  steps = sweep.equal_time_steps(loaded, runs, paths.path(tmp_path), 0.5, probe)
  assert probed == [('config=bert_large', sweep.PROBE_STEPS), ('config=xxlarge', sweep.PROBE_STEPS)]
  assert steps == {'config=bert_large': 3600, 'config=xxlarge': int(0.5 * 3600 * 0.55)}  # medians 2.0 and 0.55
  assert sweep.equal_time_steps(loaded, runs, paths.path(tmp_path), 0.5, probe) == steps and len(probed) == 2
  with pytest.raises(SystemExit, match='was measured for 0.5 hours, not 2.0'):
    sweep.equal_time_steps(loaded, runs, paths.path(tmp_path), 2.0, probe)
  # The training commands carry the steps (the probe's record in place, nothing measured again).
  sweep.main(['--sweep=configs/sweeps/table9_equal_time.py', f'--workdir={tmp_path}', '--train_hours=0.5',
              '--dry-run'])
  out = capsys.readouterr().out
  assert 'equal time: each run' in out and '--train_hours' not in out
