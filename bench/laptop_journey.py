"""The laptop page's journey, measured as a user meets it: docs/laptop.md's commands in order (the quickstart's
pretraining, the word-order task fine-tuned from its checkpoint and from random weights, BLiMP on the checkpoint
and on random weights of its shape), each timed, with the figures the README and the page quote and the paired
standard error of the word-order difference (the same dev examples under both inits).

  python bench/laptop_journey.py --blimp=../shared/data/blimp [--out=DIR] [--pairs_per_paradigm=200]

Writes DIR/journey.json and DIR/journey.txt (the record), and keeps each command's console in DIR/NAME.log. Run it
with nothing else on the machine: its wall times are the page's "minutes".
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent


def timed(name: str, argv: list, out: pathlib.Path) -> float:
  """Runs `python -m ...` as the page shows it, its console to out/NAME.log; its wall seconds."""
  started = time.time()
  with open(out / f'{name}.log', 'w') as log:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                          env={**os.environ, 'PYTHONPATH': str(REPO)})
  if done.returncode:
    raise SystemExit(f'{name} failed (exit {done.returncode}): see {out / name}.log')
  seconds = time.time() - started
  print(f'{name}: {seconds:.0f} s', flush=True)
  return seconds


def word_order_gold(init: str, tfds_data_dir=None) -> np.ndarray:
  """The dev labels of the built-in task, as finetune.py reads them (the same examples for both inits)."""
  from albert_jax import finetune
  from albert_jax.config import from_file
  config = from_file(REPO / 'configs' / 'finetune' / 'builtin.py')
  config.init, config.data.tfds_data_dir = init, tfds_data_dir
  splits = finetune.make_task(config).splits()
  return np.array([e.label for e in splits['dev'][0]])


def predicted(workdir: pathlib.Path) -> np.ndarray:
  """The labels the run's best checkpoint gave the dev examples, in their order (predictions/dev.tsv)."""
  lines = (workdir / 'predictions' / 'dev.tsv').read_text().splitlines()[1:]
  return np.array([line.split('\t')[1] for line in lines])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--blimp', required=True, help="BLiMP's data/ folder")
  parser.add_argument('--pairs_per_paradigm', type=int, default=200)
  parser.add_argument('--out', default='/tmp/laptop_journey')
  args = parser.parse_args()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  tiny, builtin, random = out / 'albert_tiny', out / 'albert_tiny_builtin', out / 'albert_tiny_builtin_random'
  seconds = {
      'pretrain': timed('pretrain', ['-m', 'albert_jax.train', '--config=configs/tiny.py', f'--workdir={tiny}'], out),
      'finetune': timed('finetune', ['-m', 'albert_jax.finetune', '--config=configs/finetune/builtin.py',
                                     f'--config.init={tiny}', f'--workdir={builtin}'], out),
      'finetune_random': timed('finetune_random', ['-m', 'albert_jax.finetune', '--config=configs/finetune/builtin.py',
                                                   '--config.init=none', f'--workdir={random}'], out),
  }
  blimp = {}
  for name, extra in (('blimp_random', ['--random_init']), ('blimp', [f'--baseline={out / "blimp_random.json"}'])):
    result = out / f'{name}.json'
    seconds[name] = timed(name, ['-m', 'albert_jax.blimp', f'--checkpoint={tiny}', f'--data={args.blimp}',
                                 f'--pairs_per_paradigm={args.pairs_per_paradigm}', f'--output={result}', *extra],
                          out)
    blimp[name] = json.loads(result.read_text())
  from albert_jax import blimp as blimp_lib
  blimp_difference = blimp_lib.paired_difference(blimp['blimp'], blimp['blimp_random'])['overall']

  pretrained = json.loads((tiny / 'result.json').read_text())
  scores = {k: json.loads((w / 'result.json').read_text())['eval_accuracy'] for k, w in
            (('checkpoint', builtin), ('random', random))}
  gold = word_order_gold(str(tiny))
  right = {k: predicted(w) == gold for k, w in (('checkpoint', builtin), ('random', random))}
  assert all(abs(right[k].mean() - scores[k]) < 1e-6 for k in right), (scores, {k: v.mean() for k, v in right.items()})
  from albert_jax import stats
  difference, paired_se = stats.mean_and_se(right['checkpoint'].astype(float) - right['random'].astype(float))
  unpaired_se = float(np.hypot(*(stats.mean_and_se(r.astype(float))[1] for r in right.values())))
  record = {
      'date': time.strftime('%Y-%m-%d'), 'machine': f'{platform.machine()}, {os.cpu_count()} cores',
      'python': platform.python_version(), 'seconds': seconds,
      'pretraining': {k: pretrained[k] for k in ('step', 'eval_mlm_accuracy', 'eval_swap_accuracy') if k in pretrained},
      'word_order': {'n': int(len(gold)), 'checkpoint': scores['checkpoint'], 'random': scores['random'],
                     'majority': float(max(np.mean(gold == c) for c in np.unique(gold))),
                     'difference': difference, 'paired_se': paired_se, 'unpaired_se': unpaired_se},
      'blimp': {'pairs': blimp['blimp']['pairs'], 'checkpoint': blimp['blimp']['overall'],
                'random': blimp['blimp_random']['overall'], **blimp_difference},
  }
  (out / 'journey.json').write_text(json.dumps(record, indent=2) + '\n')
  w = record['word_order']
  text = '\n'.join([
      f"docs/laptop.md's journey, {record['date']}, {record['machine']}, Python {record['python']}",
      f"pretraining (tiny, built-in corpus, {pretrained.get('step')} steps): {seconds['pretrain'] / 60:.1f} min; "
      f"held-out MLM {pretrained.get('eval_mlm_accuracy', float('nan')):.4f}, swap pairs "
      f"{pretrained.get('eval_swap_accuracy', float('nan')):.4f}",
      f"word order (dev n {w['n']}): checkpoint {w['checkpoint']:.4f} ({seconds['finetune']:.0f} s), random "
      f"{w['random']:.4f} ({seconds['finetune_random']:.0f} s), majority {w['majority']:.4f}; difference "
      f"{w['difference']:+.4f}, paired SE {w['paired_se']:.4f} ({w['difference'] / w['paired_se']:.1f} SE; "
      f"unpaired {w['unpaired_se']:.4f})",
      f"BLiMP ({record['blimp']['pairs']:,} pairs): checkpoint {record['blimp']['checkpoint']:.4f} "
      f"({seconds['blimp']:.0f} s), random {record['blimp']['random']:.4f} ({seconds['blimp_random']:.0f} s); "
      f"difference {record['blimp']['difference']:+.4f}, paired SE {record['blimp']['paired_se']:.4f}",
  ])
  (out / 'journey.txt').write_text(text + '\n')
  print(text)


if __name__ == '__main__':
  main()
