"""Continued pretraining against pretraining from scratch on a domain the checkpoint never saw: the domain's
held-out MLM accuracy over the steps of both, and BLiMP (general English grammar) before and after.

  python bench/continued_pretraining.py --init=/tmp/albert_wiki_books/run --workdir=/tmp/albert_continued \\
      [--config=configs/wiki_books_cpu_hour.py] [--source=builtin] [--steps=600] [--eval_every=50] \\
      [--blimp=../shared/data/blimp] [--blimp_pairs=200] [--plot=docs/continued_pretraining.png] \\
      [-- --config.x.y=VALUE ...]

Two runs of --config on --source, the same steps, schedule, batches and held-out documents (10% of them): one from
--init (config.init: its shape, weights and vocabulary), one from random weights of that shape with the same
vocabulary; overrides after `--` reach both. Then: where each starts and ends on the domain, the step at which the
run from scratch first reaches the continued run's starting accuracy (if it does), the two curves in one figure;
what the continued run kept of the checkpoint's own data (where --init is a pretraining workdir: its held-out MLM
accuracy there, by albert_jax.evaluate on the same held-out documents, against the checkpoint's own last
evaluation); and BLiMP's pairs scored on the checkpoint before and on the continued run after (the difference with
its paired standard error, overall and per phenomenon: what is kept and what is forgotten), and on the run from
scratch. A finished run is read back.
"""
import argparse
import json
import os
import subprocess
import sys

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from albert_jax import blimp, paths  # noqa: E402
from shared import tensorboard_scalars  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(args, arm: str) -> str:
  """The arm's workdir, trained (or read back where it finished)."""
  workdir = os.path.join(args.workdir, arm)
  if (paths.path(workdir) / 'result.json').exists():
    return workdir
  vocab = json.loads((paths.path(args.init) / 'config.json').read_text())['data']['vocab']
  argv = [sys.executable, '-m', 'albert_jax.train', f'--config={args.config}', f'--workdir={workdir}',
          f'--config.data.source={args.source}', '--config.data.eval_fraction=0.1',
          f'--config.data.vocab={vocab}', f'--config.train.num_steps={args.steps}',
          f'--config.train.warmup_steps={args.steps // 10}', f'--config.train.eval_every={args.eval_every}',
          f'--config.train.checkpoint_every={args.steps}', '--config.train.blimp=',
          '--config.train.fill_mask_text=', '--config.train.fill_mask_word=', *args.overrides]
  if arm == 'continued':
    argv.append(f'--config.init={args.init}')
  print(f'{arm}: {" ".join(argv[3:])}', flush=True)
  with open(os.path.join(args.workdir, f'{arm}.log'), 'w') as log:
    subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
  return workdir


def curve(workdir: str) -> list:
  """[(step, held-out MLM accuracy)] of a run."""
  _, series = tensorboard_scalars(workdir)
  return sorted({step: value for _, step, value in series['eval_mlm_accuracy']}.items())


