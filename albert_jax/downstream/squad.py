"""SQuAD 1.1 and 2.0 as the original's run_squad_v1 / run_squad_v2: sliding windows over the context, answers
mapped to SentencePiece pieces exactly, predictions mapped back to the original text.

Reading: TFDS (squad/v1.1, squad/v2.0) or the official JSON files (train-v1.1.json, dev-v2.0.json, ...).
Alignment: the context is normalised as the tokenizer does (whitespace collapsed, accents stripped, lowercased),
character by character, so that every normalised character remembers the original character it came from;
SentencePiece's piece offsets then give each piece its span of the original text. An answer's pieces are those
overlapping its character span, and a predicted span of pieces is cut from the original context, accents,
repeated whitespace and all.
Windows: `[CLS] question[:max_query_length] [SEP] context window [SEP]`, windows doc_stride pieces apart; a piece
in several windows is predicted from the one where it has most context (the original's _check_is_max_context).
"""
import dataclasses
import json
import unicodedata

import jax.numpy as jnp
import numpy as np
import optax

from albert_jax import paths
from albert_jax.data import sources
from albert_jax.data.tokenizer import CLS, SEP
from albert_jax.downstream import DataError, hub, squad_eval


@dataclasses.dataclass
class Question:
  qid: str
  question: str
  context: str
  answers: list              # [(text, start character)], the first one trained on
  is_impossible: bool = False


# ---- Alignment -----------------------------------------------------------------------------------------------------

def normalize_with_offsets(text: str, lower: bool = True) -> tuple:
  """(the tokenizer's preprocess_text(text), for each of its characters the index of the original character)."""
  out, origin = [], []
  for i, c in enumerate(text):
    if c.isspace():
      if out and out[-1] != ' ':
        out.append(' ')
        origin.append(i)
      continue
    if not c.isascii():
      c = ''.join(x for x in unicodedata.normalize('NFKD', c) if not unicodedata.combining(x))
    for x in (c.lower() if lower else c):
      out.append(x)
      origin.append(i)
  if out and out[-1] == ' ':
    out.pop()
    origin.pop()
  return ''.join(out), origin


def pieces_with_spans(tokenizer, text: str) -> tuple:
  """(piece ids, start and end character of each piece in `text`): the ids equal tokenizer.encode([text])[0]."""
  normalized, origin = normalize_with_offsets(text, tokenizer.lower)
  char_of_byte = np.zeros(len(normalized.encode('utf-8')) + 1, np.int64)
  position = 0
  for i, c in enumerate(normalized):
    width = len(c.encode('utf-8'))
    char_of_byte[position:position + width] = i
    position += width
  char_of_byte[position] = len(normalized)
  ids, starts, ends = [], [], []
  for piece in tokenizer.sp.encode(normalized, return_type='proto').pieces:
    begin, end = int(char_of_byte[piece.begin]), int(char_of_byte[piece.end])
    while begin < end - 1 and normalized[begin] == ' ':  # '▁' pieces cover the space before their word
      begin += 1
    span = (origin[begin], origin[end - 1] + 1) if end > begin else (origin[min(begin, len(origin) - 1)],) * 2
    replacement = tokenizer.digit_comma.get(piece.id)
    if replacement:  # '1,' becomes '▁1' ',' (the original's re-encoding): the comma is the last character
      ids += list(replacement)
      starts += [span[0]] * (len(replacement) - 1) + [span[1] - 1]
      ends += [span[1] - 1] * (len(replacement) - 1) + [span[1]]
    else:
      ids.append(piece.id)
      starts.append(span[0])
      ends.append(span[1])
  return ids, starts, ends


def answer_pieces(starts: list, ends: list, char_start: int, char_end: int) -> tuple:
  """(first, last) piece overlapping the characters [char_start, char_end)."""
  first = next(i for i in range(len(starts)) if ends[i] > char_start)
  last = max(i for i in range(len(starts)) if starts[i] < char_end)
  return first, last


def windows(length: int, room: int, stride: int) -> list:
  """(start, length) of the context windows, as the original: each `stride` pieces after the last, the last
  one reaching the end."""
  out, start = [], 0
  while start < length:
    size = min(length - start, room)
    out.append((start, size))
    if start + size == length:
      break
    start += min(size, stride)
  return out or [(0, 0)]


def max_context(spans: list, index: int, position: int) -> bool:
  """Whether window `index` gives piece `position` the most context (the least of left and right, ties to the
  longer window) of all windows holding it."""
  def score(span):
    start, size = span
    return min(position - start, start + size - 1 - position) + 0.01 * size
  holding = [i for i, (start, size) in enumerate(spans) if start <= position < start + size]
  return max(holding, key=lambda i: score(spans[i])) == index


# ---- Reading -------------------------------------------------------------------------------------------------------

