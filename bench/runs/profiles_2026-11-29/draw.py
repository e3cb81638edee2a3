"""The picture in docs/profiles.md: a trace's timeline drawn from its Chrome-format file (HOST.trace.json.gz), a
row per thread that did work, the steps' marks above, XLA's operations coloured by kind.

  python bench/runs/profiles_2026-11-29/draw.py WORKDIR/profiles/plugins/profile/TIME/HOST.trace.json.gz OUT.png
"""
import gzip
import json
import sys

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

KINDS = [('matrix products', ('dot', 'ynn_fusion'), 'tab:red'),
         ('copies and transposes', ('copy', 'transpose'), 'tab:orange'),
         ('reductions and scatters', ('wrapped_reduce', 'reduce', 'wrapped_scatter', 'scatter'), 'tab:green'),
         ('other fused operations', ('',), 'tab:blue')]
HOST = {'PjitFunction': ('the host dispatches the step', 'black'),
        'np.asarray': ('the host waits for its results', 'lightgray')}


def kind(event: dict):
  """(label, colour) of an XLA operation (it names its HLO module) or of the host's dispatch and wait; else None."""
  if 'hlo_module' in event.get('args', {}):
    return next((label, colour) for label, prefixes, colour in KINDS if event['name'].startswith(prefixes))
  return next((shown for prefix, shown in HOST.items() if event['name'].startswith(prefix)), None)


def main(trace_file: str, out: str) -> None:
  events = json.load(gzip.open(trace_file))['traceEvents']
  threads = {(e['pid'], e['tid']): e['args']['name'] for e in events if e.get('ph') == 'M' and
             e.get('name') == 'thread_name'}
  work = [e for e in events if e.get('ph') == 'X' and not e['name'].startswith('end: ')]
  steps = [e for e in work if e['name'] == 'train']
  start = min(e['ts'] for e in steps)
  busy = {}
  for e in work:
    if e['name'] != 'train' and kind(e):
      busy.setdefault((e['pid'], e['tid']), []).append(e)
  rows = sorted(busy, key=lambda t: -sum(e['dur'] for e in busy[t]))[:8]
  figure, ax = plt.subplots(figsize=(11, 0.45 * (len(rows) + 2) + 1))
  for e in steps:
    ax.broken_barh([((e['ts'] - start) / 1e3, e['dur'] / 1e3)], (len(rows) + 0.1, 0.8), color='black', alpha=0.25)
    ax.text((e['ts'] - start + e['dur'] / 2) / 1e3, len(rows) + 0.5, f'step {e["args"]["step_num"]}',
            ha='center', va='center', fontsize=8)
  seen = set()
  for row, thread in enumerate(reversed(rows)):
    for e in busy[thread]:
      label, colour = kind(e)
      ax.broken_barh([((e['ts'] - start) / 1e3, max(e['dur'], 1) / 1e3)], (row + 0.1, 0.8), color=colour,
                     label=None if label in seen else label)
      seen.add(label)
  names = [threads.get(t, str(t[1])).split('/')[0][:24] for t in reversed(rows)]
  ax.set_yticks([r + 0.5 for r in range(len(rows) + 1)], names + ['steps'], fontsize=7)
  ax.set_xlabel('milliseconds from the first traced step')
  ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.25), ncol=3)
  ax.set_title('A profile of configs/tiny.py\'s training step on a 2-core CPU (the host\'s threads)', fontsize=9)
  figure.tight_layout()
  figure.savefig(out, dpi=100)


if __name__ == '__main__':
  main(*sys.argv[1:])
