"""What pretraining buys on real tasks: a pretraining run's checkpoint against random weights of the same shape,
fine-tuned on GLUE tasks and compared on the same dev examples.

  python bench/pretrained_vs_random.py --init=/tmp/albert_wiki_books/run --glue=../shared/data/glue \
      --workdir=/tmp/albert_wiki_books/downstream

For each task and each init (the checkpoint, and 'none': random weights of its shape and vocabulary):
  1. a grid on dev, seed 0: every --learning_rates value times every schedule length in the task's --steps (each
     run keeps its best of four evaluated checkpoints, as finetune does); the init's best cell is its setting (for
     the inits --TASK_settings names, the setting an earlier grid chose, and no grid);
  2. --seeds seeds at that setting (the seed draws the head's initial weights, dropout and the example order);
  3. the paired comparison on the same dev examples: the difference of the seed-mean metric, paired by seed, its
     standard error from resampling seeds and dev examples together (and the examples' part alone), and McNemar's
     exact test for each seed's pair of runs;
  4. each init's dev accuracy split by how often the example's rarest piece occurs in the training examples.
Then label efficiency on SST-2 (--train_examples): each init at its setting on 500, 2,000, 8,000 ... of the
training examples (the same draw for both inits at one seed), at most --subset_epochs epochs, --seeds seeds.

Every run is `python -m albert_jax.finetune` in a workdir of its own under --workdir; a run with a result.json is
not run again, so an interrupted bench continues where it stopped (a run cut off resumes from its checkpoint; its
"seconds per run" then counts the resumed part only). Writes report.md, results.json and
label_efficiency.png under --workdir and prints the report.
"""
import argparse
import collections
import io
import json
import math
import pathlib
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from albert_jax import cpu_allocator, finetune, paths, stats  # noqa: E402
from albert_jax.data import vocab  # noqa: E402
from albert_jax.downstream import classification  # noqa: E402
from shared import GLUE_TASKS, glue_task_config  # noqa: E402

# Published figures a reader needs for scale (not targets for a CPU hour). BERT-Tiny/Mini: fully pretrained on
# Wikipedia and BooksCorpus, GLUE test (google-research/bert's README). BERT-base, no pretraining: Geiping and
# Goldstein 2022 ("Cramming"), GLUE dev.
PUBLISHED = {'sst2': {'BERT-Tiny (2/128), pretrained, test': 'accuracy 83.2',
                      'BERT-Mini (4/256), pretrained, test': 'accuracy 85.9',
                      'BERT-base, no pretraining, dev (Cramming)': 'accuracy 79.9'},
             'mrpc': {'BERT-Tiny (2/128), pretrained, test': 'F1 81.1, accuracy 71.1',
                      'BERT-Mini (4/256), pretrained, test': 'F1 81.1, accuracy 71.8',
                      'BERT-base, no pretraining, dev (Cramming)': '77.9'}}
BOOTSTRAP = 10_000


