"""GLUE: its tasks read from TFDS (glue/<task>) or the original TSV directories, and the sentence(-pair)
classification and regression they share with the built-in task (builtin.py): features, loss, GLUE's metrics,
leaderboard files.

Features follow the original's run_classifier: `[CLS] A [SEP] (B [SEP])`, segment 0 for A and 1 for B, a pair
cut to length by dropping tokens from the end of the longer side. Loss: softmax cross-entropy, or for one label
(STS-B) the mean squared error of the single logit.
"""
import csv
import dataclasses
import io
import math
from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np
import optax

from albert_jax import paths
from albert_jax.data import sources
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


# ---- The GLUE tasks: where their examples are, in TFDS and in the original TSV files.

@dataclasses.dataclass(frozen=True)
class Columns:
  """Where a TSV file's fields are (the original's processors): text_a, text_b, label (None in test files) and the
  index (None: the line number); `header` files start with a line of column names."""
  a: int
  b: Optional[int]
  label: Optional[int]
  guid: Optional[int] = None
  header: bool = True


@dataclasses.dataclass(frozen=True)
class GlueSpec:
  directory: str              # the task's folder in the GLUE download
  labels: Optional[tuple]     # as the original's get_labels; None: regression
  metric: str                 # the original's checkpoint-selection metric
  tfds_keys: tuple            # TFDS text features, text_a then text_b
  train: Columns
  test: Columns
  # (split, TSV file, TFDS split, leaderboard file or None): the dev splits are scored, test splits predicted.
  splits: tuple


def _dev_and_test(leaderboard_file: str) -> tuple:
  """The splits of every task but MNLI: dev.tsv (TFDS validation) and test.tsv (TFDS test)."""
  return ('dev', 'dev.tsv', 'validation', None), ('test', 'test.tsv', 'test', leaderboard_file)


_BINARY = ('0', '1')
_NLI = ('entailment', 'not_entailment')
GLUE = {
    'cola': GlueSpec('CoLA', _BINARY, 'mcc', ('sentence',), Columns(3, None, 1, header=False),
                     Columns(1, None, None, 0), _dev_and_test('CoLA.tsv')),
    'sst2': GlueSpec('SST-2', _BINARY, 'accuracy', ('sentence',), Columns(0, None, 1), Columns(1, None, None, 0),
                     _dev_and_test('SST-2.tsv')),
    'mrpc': GlueSpec('MRPC', _BINARY, 'accuracy', ('sentence1', 'sentence2'), Columns(3, 4, 0),
                     Columns(3, 4, None, 0), _dev_and_test('MRPC.tsv')),
    'stsb': GlueSpec('STS-B', None, 'pearson', ('sentence1', 'sentence2'), Columns(7, 8, -1),
                     Columns(7, 8, None, 0), _dev_and_test('STS-B.tsv')),
    'qqp': GlueSpec('QQP', _BINARY, 'accuracy', ('question1', 'question2'), Columns(3, 4, 5),
                    Columns(1, 2, None, 0), _dev_and_test('QQP.tsv')),
    'mnli': GlueSpec('MNLI', ('contradiction', 'entailment', 'neutral'), 'accuracy', ('premise', 'hypothesis'),
                     Columns(8, 9, -1), Columns(8, 9, None, 0),
                     (('dev', 'dev_matched.tsv', 'validation_matched', None),
                      ('dev_mismatched', 'dev_mismatched.tsv', 'validation_mismatched', None),
                      ('test', 'test_matched.tsv', 'test_matched', 'MNLI-m.tsv'),
                      ('test_mismatched', 'test_mismatched.tsv', 'test_mismatched', 'MNLI-mm.tsv'),
                      # The diagnostic set, predicted with the MNLI model (GLUE's AX), from its own folder.
                      ('ax', '../diagnostic/diagnostic.tsv', 'ax:test', 'AX.tsv'))),
    'qnli': GlueSpec('QNLI', _NLI, 'accuracy', ('question', 'sentence'), Columns(1, 2, -1), Columns(1, 2, None, 0),
                     _dev_and_test('QNLI.tsv')),
    'rte': GlueSpec('RTE', _NLI, 'accuracy', ('sentence1', 'sentence2'), Columns(1, 2, -1), Columns(1, 2, None, 0),
                    _dev_and_test('RTE.tsv')),
    'wnli': GlueSpec('WNLI', _BINARY, 'accuracy', ('sentence1', 'sentence2'), Columns(1, 2, -1),
                     Columns(1, 2, None, 0), _dev_and_test('WNLI.tsv')),
}
_AX_COLUMNS = Columns(1, 2, None, 0)
_TFDS_AX_KEYS = ('premise', 'hypothesis')