def on_the_checkpoints_data(args, continued: str):
  """{'before': the checkpoint's held-out MLM figures on its own data at its last evaluation, 'after': the
  continued run's on the same held-out documents}, or None where --init is not a pretraining workdir (its data are
  not known here)."""
  recorded = paths.path(args.init) / 'config.json'
  if not recorded.exists():
    return None
  data = json.loads(recorded.read_text())['data']
  output = paths.path(continued) / 'eval-sop.json'
  if not output.exists():  # albert_jax.evaluate writes it
    subprocess.run([sys.executable, '-m', 'albert_jax.evaluate', f'--config={args.config}', f'--workdir={continued}',
                    f'--config.init={args.init}', f'--config.data.source={data["source"]}',
                    f'--config.data.eval_fraction={data["eval_fraction"]}', f'--config.data.vocab={data["vocab"]}',
                    '--config.data.sentence_task=sop', *args.overrides], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
  after = json.loads(output.read_text())
  _, series = tensorboard_scalars(args.init)
  tags = [tag for tag in series if tag.startswith('eval_') and tag.endswith(('mlm_accuracy', 'mlm_count'))]
  before = {tag: max(series[tag], key=lambda point: point[1])[2] for tag in tags}
  return {'before': before, 'after': {tag: after[tag] for tag in tags if tag in after}}


def blimp_of(args, checkpoint: str, name: str) -> dict:
  """The BLiMP result of a checkpoint (scored once, then read back)."""
  output = os.path.join(args.workdir, f'blimp-{name}.json')
  if not os.path.exists(output):
    result = blimp.run(checkpoint, args.blimp, per_paradigm=args.blimp_pairs)
    with open(output, 'w') as f:
      json.dump(result, f)
  with open(output) as f:
    return json.load(f)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--init', required=True, help='the checkpoint continued (a pretraining workdir, ...)')
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--config', default='configs/wiki_books_cpu_hour.py')
  parser.add_argument('--source', default='builtin', help='the domain: a data.source the checkpoint never saw')
  parser.add_argument('--steps', type=int, default=600)
  parser.add_argument('--eval_every', type=int, default=50)
  parser.add_argument('--blimp', help='the folder of BLiMP\'s files (none: no BLiMP)')
  parser.add_argument('--blimp_pairs', type=int, default=None, help='pairs of each paradigm (default: all)')
  parser.add_argument('--plot', help='write the two curves here (PNG)')
  argv = sys.argv[1:] if argv is None else argv
  split = argv.index('--') if '--' in argv else len(argv)
  args = parser.parse_args(argv[:split])
  args.overrides = argv[split + 1:]  # --config.x.y=VALUE for both runs
  os.makedirs(args.workdir, exist_ok=True)
  runs = {arm: train(args, arm) for arm in ('continued', 'scratch')}
  curves = {arm: curve(workdir) for arm, workdir in runs.items()}
  start = curves['continued'][0][1]
  caught = next((step for step, value in curves['scratch'] if value >= start), None)
  report = {'steps': args.steps, 'source': args.source, 'init': args.init, 'curves': curves,
            'scratch_reaches_the_continued_start_at': caught}
  print('\n| step | continued | from scratch |\n|---|---|---|')
  for (step, continued), (_, scratch) in zip(*curves.values()):
    print(f'| {step} | {continued:.4f} | {scratch:.4f} |')
  print(f'\nheld-out MLM accuracy on {args.source}: continued {start:.4f} -> {curves["continued"][-1][1]:.4f}, from '
        f'scratch {curves["scratch"][0][1]:.4f} -> {curves["scratch"][-1][1]:.4f}; from scratch reaches the '
        f'continued run\'s start ' + (f'at step {caught}' if caught is not None else f'not in {args.steps} steps'))
  if args.plot:
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for arm, points in curves.items():
      axes.plot(*zip(*points), marker='o', markersize=3, label={'continued': f'continued from {args.init}',
                                                                'scratch': 'from random weights'}[arm])
    axes.set(xlabel='step', ylabel=f'held-out MLM accuracy, {args.source}',
             title=f'{args.steps} steps on {args.source}: continued pretraining and from scratch')
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(args.plot, dpi=110)
    print(f'wrote {args.plot}')
  own = on_the_checkpoints_data(args, runs['continued'])
  if own:
    report['on_the_checkpoints_data'] = own
    print(f'\nheld-out MLM accuracy on the checkpoint\'s own data ({own["before"]["eval_mlm_count"]:,.0f} masked '
          f'pieces): before {own["before"]["eval_mlm_accuracy"]:.4f}, after continuing '
          f'{own["after"]["eval_mlm_accuracy"]:.4f}')
  if args.blimp:
    before = blimp_of(args, args.init, 'before')
    after = blimp_of(args, runs['continued'], 'continued')
    scratch = blimp_of(args, runs['scratch'], 'scratch')
    kept = blimp.paired_difference(after, before)
    report['blimp'] = {'before': before['overall'], 'continued': after['overall'], 'scratch': scratch['overall'],
                       'continued_minus_before': kept}
    print(f'\nBLiMP ({after["pairs"]:,} pairs): before {before["overall"]:.4f}, after continuing '
          f'{after["overall"]:.4f}, from scratch {scratch["overall"]:.4f}')
    print('| phenomenon | before | after | after - before (paired SE) |\n|---|---|---|---|')
    for term, difference in kept['phenomena'].items():
      print(f'| {term} | {before["phenomena"][term]:.3f} | {after["phenomena"][term]:.3f} | '
            f'{difference["difference"]:+.3f} ({difference["paired_se"]:.3f}) |')
    overall = kept['overall']
    print(f'| **overall** | {before["overall"]:.3f} | {after["overall"]:.3f} | {overall["difference"]:+.3f} '
          f'({overall["paired_se"]:.3f}) |')
  with open(os.path.join(args.workdir, 'report.json'), 'w') as f:
    json.dump(report, f, indent=1)
  return report


if __name__ == '__main__':
  main()
