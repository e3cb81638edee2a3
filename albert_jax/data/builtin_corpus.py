"""The built-in corpus: English prose that every Python installation carries (the language reference topics of
pydoc_data and the docstrings of the standard library), prepared once into a local TFDS dataset."""
import ast
import pathlib
import re
import sys
import sysconfig
from typing import Iterator

import tensorflow_datasets as tfds


def _stdlib_documents() -> Iterator[tuple]:
  """(title, text) pairs: the language reference topics of pydoc_data, then each stdlib module's docstrings,
  in sorted file order. Interactive examples and indented code are dropped; what remains is prose."""
  from pydoc_data import topics
  for title in sorted(topics.topics):
    yield f'topic:{title}', _prose(topics.topics[title])
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
    docs = [ast.get_docstring(node) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    text = '\n\n'.join(_prose(d) for d in docs if d and len(d) > 200)
    if text.strip():
      yield f'module:{".".join(parts)[:-3]}', text


def _prose(text: str) -> str:
  """Paragraphs of a docstring or help topic that are prose: lines joined, code and tables left out."""
  paragraphs = []
  for block in re.split(r'\n\s*\n', text):
    lines = [line for line in block.split('\n') if line.strip()]
    if not lines or any(line.lstrip().startswith(('>>>', '...', '$ ', '+--', '===', '---')) for line in lines):
      continue
    if sum(line.startswith('   ') for line in lines) > len(lines) / 2:
      continue  # indented: code or a literal block
    paragraph = ' '.join(line.strip() for line in lines)
    if len(paragraph) > 40 and sum(c.isalpha() or c == ' ' for c in paragraph) > 0.8 * len(paragraph):
      paragraphs.append(paragraph)
  return '\n'.join(paragraphs)


class AlbertBuiltinCorpus(tfds.core.GeneratorBasedBuilder):
  """Prose of Python's own documentation (pydoc topics and stdlib docstrings), one document per module or
  topic. Deterministic for a given Python version, whose number names the config."""
  VERSION = tfds.core.Version('1.0.0')
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=f'python{sys.version_info[0]}.{sys.version_info[1]}')]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {'title': tfds.features.Text(), 'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    for title, text in _stdlib_documents():
      yield title, {'title': title, 'text': text}