class GlueTask(ClassificationTask):
  """One GLUE task; `config.task.data` is 'tfds' or the GLUE download's folder (holding CoLA/, SST-2/, ...) or the
  task's own folder."""

  def __init__(self, config):
    name = config.task.name
    self.spec = GLUE[name]
    super().__init__(name, self.spec.labels, f'eval_{self.spec.metric}', config)
    self.data, self.tfds_data_dir = config.task.data, config.data.tfds_data_dir
    self.test_predictions = config.task.test_predictions

  def splits(self) -> dict:
    """{split: (examples, leaderboard file or None)}: 'train', the dev splits (scored; 'dev' picks the best
    checkpoint) and, when asked for, the test splits (predicted only). Every file is read and checked here."""
    wanted = [s for s in self.spec.splits if s[0].startswith('dev') or self.test_predictions]
    read = self._read_tfds if self.data == 'tfds' else self._read_tsv
    out = {'train': (read('train', 'train.tsv', 'train'), None)}
    for split, tsv, tfds_split, leaderboard in wanted:
      out[split] = (read(split, tsv, tfds_split), leaderboard)
    return out

  def _folder(self) -> paths.Path:
    root = paths.path(self.data)
    return root / self.spec.directory if (root / self.spec.directory).is_dir() else root

  def _read_tsv(self, split: str, file: str, tfds_split: str) -> list:
    folder = self._folder()
    # An object name in a bucket keeps '..' as it is: the task folder's sibling (diagnostic/) is named by going up.
    path = folder.parent / file[len('../'):] if file.startswith('../') else folder / file
    if not path.exists():
      hint = (' (or set --config.task.test_predictions=False to skip the test predictions)'
              if not split.startswith(('dev', 'train')) else '')
      raise DataError(f'{path} is missing: the {self.name} {split} split is read from it. Point config.task.data '
                      f'at the GLUE folder that holds {self.spec.directory}/ with its train, dev and test TSV files'
                      f'{hint}.')
    columns = self.spec.train if split in ('train', 'dev', 'dev_mismatched') else (
        _AX_COLUMNS if split == 'ax' else self.spec.test)
    # newline='': the csv module splits lines itself, as from a file opened that way.
    lines = list(csv.reader(io.StringIO(path.read_bytes().decode('utf-8'), newline=''), delimiter='\t',
                            quotechar=None))
    examples = []
    needed = max(c for c in (columns.a, columns.b, columns.label, columns.guid) if c is not None and c >= 0) + 1
    for number, line in enumerate(lines[1:] if columns.header else lines, start=2 if columns.header else 1):
      if not line:
        continue
      if len(line) < needed:
        raise DataError(f'{path}, line {number}: {len(line)} tab-separated fields, the {self.name} format has at '
                        f'least {needed} ({self.spec.directory}\'s {split} file as GLUE distributes it).')
      examples.append(Example(guid=line[columns.guid] if columns.guid is not None else str(number),
                              text_a=line[columns.a], text_b=line[columns.b] if columns.b is not None else None,
                              label=line[columns.label] if columns.label is not None else None))
      if examples[-1].label is not None:
        self.label_id(examples[-1].label, f'{path}, line {number}')
    if not examples:
      raise DataError(f'{path} holds no examples.')
    return examples

  def _read_tfds(self, split: str, file: str, tfds_split: str) -> list:
    import tensorflow_datasets as tfds
    name, keys = f'glue/{self.name}', self.spec.tfds_keys
    if tfds_split.startswith('ax:'):
      name, tfds_split, keys = 'glue/ax', tfds_split[3:], _TFDS_AX_KEYS
    try:
      builder = tfds.builder(name, data_dir=self.tfds_data_dir)
      rows = sources.tfds_examples(builder, tfds_split, f'task {self.name}: TFDS {name}')
      label_names = getattr(builder.info.features['label'], 'names', None)
    except sources.SourceError:
      raise
    except Exception as e:  # not prepared, a missing split, ...
      raise DataError(f'TFDS {name} split {tfds_split!r} cannot be read ({e}). Prepare it (tfds build {name}) and '
                      f'set data.tfds_data_dir, or set task.data to the GLUE TSV folder.') from e
    examples = []
    for row in rows:
      label = None
      if not split.startswith('test') and split != 'ax':
        label = float(row['label']) if self.labels is None else self._tfds_label(int(row['label']), label_names)
      text = lambda key: row[key].decode('utf-8')
      examples.append(Example(guid=str(int(row['idx'])), text_a=text(keys[0]),
                              text_b=text(keys[1]) if len(keys) > 1 else None, label=label))
    return sorted(examples, key=lambda e: int(e.guid))  # TFDS stores them shuffled; the leaderboard's order

  def _tfds_label(self, index: int, names) -> str:
    """TFDS's label index as the original's label name: by name where they agree (MNLI, QNLI, RTE), else 0/1."""
    if index < 0 or (names and index >= len(names)):
      raise DataError(f'TFDS glue/{self.name}: label {index} is outside its {len(names or [])} classes.')
    return names[index] if names and names[index] in self.labels else str(index)
