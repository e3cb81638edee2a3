"""SentencePiece vocabulary: the ALBERT recipe for training, loading with checks, and the original's text
preprocessing and word-start rule (what whole-word masking groups by)."""
import os
import string
import unicodedata
from typing import Iterable, Optional

import numpy as np
import sentencepiece as spm

from albert_jax import paths
from albert_jax.errors import ConfigError

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
CONTROL_SYMBOLS = ('[CLS]', '[SEP]', '[MASK]')
# The punctuation of the original's word-start rule: ASCII punctuation without ' < = > (its list omits them).
_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
# The original README's spm_train recipe (albert-original.md 1.7).
USER_DEFINED_SYMBOLS = ('(', ')', '"', '-', '.', '–', '£', '€')


class VocabError(ConfigError):
  """A vocabulary that cannot serve the model; the message names the file and the fix."""


def preprocess_text(text: str, lower: bool = True) -> str:
  """The original's `tokenization.preprocess_text`: collapse whitespace, NFKD, strip accents, lowercase."""
  text = ' '.join(text.split())
  if text.isascii():  # nothing to decompose: the common case, and 20x faster
    return text.lower() if lower else text
  text = unicodedata.normalize('NFKD', text)
  text = ''.join(c for c in text if not unicodedata.combining(c))
  return text.lower() if lower else text


def train(sentences: Iterable[str], vocab_size: int, output_prefix: str, input_sentence_size: int = 10_000_000,
          seed: int = 12345) -> str:
  """Trains a unigram SentencePiece model with the ALBERT recipe on already preprocessed sentences; writes
  PREFIX.model and PREFIX.vocab (the prefix may be a URL: SentencePiece writes locally, then they are copied)."""
  output_prefix = str(output_prefix)
  folder, name = output_prefix.rsplit('/', 1) if '/' in output_prefix else ('.', output_prefix)
  spm.set_random_generator_seed(seed)
  with paths.writable_locally(folder) as local_folder:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=os.path.join(local_folder, name), vocab_size=vocab_size,
        model_type='unigram', pad_id=PAD, unk_id=UNK, bos_id=-1, eos_id=-1, control_symbols=list(CONTROL_SYMBOLS),
        user_defined_symbols=list(USER_DEFINED_SYMBOLS), character_coverage=0.99995,
        input_sentence_size=input_sentence_size, shuffle_input_sentence=True, num_threads=1,
        minloglevel=2)
  return output_prefix + '.model'


class Tokenizer:
  """A loaded vocabulary, checked against the ids the model and the pipeline rely on."""

  def __init__(self, model_file, vocab_size: Optional[int] = None, lower: bool = True):
    model_file = str(model_file)
    if not model_file.endswith('.model') and paths.path(model_file + '.model').exists():
      model_file += '.model'
    if not paths.path(model_file).is_file():
      raise VocabError(f'vocabulary {model_file} does not exist: set data.vocab to a SentencePiece .model file, '
                       f'or train one with python -m albert_jax.data.vocab --input=SOURCE --output=PREFIX.')
    try:  # from the file's bytes: SentencePiece opens local files only
      self.sp = spm.SentencePieceProcessor(model_proto=paths.path(model_file).read_bytes())
    except (RuntimeError, OSError) as e:
      raise VocabError(f'{model_file} is not a SentencePiece model ({e}).') from e
    self.path, self.lower = model_file, lower
    expected = {'<pad>': PAD, '<unk>': UNK, '[CLS]': CLS, '[SEP]': SEP, '[MASK]': MASK}
    wrong = {p: self.sp.piece_to_id(p) for p, i in expected.items() if self.sp.piece_to_id(p) != i
             or (p != '<unk>' and self.sp.piece_to_id(p) == UNK)}
    if wrong:
      raise VocabError(f'{model_file} lacks the ALBERT control symbols at their ids (<pad>=0, <unk>=1, [CLS]=2, '
                       f'[SEP]=3, [MASK]=4; found {wrong}). Train it with python -m albert_jax.data.vocab, which '
                       f'uses the original recipe.')
    if vocab_size is not None and self.sp.get_piece_size() != vocab_size:
      raise VocabError(f'{model_file} has {self.sp.get_piece_size()} pieces but model.vocab_size is {vocab_size}: '
                       f'set --config.model.vocab_size={self.sp.get_piece_size()} or use a matching vocabulary.')
    self.vocab_size = self.sp.get_piece_size()
    self.word_start = self._word_start_table()
    self.digit_comma = self._digit_comma_table()

  def encode(self, texts: list) -> list:
    """Token ids (int32 arrays) of each text, after the original's preprocessing, with its digit-comma split."""
    encoded = []
    for ids in self.sp.encode([preprocess_text(t, self.lower) for t in texts]):
      if any(i in self.digit_comma for i in ids):
        ids = [j for i in ids for j in self.digit_comma.get(i, (i,))]
      encoded.append(np.asarray(ids, np.int32))
    return encoded

  def decode_pieces(self, ids) -> list:
    return [self.sp.id_to_piece(int(i)) for i in ids]

  def _digit_comma_table(self) -> dict:
    """{id: replacement ids} for the pieces the original's `encode_pieces` re-encodes: a piece that ends in a
    digit and a comma becomes the pieces of its text without the comma and without '▁', then ','. Under Python 3
    its test for stripping the new leading '▁' compares str with bytes and never holds, so '1,' becomes '▁1' ','."""
    table = {}
    for i in range(self.vocab_size):
      piece = self.sp.id_to_piece(i)
      if len(piece) > 1 and piece[-1] == ',' and piece[-2].isdigit():
        table[i] = tuple(self.sp.encode(piece[:-1].replace('▁', ''))) + (self.sp.piece_to_id(','),)
    return table

  def _word_start_table(self) -> np.ndarray:
    """word_start[id]: the piece begins a word, by the original's `_is_start_piece_sp`: it starts with '▁' or
    '<', is one of its punctuation marks, or has a character that is neither a-z nor one of them once
    lowercased (so `',` and `==` start words)."""
    allowed = set(string.ascii_lowercase) | _PUNCTUATION
    table = np.zeros(self.vocab_size, bool)
    for i in range(self.vocab_size):
      piece = self.sp.id_to_piece(i)
      table[i] = (piece.startswith(('▁', '<')) or piece in _PUNCTUATION
                  or not all(c.lower() in allowed for c in piece))
    return table
