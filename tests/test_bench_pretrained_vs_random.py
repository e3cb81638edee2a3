"""bench/pretrained_vs_random.py, what pretraining buys on real tasks: its statistics against independent ones
(scipy's exact binomial test for McNemar, the analytic paired standard error for the bootstrap, GLUE's F1), and a
small run end to end on slices of the real SST-2 files: both inits fine-tuned, seed 0 shared by the grid and the
seeds, the same shape for random weights, a finished run never run again."""
import importlib
import json
import math
import re
import sys

import jax
import numpy as np
import pytest
import scipy.stats

from albert_jax import train
from albert_jax.downstream import glue
from conftest import ROOT
from test_train import small

GLUE = ROOT.parent / 'shared' / 'data' / 'glue'


@pytest.fixture(scope='module')
def bench():
  sys.path.insert(0, str(ROOT / 'bench'))
  try:
    return importlib.import_module('pretrained_vs_random')
  finally:
    sys.path.remove(str(ROOT / 'bench'))


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_examples(bench):
  rng = np.random.default_rng(0)
  for n, p, q in ((12, 0.7, 0.6), (80, 0.8, 0.5), (872, 0.8, 0.79)):
    a, b = rng.random(n) < p, rng.random(n) < q
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    assert bench.mcnemar(a, b) == pytest.approx(scipy.stats.binomtest(only_a, only_a + only_b).pvalue, rel=1e-9)
  assert bench.mcnemar(a, a) == 1.0


def test_the_paired_bootstrap_agrees_with_the_analytic_paired_standard_error(bench):
  rng = np.random.default_rng(1)
  gold = rng.choice(['0', '1'], 872)
  flip = lambda share: np.where(rng.random(872) < share, np.where(gold == '1', '0', '1'), gold)
  pretrained, random = flip(0.15), flip(0.25)
  out = bench.paired('accuracy', [pretrained], [random], gold)
  d = (pretrained == gold).astype(float) - (random == gold)
  assert out['difference'] == pytest.approx(d.mean())
  assert out['se'] == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)), rel=0.05)
  assert out['interval'][0] < out['difference'] < out['interval'][1] and out['z'] > 3
  # F1 as GLUE's scorer computes it (glue.f1 on label indices).
  assert bench.metric('f1', pretrained, gold) == pytest.approx(glue.f1(pretrained.astype(int), gold.astype(int)))


@pytest.mark.skipif(not (GLUE / 'SST-2').is_dir(), reason=f'the shared GLUE files are not at {GLUE}')
def test_the_bench_fine_tunes_both_inits_and_compares_them_on_the_same_dev_examples(bench, tiny_config,
                                                                                    builtin_tokenizer, tmp_path):
  pretrained = tmp_path / 'pretrained'
  train.train_and_evaluate(small(tiny_config, num_steps=4, eval_every=4, checkpoint_every=4), pretrained,
                           devices=jax.devices()[:1])
  for split, rows in (('train', 97), ('dev', 41)):  # the header and the first rows of the real files
    lines = (GLUE / 'SST-2' / f'{split}.tsv').read_text().splitlines()[:rows]
    (tmp_path / 'glue' / 'SST-2').mkdir(parents=True, exist_ok=True)
    (tmp_path / 'glue' / 'SST-2' / f'{split}.tsv').write_text('\n'.join(lines) + '\n')
  argv = [f'--init={pretrained}', f'--glue={tmp_path / "glue"}', f'--workdir={tmp_path / "bench"}', '--tasks=sst2',
          '--learning_rates=1e-3', '--sst2_steps=8', '--seeds=2', '--train_examples=']
  out = bench.main(argv)
  runs = sorted(p.relative_to(tmp_path / 'bench') for p in (tmp_path / 'bench').glob('sst2/*/*'))
  assert [str(r) for r in runs] == ['sst2/pretrained/lr=0.001,steps=8,seed=0', 'sst2/pretrained/lr=0.001,steps=8,seed=1',
                                    'sst2/random/lr=0.001,steps=8,seed=0', 'sst2/random/lr=0.001,steps=8,seed=1']
  logs = {init: (tmp_path / 'bench' / 'sst2' / init / 'lr=0.001,steps=8,seed=1' / 'finetune.log').read_text()
          for init in ('pretrained', 'random')}
  assert f'starting from {pretrained}' in logs['pretrained'] and 'random weights' in logs['random']
  counts = {init: re.search(r'([\d,]+) parameters', log).group(1) for init, log in logs.items()}
  assert counts['pretrained'] == counts['random']  # random weights of the checkpoint's shape
  assert 'train 96, dev 40 examples' in logs['random']
  # The paired difference is the difference of the two inits' seed means, each a run's own dev accuracy.
  for init in ('pretrained', 'random'):
    results = [json.loads((tmp_path / 'bench' / 'sst2' / init / f'lr=0.001,steps=8,seed={s}' / 'result.json')
                          .read_text())['eval_accuracy'] for s in (0, 1)]
    assert out[f'sst2/{init}/accuracy']['scores'] == pytest.approx(results)
  assert out['sst2/paired/accuracy']['difference'] == pytest.approx(
      out['sst2/pretrained/accuracy']['mean'] - out['sst2/random/accuracy']['mean'])
  assert 'Pretrained minus random, accuracy' in (tmp_path / 'bench' / 'report.md').read_text()
  # Run again: every run is finished, none is repeated, the same figures come out.
  before = {p: p.stat().st_mtime for p in (tmp_path / 'bench').glob('sst2/*/*/result.json')}
  assert bench.main(argv)['sst2/paired/accuracy'] == out['sst2/paired/accuracy']
  assert {p: p.stat().st_mtime for p in (tmp_path / 'bench').glob('sst2/*/*/result.json')} == before