def parse(data: list, where: str, version: str) -> list:
  """Questions of a SQuAD file's `data`, each answer checked against its context."""
  out = []
  for article in data:
    for paragraph in article['paragraphs']:
      context = paragraph['context']
      for qa in paragraph['qas']:
        impossible = bool(qa.get('is_impossible', False))
        answers = [] if impossible else [(a['text'], int(a['answer_start'])) for a in qa['answers']]
        for text, start in answers:
          if context[start:start + len(text)] != text:
            raise DataError(f'{where}: question {qa["id"]}: answer {text!r} is not at its answer_start {start} '
                            f'(the context has {context[start:start + len(text)]!r} there). Fix answer_start or '
                            f'the text.')
        if version == 'v1.1' and not answers:
          raise DataError(f'{where}: question {qa["id"]} has no answer; SQuAD 1.1 questions all have one (is this '
                          f'a v2.0 file? use configs/finetune/squad_v2.py).')
        out.append(Question(qa['id'], qa['question'], context, answers, impossible))
  return out


class SquadTask:
  metric = 'eval_f1'  # the original keeps the checkpoint with the best dev F1
  scale = 100.0  # the official scorers print percentages

  def __init__(self, config):
    self.version = 'v2.0' if config.task.name == 'squad_v2' else 'v1.1'
    self.name = config.task.name
    t = config.task
    self.data, self.tfds_data_dir = t.data, config.data.tfds_data_dir
    self.max_seq_length, self.doc_stride, self.max_query_length = t.max_seq_length, t.doc_stride, t.max_query_length
    self.n_best_size, self.max_answer_length = t.n_best_size, t.max_answer_length
    self.start_n_top, self.end_n_top = t.get('start_n_top', 5), t.get('end_n_top', 5)
    self.answer_dropout = t.classifier_dropout
    if self.max_seq_length - self.max_query_length - 3 < 1 or self.doc_stride < 1 or self.max_answer_length < 1:
      raise DataError(f'config.task: max_seq_length {self.max_seq_length} leaves no room for the context after '
                      f'max_query_length {self.max_query_length} + 3, or doc_stride/max_answer_length is not positive.')
    self.gold = {}  # split -> the data's `data` list, for the official scorer
    self.windows = {}  # split -> per feature: (question index, piece spans, max-context flags, context offset)

  @property
  def head(self) -> dict:
    if self.version == 'v1.1':
      return {'architecture': 'AlbertForQuestionAnswering'}
    return {'architecture': 'AlbertForSquadV2', 'start_n_top': self.start_n_top, 'end_n_top': self.end_n_top,
            'classifier_dropout': self.answer_dropout}

  def dummy_inputs(self) -> dict:
    return {'input_ids': jnp.zeros((1, self.max_seq_length), jnp.int32)}

  def splits(self) -> dict:
    """'train' and 'dev' (the official dev set is SQuAD's test set: there is no other)."""
    return {split: (self._read(split), None) for split in ('train', 'dev')}

  def _read(self, split: str) -> list:
    """The split from config.task.data, told apart by what it holds: the Hub's download (rajpurkar/squad's
    plain_text/ or rajpurkar/squad_v2's squad_v2/ folder of Parquet files, or that folder itself), the official
    JSON files (train-v1.1.json, dev-v1.1.json), or 'tfds'."""
    if self.data == 'tfds':
      return self._read_tfds(split)
    root = paths.path(self.data)
    found = hub.folder(root, ['plain_text'] if self.version == 'v1.1' else ['squad_v2'])
    if found:
      where = f'{found} ({"train" if split == "train" else "validation"})'
      rows, _ = hub.read(found, 'train' if split == 'train' else 'validation', f'SQuAD {self.version}')
      hub.missing_columns(rows, ('id', 'context', 'question', 'answers'), where)
      return self._official(rows, split, where)
    path = root / f'{split}-{self.version}.json'
    if not path.exists():
      raise DataError(f'{path} is missing: config.task.data must be the folder of the Hub\'s download '
                      f'(rajpurkar/{"squad" if self.version == "v1.1" else "squad_v2"}) or the one holding the '
                      f'official train-{self.version}.json and dev-{self.version}.json.')
    try:
      data = json.loads(path.read_text(encoding='utf-8'))['data']
    except (json.JSONDecodeError, KeyError) as e:
      raise DataError(f'{path} is not a SQuAD file ({type(e).__name__}: {e}).') from None
    self.gold[split] = data
    return parse(data, str(path), self.version)

  def _read_tfds(self, split: str) -> list:
    import tensorflow_datasets as tfds
    name = f'squad/{self.version}'
    try:
      rows = sources.tfds_examples(tfds.builder(name, data_dir=self.tfds_data_dir),
                                   'train' if split == 'train' else 'validation', f'task {self.version}: TFDS {name}')
    except sources.SourceError:
      raise
    except Exception as e:  # not prepared, ...
      raise DataError(f'TFDS {name} cannot be read ({e}). Prepare it (tfds build {name}) and set '
                      f'data.tfds_data_dir, or set task.data to the folder of the Hub\'s download or the official '
                      f'JSON files.') from e
    return self._official(rows, split, f'TFDS {name} {split}')

  def _official(self, rows, split: str, where: str) -> list:
    """TFDS's or the Hub's rows (one a question: id, question, context, answers {text, answer_start}) regrouped
    into the official layout, which the scorer reads; in SQuAD 2.0 a question without answers is impossible."""
    text = lambda x: x.decode('utf-8') if isinstance(x, bytes) else str(x)
    paragraphs = {}
    for row in rows:
      answers = row['answers']
      qa = {'id': text(row['id']), 'question': text(row['question']),
            'answers': [{'text': text(t), 'answer_start': int(s)} for t, s in zip(answers['text'],
                                                                                  answers['answer_start'])]}
      if 'is_impossible' in row or self.version == 'v2.0':
        qa['is_impossible'] = bool(row['is_impossible']) if 'is_impossible' in row else not qa['answers']
      paragraphs.setdefault(text(row['context']), []).append(qa)
    data = [{'title': '', 'paragraphs': [{'context': c, 'qas': qas} for c, qas in paragraphs.items()]}]
    self.gold[split] = data
    return parse(data, where, self.version)

  # ---- Features.

  def features(self, questions: list, tokenizer, split: str) -> dict:
    rows, meta = [], []
    for q_index, q in enumerate(questions):
      query = list(tokenizer.encode([q.question])[0])[:self.max_query_length]
      ids, starts, ends = pieces_with_spans(tokenizer, q.context)
      answer = answer_pieces(starts, ends, q.answers[0][1], q.answers[0][1] + len(q.answers[0][0])) \
          if q.answers else None
      spans = windows(len(ids), self.max_seq_length - len(query) - 3, self.doc_stride)
      for w, (start, size) in enumerate(spans):
        offset = len(query) + 2  # [CLS] query [SEP]
        tokens = [CLS] + query + [SEP] + ids[start:start + size] + [SEP]
        inside = answer is not None and start <= answer[0] and answer[1] < start + size
        positions = (answer[0] - start + offset, answer[1] - start + offset) if inside else (0, 0)
        rows.append((tokens, offset, size, positions, not inside))
        meta.append((q_index, starts[start:start + size], ends[start:start + size],
                     [max_context(spans, w, start + i) for i in range(size)], offset))
    n, length = len(rows), self.max_seq_length
    out = {'input_ids': np.zeros((n, length), np.int32), 'input_mask': np.zeros((n, length), np.int32),
           'segment_ids': np.zeros((n, length), np.int32), 'p_mask': np.ones((n, length), np.float32),
           'start_positions': np.zeros((n,), np.int32), 'end_positions': np.zeros((n,), np.int32),
           'is_impossible': np.zeros((n,), np.float32), 'weights': np.ones((n,), np.float32)}
    for i, (tokens, offset, size, positions, impossible) in enumerate(rows):
      out['input_ids'][i, :len(tokens)] = tokens
      out['input_mask'][i, :len(tokens)] = 1
      out['segment_ids'][i, offset:len(tokens)] = 1
      out['p_mask'][i, 0] = 0  # [CLS] may be chosen (no answer here) ...
      out['p_mask'][i, offset:offset + size] = 0  # ... and the context
      out['start_positions'][i], out['end_positions'][i] = positions
      out['is_impossible'][i] = impossible
    self.windows[split] = meta
    return out

  # ---- Loss and outputs.

  def normalizers(self, batch) -> dict:
    """What the loss divides its sum by: the features (padding rows weigh 0), as step.normalizers."""
    return {'count': jnp.maximum(jnp.sum(batch['weights']), 1)}

  def loss(self, model, params, batch, rng, deterministic: bool, norms=None):
    """(mean loss over the features, sums for metrics); the mean divides by `norms` (a whole batch's, when this
    is one of its microbatches) or by this batch's own."""
    norms = self.normalizers(batch) if norms is None else norms
    inputs = (batch['input_ids'], batch['segment_ids'], batch['input_mask'])
    weights, count = batch['weights'], norms['count']
    if self.version == 'v1.1':
      out = model.apply({'params': params}, *inputs, deterministic=deterministic, rngs={'dropout': rng})
      ce = lambda logits, labels: optax.softmax_cross_entropy_with_integer_labels(logits, labels)
      per_feature = (ce(out.start_logits, batch['start_positions']) + ce(out.end_logits, batch['end_positions'])) / 2
    else:  # log-probabilities of the gold start and end (given the gold start), and answerability
      out = model.apply({'params': params}, *inputs, batch['p_mask'], batch['start_positions'],
                        deterministic=deterministic, rngs={'dropout': rng})
      pick = lambda log_probs, labels: -jnp.take_along_axis(log_probs, labels[:, None], axis=1)[:, 0]
      span = (pick(out.start_logits, batch['start_positions']) + pick(out.end_logits, batch['end_positions'])) / 2
      answerable = optax.sigmoid_binary_cross_entropy(out.cls_logits, batch['is_impossible'])
      per_feature = span + 0.5 * answerable
    per_feature = per_feature * weights
    return jnp.sum(per_feature) / count, {'loss': jnp.sum(per_feature), 'count': jnp.sum(weights)}

  def predict(self, model, params, batch) -> dict:
    inputs = (batch['input_ids'], batch['segment_ids'], batch['input_mask'])
    if self.version == 'v1.1':
      out = model.apply({'params': params}, *inputs)
      return {'start_logits': out.start_logits, 'end_logits': out.end_logits}
    out = model.apply({'params': params}, *inputs, batch['p_mask'])
    return {k: getattr(out, k) for k in ('start_top_log_probs', 'start_top_index', 'end_top_log_probs',
                                         'end_top_index', 'cls_logits')}

  def candidates(self, outputs: dict, i: int) -> list:
    """(score, start, end) piece positions proposed by feature i (the original's n-best / beam; an ensemble's
    pooled proposals, albert_jax/ensemble.py, as they are)."""
    if 'candidates' in outputs:
      return outputs['candidates'][i]
    if self.version == 'v1.1':
      start, end = outputs['start_logits'][i], outputs['end_logits'][i]
      best = lambda x: np.argsort(-x, kind='stable')[:self.n_best_size]
      return [(start[s] + end[e], s, e) for s in best(start) for e in best(end)]
    k = self.end_n_top
    return [(outputs['start_top_log_probs'][i, a] + outputs['end_top_log_probs'][i, a * k + b],
             outputs['start_top_index'][i, a], outputs['end_top_index'][i, a * k + b])
            for a in range(self.start_n_top) for b in range(k)]

  def answers(self, outputs: dict, questions: list, split: str) -> tuple:
    """({question id: best non-empty answer text}, {question id: no-answer score}) over all windows."""
    best, null = {}, {}
    for i, (q_index, starts, ends, is_max, offset) in enumerate(self.windows[split]):
      q = questions[q_index]
      if self.version == 'v2.0':
        null[q.qid] = min(null.get(q.qid, np.inf), float(outputs['cls_logits'][i]))
      for score, s, e in self.candidates(outputs, i):
        s, e = int(s) - offset, int(e) - offset
        if not (0 <= s < len(starts) and 0 <= e < len(starts)) or e < s or e - s + 1 > self.max_answer_length \
            or not is_max[s]:
          continue
        if q.qid not in best or score > best[q.qid][0]:
          best[q.qid] = (float(score), q.context[starts[s]:ends[e]])
    return {q.qid: best[q.qid][1] if q.qid in best else '' for q in questions}, null

  def _final(self, outputs: dict, questions: list, split: str) -> tuple:
    """(official scores, final predictions, no-answer scores). v2.0, as the original: predictions are made again
    with the dev-best no-answer threshold applied, and scored again."""
    predictions, null = self.answers(outputs, questions, split)
    if self.version == 'v1.1':
      return squad_eval.evaluate_v1(self.gold[split], predictions), predictions, null
    first = squad_eval.evaluate_v2(self.gold[split], predictions, null)
    threshold = first['best_f1_thresh']
    final = {q: ('' if null[q] > threshold else text) for q, text in predictions.items()}
    scores = {**squad_eval.evaluate_v2(self.gold[split], final), 'null_score_diff_threshold': threshold,
              **{k: v for k, v in first.items() if k.startswith('best_')}}
    return scores, final, null

  def score(self, outputs: dict, questions: list, features: dict, split: str, prefix: str = 'eval_') -> dict:
    out = {}
    for name, value in self._final(outputs, questions, split)[0].items():
      out[f'{prefix}{name}'] = float(value)
      if not name.endswith(('total', 'thresh', 'threshold')):
        out[f'{prefix}{name}_count'] = len(questions)
    return out

  def prediction_files(self, outputs: dict, questions: list, split: str, leaderboard_file) -> dict:
    """predictions.json (and for v2.0 null_odds.json), as the official scorer and the leaderboard take them."""
    _, final, null = self._final(outputs, questions, split)
    files = {f'{split}_predictions.json': json.dumps(final, indent=2, ensure_ascii=False)}
    if self.version == 'v2.0':
      files[f'{split}_null_odds.json'] = json.dumps(null, indent=2)
    return files
