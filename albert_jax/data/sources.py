"""Where documents come from: TFDS datasets, files in the formats people hold corpora in, and the built-in corpus.

A source is an indexed, stable sequence of documents: `len(source)` documents, `source.read(start, stop)` yields
documents start..stop-1 as lists of sentences, always in the same order. Everything above (held-out slices,
per-host shards, epochs, resume) is index arithmetic on that.

Spec strings (`data.source`, comma-separated or a list; `@weight` sets a mixture weight, default 1):
  builtin                          the built-in corpus (Python's own documentation prose; no download)
  tfds:wikipedia/20230601.en       a TFDS dataset's train split (wikipedia, pg19, c4/en, wiki40b/en, ...)
  lines:/data/*.txt                the original format: one sentence per line, a blank line between documents
  text:/data/books/*.txt           plain text, one document per file
  wikiextractor:/data/wiki/*/wiki_*    WikiExtractor's output (<doc> blocks), plain or .bz2
  gutenberg:/data/books/*.txt      Project Gutenberg e-books: licence header and footer removed, cut at chapters
  jsonl:/data/*.jsonl.zst          JSON lines (plain, .gz, .zst), the text in field "text"; jsonl[body]:... another
  parquet:/data/*.parquet          Parquet files, the text in column "text"; parquet[content]:... another
Globs may be URLs (lines:gs://bucket/corpus/*.txt; `**` matches any number of folders). How each file format
finds and cleans its documents is formats.py's job, keeping where they are corpus_index.py's; this module numbers
them over all the files of a glob.
"""
import collections
import dataclasses
import importlib
import itertools
import os
import re
from typing import Iterator, Optional

import numpy as np
import sentencex

from albert_jax import paths
from albert_jax.data import corpus_index, formats
from albert_jax.data.formats import decode
from albert_jax.errors import ConfigError

# Text features of the TFDS datasets we know; any other dataset's first Text feature is used.
TFDS_TEXT_FEATURE = {'wikipedia': 'text', 'pg19': 'book_text', 'c4': 'text', 'wiki40b': 'text'}
_WIKI40B_MARKERS = re.compile(r'_START_ARTICLE_|_START_SECTION_|_START_PARAGRAPH_|_NEWLINE_')
# A vocabulary's sample takes at least this many sentences from each file it reads (file sources: FileSource.spread).
SAMPLE_SENTENCES_PER_FILE = 500
# ... and a TFDS source's sample is spread over it in blocks of this many documents (TfdsSource.spread).
SAMPLE_BLOCK = 64


class SourceError(ConfigError):
  """A source that cannot be read or yields nothing usable; the message names it and the fix."""


class SkipCounter(collections.Counter):
  """What was dropped or repaired, and why: reported so that no data disappears silently."""

  def report(self) -> str:
    return ', '.join(f'{n} {reason}' for reason, n in sorted(self.items())) or 'nothing'


def split_sentences(text: str, language: str = 'en') -> list:
  """Sentences of a text: each line (paragraph) is segmented separately; empty pieces are dropped."""
  sentences = []
  for paragraph in text.split('\n'):
    if paragraph.strip():
      sentences.extend(s.strip() for s in sentencex.segment(language, paragraph) if s.strip())
  return sentences


KINDS = ('builtin', 'tfds') + tuple(formats.FORMATS)
_KIND = re.compile(r'(\w+)(?:\[([^\]]+)\])?')  # kind, or kind[field]


