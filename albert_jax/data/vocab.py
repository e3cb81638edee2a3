"""Train a SentencePiece vocabulary with the ALBERT recipe from any configured source.

  python -m albert_jax.data.vocab --input=builtin --vocab_size=30000 --output=PREFIX
  python -m albert_jax.data.vocab --input='tfds:wikipedia/20230601.en,text:/data/*.txt' --output=PREFIX

Writes PREFIX.model and PREFIX.vocab (<pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4; unigram; the original's
user-defined symbols and character coverage). Sentences are preprocessed as at training time (NFKD, accents
stripped, lowercased), so the vocabulary sees what the model will.
"""
import itertools

from absl import flags

from albert_jax import paths
from albert_jax.config import run_cli
from albert_jax.data import sources, tokenizer


def sentences(spec_text, data_dir=None, limit=None):
  """Preprocessed sentences of every source's documents, in order, up to `limit`."""
  def all_sentences():
    for spec in sources.parse_specs(spec_text):
      source = sources.open_source(spec, data_dir)
      for document in source.read(0, len(source)):
        for sentence in document:
          text = tokenizer.preprocess_text(sentence)
          if text:
            yield text
  return itertools.islice(all_sentences(), limit)


def train_on_source(spec_text, vocab_size, output_prefix, data_dir=None, limit=10_000_000) -> str:
  stream = sentences(spec_text, data_dir, limit)
  first = next(stream, None)
  if first is None:
    raise sources.SourceError(f'{spec_text} yields no text to train a vocabulary on.')
  try:
    return tokenizer.train(itertools.chain([first], stream), vocab_size, output_prefix, limit)
  except RuntimeError as e:  # e.g. "Vocabulary size too high" for a small corpus
    raise tokenizer.VocabError(f'SentencePiece could not train {vocab_size} pieces on {spec_text}: {str(e).rstrip(".")}. '
                               f'Use a smaller --vocab_size or more text.') from e


def main(argv):
  del argv
  paths.check_reachable(_INPUT.value, _OUTPUT.value, _TFDS_DATA_DIR.value)
  path = train_on_source(_INPUT.value, _VOCAB_SIZE.value, _OUTPUT.value, _TFDS_DATA_DIR.value, _MAX_SENTENCES.value)
  vocab = tokenizer.Tokenizer(path, vocab_size=_VOCAB_SIZE.value)
  print(f'wrote {path}: {vocab.vocab_size} pieces')


if __name__ == '__main__':
  # Flags are defined only when run as a program: other modules import this one's functions.
  _INPUT = flags.DEFINE_string('input', None, 'Sources, as data.source: builtin, tfds:NAME, lines:GLOB, text:GLOB.')
  _VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 30000, 'Number of pieces.')
  _OUTPUT = flags.DEFINE_string('output', None, 'Output prefix: writes PREFIX.model and PREFIX.vocab.')
  _MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 10_000_000, 'Sentences sampled for training (the '
                                        'original: input_sentence_size 10M).')
  _TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'TFDS data directory (local or gs://).')
  flags.mark_flags_as_required(['input', 'output'])
  run_cli(main)
