"""Train a SentencePiece vocabulary with the ALBERT recipe from any configured source.

  python -m albert_jax.data.vocab --input=builtin --vocab_size=30000 --output=PREFIX
  python -m albert_jax.data.vocab --input='tfds:wikipedia/20230601.en@3,gutenberg:/data/books/*.txt' --output=PREFIX

Writes PREFIX.model and PREFIX.vocab (<pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4; unigram; the original's
user-defined symbols and character coverage). Sentences are preprocessed as at training time (NFKD, accents
stripped, lowercased), so the vocabulary sees what the model will. At most --max_sentences sentences are taken,
shared among the sources by their @weights and sampled over the whole of each without reading all of it
(`sentences`): a 4 GB corpus costs about what a 100 MB one does.
"""
import itertools
import os
import resource
import time
from typing import Optional

import numpy as np
from absl import flags

from albert_jax import paths
from albert_jax.config import run_cli
from albert_jax.data import sources, tokenizer
from albert_jax.errors import ConfigError


def sentences(spec_text, data_dir=None, limit=None, seed=0, counts=None, index_dir=None):
  """Preprocessed sentences sampled over every source in proportion to its mixture weight: with `limit`, source i
  gives at most limit * weight_i / sum(weights) of them, spread over the whole source (`spread`: a file source's
  files in a seeded random order and a share of each, without reading the rest; a TFDS source's documents in
  blocks in a seeded random order); a source with fewer sentences gives all it has. A file source's kept index
  (in `index_dir`, corpus_index.folder) spares indexing the files read. `counts`, a dict, receives the number
  taken from each source."""
  specs = sources.parse_specs(spec_text)
  opened = [sources.open_source(spec, data_dir, index_dir) for spec in specs]  # a bad source stops here
  weights = np.array([spec.weight for spec in specs])
  quotas = [None] * len(specs) if limit is None else np.floor(limit * weights / weights.sum()).astype(int).tolist()
  for source, quota in zip(opened, quotas):
    taken = 0
    texts = (text for document in source.spread(seed, quota) for text in map(tokenizer.preprocess_text, document)
             if text)
    for text in itertools.islice(texts, quota):
      taken += 1
      yield text
    if counts is not None:
      counts[source.name] = taken


def with_progress(stream, limit, every_s: float):
  """The sentences of `stream`, with a line on the console every `every_s` seconds while they are read: a large
  corpus takes minutes to read and preprocess before SentencePiece starts, and SentencePiece's training minutes
  more, both silent otherwise."""
  start = last = time.perf_counter()
  read = 0
  for read, text in enumerate(stream, 1):
    now = time.perf_counter()
    if now - last >= every_s:
      last = now
      print(f'vocab: {read:,} sentences read ({read / (now - start):,.0f}/s; at most {limit:,} are sampled)',
            flush=True)
    yield text
  print(f'vocab: {read:,} sentences read in {time.perf_counter() - start:.0f} s; SentencePiece is training on them '
        '(minutes for millions)', flush=True)


def train_on_source(spec_text, vocab_size, output_prefix, data_dir=None, limit=10_000_000, counts=None,
                    progress_every_s: float = 15.0, index_dir=None) -> str:
  stream = sentences(spec_text, data_dir, limit, counts=counts, index_dir=index_dir)
  first = next(stream, None)
  if first is None:
    raise sources.SourceError(f'{spec_text} yields no text to train a vocabulary on.')
  try:
    return tokenizer.train(with_progress(itertools.chain([first], stream), limit, progress_every_s), vocab_size,
                           output_prefix, limit)
  except RuntimeError as e:  # e.g. "Vocabulary size too high" for a small corpus
    raise tokenizer.VocabError(f'SentencePiece could not train {vocab_size} pieces on {spec_text}: {str(e).rstrip(".")}. '
                               f'Use a smaller --vocab_size or more text.') from e


def builtin_vocab_path(data_dir: Optional[str], vocab_size: int) -> paths.Path:
  """Where the built-in corpus's vocabulary of `vocab_size` pieces is cached: beside that corpus's TFDS data."""
  return paths.path(sources.builtin_builder(data_dir).data_dir) / f'vocab-{vocab_size}.model'


def load_tokenizer(vocab: Optional[str], vocab_size: int,
                   data_dir: Optional[str] = None) -> tokenizer.Tokenizer:
  """The vocabulary `vocab` (config.data.vocab) names, checked against the model's `vocab_size`: a SentencePiece
  .model file, or 'builtin', trained on the built-in corpus on first use (seconds) and cached beside it."""
  if vocab == 'builtin':
    path = builtin_vocab_path(data_dir, vocab_size)
    if not path.exists():
      print(f'Training a {vocab_size}-piece SentencePiece vocabulary on the built-in corpus, once (seconds), into '
            f'{path}', flush=True)
      with paths.writable_locally(path.parent) as folder:
        # Trained under a name of this process's own, then moved into place: several processes may do it at once.
        own = os.path.join(folder, f'{path.stem}.{os.getpid()}')
        train_on_source('builtin', vocab_size, own, data_dir)
        for suffix in ('.vocab', '.model'):
          os.replace(f'{own}{suffix}', os.path.join(folder, path.stem + suffix))
    return tokenizer.Tokenizer(path, vocab_size=vocab_size)
  if not vocab:
    raise ConfigError('config.data.vocab is not set: give a SentencePiece .model file (train one with '
                      'python -m albert_jax.data.vocab), or builtin for the built-in corpus.')
  return tokenizer.Tokenizer(vocab, vocab_size=vocab_size)


def main(argv):
  del argv
  paths.check_reachable(_INPUT.value, _OUTPUT.value, _TFDS_DATA_DIR.value, _INDEX_DIR.value)
  start, counts = time.perf_counter(), {}
  path = train_on_source(_INPUT.value, _VOCAB_SIZE.value, _OUTPUT.value, _TFDS_DATA_DIR.value, _MAX_SENTENCES.value,
                         counts, index_dir=_INDEX_DIR.value)
  vocab = tokenizer.Tokenizer(path, vocab_size=_VOCAB_SIZE.value)
  total = sum(counts.values())
  print(f'sampled {total:,} sentences: ' + ', '.join(f'{name} {n:,} ({n / total:.1%})' for name, n in counts.items()))
  print(f'wrote {path}: {vocab.vocab_size} pieces in {time.perf_counter() - start:.0f} s, peak memory '
        f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.1f} GiB')


if __name__ == '__main__':
  # Flags are defined only when run as a program: other modules import this one's functions.
  _INPUT = flags.DEFINE_string('input', None, 'Sources, as data.source (builtin, tfds:NAME, wikiextractor:GLOB, ...; '
                               '@WEIGHT shares the sentences).')
  _VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 30000, 'Number of pieces.')
  _OUTPUT = flags.DEFINE_string('output', None, 'Output prefix: writes PREFIX.model and PREFIX.vocab.')
  _MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 10_000_000, 'Sentences sampled for training, shared by '
                                        'the sources\' weights (the original: input_sentence_size 10M).')
  _TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'TFDS data directory (local or gs://).')
  _INDEX_DIR = flags.DEFINE_string('index_dir', None, 'Where file sources\' indexes are kept, as data.index_dir (by '
                                   'default beside a corpus in a bucket, in ~/.cache for a local one): where there '
                                   'is one, the files sampled are not indexed again.')
  flags.mark_flags_as_required(['input', 'output'])
  run_cli(main)
