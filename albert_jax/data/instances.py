"""Documents (lists of tokenized sentences) -> sentence-pair instances, as the original
`create_instances_from_document` makes them (albert-original.md 1.3-1.4), with a seeded numpy Generator.

  [CLS] A [SEP] B [SEP], segment ids 0 for [CLS] A [SEP] and 1 for B [SEP]
  sop:  B follows A; swapped half the time (label 1). A one-segment chunk takes B from a random other document
        (label 1), as the original does even in SOP mode.
  nsp:  B follows A, or half the time comes from a random other document (label 1).
  none: no pair: [CLS] chunk [SEP], label 0 (the paper's Table 6 "None").

Two held-out probes that isolate what each task can learn (never used for training), exactly balanced: every
chunk of two or more segments gives two pairs, and a one-segment chunk gives none.
  swap:   A B (label 0) and B A (label 1): order alone; topic cannot tell them apart.
  random: A B (label 0) and A R (label 1), R from a random other document: what NSP asks.
"""
import dataclasses

import numpy as np

from albert_jax.data.tokenizer import CLS, SEP


@dataclasses.dataclass
class Instance:
  tokens: np.ndarray  # int32, with [CLS] and [SEP]s, unpadded
  segment_ids: np.ndarray  # int32
  label: int  # 1 = swapped (SOP) or random next (NSP)
  short: bool  # made with a short target length (short_seq_prob)


def truncate_pair(len_a: int, len_b: int, max_tokens: int, rng: np.random.Generator) -> tuple:
  """The original's truncate_seq_pair in closed form: remove one token at a time from the longer side (ties:
  B), each from the front or the back with probability 1/2. Returns (a_start, a_stop, b_start, b_stop)."""
  excess = len_a + len_b - max_tokens
  cut_a = cut_b = 0
  if excess > 0:
    gap = abs(len_a - len_b)
    to_longer = min(excess, gap)
    rest = excess - to_longer
    cut_a, cut_b = (to_longer, 0) if len_a > len_b else (0, to_longer)
    cut_b += (rest + 1) // 2  # once equal, B (the tie winner) goes first
    cut_a += rest // 2
  front_a = rng.binomial(cut_a, 0.5) if cut_a else 0
  front_b = rng.binomial(cut_b, 0.5) if cut_b else 0
  return front_a, len_a - (cut_a - front_a), front_b, len_b - (cut_b - front_b)


def _pair(tokens_a, tokens_b, label, short):
  tokens = np.concatenate([[CLS], tokens_a, [SEP], tokens_b, [SEP]]).astype(np.int32)
  segment_ids = np.zeros(len(tokens), np.int32)
  segment_ids[len(tokens_a) + 2:] = 1
  return Instance(tokens, segment_ids, label, short)


def _single(tokens_a, short):
  tokens = np.concatenate([[CLS], tokens_a, [SEP]]).astype(np.int32)
  return Instance(tokens, np.zeros(len(tokens), np.int32), 0, short)


def from_document(documents: list, index: int, max_seq_length: int, short_seq_prob: float, sentence_task: str,
                  rng: np.random.Generator) -> list:
  """Instances from documents[index]; documents are lists of non-empty int32 sentence arrays, none longer than
  max_seq_length - 3 tokens. Other documents of the list serve the random-document segments."""
  document = documents[index]
  max_tokens = max_seq_length - (2 if sentence_task == 'none' else 3)
  probe = sentence_task in ('swap', 'random')
  # Drawn once per document (and pass), so every instance of this document shares it, as in the original.
  short = rng.random() < short_seq_prob
  target = int(rng.integers(2, max_tokens + 1)) if short else max_tokens
  instances = []
  chunk, chunk_length, i = [], 0, 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i])
    if i == len(document) - 1 or chunk_length >= target:
      if sentence_task == 'none':
        tokens = np.concatenate(chunk)
        start, stop, _, _ = truncate_pair(len(tokens), 0, max_tokens, rng)
        instances.append(_single(tokens[start:stop], short))
      elif probe:
        if len(chunk) >= 2:  # a one-segment chunk has no order to probe
          instances.extend(_probe_pairs(chunk, documents, index, target, max_tokens, sentence_task, short, rng))
      else:
        a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
        tokens_a = np.concatenate(chunk[:a_end])
        if len(chunk) == 1 or (sentence_task == 'nsp' and rng.random() < 0.5):
          label, tokens_b = 1, _random_segment(documents, index, target - len(tokens_a), rng)
          i -= len(chunk) - a_end  # the unused segments start the next chunk
        elif sentence_task == 'sop' and rng.random() < 0.5:
          label, tokens_a, tokens_b = 1, np.concatenate(chunk[a_end:]), tokens_a
        else:
          label, tokens_b = 0, np.concatenate(chunk[a_end:])
        a0, a1, b0, b1 = truncate_pair(len(tokens_a), len(tokens_b), max_tokens, rng)
        instances.append(_pair(tokens_a[a0:a1], tokens_b[b0:b1], label, short))
      chunk, chunk_length = [], 0
    i += 1
  return instances


def _probe_pairs(chunk, documents, index, target, max_tokens, probe, short, rng) -> list:
  """The two pairs a chunk of 2+ segments gives a probe: A B (label 0), and B A (swap: the same tokens, only
  their order differs) or A R (random: the same A, then a segment of another document) with label 1."""
  a_end = int(rng.integers(1, len(chunk)))
  tokens_a, tokens_b = np.concatenate(chunk[:a_end]), np.concatenate(chunk[a_end:])
  a0, a1, b0, b1 = truncate_pair(len(tokens_a), len(tokens_b), max_tokens, rng)
  a, b = tokens_a[a0:a1], tokens_b[b0:b1]
  if probe == 'swap':
    negative = (b, a)
  else:
    negative = (a, _random_segment(documents, index, target - len(a), rng)[:max_tokens - len(a)])
  return [_pair(a, b, 0, short), _pair(*negative, 1, short)]


def _random_segment(documents: list, index: int, target_length: int, rng: np.random.Generator) -> np.ndarray:
  """Consecutive sentences of a random other document (10 tries to avoid this one), from a random start, until
  target_length tokens."""
  other = index
  for _ in range(10):
    other = int(rng.integers(0, len(documents)))
    if other != index:
      break
  document = documents[other]
  pieces, length = [], 0
  for sentence in document[int(rng.integers(0, len(document))):]:
    pieces.append(sentence)
    length += len(sentence)
    if length >= target_length:
      break
  return np.concatenate(pieces)
