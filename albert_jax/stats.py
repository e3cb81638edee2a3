"""The statistics the comparisons report: a mean with its standard error, a paired bootstrap over examples (and
over seeds and examples together, for runs repeated with several seeds), and McNemar's exact test. Sweeps
(launch/sweep.py), BLiMP's paired differences and the benches use these, so that one figure means the same
wherever it is printed."""
import math
from typing import Callable, Sequence

import numpy as np


def mean_and_se(values: Sequence[float]) -> tuple:
  """(mean, standard error of the mean), the error None for fewer than two values: the sample standard deviation
  (n - 1) over the square root of n."""
  values = np.asarray(values, np.float64)
  mean = float(values.mean())
  return mean, (float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None)


def proportion_se(p: float, n: int) -> float:
  """The standard error of an accuracy p measured on n items taken as independent draws: sqrt(p(1-p)/n). Masked
  pieces of one sequence are not quite independent (a span's pieces), so for MLM accuracy it is a lower bound."""
  return math.sqrt(p * (1 - p) / n)


def paired_bootstrap(difference: Callable[[np.ndarray], float], n: int, draws: int = 10_000,
                     seed: int = 0) -> dict:
  """A difference of two systems scored on the same n examples, `difference(rows)` computing it on the examples
  `rows` (indices, repeats allowed), with its standard error and 95% interval from `draws` resamplings of the
  examples: {'difference', 'se', 'interval', 'z'}."""
  rng = np.random.default_rng(seed)
  resampled = np.array([difference(rng.integers(0, n, n)) for _ in range(draws)])
  out = {'difference': float(difference(np.arange(n))), 'se': float(resampled.std(ddof=1)),
         'interval': [float(np.percentile(resampled, 2.5)), float(np.percentile(resampled, 97.5))]}
  out['z'] = out['difference'] / out['se'] if out['se'] else math.inf
  return out


def seeds_and_examples_bootstrap(difference: Callable[[int, np.ndarray], float], seeds: int, n: int,
                                 draws: int = 10_000, seed: int = 0) -> dict:
  """A difference of two systems each run with `seeds` seeds, paired by seed (seed i of one against seed i of the
  other: the same data order and head), scored on the same n examples; `difference(i, rows)` computes seed i's on
  the examples `rows`. The figure is the mean over seeds; its standard error and 95% interval come from
  resampling the seeds and the examples together (a two-level bootstrap), so that they include what varies from
  seed to seed as well as the examples' sampling: {'difference', 'se', 'interval', 'z'}."""
  rng = np.random.default_rng(seed)

  def one_draw():  # the same examples for every seed drawn: they are scored on one dev set
    rows = rng.integers(0, n, n)
    return float(np.mean([difference(int(i), rows) for i in rng.integers(0, seeds, seeds)]))

  resampled = np.array([one_draw() for _ in range(draws)])
  every = np.arange(n)
  out = {'difference': float(np.mean([difference(i, every) for i in range(seeds)])),
         'se': float(resampled.std(ddof=1)),
         'interval': [float(np.percentile(resampled, 2.5)), float(np.percentile(resampled, 97.5))]}
  out['z'] = out['difference'] / out['se'] if out['se'] else math.inf
  return out


def mcnemar(a: np.ndarray, b: np.ndarray) -> float:
  """Two-sided exact McNemar test of two systems' right/wrong on the same examples (boolean arrays): of the
  examples exactly one of them gets right, is the split even?"""
  only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
  n, k = only_a + only_b, min(only_a, only_b)
  if n == 0:
    return 1.0
  tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
  return min(1.0, 2 * tail)

