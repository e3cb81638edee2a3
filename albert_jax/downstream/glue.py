"""GLUE: its tasks read from the Hugging Face Hub's download (nyu-mll/glue: a folder per task of Parquet files), the
original TSV directories, or TFDS (glue/<task>), on the classification and regression base (classification.py),
and the leaderboard files.
"""
import csv
import dataclasses
import io
from typing import Optional

from albert_jax import paths
from albert_jax.data import sources
from albert_jax.downstream import DataError, hub
from albert_jax.downstream.classification import ClassificationTask, Example


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
# The classes of TFDS's and the Hub's label indices, where they are names (the others are 0 and 1 as in the TSVs).
_CLASSES = {'mnli': ('entailment', 'neutral', 'contradiction'), 'qnli': ('entailment', 'not_entailment'),
            'rte': ('entailment', 'not_entailment')}
_TFDS_AX_KEYS = ('premise', 'hypothesis')


class GlueTask(ClassificationTask):
  """One GLUE task; `config.task.data` is a folder, told apart by what it holds: the Hub's download of
  nyu-mll/glue (sst2/train-00000-of-00001.parquet, ...) or its task's folder; the original GLUE download (SST-2/
  train.tsv, ...) or its task's folder; or 'tfds'."""

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
    read = (self._read_tfds if self.data == 'tfds' else
            self._read_hub if hub.folder(self.data, [self.name]) else self._read_tsv)
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

  def _read_hub(self, split: str, file: str, hub_split: str) -> list:
    """The Hub's splits are TFDS's names (validation_matched, ...); the diagnostic set is its own folder, ax/."""
    name, keys = self.name, self.spec.tfds_keys
    if hub_split.startswith('ax:'):
      name, hub_split, keys = 'ax', hub_split[3:], _TFDS_AX_KEYS
    root = paths.path(self.data)
    folder = hub.folder(root, [name]) or (hub.folder(root.parent, [name]) if name == 'ax' else None)
    if folder is None:
      raise DataError(f'{root} holds no {name}/ folder of Parquet files: the GLUE diagnostic set (AX) is read from '
                      f'it. Download nyu-mll/glue whole, or set --config.task.test_predictions=False.')
    rows, features = hub.read(folder, hub_split, f'GLUE {name}')
    hub.missing_columns(rows, [*keys, 'label', 'idx'], f'{folder} ({hub_split})')
    return self._examples(rows, split, keys, hub.class_names(features), f'{folder} ({hub_split})')

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
                      f'set data.tfds_data_dir, or set task.data to the GLUE folder (the Hub\'s download or the '
                      f'original TSVs).') from e
    return self._examples(rows, split, keys, label_names, f'TFDS {name}')

  def _examples(self, rows, split: str, keys: tuple, label_names, where: str) -> list:
    """TFDS's or the Hub's rows (the same fields: the texts, label, idx) as examples in the leaderboard's order;
    test rows carry no label (-1 at the Hub)."""
    examples = []
    text = lambda value: value.decode('utf-8') if isinstance(value, bytes) else str(value)
    for row in rows:
      label = None
      if not split.startswith('test') and split != 'ax':
        label = (float(row['label']) if self.labels is None else
                 self._label_name(int(row['label']), label_names, where))
      examples.append(Example(guid=str(int(row['idx'])), text_a=text(row[keys[0]]),
                              text_b=text(row[keys[1]]) if len(keys) > 1 else None, label=label))
    if not examples:
      raise DataError(f'{where} holds no examples.')
    return sorted(examples, key=lambda e: int(e.guid))  # stored shuffled (TFDS) or in files: the leaderboard's order

  def _label_name(self, index: int, names, where: str) -> str:
    """A label index (TFDS's, the Hub's: their classes are in the same order, _CLASSES where a file does not name
    them) as the original's label name: by name where they agree (MNLI, QNLI, RTE), else 0/1."""
    names = names or _CLASSES.get(self.name)
    if index < 0 or index >= len(names or self.labels):
      raise DataError(f'{where}: label {index} is outside its {len(names or self.labels)} classes (a labelled split '
                      f'with the test split\'s -1?).')
    return names[index] if names and names[index] in self.labels else str(index)
