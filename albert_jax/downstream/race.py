"""RACE: reading comprehension with four options, middle- and high-school levels, as the original's run_race.

Read from TFDS (race/middle, race/high) or the RACE download (RACE/{train,dev,test}/{middle,high}/ holding one
JSON file per article, or the original's prepared all.txt of JSON lines). Each option becomes
`[CLS] article [SEP] (question with '_' filled by the option, or question + ' ' + option)[-max_qa_length:] [SEP]`,
the article cut from its end to fit. Scored by accuracy overall and per level.
"""
import dataclasses
import json

import jax.numpy as jnp
import numpy as np

from albert_jax import paths
from albert_jax.data import sources
from albert_jax.data.tokenizer import CLS, SEP
from albert_jax.downstream import DataError, hub
from albert_jax.downstream.classification import ClassificationTask

LEVELS = ('middle', 'high')
CHOICES = 'ABCD'


@dataclasses.dataclass
class Question:
  guid: str        # article id and question number
  level: str
  article: str
  endings: list    # the four question + option texts
  label: int = -1  # 0..3; -1 when unknown


def make_questions(article_id: str, level: str, row: dict, where: str) -> list:
  """The questions of one article (a dict with article, questions, options, answers), checked."""
  questions, options, answers = row['questions'], row['options'], row.get('answers') or []
  return [make_question(article_id, i, level, row['article'], question, options[i] if i < len(options) else [],
                        answers[i] if i < len(answers) else '', where) for i, question in enumerate(questions)]


def make_question(article_id: str, number: int, level: str, article: str, question: str, options: list,
                  answer: str, where: str) -> Question:
  """The article's `number`th question, its four options made into endings as the original does; checked."""
  if len(options) != 4:
    raise DataError(f'{where}: question {number} has {len(options)} options; RACE questions have exactly 4 (fix '
                    f'or remove it).')
  if answer and answer not in CHOICES:
    raise DataError(f'{where}: question {number} has answer {answer!r}, not one of A, B, C, D.')
  endings = [question.replace('_', option) if '_' in question else f'{question} {option}' for option in options]
  return Question(f'{article_id}-{number}', level, article, endings, CHOICES.index(answer) if answer else -1)


