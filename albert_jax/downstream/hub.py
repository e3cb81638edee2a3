"""Datasets as the Hugging Face Hub holds them, downloaded (`huggingface-cli download nyu-mll/glue --repo-type=dataset
--local-dir=DIR`, or `snapshot_download`), on a disk or copied to gs://: a folder per configuration (sst2/, mnli/,
plain_text/, high/, ...) holding each split's Parquet files, SPLIT-00000-of-0000N.parquet, every column a field of
the example; the datasets library's features, ClassLabel names among them, in each file's schema metadata.

  folder(ROOT, names)      the configuration's folder under a download (or ROOT itself, a configuration's folder)
  read(FOLDER, split)      (rows as dicts, the features): every file of a split, in their order
"""
import json
from typing import Optional

from albert_jax import paths
from albert_jax.downstream import DataError


def split_files(folder, split: str) -> list:
  """The split's Parquet files in `folder`, in order (SPLIT-00000-of-00002.parquet, ...; or one SPLIT.parquet)."""
  folder = paths.path(folder)
  if not folder.is_dir():
    return []
  return sorted((f for f in folder.iterdir() if f.name.endswith('.parquet') and
                 (f.name.startswith(f'{split}-') or f.name == f'{split}.parquet')), key=lambda f: f.name)


def holds_parquet(folder) -> bool:
  folder = paths.path(folder)
  return folder.is_dir() and any(f.name.endswith('.parquet') for f in folder.iterdir())


def folder(root, names) -> Optional[paths.Path]:
  """The folder of the first configuration of `names` that a Hub download at `root` holds, or `root` itself
  where its own files are Parquet (a configuration's folder named directly); None where it is no Hub download."""
  root = paths.path(root)
  for name in names:
    if holds_parquet(root / name):
      return root / name
  return root if holds_parquet(root) else None


def read(folder, split: str, what: str) -> tuple:
  """(every row of the split as a dict, the features the datasets library recorded, or {}); `what` names the
  dataset in the message where the split is missing."""
  import pyarrow.parquet as pq
  files = split_files(folder, split)
  if not files:
    present = sorted({f.name.split('-')[0].removesuffix('.parquet') for f in paths.path(folder).iterdir()
                      if f.name.endswith('.parquet')})
    raise DataError(f'{folder} holds no {split} split of {what} ({split}-*.parquet); it has: '
                    f'{", ".join(present) or "nothing"}. Download the whole dataset, or point config.task.data at '
                    f'the folder the Hub download made.')
  rows, features = [], {}
  for file in files:
    try:
      with file.open('rb') as f:
        table = pq.read_table(f)
    except Exception as e:  # pylint: disable=broad-except  (pyarrow's errors for a damaged or partial file)
      raise DataError(f'{file} cannot be read as Parquet ({type(e).__name__}: {" ".join(str(e).split())[:200]}): '
                      f'download it again.') from None
    metadata = (table.schema.metadata or {}).get(b'huggingface')
    if metadata and not features:
      features = json.loads(metadata).get('info', {}).get('features', {})
    rows += table.to_pylist()
  return rows, features


def class_names(features: dict, column: str = 'label') -> Optional[list]:
  """The names of a ClassLabel column, as the datasets library recorded them; None where it did not."""
  feature = features.get(column) or {}
  return feature.get('names') if feature.get('_type') == 'ClassLabel' else None


def missing_columns(rows: list, columns, where: str) -> None:
  """Stops with the columns a split lacks, naming them and what the task reads."""
  missing = [c for c in columns if rows and c not in rows[0]]
  if missing:
    raise DataError(f'{where} lacks the column(s) {", ".join(missing)} (it has {", ".join(rows[0])}): not the '
                    f'dataset the task reads from the Hub.')