@dataclasses.dataclass
class Spec:
  kind: str
  arg: str
  weight: float
  field: Optional[str] = None  # jsonl[FIELD] / parquet[COLUMN]: where the text is

  @classmethod
  def parse(cls, text: str) -> 'Spec':
    text = text.strip()
    weight = 1.0
    if '@' in text:
      text, w = text.rsplit('@', 1)
      try:
        weight = float(w)
      except ValueError:
        raise SourceError(f'data.source {text}@{w}: the weight after @ must be a number.') from None
      if weight <= 0:
        raise SourceError(f'data.source {text}@{w}: the weight must be positive.')
    head, _, arg = text.partition(':')
    kind = _KIND.fullmatch(head)
    if not kind or kind.group(1) not in KINDS or (kind.group(1) != 'builtin' and not arg):
      raise SourceError(f'data.source {text!r} is not a source: use builtin, tfds:NAME, or a file format and a glob: '
                        f'{", ".join(k + ":GLOB" for k in formats.FORMATS)} (jsonl[FIELD]:GLOB and '
                        f'parquet[COLUMN]:GLOB name the text field; optionally @WEIGHT).')
    if kind.group(2) and kind.group(1) not in formats.FIELD_FORMATS:
      raise SourceError(f'data.source {text!r}: only {" and ".join(formats.FIELD_FORMATS)} take a [FIELD].')
    return cls(kind.group(1), arg, weight, kind.group(2))

  @property
  def label(self) -> str:
    """A short name for the source's held-out metrics: the format, or the TFDS dataset's name."""
    return self.arg.split('/')[0].split(':')[0] if self.kind == 'tfds' else self.kind


def parse_specs(source) -> list:
  items = source.split(',') if isinstance(source, str) else list(source)
  specs = [Spec.parse(s) for s in items if s.strip()]
  if not specs:
    raise SourceError('data.source is empty: name at least one source, e.g. builtin or tfds:wikipedia/20230601.en.')
  return specs


