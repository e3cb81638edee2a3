"""The built-in downstream task: word-order acceptability on the built-in corpus's held-out documents.

No downstream dataset can be downloaded everywhere, so this one is made from text the pretraining never saw (the
documents a pretraining run with the same data.eval_fraction holds out), with labels made without any model: a
sentence as written (label '1', acceptable) or with two neighbouring words swapped ('0'), as CoLA labels
acceptability. Training sentences come in both versions; each dev sentence in one version, chosen by a seeded
coin, so that dev examples are independent. Documents, not sentences, are split between train and dev.
"""
import numpy as np

from albert_jax.data import pipeline, sources
from albert_jax.downstream import DataError
from albert_jax.downstream.classification import ClassificationTask, Example

MIN_WORDS = 5  # shorter sentences have too few places to swap, and are mostly headings


def swap_neighbours(words: list, rng: np.random.Generator) -> list:
  """The words with one pair of neighbouring, different words exchanged."""
  places = [i for i in range(len(words) - 1) if words[i] != words[i + 1]]
  i = places[rng.integers(len(places))]
  return words[:i] + [words[i + 1], words[i]] + words[i + 2:]


def shuffle_words(words: list, rng: np.random.Generator) -> list:
  """The words in a random order other than the original's."""
  while True:
    shuffled = [words[i] for i in rng.permutation(len(words))]
    if shuffled != words:
      return shuffled


CORRUPTIONS = {'swap': swap_neighbours, 'shuffle': shuffle_words}


def make_examples(documents: list, split: str, seed: int, corruption: str = 'swap') -> list:
  """Examples from documents (lists of sentences): both versions of each sentence for 'train', one for 'dev'."""
  rng = np.random.default_rng([seed, 0 if split == 'train' else 1])
  examples = []
  for d, document in enumerate(documents):
    for s, sentence in enumerate(document):
      words = sentence.split()
      if len(words) < MIN_WORDS or len(set(words)) < 2:
        continue
      swapped = ' '.join(CORRUPTIONS[corruption](words, rng))
      versions = [(sentence, '1'), (swapped, '0')]
      if split != 'train':
        versions = [versions[rng.integers(2)]]
      examples += [Example(guid=f'{d}-{s}-{label}', text_a=text, label=label) for text, label in versions]
  return examples


class BuiltinTask(ClassificationTask):
  def __init__(self, config):
    super().__init__('builtin', ('0', '1'), 'eval_accuracy', config)
    self.eval_fraction, self.dev_fraction = config.task.eval_fraction, config.task.dev_fraction
    self.seed, self.tfds_data_dir = config.task.seed, config.data.tfds_data_dir
    self.corruption = config.task.corruption

  def splits(self) -> dict:
    source = sources.BuiltinSource(self.tfds_data_dir)
    first, stop = pipeline.document_ranges(len(source), self.eval_fraction, 'eval', 0, 1, source.name)
    documents = list(source.read(first, stop))
    dev_start = len(documents) - max(1, int(round(len(documents) * self.dev_fraction)))
    out = {'train': (make_examples(documents[:dev_start], 'train', self.seed, self.corruption), None),
           'dev': (make_examples(documents[dev_start:], 'dev', self.seed, self.corruption), None)}
    for split, (examples, _) in out.items():
      if not examples:
        raise DataError(f'the built-in task has no {split} examples: task.eval_fraction {self.eval_fraction} and '
                        f'task.dev_fraction {self.dev_fraction} leave too few documents.')
    return out
