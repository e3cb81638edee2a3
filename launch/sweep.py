"""Config-override sweeps: expand a grid or zip of overrides, run each (locally one after another, or on a TPU pod),
and report every run's final held-out metrics as a table and a plot.

  python -m launch.sweep --config=configs/tiny.py --sweep='model.embedding_size=16,32,64' --workdir=/tmp/e_sweep
  python -m launch.sweep --sweep=configs/sweeps/table4_embedding.py --workdir=/tmp/table4      # a sweep file
  python -m launch.sweep --sweep=configs/sweeps/table4_embedding.py --workdir=/tmp/table4 --report
  python -m launch.sweep ... --target=tpu --name=albert --zone=europe-west4-a --accelerator=v3-64  # gs:// workdir

A command-line SPEC is space-separated axes `key=v1,v2,...`, crossed (--mode=grid) or paired (--mode=zip). A
sweep file is a Python file with CONFIG (the base config file), SWEEP ({key: [values]}), optional MODE ('grid' or
'zip'), FIXED ({key: value} for every run), EVALUATE (a list of {data.key: value} held-out evaluations to run
after training, e.g. with another sentence task: the report shows their sentence-task accuracy as TASK_accuracy
and their MLM accuracy as TASK_mlm_accuracy, the same held-out instances for every run) and PAPER (the paper's
figures per run, shown beside ours; PAPER_METRICS maps those that measure one of our metrics, in %, to it, and the
plot draws them beside our bars). FINETUNE (a list of configs/finetune/*.py files, each optionally with
its argument, FILE.py:TASK, and ' --config.x=v' overrides) fine-tunes every run's best checkpoint on those tasks
after training, as the paper scores every pretraining variant downstream: the report shows each task's dev score
(its checkpoint-selection metric, on a 0-1 scale) as finetune_TASK and their mean as finetune_average, the paper's
"Avg" column. FINETUNE_SEEDS (default [0]) fine-tunes each once per seed (train.seed: the head's init, dropout and
the order of the examples; workdir finetune-TASK for seed 0, finetune-TASK-seedN for the others): the report
shows each score as the mean over the seeds ± its standard error, and the Avg as the mean of the per-seed Avgs.
Each run's name and workdir come from its overrides (embedding_size=16). A run whose workdir already holds a
result.json is not run again, so an interrupted sweep continues where it stopped.

An axis named `config` takes config files (the runs of Table 3 are seven configs). MINIATURE ({'config', 'sweep',
'fixed', optional 'mode'}) is the same grid at a scale a CPU runs in an hour, run with --miniature; its runs are
matched to the paper's by their place in the grid. SPEEDUP_OF names the run the report's speedup column divides
by (its steps/s: the median of the logged windows after the first step, so compilation is left out). TRAIN_HOURS
(or --train_hours) gives every run the same training time instead of the same steps: each run's step rate is
measured first by a short run of it on the same devices (WORKDIR/RUN/probe), and its train.num_steps set to fill
the time (the schedule's warmup, evaluations and checkpoints follow num_steps as the configs derive them);
equal_time.json keeps the measurement. CONTINUED lists runs that branch from another's checkpoint ({'from': RUN,
'step': N, 'overrides': {...}}): its checkpoint of step N is copied into the branch's workdir, which resumes
from it with the branch's overrides (the paper's dropout removed partway). CURVES (TensorBoard tags) draws each
tag by step for every run into curves.png (Figures 1 and 3).
"""
import argparse
import importlib.util
import itertools
import io
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from albert_jax import failures, goodput, metrics, paths, stats
from launch import tpu

REPO = pathlib.Path(__file__).resolve().parent.parent
METRICS = ('eval_mlm_accuracy', 'eval_sop_accuracy', 'eval_swap_accuracy', 'eval_random_accuracy',
           'eval_blimp_accuracy', 'eval_mlm_loss')


def parse_spec(spec: str) -> dict:
  axes = {}
  for axis in spec.split():
    key, sep, values = axis.partition('=')
    if not sep or not values:
      raise ValueError(f'sweep axis {axis!r}: write key=v1,v2,... (e.g. model.embedding_size=16,32,64)')
    axes[key.removeprefix('config.')] = values.split(',')
  return axes


