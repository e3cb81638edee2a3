"""Held-out curves of pretraining runs against wall-clock time: a PNG and a markdown table.

  python bench/held_out_curves.py /tmp/albert_wiki_books/run [OTHER_RUN ...] --output=docs/wiki_books_cpu_hour.png \
      [--minutes=15,30,60]

Reads each workdir's TensorBoard files (what train.py writes) and plots, against minutes since the run's first
event (its start: indexing, compiling and evaluations included), the held-out MLM accuracy of every source (and
of all together) and the sentence-order accuracy on swap pairs. The table gives the figures of the last evaluation
at or before each of --minutes.
"""
import argparse

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from albert_jax import paths  # noqa: E402
from shared import tensorboard_scalars  # noqa: E402


def read_run(workdir: str) -> dict:
  """{tag: [(minutes since the start, step, value)]} for the held-out accuracies of a run."""
  start, series = tensorboard_scalars(workdir)
  return {tag: sorted(((t - start) / 60, step, value) for t, step, value in points) for tag, points in series.items()
          if tag.startswith('eval_') and tag.endswith('accuracy')}


def label(tag: str) -> str:
  name = tag[len('eval_'):-len('_accuracy')]
  return {'mlm': 'MLM, all held-out', 'swap': 'sentence order, swap pairs', 'sop': 'own SOP pairs',
          'random': 'random pairs'}.get(name, f'MLM, held-out {name.replace("_mlm", "")}')


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('workdirs', nargs='+')
  parser.add_argument('--output', required=True, help='the PNG to write')
  parser.add_argument('--minutes', default='15,30,60', help='where the table reads the curves')
  args = parser.parse_args()
  marks = [float(m) for m in args.minutes.split(',')]
  figure, (mlm_axes, order_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
  for workdir in args.workdirs:
    run = read_run(workdir)
    name = paths.path(workdir).name
    mlm_tags = sorted(t for t in run if t.endswith('mlm_accuracy'))
    for tag in mlm_tags:
      minutes, _, values = zip(*run[tag])
      mlm_axes.plot(minutes, values, marker='o', markersize=3,
                    label=label(tag) + (f' ({name})' if len(args.workdirs) > 1 else ''))
    for tag in ('eval_swap_accuracy',):
      if tag in run:
        minutes, _, values = zip(*run[tag])
        order_axes.plot(minutes, values, marker='o', markersize=3, label=label(tag) + (
            f' ({name})' if len(args.workdirs) > 1 else ''))
    shown = mlm_tags + [t for t in ('eval_swap_accuracy',) if t in run]
    print(f'\n{workdir}\n| minutes | step | ' + ' | '.join(label(t) for t in shown) + ' |')
    print('|---|---|' + '---|' * len(shown))
    for mark in marks:
      rows = [max((p for p in run[t] if p[0] <= mark), default=None) for t in shown]
      if rows[0] is None:
        continue
      print(f'| {mark:g} (at {rows[0][0]:.1f}) | {rows[0][1]:,} | ' +
            ' | '.join(f'{r[2]:.4f}' if r else '' for r in rows) + ' |')
  mlm_axes.set(xlabel='minutes since the start', ylabel='held-out MLM accuracy', title='Masked LM')
  order_axes.axhline(0.5, color='grey', linestyle=':', label='chance')
  order_axes.set(xlabel='minutes since the start', ylabel='accuracy', title='Sentence order (held-out swap pairs)')
  for axes in (mlm_axes, order_axes):
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
  figure.tight_layout()
  figure.savefig(args.output, dpi=110)
  print(f'\nwrote {args.output}')


if __name__ == '__main__':
  main()
