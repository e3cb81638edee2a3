"""Fine-tuning batches padded to a few fixed lengths instead of all to task.max_seq_length.

Most downstream inputs are far shorter than the length a task is configured for (SST-2's sentences average about 13
pieces; run_glue.sh pads them to 512), and a step's cost grows with the padded length. The task's rows are measured
once, `task.length_buckets` fixed lengths are chosen from the longest row of each of the run's training batches
(the ones that leave the least padding, so only that many shapes are compiled), and each batch is cut to the
shortest fixed length that holds its longest row.
Cutting only drops padding: every real piece, and every output, is what padding to the maximum gives, up to float
rounding. With `task.group_by_length` the training batches are also drawn by length (rows of a similar length
together), as HF's Trainer does with its option of that name: far less padding, a different order of examples.
"""
import numpy as np

MULTIPLE = 8  # fixed lengths are multiples of this: matmul tiles stay whole
POOL = 64  # group_by_length sorts this many batches' rows at a time, so batches still mix the whole training set


def row_lengths(features: dict) -> np.ndarray:
  """The real pieces of each row (of its longest option, where a row holds several sequences: RACE's four)."""
  mask = np.asarray(features['input_mask'])
  return mask.reshape(len(mask), -1, mask.shape[-1]).sum(-1).max(-1)


def choose(lengths: np.ndarray, count: int, max_length: int) -> tuple:
  """`count` fixed lengths (multiples of MULTIPLE, none above max_length, the last holding the longest row) that
  leave the fewest padded positions when each row is padded to the shortest that holds it; (max_length,) for 0.

  Dynamic programming over the candidate lengths: best[k][j] is the least padded total of the rows up to
  candidate j with k fixed lengths, the k-th being candidate j."""
  if count <= 0 or not len(lengths):
    return (max_length,)
  candidates = sorted({min(max_length, c) for c in range(MULTIPLE, max_length + MULTIPLE, MULTIPLE)})
  longest = int(np.max(lengths))
  candidates = [c for c in candidates if c < longest] + [next(c for c in candidates if c >= longest)]
  rows_up_to = np.searchsorted(np.sort(lengths), candidates, side='right')  # rows of each length or less
  n, inf = len(candidates), float('inf')
  best = np.full((count + 1, n), inf)
  came_from = np.zeros((count + 1, n), int)
  for j in range(n):
    best[1][j] = candidates[j] * rows_up_to[j]
  for k in range(2, count + 1):
    for j in range(n):
      for i in range(j):
        cost = best[k - 1][i] + candidates[j] * (rows_up_to[j] - rows_up_to[i])
        if cost < best[k][j]:
          best[k][j], came_from[k][j] = cost, i
  k = int(np.argmin(best[1:, n - 1])) + 1  # fewer fixed lengths when more would not lower the padding
  chosen, j = [], n - 1
  while k:
    chosen.append(candidates[j])
    j, k = came_from[k][j], k - 1
  return tuple(sorted(chosen))