def load_sweep_file(path: str) -> dict:
  if not pathlib.Path(path).is_file():
    raise ValueError(f'{path}: no such sweep file (see configs/sweeps/ for examples).')
  spec = importlib.util.spec_from_file_location('sweep', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, 'SWEEP') or not hasattr(module, 'CONFIG'):
    raise ValueError(f'{path}: a sweep file defines CONFIG (a config file) and SWEEP ({{key: [values]}}).')
  seeds = getattr(module, 'FINETUNE_SEEDS', [0])
  if not (isinstance(seeds, list) and seeds and all(type(s) is int and s >= 0 for s in seeds)
          and len(set(seeds)) == len(seeds)):
    raise ValueError(f'{path}: FINETUNE_SEEDS {seeds!r}: write a list of distinct seeds, e.g. [0, 1, 2].')
  sweep = {'config': module.CONFIG, 'axes': module.SWEEP, 'mode': getattr(module, 'MODE', 'grid'),
           'fixed': getattr(module, 'FIXED', {}), 'evaluate': getattr(module, 'EVALUATE', []),
           'finetune': getattr(module, 'FINETUNE', []), 'finetune_seeds': seeds,
           'paper': getattr(module, 'PAPER', {}), 'paper_metrics': getattr(module, 'PAPER_METRICS', {}),
           'miniature': getattr(module, 'MINIATURE', None), 'speedup_of': getattr(module, 'SPEEDUP_OF', None),
           'train_hours': getattr(module, 'TRAIN_HOURS', None), 'continued': getattr(module, 'CONTINUED', []),
           'curves': getattr(module, 'CURVES', [])}
  names = [run_name(r) for r in expand(sweep['axes'], sweep['mode'])]
  mini = sweep['miniature']
  if mini is not None and (set(mini) - {'config', 'sweep', 'fixed', 'mode', 'finetune'} or 'sweep' not in mini or
                           len(expand(mini['sweep'], mini.get('mode', sweep['mode']))) != len(names)):
    raise ValueError(f"{path}: MINIATURE holds 'config', 'sweep', 'fixed', 'mode' and 'finetune', its grid as "
                     f"many runs as SWEEP's ({len(names)}).")
  for branch in sweep['continued']:
    if branch.get('from') not in names or type(branch.get('step')) is not int or not branch.get('overrides'):
      raise ValueError(f"{path}: CONTINUED {branch!r}: write {{'from': one of {names}, 'step': N, 'overrides': "
                       f"{{key: value}}}}.")
  if sweep['speedup_of'] is not None and sweep['speedup_of'] not in names:
    raise ValueError(f'{path}: SPEEDUP_OF {sweep["speedup_of"]!r} is none of the runs {names}.')
  return sweep


def in_miniature(sweep: dict) -> dict:
  """The sweep at its MINIATURE scale: its config, grid and fixed settings, the paper's figures (and the speedup's
  reference and the branches' sources) moved to the miniature run in the same place of the grid, each with the
  paper's setting it stands for."""
  mini = sweep['miniature']
  if mini is None:
    raise ValueError('--miniature: this sweep file has no MINIATURE (the same grid at a CPU\'s scale).')
  ours = {run_name(p): run_name(m) for p, m in zip(expand(sweep['axes'], sweep['mode']),
                                                  expand(mini['sweep'], mini.get('mode', sweep['mode'])))}
  return {**sweep, 'config': mini.get('config', sweep['config']), 'axes': mini['sweep'],
          'mode': mini.get('mode', sweep['mode']), 'fixed': mini.get('fixed', {}),
          'finetune': mini.get('finetune', []),  # the paper's tasks are a pod's work
          'paper': {mine: {'setting': theirs, **sweep['paper'].get(theirs, {})} for theirs, mine in ours.items()},
          'speedup_of': ours.get(sweep['speedup_of']),
          'continued': [{**b, 'from': ours[b['from']], 'step': b.get('miniature_step', b['step'])}
                        for b in sweep['continued']]}


def all_runs(sweep: dict) -> list:
  """The grid's runs, then the branches (CONTINUED), each as (overrides, the run it branches from and the step, or
  None)."""
  runs = [(r, None) for r in expand(sweep['axes'], sweep['mode'])]
  runs += [(b['overrides'], (b['from'], b['step'])) for b in sweep['continued']]
  names = [run_name(*r) for r in runs]
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise ValueError(f'two runs of the sweep would share the workdir {twice[0]}: give their values names that '
                     f'differ (a data.source is named by its sources\' kinds and weights).')
  return runs


