"""Sentence(-pair) classification and regression, the base that GLUE's tasks (glue.py), RACE's (race.py) and the
built-in task (builtin.py) share: examples, features, loss, predictions and GLUE's metrics.

Features follow the original's run_classifier: `[CLS] A [SEP] (B [SEP])`, segment 0 for A and 1 for B, a pair
cut to length by dropping tokens from the end of the longer side. Loss: softmax cross-entropy, or for one label
(STS-B) the mean squared error of the single logit.
"""
import dataclasses
import math
from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np
import optax

from albert_jax.data.tokenizer import CLS, SEP
from albert_jax.downstream import DataError


@dataclasses.dataclass
class Example:
  guid: str        # the index the leaderboards' files use
  text_a: str
  text_b: Optional[str] = None
  label: Optional[object] = None  # a label name (classification), a float (regression), None (test)


def encode(tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int) -> tuple:
  """(ids, segment ids) of `[CLS] A [SEP] (B [SEP])`, the longer side cut first (the original's
  _truncate_seq_pair)."""
  a = list(tokenizer.encode([text_a])[0])
  b = list(tokenizer.encode([text_b])[0]) if text_b is not None else None
  if b is None:
    a = a[:max_seq_length - 2]
    return [CLS] + a + [SEP], [0] * (len(a) + 2)
  while len(a) + len(b) > max_seq_length - 3:
    (a if len(a) > len(b) else b).pop()
  return [CLS] + a + [SEP] + b + [SEP], [0] * (len(a) + 2) + [1] * (len(b) + 1)