class RaceTask(ClassificationTask):
  """Four options per question: the classification's loss and prediction over [batch, 4] choice logits."""

  def __init__(self, config):
    super().__init__('race', tuple(CHOICES), 'eval_accuracy', config)
    self.data, self.tfds_data_dir = config.task.data, config.data.tfds_data_dir
    self.levels = [level.strip() for level in config.task.levels.split(',')]
    if not self.levels or any(level not in LEVELS for level in self.levels):
      raise DataError(f'config.task.levels {config.task.levels!r}: a comma-separated subset of middle, high.')
    self.max_qa_length = config.task.max_qa_length
    if not 0 < self.max_qa_length <= self.max_seq_length - 4:
      raise DataError(f'config.task.max_qa_length {self.max_qa_length} must be positive and leave room for the '
                      f'article in max_seq_length {self.max_seq_length} (at most {self.max_seq_length - 4}).')
    self.test_predictions = config.task.test_predictions

  @property
  def head(self) -> dict:
    return {'architecture': 'AlbertForMultipleChoice', 'classifier_dropout': self.classifier_dropout}

  def dummy_inputs(self) -> dict:
    return {'input_ids': jnp.zeros((1, 4, self.max_seq_length), jnp.int32)}

  # ---- Reading.

  def splits(self) -> dict:
    names = ('train', 'dev') + (('test',) if self.test_predictions else ())
    return {split: ([q for level in self.levels for q in self._read(split, level)], None) for split in names}

  def _read(self, split: str, level: str) -> list:
    """The level's split from config.task.data, told apart by what it holds: the Hub's download of ehovy/race
    (middle/, high/ or all/, each of Parquet files; or that folder itself), the original RACE folder, or 'tfds'."""
    if self.data == 'tfds':
      return self._read_tfds(split, level)
    root = paths.path(self.data)
    found = hub.folder(root, [level, 'all'])
    if found:
      return self._read_hub(found, split, level)
    folder = next((f for f in (root / 'RACE' / split / level, root / split / level) if f.is_dir()), None)
    if folder is None:
      raise DataError(f'{root / split / level} is missing: config.task.data must be the RACE folder, holding '
                      f'train/, dev/ and test/, each with middle/ and high/.')
    questions = []
    if (folder / 'all.txt').exists():  # the original's prepared file: one article per line
      for number, line in enumerate((folder / 'all.txt').read_text(encoding='utf-8').splitlines(), start=1):
        if line.strip():
          row = self._json(line, f'{folder / "all.txt"}, line {number}')
          questions += make_questions(row.get('id', str(number)), level, row, f'{folder / "all.txt"}, line {number}')
    else:
      for path in sorted(folder.glob('*.txt'), key=lambda p: p.name):
        row = self._json(path.read_text(encoding='utf-8'), str(path))
        questions += make_questions(row.get('id', path.name), level, row, str(path))
    if not questions:
      raise DataError(f'{folder} holds no RACE questions.')
    return questions

  @staticmethod
  def _json(text: str, where: str) -> dict:
    try:
      row = json.loads(text)
    except json.JSONDecodeError as e:
      raise DataError(f'{where} is not JSON ({e}).') from None
    missing = [k for k in ('article', 'questions', 'options') if k not in row]
    if missing:
      raise DataError(f'{where} lacks {", ".join(missing)}: not a RACE article.')
    return row

  def _read_hub(self, folder, split: str, level: str) -> list:
    """One row a question (example_id: its article's file, as high1234.txt; article, question, options, answer);
    from all/, the rows of this level's articles."""
    hub_split = 'validation' if split == 'dev' else split
    where = f'{folder} ({hub_split})'
    rows, _ = hub.read(folder, hub_split, 'RACE')
    hub.missing_columns(rows, ('example_id', 'article', 'question', 'options', 'answer'), where)
    if folder.name == 'all':
      rows = [row for row in rows if str(row['example_id']).startswith(level)]
    questions, asked = [], {}
    for row in rows:
      article_id = str(row['example_id'])
      number = asked[article_id] = asked.get(article_id, -1) + 1  # the question's place in its article
      questions.append(make_question(article_id, number, level, row['article'], row['question'],
                                     list(row['options']), row['answer'] or '', f'{where} {article_id}'))
    if not questions:
      raise DataError(f'{where} holds no {level} questions.')
    return questions

  def _read_tfds(self, split: str, level: str) -> list:
    import tensorflow_datasets as tfds
    try:
      builder = tfds.builder(f'race/{level}', data_dir=self.tfds_data_dir)
      rows = sources.tfds_examples(builder, split, f'task race: TFDS race/{level}')
    except sources.SourceError:
      raise
    except Exception as e:  # not prepared, ...
      raise DataError(f'TFDS race/{level} split {split!r} cannot be read ({e}). Prepare it (tfds build '
                      f'race/{level}) and set data.tfds_data_dir, or set task.data to the RACE folder.') from e
    text = lambda x: x.decode('utf-8') if isinstance(x, bytes) else str(x)
    questions = []
    for row in rows:
      article_id = text(row['example_id'])
      as_lists = {'article': text(row['article']), 'questions': [text(q) for q in row['questions']],
                  'options': [[text(o) for o in options] for options in row['options']],
                  'answers': [text(a) for a in row['answers']]}
      questions += make_questions(article_id, level, as_lists, f'TFDS race/{level} {split} {article_id}')
    return sorted(questions, key=lambda q: q.guid)

  # ---- Features, loss, scores.

  def features(self, questions: list, tokenizer, split: str) -> dict:
    n, length = len(questions), self.max_seq_length
    out = {'input_ids': np.zeros((n, 4, length), np.int32), 'input_mask': np.zeros((n, 4, length), np.int32),
           'segment_ids': np.zeros((n, 4, length), np.int32), 'label_ids': np.zeros((n,), np.int32),
           'level': np.array([LEVELS.index(q.level) for q in questions], np.int32),
           'weights': np.ones((n,), np.float32)}
    articles = {}
    for i, question in enumerate(questions):
      if question.article not in articles:
        articles[question.article] = list(tokenizer.encode([question.article])[0])
      for j, ending in enumerate(tokenizer.encode(question.endings)):
        ending = list(ending)[-self.max_qa_length:]
        context = articles[question.article][:max(length - 3 - len(ending), 0)]
        ids = [CLS] + context + [SEP] + ending + [SEP]
        out['input_ids'][i, j, :len(ids)] = ids
        out['input_mask'][i, j, :len(ids)] = 1
        out['segment_ids'][i, j, len(context) + 2:len(ids)] = 1
      out['label_ids'][i] = max(question.label, 0)
    return out

  def score(self, outputs: dict, questions: list, features: dict, split: str, prefix: str = 'eval_') -> dict:
    right = outputs['logits'].argmax(-1) == features['label_ids']
    out = {f'{prefix}accuracy': float(right.mean()), f'{prefix}accuracy_count': len(right)}
    for i, level in enumerate(LEVELS):
      mine = features['level'] == i
      if mine.any():
        out[f'{prefix}{level}_accuracy'], out[f'{prefix}{level}_accuracy_count'] = float(right[mine].mean()), \
            int(mine.sum())
    return out

  def prediction_files(self, outputs: dict, questions: list, split: str, leaderboard_file) -> dict:
    predicted = outputs['logits'].argmax(-1)
    lines = ['id\tlevel\tprediction'] + [f'{q.guid}\t{q.level}\t{CHOICES[int(p)]}'
                                          for q, p in zip(questions, predicted)]
    return {f'{split}.tsv': '\n'.join(lines) + '\n'}