def expand(axes: dict, mode: str) -> list:
  """[{key: value}, ...]: every combination (grid), or the i-th value of every axis together (zip)."""
  keys = list(axes)
  if mode == 'zip':
    lengths = {k: len(v) for k, v in axes.items()}
    if len(set(lengths.values())) > 1:
      raise ValueError(f'--mode=zip needs axes of one length; got {lengths}')
    combos = zip(*axes.values())
  else:
    combos = itertools.product(*axes.values())
  return [dict(zip(keys, combo)) for combo in combos]


def run_name(overrides: dict, branch=None) -> str:
  """embedding_size=16,sharing=none; a config axis by the file's stem (config=bert_large); a branch with its
  source: dropout_rate=0.0,from=dropout_rate=0.1@62500."""
  name = ','.join(f'{key.rsplit(".", 1)[-1]}={value_name(key, value)}' for key, value in overrides.items())
  return (name + (f',from={branch[0]}@{branch[1]}' if branch else '')).replace('/', '_')


def value_name(key: str, value) -> str:
  """A value as a run's name shows it: a config file by its stem; a data.source by its sources' kinds (a TFDS
  dataset by its name) and weights, not their paths, whose globs make no folder name (wikiextractor@7+pg19@1)."""
  if key == 'config':
    return pathlib.Path(value).stem
  if key == 'data.source':
    named = []
    for source in str(value).split(','):
      kind, _, rest = source.partition(':')
      weight = '@' + rest.rsplit('@', 1)[1] if '@' in rest else ''
      named.append((rest.rsplit('@', 1)[0] if kind == 'tfds' else kind.split('[')[0]) + weight)
    return '+'.join(named)
  return str(value)


def flags(overrides: dict) -> list:
  """The --config.x=v flags of `overrides` (a config axis is the --config itself: `config_file`)."""
  return [f'--config.{key}={value}' for key, value in overrides.items() if key != 'config']


def config_file(sweep: dict, overrides: dict) -> str:
  return overrides.get('config', sweep['config'])


def run_flags(sweep: dict, overrides: dict, workdir) -> list:
  """What a run's training (and its follow-up evaluations) is given: its config, workdir and overrides."""
  return [f'--config={config_file(sweep, overrides)}', f'--workdir={workdir}', *flags(sweep['fixed']),
          *flags(overrides)]


def finished(workdir: paths.Path, what: str) -> bool:
  """Training is finished when it wrote result.json (a run stopped by SIGTERM exits 0 without one); an evaluation
  when its file is of the same step as that result."""
  result = workdir / 'result.json'
  if what == 'train' or not result.exists():
    return result.exists()
  if what.startswith('finetune-'):
    return (workdir / what / 'result.json').exists()
  evaluated = workdir / f'{what}.json'
  return evaluated.exists() and json.loads(evaluated.read_text())['step'] == json.loads(result.read_text())['step']


def run_local(sweep: dict, runs: list, root: paths.Path, dry_run: bool, steps: dict, attempts: int = 3) -> None:
  """Each of `runs` (all_runs) trained, then evaluated and fine-tuned as the sweep file asks, one after another;
  `steps`: {run name: train.num_steps} where equal time set them."""
  for i, (overrides, branch) in enumerate(runs):
    name = run_name(overrides, branch)
    workdir = root / name
    common = run_flags(sweep, overrides, workdir) + flags({'train.num_steps': steps[name]} if name in steps else {})
    commands = [('train', [sys.executable, '-m', 'albert_jax.train', *common])]
    commands += [(f'eval-{extra.get("data.sentence_task", j)}', [sys.executable, '-m', 'albert_jax.evaluate',
                                                                  *common, *flags(extra)])
                 for j, extra in enumerate(sweep['evaluate'])]
    for config, *overrides in (spec.split() for spec in sweep['finetune']):
      for seed in sweep['finetune_seeds']:
        what = finetune_dir(config, seed)
        commands.append((what, [sys.executable, '-m', 'albert_jax.finetune', f'--config={config}',
                                f'--config.init={workdir}', f'--workdir={workdir / what}', *overrides,
                                f'--config.train.seed={seed}']))
    for what, argv in commands:
      print(f'[{i + 1}/{len(runs)} {workdir.name}] {"done already: " if finished(workdir, what) else ""}'
            f'{" ".join(argv)}', flush=True)
      if what == 'train' and branch and not dry_run:
        branch_from(root / branch[0], branch[1], workdir)
      for _ in range(attempts):  # a run interrupted by SIGTERM saved a checkpoint: starting it again resumes
        if dry_run or finished(workdir, what):
          break
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        result = run_logged(argv, workdir / f'{what}.log')
        if result.returncode not in (0, failures.RESTART):  # 42: stopped (SIGTERM, a transient failure), to resume
          raise SystemExit(f'{workdir.name}: {what} failed (exit {result.returncode}); see {workdir}/{what}.log')
        print(f'    {"finished" if finished(workdir, what) else "stopped early"} after {time.time() - started:.0f} s',
              flush=True)
      if not dry_run and not finished(workdir, what):
        raise SystemExit(f'{workdir.name}: {what} did not finish in {attempts} attempts; see {workdir}/{what}.log')