def with_evaluation(fixed: tuple, features: dict, max_length: int) -> tuple:
  """The training batches' fixed lengths, and one more that holds the longest row of the other splits where that is
  longer (evaluation's alone)."""
  longest = max((int(row_lengths(f).max()) for f in features.values() if len(f['weights'])), default=0)
  if longest > fixed[-1]:
    fixed += (min(max_length, -(-longest // MULTIPLE) * MULTIPLE),)
  return fixed


def fitting(longest: int, fixed: tuple) -> int:
  """The shortest fixed length that holds a row of `longest` pieces."""
  return next((length for length in fixed if length >= longest), fixed[-1])


def cut(batch: dict, length: int, max_length: int) -> dict:
  """The batch's arrays of one value per position (their last axis max_length) cut to `length`."""
  return {k: v[..., :length] if np.ndim(v) >= 2 and v.shape[-1] == max_length else v for k, v in batch.items()}


def pad_outputs(outputs: dict, length: int, max_length: int) -> dict:
  """The inverse for a model's outputs: those of one value per position (SQuAD's span logits, axis 1 of the cut
  length) padded back to max_length with the lowest float, which no argmax or top-k picks."""
  def pad(x):
    if length == max_length or np.ndim(x) < 2 or x.shape[1] != length or not np.issubdtype(x.dtype, np.floating):
      return x
    widths = [(0, 0), (0, max_length - length)] + [(0, 0)] * (x.ndim - 2)
    return np.pad(x, widths, constant_values=np.finfo(x.dtype).min)
  return {k: pad(v) for k, v in outputs.items()}


class TrainingBatches:
  """Which rows make the training batch of each step, and the fixed length it is padded to: a function of the
  step alone, so that resuming is exact without any data state, and the same on every host (each takes its slice).

  Rows come in epochs of seeded permutations. Without grouping, the epochs are laid end to end (a batch may span two).
  With grouping, each epoch's permutation is cut into pools of POOL batches whose rows are sorted by length, cut into
  batches, and the epoch's batches shuffled; an epoch then leaves out its last (count mod batch) rows, different
  ones each epoch. The fixed lengths are chosen (`choose`) from the longest row of each of the run's first batches
  (up to SAMPLE): what a step pads to is its longest row, so that is the distribution whose padding they lower."""
  SAMPLE = 4096

  def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, group_by_length: bool, buckets: int,
               max_length: int, steps: int, host: int = 0, hosts: int = 1):
    self.lengths, self.batch_size, self.seed = np.asarray(lengths), batch_size, seed
    self.count, self.host, self.per_host = len(lengths), host, batch_size // hosts
    self.per_epoch = self.count // batch_size if group_by_length else 0  # 0: no grouping (or too few rows for it)
    self._epochs = {}
    # The longest row of all counts too: a batch past the sample may hold it, and no fixed length may cut it.
    longest = [self.lengths.max()] + [self.lengths[self.rows(step)].max() for step in range(min(steps, self.SAMPLE))]
    self.fixed = choose(np.array(longest), buckets, max_length)

  def __call__(self, step: int) -> tuple:
    """(this host's rows of the batch at `step`, the fixed length the whole batch is padded to)."""
    rows = self.rows(step)
    length = fitting(int(self.lengths[rows].max()), self.fixed)
    return rows[self.host * self.per_host:(self.host + 1) * self.per_host], length

  def rows(self, step: int) -> np.ndarray:
    """Every host's rows of the batch at `step`."""
    if self.per_epoch:
      epoch, index = divmod(step, self.per_epoch)
      return self._epoch(epoch, grouped=True)[index]
    positions = np.arange(step * self.batch_size, (step + 1) * self.batch_size)
    epochs, offsets = positions // self.count, positions % self.count
    return np.array([self._epoch(e)[o] for e, o in zip(epochs, offsets)])

  def _epoch(self, epoch: int, grouped: bool = False) -> np.ndarray:
    """The epoch's permutation (grouped: its batches, [per_epoch, batch_size]); this epoch's and the one before
    are kept."""
    if epoch not in self._epochs:
      order = np.random.default_rng([self.seed, int(epoch)]).permutation(self.count)
      if grouped:
        order = order[:self.per_epoch * self.batch_size]
        pool = POOL * self.batch_size
        order = np.concatenate([chunk[np.argsort(self.lengths[chunk], kind='stable')]
                                for chunk in np.split(order, range(pool, len(order), pool))])
        batches = order.reshape(self.per_epoch, self.batch_size)
        order = batches[np.random.default_rng([self.seed, int(epoch), 1]).permutation(self.per_epoch)]
      self._epochs = {e: v for e, v in self._epochs.items() if e == epoch - 1}  # a batch spans at most two
      self._epochs[epoch] = order
    return self._epochs[epoch]


def evaluation_batches(lengths: np.ndarray, batch_size: int, fixed: tuple) -> list:
  """[(rows, fixed length)] covering every row once, rows in order of length so that each batch pads little; the
  last batch may be short (the caller pads it with weight-0 rows)."""
  order = np.argsort(lengths, kind='stable')
  return [(rows, fitting(int(lengths[rows].max()), fixed))
          for rows in np.split(order, range(batch_size, len(order), batch_size))]