class FileSource:
  """The documents of every file a glob matches, local or in a bucket, in one of formats.FORMATS, numbered over
  the files in name order. Where each lies is kept by corpus_index.py (found once per corpus, shared by the
  processes that open it: `process_index` of `process_count`); a document is read by its number. A file source
  lists its files (its glob never matches its index folder), and opens the index only when asked for a count
  or documents."""

  def __init__(self, spec: Spec, index_dir: Optional[str] = None, process_index: int = 0, process_count: int = 1):
    self.format = formats.FORMATS[spec.kind](spec.field) if spec.field else formats.FORMATS[spec.kind]()
    self.label = f'{spec.kind}{f"[{spec.field}]" if spec.field else ""}'
    self.name, self.pattern = f'{self.label}:{spec.arg}', spec.arg
    self.index_folder = corpus_index.folder(self.label, spec.arg, index_dir)
    self.files = [info for info in paths.listing(spec.arg) if not corpus_index.holds(info.name, index_dir)]
    if not self.files:
      raise SourceError(f'data.source {self.name}: no file matches {spec.arg!r}: fix the path or the pattern '
                        f'(* and ? match within a folder, ** any number of folders).')
    self.process = (process_index, process_count)
    self.skipped = SkipCounter()
    self._index = None

  @property
  def index(self) -> corpus_index.Index:
    if self._index is None:
      self._index = corpus_index.open_index(f'data.source {self.name}', self.format, self.files, self.pattern,
                                            self.index_folder, *self.process)
      self.skipped.update(self._index.skipped)  # what indexing skipped, over the whole source
    return self._index

  def __len__(self):
    return len(self.index)

  def read(self, start: int, stop: int) -> Iterator[list]:
    # The documents of one file, consecutive in the numbering, in one read: in a bucket every open is a request,
    # and a compressed file is decompressed from its start.
    index = self.index
    start, stop = max(start, 0), min(stop, len(index))
    while start < stop:
      number = int(np.searchsorted(index.starts, start, side='right')) - 1  # past files without documents
      end = min(stop, int(index.starts[number + 1]))
      first = int(index.starts[number])
      yield from self._documents(number, index.locations(number, start - first, end - first))
      start = end

  def _documents(self, number: int, locations) -> Iterator[list]:
    for paragraphs in self.format.read(paths.path(self.files[number].name), locations, self.skipped):
      yield self._sentences(paragraphs)

  def _sentences(self, paragraphs: list) -> list:
    return paragraphs if self.format.segmented else split_sentences('\n'.join(paragraphs))

  def spread(self, seed: int, sentences: Optional[int]) -> Iterator[list]:
    """Documents of about `sentences` sentences (all, if None) spread over the whole source, without reading all
    of it: its files in a seeded random order, from each a seeded random choice of its documents up to its share
    (at least SAMPLE_SENTENCES_PER_FILE: a file read for a handful of sentences is mostly wasted reading); where
    that falls short (files with fewer sentences than their share), a second pass takes the rest of the files that
    had more. A file's documents come from the kept index where it has them, else from indexing that file alone."""
    order = np.random.default_rng(seed).permutation(len(self.files))
    share = None if sentences is None else max(-(-sentences // len(self.files)), SAMPLE_SENTENCES_PER_FILE)
    kept = corpus_index.kept_locations(self.index_folder, self.files, self.pattern)
    left = {}  # file -> where its documents' order stopped on the first pass, for files with more
    for first_pass in (True, False):
      for number in (order if first_pass else [n for n in order if n in left]):
        documents = self._file_documents(int(number), kept)
        picks = np.random.default_rng([seed, int(number)]).permutation(len(documents))
        taken = 0
        for place in range(0 if first_pass else left[number], len(picks)):
          if first_pass and share is not None and taken >= share:
            left[number] = place
            break
          # Only the documents taken are split into sentences (the costlier part of reading).
          document = self._sentences(documents[picks[place]])
          taken += len(document)
          yield document

  def _file_documents(self, number: int, kept) -> list:
    """A file's documents, as its format's paragraphs, in one read."""
    info = self.files[number]
    locations = kept(number)
    if locations is None:
      locations = (np.zeros((0, 2), np.int64) if info.size == 0 else
                   np.asarray(self.format.index(paths.path(info.name), self.skipped), np.int64).reshape(-1, 2))
    return list(self.format.read(paths.path(info.name), locations, self.skipped)) if len(locations) else []


def tfds_examples(builder, split: str, what: str, feature: Optional[str] = None) -> Iterator:
  """The examples of `split` of a prepared TFDS dataset in stored order, as numpy values (text as bytes); only
  `feature` of each, if given.

  A dataset stored in a random-access format (ArrayRecord, Parquet) is read through its data source, without
  TensorFlow; one stored as TFRecord (TFDS's default) only through tf.data, which needs TensorFlow (the `tf`
  extra): without it, a SourceError names `what` (a data.source or a task) and the two ways out. Anything else
  that goes wrong (a dataset not prepared, a missing split) is raised as TFDS raises it, for the caller to name."""
  import tensorflow_datasets as tfds
  if builder.info.available_file_formats() & tfds.core.file_adapters.FileFormat.with_random_access():
    data = builder.as_data_source(split=split)
    return (data[i] if feature is None else data[i][feature] for i in range(len(data)))
  _require_tensorflow(builder, what)
  dataset = builder.as_dataset(split=split, shuffle_files=False)
  if feature is None:
    return iter(tfds.as_numpy(dataset))
  # One feature, in batches: a tf.data step per example is slow.
  return (x for batch in tfds.as_numpy(dataset.map(lambda example: example[feature]).batch(64)) for x in batch)


def _require_tensorflow(builder, what: str) -> None:
  try:
    importlib.import_module('tensorflow')  # tf.data reads TFRecord files
  except ImportError:
    raise SourceError(
        f"{what}: {builder.data_dir} is stored as TFRecord, which only TensorFlow reads, and TensorFlow is not "
        f"installed. Install it (pip install -e '.[tf]'), or convert the dataset once, where TensorFlow is, to "
        f"ArrayRecord, which albert_jax reads without it: pip install tensorflow-cpu apache-beam mlcroissant && "
        f"tfds convert_format --dataset_version_dir={builder.data_dir} --out_file_format=array_record") from None


class TfdsSource:
  """The train split of a TFDS dataset, read in its stored order (never shuffled, so indices are stable)."""

  def __init__(self, name: str, data_dir: Optional[str]):
    import tensorflow_datasets as tfds
    self.name = f'tfds:{name}'
    try:
      self.builder = tfds.builder(name, data_dir=data_dir)
    except Exception as e:  # tfds raises DatasetNotFoundError, ValueError, ... for bad names
      raise SourceError(f'data.source tfds:{name}: {e}') from e
    features = self.builder.info.features
    key = TFDS_TEXT_FEATURE.get(name.split('/')[0].split(':')[0])
    if key is None:
      texts = [k for k, f in features.items() if isinstance(f, tfds.features.Text)]
      if not texts:
        raise SourceError(f'data.source tfds:{name} has no text feature (features: {", ".join(features)}).')
      key = texts[0]
    self.text_key, self.wiki40b = key, name.startswith('wiki40b')
    self.skipped = SkipCounter()
    try:
      self.size = self.builder.info.splits['train'].num_examples
      self.sliceable = True
    except KeyError:  # split sizes unknown (a mocked dataset): count once, read by skipping
      self.size = sum(1 for _ in self._texts('train'))
      self.sliceable = False

  def _texts(self, split):
    """The raw text (bytes) of each example of `split`."""
    try:
      return tfds_examples(self.builder, split, f'data.source {self.name}', self.text_key)
    except SourceError:
      raise
    except Exception as e:  # not prepared, missing files, ...
      raise SourceError(f'data.source {self.name}: cannot read split {split!r} ({e}). Prepare it first with '
                        f'tfds build or tfds.builder(...).download_and_prepare(), and set data.tfds_data_dir '
                        f'to where it is.') from e

  def __len__(self):
    return self.size

  def spread(self, seed: int, sentences: Optional[int]) -> Iterator[list]:
    """Documents spread over the whole dataset: blocks of SAMPLE_BLOCK in a seeded random order (until the caller
    has `sentences`; the examples are read by number, so no more are read than are taken)."""
    del sentences
    for block in np.random.default_rng(seed).permutation(max(1, -(-len(self) // SAMPLE_BLOCK))):
      yield from self.read(int(block) * SAMPLE_BLOCK, min((int(block) + 1) * SAMPLE_BLOCK, len(self)))

  def read(self, start: int, stop: int) -> Iterator[list]:
    if self.sliceable:
      texts = self._texts(f'train[{start}:{stop}]')
    else:
      texts = itertools.islice(self._texts('train'), start, stop)
    for raw in texts:
      text = decode(raw, self.skipped)
      if self.wiki40b:
        text = _WIKI40B_MARKERS.sub('\n', text)
      yield split_sentences(text)


def builtin_builder(data_dir: Optional[str]):
  """The TFDS builder of the built-in corpus, prepared on first use (seconds; no network) as ArrayRecord: TFDS's
  default, TFRecord, needs TensorFlow to write and to read. ArrayRecord cannot be written to a bucket: with a
  gs:// data_dir the corpus is read from there if someone copied it there, else prepared in the local TFDS
  folder."""
  import tensorflow_datasets as tfds
  from albert_jax.data import builtin_corpus
  builder = builtin_corpus.AlbertBuiltinCorpus(data_dir=data_dir, file_format='array_record')
  # What is_prepared() checks, without its warning about the empty version folder the builder has just made.
  if (paths.path(builder.data_dir) / 'dataset_info.json').exists():
    return builder
  if paths.is_url(builder.data_dir):  # (TFDS_DATA_DIR may name the bucket too: TFDS's own local default then)
    return builtin_builder(os.path.join(os.path.expanduser('~'), 'tensorflow_datasets'))
  # The builder prints its own start and end lines; TFDS's bars (an ETA of an hour for a few seconds of shuffling)
  # would only confuse.
  tfds.display_progress_bar(False)
  try:
    builder.download_and_prepare()
  except FileExistsError:  # another process on this machine (a local multi-host run) prepared it first
    builder = builtin_corpus.AlbertBuiltinCorpus(data_dir=data_dir, file_format='array_record')
  finally:
    tfds.display_progress_bar(True)
  return builder


class BuiltinSource(TfdsSource):
  def __init__(self, data_dir: Optional[str]):
    self.name, self.builder, self.text_key, self.wiki40b = 'builtin', builtin_builder(data_dir), 'text', False
    self.skipped = SkipCounter()
    self.size, self.sliceable = self.builder.info.splits['train'].num_examples, True


def open_source(spec: Spec, data_dir: Optional[str], index_dir: Optional[str] = None, process_index: int = 0,
                process_count: int = 1):
  """The source `spec` names. A file source keeps its index in `index_dir` (corpus_index.folder) and, where files
  lack an index entry, indexes them with the other `process_count` processes that open it (this is
  `process_index`)."""
  if spec.kind == 'builtin':
    return BuiltinSource(data_dir)
  if spec.kind == 'tfds':
    return TfdsSource(spec.arg, data_dir)
  return FileSource(spec, index_dir, process_index, process_count)
