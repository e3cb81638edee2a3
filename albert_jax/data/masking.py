"""Whole-word n-gram masking as the original `create_masked_lm_predictions` (albert-original.md 1.5).

Words are maximal runs of pieces that start with a word-start piece. Candidate spans start at every word in a
shuffled order; each draws n in 1..ngram with p(n) proportional to 1/n, shrinks n while the span would exceed the
budget min(max_predictions, max(1, round(len * masked_lm_prob))), and is skipped if it overlaps a chosen span.
The selection walks spans (a few dozen per instance), never tokens; word boundaries and the 80/10/10
replacement are array operations.

Deliberate differences from the original: numpy's RNG is seeded (the original's n-gram draws are not), and a
continuation piece right after [SEP] starts a new word instead of joining the last word before [SEP].
"""
import dataclasses

import numpy as np

from albert_jax.data.tokenizer import CLS, MASK, SEP


@dataclasses.dataclass
class Masked:
  tokens: np.ndarray  # input ids after replacement
  positions: np.ndarray  # sorted masked positions
  labels: np.ndarray  # original ids at those positions
  span_words: list  # words per chosen span (for statistics)


def ngram_probabilities(ngram: int, favor_shorter: bool = True) -> np.ndarray:
  p = 1.0 / np.arange(1, ngram + 1)
  p /= p.sum()
  return p if favor_shorter else p[::-1]


def mask(tokens: np.ndarray, word_start: np.ndarray, rng: np.random.Generator, masked_lm_prob: float,
         max_predictions: int, ngram_p: np.ndarray, vocab_size: int) -> Masked:
  special = (tokens == CLS) | (tokens == SEP)
  after_special = np.concatenate([[True], special[:-1]])
  starts = np.flatnonzero(~special & (word_start[tokens] | after_special))
  # A word runs from its start to the next start or special token.
  boundaries = np.flatnonzero(special)
  next_boundary = boundaries[np.searchsorted(boundaries, starts)] if len(boundaries) else np.full(len(starts),
                                                                                                  len(tokens))
  ends = np.minimum(np.append(starts[1:], len(tokens)), next_boundary)
  word_count = len(starts)
  budget = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))

  # Pieces in words [w, w + k): a prefix sum over word lengths.
  cumulative = np.concatenate([[0], np.cumsum(ends - starts)]).tolist()
  order = rng.permutation(word_count).tolist()
  ns = (rng.choice(len(ngram_p), size=word_count, p=ngram_p) + 1).tolist()
  covered = bytearray(word_count)
  chosen, count = [], 0
  for w, n in zip(order, ns):
    if count >= budget:
      break
    k = min(n, word_count - w)  # near the end the original's slice holds fewer words
    while k > 1 and count + cumulative[w + k] - cumulative[w] > budget:
      k -= 1
    pieces = cumulative[w + k] - cumulative[w]
    if count + pieces > budget or any(covered[w:w + k]):
      continue
    covered[w:w + k] = b'\x01' * k
    chosen.append((w, k))
    count += pieces

  if chosen:
    positions = np.sort(np.concatenate([np.arange(starts[w + j], ends[w + j]) for w, k in chosen
                                        for j in range(k)]))
  else:
    positions = np.zeros(0, np.int64)
  labels = tokens[positions]
  out = tokens.copy()
  # Per token, as the original: 80% [MASK], 10% unchanged, 10% a uniformly random id.
  replace = rng.random(len(positions))
  keep = rng.random(len(positions)) < 0.5
  random_ids = rng.integers(0, vocab_size, len(positions))
  out[positions] = np.where(replace < 0.8, MASK, np.where(keep, labels, random_ids))
  return Masked(out, positions.astype(np.int32), labels.astype(np.int32), [k for _, k in chosen])
