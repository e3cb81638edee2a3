"""albert_jax/stats.py against independent computations: Python's statistics module for the standard error,
scipy's exact binomial test for McNemar, the analytic paired standard error for the bootstrap."""
import math
import statistics

import numpy as np
import pytest
import scipy.stats

from albert_jax import stats


def test_mean_and_se_is_the_sample_standard_deviation_over_root_n():
  values = [0.91, 0.87, 0.9, 0.84]
  mean, se = stats.mean_and_se(values)
  assert mean == pytest.approx(statistics.fmean(values)) and se == pytest.approx(statistics.stdev(values) / 2)
  assert stats.mean_and_se([0.5]) == (0.5, None)  # one value: no error to give


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_examples():
  rng = np.random.default_rng(0)
  for n, p, q in ((12, 0.7, 0.6), (80, 0.8, 0.5), (872, 0.8, 0.79)):
    a, b = rng.random(n) < p, rng.random(n) < q
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    assert stats.mcnemar(a, b) == pytest.approx(scipy.stats.binomtest(only_a, only_a + only_b).pvalue, rel=1e-9)
  assert stats.mcnemar(a, a) == 1.0


def test_the_paired_bootstrap_of_a_mean_difference_matches_its_analytic_standard_error():
  rng = np.random.default_rng(1)
  a, b = rng.random(2000) < 0.8, rng.random(2000) < 0.7
  d = a.astype(float) - b
  out = stats.paired_bootstrap(lambda rows: d[rows].mean(), len(d), draws=4000)
  assert out['difference'] == pytest.approx(d.mean())
  assert out['se'] == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)), rel=0.05)
  assert out['interval'][0] < out['difference'] < out['interval'][1] and out['z'] == out['difference'] / out['se']


def test_the_two_level_bootstrap_adds_the_seeds_variance_to_the_examples():
  rng = np.random.default_rng(2)
  k, n = 8, 2000
  # Per seed and example: right (1) or wrong (0) for each system; seed i of B is shifted by its own amount, so the
  # paired per-seed differences vary from seed to seed as fine-tuning runs do.
  shift = rng.normal(0, 0.03, k)
  a = rng.random((k, n)) < 0.8
  b = rng.random((k, n)) < (0.7 + shift)[:, None]
  d = a.astype(float) - b  # [seed, example]
  out = stats.seeds_and_examples_bootstrap(lambda i, rows: d[i, rows].mean(), k, n, draws=3000)
  assert out['difference'] == pytest.approx(d.mean())
  # Analytic: the plug-in variance of the seeds' differences over k, plus the examples' sampling of the mean over
  # each seed (each seed's own sampling variance, averaged, over k n).
  per_seed = d.mean(1)
  expected = math.sqrt(per_seed.var() / k + d.var(1).mean() / (k * n))
  assert out['se'] == pytest.approx(expected, rel=0.1)
  # Larger than the examples-only figure, by the seeds' share.
  examples_only = stats.paired_bootstrap(lambda rows: d[:, rows].mean(), n, draws=3000)
  assert out['se'] > 1.5 * examples_only['se']