class ClassificationTask:
  """A task whose examples are Examples with labels from `labels` (None: regression to a float)."""
  scale = 1.0

  def __init__(self, name: str, labels: Optional[Sequence[str]], metric: str, config):
    self.name, self.labels, self.metric = name, labels, metric
    self.num_labels = len(labels) if labels else 1
    self.max_seq_length = config.task.max_seq_length
    self.classifier_dropout = config.task.classifier_dropout

  @property
  def head(self) -> dict:
    """The model's head, as heads.make_model and the exported checkpoint describe it."""
    return {'architecture': 'AlbertForSequenceClassification', 'num_labels': self.num_labels,
            'labels': list(self.labels or []), 'classifier_dropout': self.classifier_dropout}

  def dummy_inputs(self) -> dict:
    return {'input_ids': jnp.zeros((1, self.max_seq_length), jnp.int32)}

  def features(self, examples: list, tokenizer, split: str) -> dict:
    """Arrays [examples, ...] with the original's feature names; a label outside the task's set stops here."""
    n, length = len(examples), self.max_seq_length
    out = {'input_ids': np.zeros((n, length), np.int32), 'input_mask': np.zeros((n, length), np.int32),
           'segment_ids': np.zeros((n, length), np.int32),
           'label_ids': np.zeros((n,), np.float32 if self.labels is None else np.int32),
           'weights': np.ones((n,), np.float32)}
    for i, example in enumerate(examples):
      ids, segments = encode(tokenizer, example.text_a, example.text_b, length)
      out['input_ids'][i, :len(ids)] = ids
      out['input_mask'][i, :len(ids)] = 1
      out['segment_ids'][i, :len(ids)] = segments
      if example.label is not None:
        out['label_ids'][i] = self.label_id(example.label, f'{self.name} {split}, example {example.guid}')
    return out

  def label_id(self, label, where: str):
    if self.labels is None:
      try:
        value = float(label)
      except (TypeError, ValueError):
        raise DataError(f'{where}: label {label!r} is not a number ({self.name} is a regression task).') from None
      if not math.isfinite(value):
        raise DataError(f'{where}: label {label!r} is not a finite number.')
      return value
    if str(label) not in self.labels:
      raise DataError(f'{where}: label {label!r} is not one of {self.name}\'s labels {list(self.labels)}; fix '
                      f'the file or choose the task whose labels it uses.')
    return self.labels.index(str(label))

  def normalizers(self, batch) -> dict:
    """What the loss divides its sum by: the examples (padding rows weigh 0), as step.normalizers."""
    return {'count': jnp.maximum(jnp.sum(batch['weights']), 1)}

  def loss(self, model, params, batch, rng, deterministic: bool, norms=None):
    """(mean loss over the examples, sums for metrics); the mean divides by `norms` (a whole batch's, when this
    is one of its microbatches) or by this batch's own."""
    norms = self.normalizers(batch) if norms is None else norms
    logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask'],
                         deterministic=deterministic, rngs={'dropout': rng}).logits
    weights = batch['weights']
    if self.labels is None:
      per_example = jnp.square(logits[:, 0] - batch['label_ids'])
    else:
      per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch['label_ids'])
    return jnp.sum(per_example * weights) / norms['count'], {'loss': jnp.sum(per_example * weights),
                                                            'count': jnp.sum(weights)}

  def predict(self, model, params, batch) -> dict:
    logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask']).logits
    return {'logits': logits}

  def predictions(self, outputs: dict) -> np.ndarray:
    """Label indices, or the regression values."""
    logits = outputs['logits']
    return logits[:, 0] if self.labels is None else logits.argmax(-1)

  def score(self, outputs: dict, examples: list, features: dict, split: str, prefix: str = 'eval_') -> dict:
    """GLUE's metrics for this task, each with its count."""
    predicted, gold = self.predictions(outputs), features['label_ids']
    n = len(gold)
    if self.labels is None:
      metrics = {'pearson': pearson(predicted, gold), 'spearman': spearman(predicted, gold)}
      metrics['pearson_spearman'] = (metrics['pearson'] + metrics['spearman']) / 2
    else:
      metrics = {'accuracy': float(np.mean(predicted == gold))}
      if self.name in ('mrpc', 'qqp'):
        metrics['f1'] = f1(predicted, gold)
        metrics['accuracy_f1'] = (metrics['accuracy'] + metrics['f1']) / 2
      if self.name == 'cola':
        metrics['mcc'] = matthews(predicted, gold)
    out = {}
    for name, value in metrics.items():
      out[f'{prefix}{name}'], out[f'{prefix}{name}_count'] = float(value), n
    return out

  def prediction_files(self, outputs: dict, examples: list, split: str, leaderboard_file) -> dict:
    """The leaderboard's TSV (named as GLUE wants it for test sets): a header, then index and predicted label (or
    value, clipped to STS-B's 0..5) per example."""
    predicted = self.predictions(outputs)
    values = ([f'{min(max(float(v), 0.0), 5.0):.3f}' for v in predicted] if self.labels is None
              else [self.labels[int(i)] for i in predicted])
    lines = ['index\tprediction'] + [f'{e.guid}\t{v}' for e, v in zip(examples, values)]
    return {leaderboard_file or f'{split}.tsv': '\n'.join(lines) + '\n'}


# ---- GLUE's metrics (as sklearn and scipy compute them, which the GLUE scorer uses).

def f1(predicted, gold) -> float:
  """F1 of the positive class (label index 1)."""
  tp = np.sum((predicted == 1) & (gold == 1))
  fp, fn = np.sum((predicted == 1) & (gold != 1)), np.sum((predicted != 1) & (gold == 1))
  return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews(predicted, gold) -> float:
  """Matthews correlation of two binary labelings; 0 when a marginal is empty (sklearn's convention)."""
  tp = float(np.sum((predicted == 1) & (gold == 1)))
  tn = float(np.sum((predicted == 0) & (gold == 0)))
  fp, fn = float(np.sum((predicted == 1) & (gold == 0))), float(np.sum((predicted == 0) & (gold == 1)))
  denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return (tp * tn - fp * fn) / denominator if denominator else 0.0


def pearson(x, y) -> float:
  x, y = np.asarray(x, np.float64) - np.mean(x), np.asarray(y, np.float64) - np.mean(y)
  denominator = math.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _ranks(x) -> np.ndarray:
  """Ranks from 1, ties sharing their mean rank."""
  x = np.asarray(x)
  order = np.argsort(x, kind='stable')
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.arange(1, len(x) + 1)
  in_order = x[order]
  for value in np.unique(in_order[1:][np.diff(in_order) == 0]):
    tied = x == value
    ranks[tied] = ranks[tied].mean()
  return ranks


def spearman(x, y) -> float:
  return pearson(_ranks(x), _ranks(y))
