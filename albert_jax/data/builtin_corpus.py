"""The built-in corpus: English prose that every Python installation carries, prepared once into a local TFDS
dataset (ArrayRecord, which TFDS writes and reads without TensorFlow), with no download.

A document is one piece of running text whose consecutive sentences belong together: one help topic of
pydoc_data (the language reference's prose), or one docstring of the standard library (a module's, a class's or a
function's) of at least MIN_SENTENCES sentences. Nothing is glued together, so two consecutive segments of a
document are in an order a model can learn (sentence-order prediction). Code, interactive examples and tables are
left out; reStructuredText markup is reduced to its text; identical docstrings (a module and its C accelerator's
twin) appear once. Documents are ordered by a hash of their text, so the held-out tail is a sample of the whole,
not the last modules of the alphabet.
"""
import ast
import hashlib
import pathlib
import re
import sys
import sysconfig
from typing import Iterator

import sentencex
import tensorflow_datasets as tfds

MIN_SENTENCES = 3
_ROLE = re.compile(r':[\w:.-]+:`~?(?:([^`<]*?)\s*<[^`>]*>|([^`]*))`')  # :func:`name`, :ref:`title <target>`
_LITERAL = re.compile(r'``([^`]*)``|`([^`]*)`_{0,2}')


def _topics() -> Iterator[tuple]:
  from pydoc_data import topics
  for title in sorted(topics.topics):
    yield f'topic:{title}', topics.topics[title]


def _docstrings() -> Iterator[tuple]:
  """(title, docstring) of every module, class and function of the standard library, in sorted file order."""
  root = pathlib.Path(sysconfig.get_paths()['stdlib'])
  for path in sorted(root.rglob('*.py')):
    parts = path.relative_to(root).parts
    if parts[0] in ('site-packages', 'dist-packages', 'idlelib', 'lib2to3', 'turtledemo', 'pydoc_data') or any(
        p in ('test', 'tests') or p.startswith('test_') for p in parts):
      continue
    try:
      tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
      continue
    module = '.'.join(parts)[:-3]
    for node in ast.walk(tree):
      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        docstring = ast.get_docstring(node)
        if docstring:
          yield f'{module}.{node.name}' if hasattr(node, 'name') else module, docstring


def prose(text: str) -> str:
  """The paragraphs of a docstring or help topic that are prose, one per line: lines joined, code, examples
  and tables left out, markup reduced to its text."""
  paragraphs = []
  for block in re.split(r'\n\s*\n', text):
    lines = [line for line in block.split('\n') if line.strip()]
    if not lines or any(line.lstrip().startswith(('>>>', '...', '$ ', '+--', '===', '---')) for line in lines):
      continue
    if sum(line.startswith('   ') for line in lines) > len(lines) / 2:
      continue  # indented: code or a literal block
    paragraph = ' '.join(line.strip() for line in lines)
    paragraph = _LITERAL.sub(lambda m: m.group(1) or m.group(2) or '', _ROLE.sub(lambda m: m.group(1) or m.group(2),
                                                                                 paragraph))
    if len(paragraph) > 40 and sum(c.isalpha() or c == ' ' for c in paragraph) > 0.8 * len(paragraph):
      paragraphs.append(paragraph)
  return '\n'.join(paragraphs)


def sentence_count(text: str) -> int:
  return sum(len([s for s in sentencex.segment('en', p) if s.strip()]) for p in text.split('\n') if p.strip())


def documents() -> list:
  """(title, text) of every document, in corpus order."""
  seen, kept = set(), []
  for title, raw in (*_topics(), *_docstrings()):
    text = prose(raw)
    if text in seen or sentence_count(text) < MIN_SENTENCES:
      continue
    seen.add(text)
    kept.append((title, text))
  return sorted(kept, key=lambda doc: hashlib.sha1(doc[1].encode()).hexdigest())


class AlbertBuiltinCorpus(tfds.core.GeneratorBasedBuilder):
  """Prose of Python's own documentation: one document per help topic or long docstring. Deterministic for a
  given Python version, whose number names the config."""
  VERSION = tfds.core.Version('3.0.0')
  RELEASE_NOTES = {'2.0.0': 'One document per help topic or docstring of 3+ sentences (1.0.0: one per module).',
                   '3.0.0': 'The same documents, stored as ArrayRecord: read without TensorFlow.'}
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=f'python{sys.version_info[0]}.{sys.version_info[1]}')]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {'title': tfds.features.Text(), 'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    for title, text in documents():  # titles repeat (every class has an __init__); texts do not
      yield hashlib.sha1(text.encode()).hexdigest(), {'title': title, 'text': text}

  # TFDS's own messages speak of downloads ("Downloading and preparing dataset Unknown size"): say what happens.
  def _log_download_bytes(self):
    print(f'Building the built-in corpus from the documentation of this Python (no download, about 10 s) '
          f'into {self.data_dir}', flush=True)

  def _log_download_done(self):
    print(f'Built-in corpus ready: {self.info.splits["train"].num_examples} documents', flush=True)