def train_here(sweep: dict, overrides: dict, workdir: paths.Path) -> None:
  """One training run of the sweep's on this machine (an equal-time probe), its console in WORKDIR.log."""
  workdir.parent.mkdir(parents=True, exist_ok=True)
  argv = [sys.executable, '-m', 'albert_jax.train', *run_flags(sweep, overrides, workdir)]
  print(f'    probe: {" ".join(argv)}', flush=True)
  if run_logged(argv, workdir.parent / f'{workdir.name}.log').returncode:
    raise SystemExit(f'{workdir.parent.name}: its probe failed; see {workdir.parent}/{workdir.name}.log')


def branch_from(source: paths.Path, step: int, workdir: paths.Path) -> None:
  """A branch's start: `source`'s checkpoint of `step` and its config.json (the data shards its stream is defined
  on) copied into `workdir`, which then resumes from there. Once: a branch that has checkpoints of its own goes on
  from them."""
  if (workdir / 'checkpoints').exists():
    return
  saved = source / 'checkpoints' / str(step)
  if not saved.is_dir():
    raise SystemExit(f'{workdir.name} branches from {source.name} at step {step}, which has no checkpoint of that '
                     f'step: set that run\'s train.checkpoint_every to divide {step} (or keep_checkpoints higher), '
                     f'then run the sweep again.')
  paths.copy_tree(saved, workdir / 'checkpoints' / str(step))
  (workdir / 'config.json').write_text((source / 'config.json').read_text())