class Bench:

  def __init__(self, args):
    self.args, self.root = args, paths.path(args.workdir)
    pretrained = json.loads((paths.path(args.init) / 'config.json').read_text())
    # The checkpoint's vocabulary, as it was pretrained with ('builtin' included).
    self.tokenizer = vocab.load_tokenizer(pretrained['data']['vocab'], pretrained['model']['vocab_size'],
                                          pretrained['data'].get('tfds_data_dir'))
    self.inits = {'pretrained': [f'--config.init={args.init}'],
                  'random': ['--config.init=none', *finetune.random_init_flags(pretrained)]}

  def run(self, task: str, init: str, lr: float, steps: int, seed: int, examples: int = 0) -> dict:
    """One fine-tuning run (or its result from before): result.json, plus its dev predictions and wall time."""
    name = f'{task}/{init}/lr={lr:g},steps={steps},seed={seed}' + (f',examples={examples}' if examples else '')
    workdir = self.root / name
    spec = GLUE_TASKS[task]
    argv = [sys.executable, '-m', 'albert_jax.finetune', f'--config={spec["config"]}', f'--workdir={workdir}',
            *self.inits[init], f'--config.task.data={self.args.glue}', '--config.task.test_predictions=False',
            f'--config.task.max_seq_length={spec["max_seq_length"]}', f'--config.task.train_examples={examples}',
            f'--config.train.learning_rate={lr}', f'--config.train.num_steps={steps}',
            f'--config.train.warmup_steps={max(steps // 10, 1)}', f'--config.train.checkpoint_every={steps // 4}',
            f'--config.train.seed={seed}', f'--config.train.log_every={max(steps // 4, 1)}']
    if not (workdir / 'result.json').exists():
      print(f'  {name} ...', end='', flush=True)
      workdir.mkdir(parents=True, exist_ok=True)
      started = time.time()
      with open(workdir / 'finetune.log', 'a') as log:
        done = subprocess.run(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
      if done.returncode:
        raise SystemExit(f'{name}: fine-tuning failed (exit {done.returncode}); see {workdir}/finetune.log')
      (workdir / 'seconds').write_text(f'{time.time() - started:.1f}\n')
      print(f' {time.time() - started:.0f} s', flush=True)
    result = json.loads((workdir / 'result.json').read_text())
    lines = (workdir / 'predictions' / 'dev.tsv').read_text().splitlines()[1:]
    result['predicted'] = np.array([line.split('\t')[1] for line in lines])
    result['seconds'] = float((workdir / 'seconds').read_text()) if (workdir / 'seconds').exists() else None
    result['settings'] = {'learning_rate': lr, 'num_steps': steps}
    return result


def rarest_piece_counts(splits: dict, tokenizer) -> np.ndarray:
  """For each dev example, how often its rarest piece occurs in the training examples: where fine-tuning never
  saw a piece, only pretraining can have taught the model what it means."""
  pieces = lambda e: tokenizer.encode([e.text_a] + ([e.text_b] if e.text_b is not None else []))
  # Counted once per training example: a pair holding a piece in both sentences counts it once.
  counts = collections.Counter(p for e in splits['train'][0] for p in {p for text in pieces(e) for p in text})
  return np.array([min((counts[p] for text in pieces(e) for p in text), default=0) for e in splits['dev'][0]])


def by_rarity(results: dict, rarest: np.ndarray, gold: np.ndarray) -> list:
  """Report lines: each init's seed-mean dev accuracy on the examples whose rarest piece occurs 0, 1-4, 5-19 and
  20 or more times in the training examples."""
  buckets = (('never', 0, 0), ('1-4', 1, 4), ('5-19', 5, 19), ('20+', 20, math.inf))
  lines = ['| rarest piece in training | dev examples | ' + ' | '.join(results) + ' |',
           '|---|---|' + '---|' * len(results)]
  for name, low, high in buckets:
    rows = (rarest >= low) & (rarest <= high)
    cells = [f'{np.mean([np.mean(r["predicted"][rows] == gold[rows]) for r in runs]):.4f}' if rows.any() else ''
             for runs in results.values()]
    lines.append(f'| {name} | {rows.sum()} | ' + ' | '.join(cells) + ' |')
  return lines


def metric(name: str, predicted: np.ndarray, gold: np.ndarray) -> float:
  """GLUE's metric of label names '0' and '1' (their indices: F1 of the positive class 1)."""
  if name == 'accuracy':
    return float(np.mean(predicted == gold))
  return classification.f1(predicted.astype(int), gold.astype(int))


def paired(name: str, pretrained: list, random: list, gold: np.ndarray, seed: int = 0) -> dict:
  """The difference of the seed-mean metric (pretrained minus random) on the same dev examples, paired by seed
  (seed i of each: the same head initialisation and example order), with its standard error and 95% interval
  from resampling the seeds and the examples together (stats.seeds_and_examples_bootstrap: what varies from
  seed to seed counts); 'se_examples': the examples' part alone (a paired bootstrap over examples of the seed
  means, what these tables gave before); McNemar's exact p for each seed's pair."""
  by_seed = lambda i, rows: metric(name, pretrained[i][rows], gold[rows]) - metric(name, random[i][rows], gold[rows])
  out = stats.seeds_and_examples_bootstrap(by_seed, len(pretrained), len(gold), BOOTSTRAP, seed)
  means = lambda rows: np.mean([by_seed(i, rows) for i in range(len(pretrained))])
  out['se_examples'] = stats.paired_bootstrap(means, len(gold), BOOTSTRAP, seed)['se']
  out['mcnemar_p'] = [stats.mcnemar(p == gold, r == gold) for p, r in zip(pretrained, random)]
  return out


def given_settings(parser, task: str, text: str, inits) -> dict:
  """--TASK_settings as {init: {'learning_rate', 'num_steps'}}: the inits it names skip the grid."""
  chosen = {}
  for item in filter(None, text.split(',')):
    try:
      init, lr, steps = item.split(':')
      chosen[init] = {'learning_rate': float(lr), 'num_steps': int(steps)}
    except ValueError:
      parser.error(f'--{task}_settings: {item!r} is not INIT:LEARNING_RATE:STEPS, such as pretrained:1e-4:3000')
    if init not in inits:
      parser.error(f'--{task}_settings: {init!r} is not one of {", ".join(inits)}')
  return chosen


def summary(results: list, name: str, gold: np.ndarray) -> dict:
  scores = [metric(name, r['predicted'], gold) for r in results]
  return {'scores': scores, 'mean': float(np.mean(scores)),
          'sd': float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0}


def plot(curves: dict, path: paths.Path) -> None:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  figure, ax = plt.subplots(figsize=(6, 4))
  for (init, points), color in zip(curves.items(), ('tab:blue', 'tab:gray')):
    sizes = sorted(points)
    means = [np.mean(points[n]) for n in sizes]
    sds = [np.std(points[n], ddof=1) if len(points[n]) > 1 else 0 for n in sizes]
    ax.errorbar(sizes, means, yerr=sds, color=color, marker='o', capsize=3, label=init)
    for n in sizes:
      ax.scatter([n] * len(points[n]), points[n], color=color, s=8, alpha=0.5)
  ax.set_xscale('log')
  ax.set_xlabel('SST-2 training examples')
  ax.set_ylabel('dev accuracy (mean and sd over seeds)')
  ax.grid(alpha=0.3)
  ax.legend()
  figure.tight_layout()
  png = io.BytesIO()
  figure.savefig(png, format='png', dpi=110)
  plt.close(figure)
  path.write_bytes(png.getvalue())


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog='python bench/pretrained_vs_random.py', description=__doc__.split('\n')[0])
  parser.add_argument('--init', required=True, help='the pretraining workdir (its best checkpoint is fine-tuned)')
  parser.add_argument('--glue', required=True, help='the GLUE folder holding SST-2/ and MRPC/ (train and dev TSV)')
  parser.add_argument('--workdir', required=True, help='one fine-tuning workdir per run under it, and the report')
  parser.add_argument('--tasks', default='sst2,mrpc')
  parser.add_argument('--learning_rates', default='1e-4,3e-4,1e-3')
  for task, spec in GLUE_TASKS.items():
    parser.add_argument(f'--{task}_steps', default=spec['steps'], help=f'{task}: the grid\'s schedule lengths')
    parser.add_argument(f'--{task}_settings', default='',
                        help=f'{task}: skip the grid, each init at the setting an earlier grid chose, as '
                             'INIT:LEARNING_RATE:STEPS for each init, comma-separated (pretrained:1e-4:3000,...)')
  parser.add_argument('--seeds', type=int, default=3)
  parser.add_argument('--train_examples', default='500,2000,8000',
                      help='SST-2 label efficiency: training-set sizes besides all of it ("" for none)')
  parser.add_argument('--subset_epochs', type=float, default=20, help='at most this many epochs of a subset')
  args = parser.parse_args(argv)
  for task in args.tasks.split(','):
    if task not in GLUE_TASKS:
      parser.error(f'--tasks: {task!r} is not one of {", ".join(GLUE_TASKS)}')
  bench, report, out = Bench(args), [], {}
  learning_rates = [float(x) for x in args.learning_rates.split(',')]
  for task in args.tasks.split(','):
    downstream = finetune.make_task(glue_task_config(task, args.glue))
    splits = downstream.splits()
    gold, train_count = np.array([e.label for e in splits['dev'][0]]), len(splits['train'][0])
    names = GLUE_TASKS[task]['metrics']
    steps_grid = [int(x) for x in getattr(args, f'{task}_steps').split(',')]
    print(f'{task}: grid of {len(learning_rates)} learning rates x {len(steps_grid)} schedules per init, then '
          f'{args.seeds} seeds', flush=True)
    chosen, seeds = given_settings(parser, task, getattr(args, f'{task}_settings'), bench.inits), {}
    for init in bench.inits:
      if init not in chosen:
        grid = [bench.run(task, init, lr, steps, 0) for lr in learning_rates for steps in steps_grid]
        chosen[init] = max(grid, key=lambda r: metric(names[0], r['predicted'], gold))['settings']
        out[f'{task}/{init}/grid'] = [{**r['settings'], names[0]: metric(names[0], r['predicted'], gold)}
                                      for r in grid]
      seeds[init] = [bench.run(task, init, chosen[init]['learning_rate'], chosen[init]['num_steps'], seed)
                     for seed in range(args.seeds)]
    table = [f'### {task.upper()} dev (n {len(gold):,}), {args.seeds} seeds per init', '',
             '| init | setting (grid best, seed 0, or given) | ' +
             ' | '.join(f'{n}: mean ± sd (seeds)' for n in names) +
             ' | seconds per run |', '|---|---|' + '---|' * len(names) + '---|']
    for init in bench.inits:
      cells = []
      for name in names:
        s = summary(seeds[init], name, gold)
        out[f'{task}/{init}/{name}'] = s
        cells.append(f'{s["mean"]:.4f} ± {s["sd"]:.4f} ({", ".join(f"{x:.4f}" for x in s["scores"])})')
      seconds = [r['seconds'] for r in seeds[init] if r['seconds']]
      table.append(f'| {init} | lr {chosen[init]["learning_rate"]:g}, {chosen[init]["num_steps"]} steps | ' +
                   ' | '.join(cells) + (f' | {np.mean(seconds):.0f} |' if seconds else ' | |'))
    table.append('')
    for name in names:
      p = paired(name, [r['predicted'] for r in seeds['pretrained']], [r['predicted'] for r in seeds['random']],
                 gold)
      out[f'{task}/paired/{name}'] = p
      table.append(f'Pretrained minus random, {name}: {p["difference"]:+.4f}, SE {p["se"]:.4f} over seeds and '
                   f'examples (z {p["z"]:+.1f}; 95% interval {p["interval"][0]:+.4f} to {p["interval"][1]:+.4f}; '
                   f'the examples alone {p["se_examples"]:.4f}); McNemar exact p per seed: '
                   f'{", ".join(f"{x:.3g}" for x in p["mcnemar_p"])}.')
    # The floor any model must clear: the training set's most frequent label on every dev example (MRPC's
    # 'paraphrase' already scores F1 0.81 on dev).
    # Chosen as finetune.py chooses the floor it prints (a tie goes to the task's first label).
    majority = downstream.labels[finetune.majority_label(
        np.array([downstream.label_id(e.label, 'train') for e in splits['train'][0]]))]
    floor = {name: metric(name, np.full(len(gold), majority), gold) for name in names}
    out[f'{task}/majority'] = {'label': majority, **floor}
    table.append(f'Always the majority training label ({majority!r}): ' +
                 ', '.join(f'{name} {v:.4f}' for name, v in floor.items()) + '.')
    table += ['', 'Seed-mean dev accuracy by how often the example\'s rarest piece occurs in the training examples:',
              '',
              *by_rarity(seeds, rarest_piece_counts(splits, bench.tokenizer), gold), '']
    table.append('Published, for scale: ' + '; '.join(f'{k}: {v}' for k, v in PUBLISHED[task].items()) + '.')
    report += [*table, '']

    sizes = [int(x) for x in args.train_examples.split(',') if x] if task == 'sst2' else []
    if sizes:
      curves = {init: {train_count: summary(seeds[init], 'accuracy', gold)['scores']} for init in bench.inits}
      lines = ['### SST-2 label efficiency: dev accuracy, mean ± sd over seeds', '',
               '| training examples | steps | pretrained | random | difference (SE over seeds and examples; examples '
               'alone) |', '|---|---|---|---|---|']
      for n in sizes:
        runs = {}
        for init in bench.inits:
          # At most --subset_epochs epochs of the configs' batch of 32, in a multiple of the 4 evaluations.
          steps = min(chosen[init]['num_steps'], max(4, int(math.ceil(args.subset_epochs * n / 32 / 4)) * 4))
          runs[init] = [bench.run(task, init, chosen[init]['learning_rate'], steps, seed, n)
                        for seed in range(args.seeds)]
          curves[init][n] = summary(runs[init], 'accuracy', gold)['scores']
        p = paired('accuracy', *[[r['predicted'] for r in runs[i]] for i in bench.inits], gold)
        out[f'sst2/examples={n}'] = {'pretrained': curves['pretrained'][n], 'random': curves['random'][n], **p}
        lines.append(f'| {n:,} | {runs["pretrained"][0]["settings"]["num_steps"]} / '
                     f'{runs["random"][0]["settings"]["num_steps"]} | '
                     + ' | '.join(f'{np.mean(curves[i][n]):.4f} ± {np.std(curves[i][n], ddof=1):.4f}'
                                  for i in bench.inits) +
                     f' | {p["difference"]:+.4f} ({p["se"]:.4f}; {p["se_examples"]:.4f}) |')
      full = train_count
      p = out['sst2/paired/accuracy']
      lines.append(f'| {full:,} (all) | {chosen["pretrained"]["num_steps"]} / {chosen["random"]["num_steps"]} | ' +
                   ' | '.join(f'{np.mean(curves[i][full]):.4f} ± {np.std(curves[i][full], ddof=1):.4f}'
                              for i in bench.inits) +
                   f' | {p["difference"]:+.4f} ({p["se"]:.4f}; {p["se_examples"]:.4f}) |')
      plot(curves, bench.root / 'label_efficiency.png')
      report += [*lines, '', f'plot: {bench.root / "label_efficiency.png"}', '']
  text = '\n'.join(report)
  (bench.root / 'report.md').write_text(text + '\n')
  (bench.root / 'results.json').write_text(json.dumps(out, indent=2) + '\n')
  print(text)
  return out


if __name__ == '__main__':
  cpu_allocator.reuse_freed_memory()  # as the command-line tools, for both sides alike
  main()