def run_logged(argv: list, log: paths.Path) -> subprocess.CompletedProcess:
  """Runs `argv`, its output appended to `log`: as it comes on a local disk (tail -f works), at the end in a bucket,
  whose objects cannot be appended to."""
  if not paths.is_url(log):
    with open(log, 'a') as f:
      return subprocess.run(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
  with tempfile.TemporaryFile() as f:
    result = subprocess.run(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    f.seek(0)
    log.write_bytes((log.read_bytes() if log.exists() else b'') + f.read())
  return result


def run_tpu(sweep: dict, runs: list, args, steps: dict) -> None:
  """One run after another on one pod: start it on every worker, wait for worker 0's exit code, go on."""
  for overrides, branch in runs:
    name = run_name(overrides, branch)
    if branch and not args.dry_run:
      root = paths.path(args.workdir)
      branch_from(root / branch[0], branch[1], root / name)
    train_on_pod(sweep, args, overrides, f'{args.workdir.rstrip("/")}/{name}', steps.get(name))


def train_on_pod(sweep: dict, args, overrides: dict, workdir: str, num_steps=None) -> None:
  extra = {'train.num_steps': num_steps} if num_steps else {}
  run_args = argparse.Namespace(**{**vars(args), 'config': config_file(sweep, overrides), 'workdir': workdir,
                                   'overrides': flags(sweep['fixed']) + flags(overrides) + flags(extra)})
  g = tpu.Gcloud(run_args)
  tpu.train(g)
  while not g.dry_run and tpu.exit_code(g) is None:
    time.sleep(args.poll_seconds)


# A run's step rate for equal time: this many steps, the first (compilation, warm-up) left out of the rate.
PROBE_STEPS = 20


def equal_time_steps(sweep: dict, runs: list, root: paths.Path, hours: float, train_probe) -> dict:
  """{run name: train.num_steps} that fills `hours` of training at each run's own step rate, measured by
  `train_probe(overrides, workdir)` training PROBE_STEPS steps of it into RUN/probe (the median of its logged
  steps/s after the first step); kept in RUN/equal_time.json, so a sweep run again measures nothing twice."""
  steps = {}
  for overrides, branch in runs:
    name = run_name(overrides, branch)
    record = root / name / 'equal_time.json'
    if branch:  # a branch goes on from its source's step to the source's end (its source comes first)
      steps[name] = steps[branch[0]]
      continue
    if not record.exists():
      probe = root / name / 'probe'
      train_probe({**overrides, 'train.num_steps': PROBE_STEPS, 'train.warmup_steps': 1, 'train.log_every': 1,
                   'train.eval_every': PROBE_STEPS, 'train.checkpoint_every': PROBE_STEPS}, probe)
      rate = step_rate(probe)
      if rate is None:
        raise SystemExit(f'{name}: its probe of {PROBE_STEPS} steps logged no steps/s; see {probe}')
      record.write_text(json.dumps({'hours': hours, 'steps_per_s': rate, 'num_steps': fill(hours, rate),
                                    'probe_steps': PROBE_STEPS}, indent=1) + '\n')
    kept = json.loads(record.read_text())
    if kept['hours'] != hours:
      raise SystemExit(f'{name}: {record} was measured for {kept["hours"]} hours, not {hours}: use that, or a '
                       f'new --workdir.')
    steps[name] = kept['num_steps']
  return steps


def fill(hours: float, steps_per_s: float) -> int:
  """The steps that `hours` hold at `steps_per_s` (at least 2: a run's warmup is below its steps)."""
  return max(int(hours * 3600 * steps_per_s), 2)


def collect(sweep: dict, runs: list, root: paths.Path) -> list:
  rows = []
  for overrides, branch in runs:
    workdir = root / run_name(overrides, branch)
    row = {'run': workdir.name}
    if (workdir / 'result.json').exists():
      result = json.loads((workdir / 'result.json').read_text())
      row.update({k: result[k] for k in METRICS if k in result})
      if sweep['speedup_of'] or sweep['train_hours']:
        row.update(pace(workdir, result))
      row.update({f'{k}_majority': result[k.replace('accuracy', 'majority')] for k in METRICS
                  if k.endswith('accuracy') and k.replace('accuracy', 'majority') in result})
      row.update({f'{k}_count': result[k.replace('accuracy', 'count')] for k in METRICS
                  if k.endswith('accuracy') and result.get(k.replace('accuracy', 'count'))})
    for extra in sweep['evaluate']:
      task = extra.get('data.sentence_task')
      path = workdir / f'eval-{task}.json'
      if task and path.exists():  # the same held-out instances for every run: MLM comparable across tasks
        evaluated = json.loads(path.read_text())
        row.update({f'{task}_accuracy': evaluated['eval_sop_accuracy'],
                    f'{task}_accuracy_majority': evaluated['eval_sop_majority'],
                    f'{task}_mlm_accuracy': evaluated['eval_mlm_accuracy']})
    scores = {}  # {column: {seed: dev score}}
    for spec, column in zip(sweep['finetune'], finetune_columns(sweep)):
      for seed in sweep['finetune_seeds']:
        path = workdir / finetune_dir(spec.split()[0], seed) / 'result.json'
        if path.exists():
          scores.setdefault(column, {})[seed] = json.loads(path.read_text())['score']
    for column, by_seed in scores.items():
      row.update(mean_and_error(column, list(by_seed.values())))
    complete = [by_seed for by_seed in scores.values() if len(by_seed) == len(sweep['finetune_seeds'])]
    if complete and len(complete) == len(finetune_columns(sweep)):  # every task, every seed: each seed's Avg
      row.update(mean_and_error('finetune_average', [sum(s[seed] for s in complete) / len(complete)
                                                     for seed in sweep['finetune_seeds']]))
    rows.append(row)
  if sweep['speedup_of']:
    reference = next((r for r in rows if r['run'] == sweep['speedup_of'] and 'steps_per_s' in r), None)
    for row in rows:
      if reference and 'steps_per_s' in row:
        row['speedup'] = row['steps_per_s'] / reference['steps_per_s']
  return rows


def pace(workdir: paths.Path, result: dict) -> dict:
  """A finished run's steps, its training hours (the goodput record's wall time over all its starts) and its
  steps/s: the median of its logged windows, each after the first step of a start (compilation left out)."""
  out = {'steps': result['step'], 'hours': goodput.account(goodput.read(workdir))['wall'] / 3600}
  rate = step_rate(workdir)
  if rate is not None:
    out['steps_per_s'] = rate
  return out


def step_rate(workdir: paths.Path):
  """A run's training steps/s: the median of its logged windows (each after a start's first step, so compilation
  is left out), from its TensorBoard files; None where it logged none."""
  rates = [value for _, _, value in metrics.tensorboard_scalars(workdir)[1].get('steps_per_sec', [])]
  return statistics.median(rates) if rates else None


def mean_and_error(column: str, values: list) -> dict:
  """{column: the mean}, with the standard error of the mean and the count where there are several."""
  mean, se = stats.mean_and_se(values)
  return {column: mean} if se is None else {column: mean, f'{column}_se': se, f'{column}_n': len(values)}


def follow_up_columns(sweep: dict) -> list:
  """The report's columns from the sweep's follow-up evaluations (collect fills them)."""
  return [f'{task}_{metric}' for task in dict.fromkeys(e.get('data.sentence_task') for e in sweep['evaluate'])
          if task for metric in ('accuracy', 'mlm_accuracy')]


def finetune_columns(sweep: dict) -> list:
  """finetune_TASK for each of the sweep's fine-tuning follow-ups (collect fills them, and finetune_average)."""
  return [f'finetune_{finetune_name(spec.split()[0])}' for spec in sweep['finetune']]


def finetune_dir(config: str, seed: int) -> str:
  """A fine-tuning follow-up's workdir under its run's: finetune-TASK for seed 0, finetune-TASK-seedN."""
  return f'finetune-{finetune_name(config)}' + (f'-seed{seed}' if seed else '')


def finetune_name(config: str) -> str:
  """A fine-tuning follow-up's name: its config file's (sst2.py: sst2), or the task its argument names
  (wiki_books_cpu_hour.py:rte: rte)."""
  path, _, arg = config.partition(':')
  return arg or pathlib.Path(path).stem


def report(sweep: dict, runs: list, root: paths.Path) -> str:
  """A markdown table of the runs' final held-out metrics (with the paper's, where the sweep file gives them) and
  a PNG plot of the accuracies, both written under the sweep's workdir."""
  rows = collect(sweep, runs, root)
  columns = [c for c in (*METRICS, *follow_up_columns(sweep), *finetune_columns(sweep), 'finetune_average',
                         'steps', 'hours', 'steps_per_s', 'speedup') if any(c in r for r in rows)]
  paper = sweep['paper']
  paper_columns = sorted({k for v in paper.values() for k in v})
  head = ['run', *columns, *[f'paper {c}' for c in paper_columns]]
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for r in rows:
    # A finished run without a metric has none to give (no eval_sop_* under sentence_task 'none'): n/a.
    cells = [r['run']] + [cell(r, c) if c in r else 'n/a' if c in METRICS and 'eval_mlm_accuracy' in r else 'not run'
                          for c in columns]
    cells += [str(paper.get(r['run'], {}).get(c, '')) for c in paper_columns]
    lines.append('| ' + ' | '.join(cells) + ' |')
  table = '\n'.join(lines)
  (root / 'report.md').write_text(table + '\n')
  plot(sweep, rows, [c for c in columns if c.endswith('accuracy') or c.startswith('finetune_')], root)
  if sweep['curves']:
    plot_curves(sweep, runs, root)
  return table


def cell(row: dict, column: str) -> str:
  """A report cell: the figure, with its majority rate, and the standard error over the seeds (or, for one run's
  held-out accuracy, that of its count of held-out items)."""
  if column in ('steps', 'hours', 'steps_per_s', 'speedup'):
    return {'steps': f'{row[column]:,}', 'hours': f'{row[column]:.2f}', 'steps_per_s': f'{row[column]:.3g}',
            'speedup': f'{row[column]:.2f}x'}[column]
  text = f'{row[column]:.4f}'
  if column + '_majority' in row:
    text += f' (majority {row[column + "_majority"]:.3f})'
  if column + '_se' in row:
    text += f' ± {row[column + "_se"]:.4f} ({row[column + "_n"]} seeds)'
  elif column + '_count' in row:  # one run: the held-out set's sampling error, for comparing runs on it
    text += f' ± {stats.proportion_se(row[column], row[column + "_count"]):.4f}'
  return text


def plot(sweep: dict, rows: list, accuracies: list, root: paths.Path) -> None:
  """report.png: a panel per accuracy, a bar per run; a black tick at each run's majority rate (what always
  guessing the commoner label scores) and, where the sweep file maps them, the paper's figures in grey beside."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  paper_of = {ours: theirs for theirs, ours in sweep['paper_metrics'].items()}
  ncols = min(len(accuracies), 3)
  nrows = -(-len(accuracies) // ncols)
  figure, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 3.6 * nrows), squeeze=False)
  for ax in axes.flat[len(accuracies):]:
    ax.set_visible(False)
  for ax, column in zip(axes.flat, accuracies):
    x = range(len(rows))
    width = 0.4 if column in paper_of else 0.8
    values = [r.get(column, 0.0) for r in rows]
    errors = [r.get(column + '_se', 0.0) for r in rows]  # over fine-tuning seeds
    ax.bar([i - width / 2 * (column in paper_of) for i in x], values, width, yerr=errors if any(errors) else None,
           capsize=3, color='tab:blue', label='ours')
    for i, v, r in zip(x, values, rows):
      ax.text(i - width / 2 * (column in paper_of), v, f'{v:.3f}' if column in r else 'n/a', ha='center',
              va='bottom', fontsize=7)
    if column in paper_of:
      theirs = [sweep['paper'].get(r['run'], {}).get(paper_of[column], 0) / 100 for r in rows]
      ax.bar([i + width / 2 for i in x], theirs, width, color='tab:gray', label=f'paper ({paper_of[column]})')
    for i, r in zip(x, rows):
      if column + '_majority' in r:
        ax.hlines(r[column + '_majority'], i - 0.45, i + 0.45, colors='black', linestyles='dashed',
                  label='majority rate' if i == 0 else None)
    ax.set_xticks(list(x), [r['run'] for r in rows], rotation=30, ha='right', fontsize=8)
    ax.set_title(column.replace('eval_', 'held-out '), fontsize=10)
    majorities = [r[column + '_majority'] for r in rows if column + '_majority' in r]
    ax.set_ylim(0, max(values + majorities + [1e-3]) * 1.15 if column not in paper_of else 1.05)
    if column in paper_of or majorities:
      ax.legend(fontsize=7, loc='best')
  figure.suptitle(f'{root.name}: {sweep["config"]} {" ".join(flags(sweep["fixed"]))}', fontsize=9)
  figure.tight_layout()
  png = io.BytesIO()  # matplotlib writes only local files; the sweep's workdir may be in a bucket
  figure.savefig(png, format='png', dpi=110)
  plt.close(figure)
  (root / 'report.png').write_bytes(png.getvalue())


def plot_curves(sweep: dict, runs: list, root: paths.Path) -> dict:
  """curves.png: a panel per CURVES tag (training loss, held-out MLM accuracy), each run's values by step, from its
  TensorBoard files (the paper's Figures 1 and 3); returns what it drew, {tag: {run: [(step, value)]}}."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  tags = sweep['curves']
  figure, axes = plt.subplots(1, len(tags), figsize=(5 * len(tags), 3.6), squeeze=False)
  drawn = {tag: {} for tag in tags}
  legend = {}  # one for all panels, under them: run names are long (a branch's holds its source's)
  for k, (overrides, branch) in enumerate(runs):
    name = run_name(overrides, branch)
    if not (root / name / 'tensorboard').exists():
      continue
    series = metrics.tensorboard_scalars(root / name)[1]
    for ax, tag in zip(axes.flat, tags):
      points = sorted({step: value for _, step, value in series.get(tag, [])}.items())  # a resume's repeats once
      if points:  # a run's colour is its own in every panel, whichever panels it has points in
        legend[name], = ax.plot(*zip(*points), color=f'C{k % 10}', marker='.' if len(points) < 30 else None)
        drawn[tag][name] = points
  for ax, tag in zip(axes.flat, tags):
    ax.set_xlabel('step')
    ax.set_title(tag.replace('eval_', 'held-out '), fontsize=10)
  figure.tight_layout()
  if legend:
    figure.legend(legend.values(), legend.keys(), loc='upper center', bbox_to_anchor=(0.5, 0), fontsize=7)
  png = io.BytesIO()
  figure.savefig(png, format='png', dpi=110, bbox_inches='tight')
  plt.close(figure)
  (root / 'curves.png').write_bytes(png.getvalue())
  return drawn


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog='python -m launch.sweep', description=__doc__.split('\n')[0])
  parser.add_argument('--sweep', required=True, help='a sweep file (.py) or a SPEC: "key=v1,v2 key2=w1,w2"')
  parser.add_argument('--config', help='base config file (a sweep file names its own)')
  parser.add_argument('--mode', choices=('grid', 'zip'), help='for a SPEC (default grid)')
  parser.add_argument('--workdir', required=True, help='parent directory: one workdir per run under it')
  parser.add_argument('--target', choices=('local', 'tpu'), default='local')
  parser.add_argument('--report', action='store_true', help='only collect the finished runs into a table + plot')
  parser.add_argument('--miniature', action='store_true', help="the sweep file's MINIATURE: its grid at a CPU's scale")
  parser.add_argument('--train_hours', '--train-hours', type=float,
                      help='every run the same training time (its num_steps from a measured step rate)')
  parser.add_argument('--dry-run', '--dry_run', dest='dry_run', action='store_true')
  for name in ('name', 'zone', 'project'):
    parser.add_argument(f'--{name}', help=f'--target=tpu: the pod\'s {name} (see launch/tpu.py)')
  parser.add_argument('--accelerator', default='v3-64')
  parser.add_argument('--num_slices', '--num-slices', type=int, default=1, help='--target=tpu: slices of the pod')
  parser.add_argument('--tfds_data_dir')
  parser.add_argument('--poll_seconds', type=float, default=60)
  args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
  try:  # a malformed sweep is reported like any other bad argument: its message, exit status 2
    if args.sweep.endswith('.py'):
      sweep = load_sweep_file(args.sweep)
    else:
      if not args.config:
        parser.error('a command-line SPEC needs --config')
      sweep = {'config': args.config, 'axes': parse_spec(args.sweep), 'mode': args.mode or 'grid', 'fixed': {},
               'evaluate': [], 'finetune': [], 'finetune_seeds': [0], 'paper': {}, 'paper_metrics': {},
               'miniature': None, 'speedup_of': None, 'train_hours': None, 'continued': [], 'curves': []}
    if args.miniature:
      sweep = in_miniature(sweep)
    if args.train_hours is not None:
      if args.train_hours <= 0:
        raise ValueError(f'--train_hours {args.train_hours}: give the training time of every run, in hours (> 0).')
      sweep['train_hours'] = args.train_hours
    runs = all_runs(sweep)
    if (args.target == 'local' or args.report) and not args.dry_run:  # this machine reads and writes the workdir
      paths.check_reachable(args.workdir)
  except ValueError as e:
    parser.error(str(e))
  if args.config:
    sweep['config'] = args.config
  # Any further --config.x=v applies to every run.
  sweep['fixed'] = {**sweep['fixed'], **dict(a[len('--config.'):].split('=', 1) for a in extra
                                           if a.startswith('--config.') and '=' in a)}
  unknown = [a for a in extra if not (a.startswith('--config.') and '=' in a)]
  if unknown:
    parser.error(f'unrecognized arguments: {" ".join(unknown)}')
  root = paths.path(args.workdir)
  of = '' if 'config' in sweep['axes'] else f' of {sweep["config"]}'
  print(f'{len(runs)} runs{of}: {", ".join(run_name(*r) for r in runs)}', flush=True)
  if not args.report:
    if args.target == 'tpu' and not (args.name and args.zone and args.workdir.startswith('gs://')):
      parser.error('--target=tpu needs --name, --zone and a gs:// --workdir')
    steps = {}
    if sweep['train_hours'] and not args.dry_run:
      steps = equal_time_steps(sweep, runs, root, sweep['train_hours'], train_probe=(
          (lambda o, w: train_on_pod(sweep, args, o, str(w))) if args.target == 'tpu' else
          (lambda o, w: train_here(sweep, o, w))))
      print('equal time: ' + ', '.join(f'{n} {s:,} steps' for n, s in steps.items()), flush=True)
    elif sweep['train_hours']:
      print(f'equal time: each run\'s step rate measured first ({PROBE_STEPS} steps into RUN/probe), its num_steps '
            f'set to fill {sweep["train_hours"]} hours', flush=True)
    if args.target == 'tpu':
      run_tpu(sweep, runs, args, steps)
    else:
      run_local(sweep, runs, root, args.dry_run, steps)
  if not args.dry_run and args.target == 'local':
    print(report(sweep, runs, root))
    print(f'table: {root}/report.md, plot: {root}/report.png')


if __name__ == '__main__':
  main()
