"""SQuAD: answers mapped to pieces and back exactly (accents, repeated whitespace, unicode, window edges), the
windows and max-context rule, the official scorers against hand-worked cases and a brute-force threshold search,
the v2 head's beam against its training-time end logits, bad files, and fine-tuning end to end."""
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from albert_jax.config import finetune_defaults
from albert_jax.downstream import heads, squad, squad_eval
from albert_jax.downstream import DataError
from albert_jax.model import ModelConfig
from conftest import ROOT

CONTEXTS = [
    'The café in Zürich   opened in 1,905 and served naïve   crème brûlée.',
    'Tabs\tand\nnewlines   between words; «quotes» and — dashes — remain.',
    'Ångström units (Å) measure 1,000,000 tiny things: ÉCOLE, Straße and ﬁne ligatures.',
]


@pytest.mark.parametrize('context', CONTEXTS)
def test_pieces_map_back_to_the_original_characters(context, builtin_tokenizer):
  ids, starts, ends = squad.pieces_with_spans(builtin_tokenizer, context)
  assert ids == list(builtin_tokenizer.encode([context])[0])  # the same pieces the model was pretrained on
  assert all(0 <= s < e <= len(context) for s, e in zip(starts, ends)) and starts == sorted(starts)
  # Every word of the context is covered, in order, by the pieces that overlap it.
  position = 0
  for word in context.split():
    start = context.index(word, position)
    position = start + len(word)
    first, last = squad.answer_pieces(starts, ends, start, position)
    recovered = context[starts[first]:ends[last]]
    assert word in recovered and len(recovered) <= len(word) + 2, (word, recovered)
    assert recovered.strip() == recovered


def test_answer_spans_round_trip_through_windows(builtin_tokenizer):
  context = ' '.join(f'Word{i} is ünïcode   number {i}.' for i in range(40))
  answer = 'ünïcode   number 17'
  start = context.index(answer)
  question = squad.Question('q1', 'Which number?', context, [(answer, start)])
  config = finetune_defaults()
  config.task.update(name='squad_v1', data='unused', max_seq_length=48, doc_stride=16, max_query_length=8,
                     n_best_size=5, max_answer_length=30)
  task = squad.SquadTask(config)
  features = task.features([question], builtin_tokenizer, 'dev')
  windows = task.windows['dev']
  assert len(windows) > 5  # the context needs many windows
  answered = [i for i in range(len(windows)) if features['start_positions'][i] > 0]
  assert answered  # the answer lies whole in some windows, and only those are labelled with it
  for i in range(len(windows)):
    q_index, starts, ends, is_max, offset = windows[i]
    if i in answered:
      s, e = features['start_positions'][i] - offset, features['end_positions'][i] - offset
      assert context[starts[s]:ends[e]] == answer  # pieces -> original text, repeated spaces and accents kept
      assert features['p_mask'][i, features['start_positions'][i]] == 0
  # Each context piece is the max-context piece of exactly one window.
  ids, _, _ = squad.pieces_with_spans(builtin_tokenizer, context)
  spans = squad.windows(len(ids), 48 - len(builtin_tokenizer.encode(['Which number?'])[0]) - 3, 16)
  assert spans[-1][0] + spans[-1][1] == len(ids)
  for position in range(len(ids)):
    assert sum(squad.max_context(spans, w, position) for w in range(len(spans))) == 1
  # A perfect model predicts the answer text exactly (window-edge handling and the max-context rule included).
  n, length = features['input_ids'].shape
  start_logits, end_logits = np.full((n, length), -10.0), np.full((n, length), -10.0)
  for i in answered:
    start_logits[i, features['start_positions'][i]] = end_logits[i, features['end_positions'][i]] = 10.0
  predictions, _ = task.answers({'start_logits': start_logits, 'end_logits': end_logits}, [question], 'dev')
  assert predictions == {'q1': answer}


def test_windows_follow_the_original_stride():
  assert squad.windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
  assert squad.windows(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # never more than a window apart
  assert squad.windows(3, 4, 2) == [(0, 3)]


def squad_file(path, version='v2.0', answer_start=None):
  context = 'Marie Curie won the Nobel Prize in 1903 and again in 1911.'
  qas = [{'id': 'a', 'question': 'When did she first win?', 'answers': [{'text': '1903', 'answer_start':
                                                                        answer_start or context.index('1903')}]},
         {'id': 'b', 'question': 'Who won?', 'answers': [{'text': 'Marie Curie', 'answer_start': 0}]}]
  if version == 'v2.0':
    for qa in qas:
      qa['is_impossible'] = False
    qas.append({'id': 'c', 'question': 'Who lost?', 'answers': [], 'is_impossible': True,
                'plausible_answers': [{'text': 'Curie', 'answer_start': 6}]})
  data = {'version': version, 'data': [{'title': 'Curie', 'paragraphs': [{'context': context, 'qas': qas}]}]}
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(data))
  return data


# ---- the official scorers ------------------------------------------------------------------------------------------

def test_official_normalisation_and_scores_on_hand_worked_cases():
  assert squad_eval.normalize_answer('The  Nobel, Prize!') == 'nobel prize'
  # precision 2/2, recall 2/4
  assert squad_eval.f1('the nobel prize', 'Nobel Prize in 1903') == pytest.approx(2 * 1 * 0.5 / (1 + 0.5))
  data = [{'paragraphs': [{'context': '', 'qas': [
      {'id': 'a', 'answers': [{'text': '1903'}, {'text': 'in 1903'}]},
      {'id': 'b', 'answers': [{'text': 'Marie Curie'}]},
      {'id': 'c', 'answers': []}]}]}]
  v1 = squad_eval.evaluate_v1(data[:1] and [{'paragraphs': [{'qas': data[0]['paragraphs'][0]['qas'][:2]}]}],
                              {'a': 'In 1903.', 'b': 'Curie'})
  assert v1 == {'exact_match': 50.0, 'f1': pytest.approx(100 * (1 + 2 / 3) / 2)}  # max over gold answers
  v2 = squad_eval.evaluate_v2(data, {'a': '1903', 'b': 'Curie', 'c': ''},
                              na_probs={'a': 0.1, 'b': 0.7, 'c': 0.9})
  assert v2['exact'] == pytest.approx(100 * 2 / 3) and v2['f1'] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3)
  assert (v2['HasAns_total'], v2['NoAns_total'], v2['NoAns_exact']) == (2, 1, 100.0)
  # Threshold 0.1: 'a' answered, 'b' (F1 2/3) turned into no answer (0), 'c' none (1): 2/3; 0.7 keeps 'b': 8/9;
  # 0.9 changes nothing more ('c' predicted empty either way), so 0.7 stays the best threshold.
  assert v2['best_f1'] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3) and v2['best_f1_thresh'] == 0.7


def test_best_threshold_equals_a_brute_force_search():
  rng = np.random.default_rng(0)
  qas = [{'id': str(i), 'answers': [{'text': f'answer {i % 5}'}] if i % 3 else []} for i in range(60)]
  predictions = {qa['id']: (f'answer {rng.integers(5)}' if rng.random() < 0.8 else '') for qa in qas}
  na_probs = {qa['id']: float(rng.random()) for qa in qas}
  data = [{'paragraphs': [{'context': '', 'qas': qas}]}]
  result = squad_eval.evaluate_v2(data, predictions, na_probs)

  def f1_at(threshold):
    total = 0.0
    for qa in qas:
      gold = [a['text'] for a in qa['answers']]
      if na_probs[qa['id']] > threshold:
        total += 0.0 if gold else 1.0
      elif gold:
        total += max(squad_eval.f1(predictions[qa['id']], g) for g in gold)
      else:
        total += float(predictions[qa['id']] == '')
    return 100 * total / len(qas)
  brute = max([f1_at(0.0)] + [f1_at(t) for t in na_probs.values()])
  assert result['best_f1'] == pytest.approx(brute)
  assert f1_at(result['best_f1_thresh']) == pytest.approx(brute)


def test_squad_eval_cli_prints_the_official_keys(tmp_path):
  squad_file(tmp_path / 'dev.json')
  (tmp_path / 'pred.json').write_text(json.dumps({'a': '1903', 'b': 'Marie Curie', 'c': 'Curie'}))
  (tmp_path / 'na.json').write_text(json.dumps({'a': 0.1, 'b': 0.2, 'c': 0.8}))
  out = subprocess.run([sys.executable, '-m', 'albert_jax.downstream.squad_eval', str(tmp_path / 'dev.json'),
                        str(tmp_path / 'pred.json'), f'--na_prob_file={tmp_path / "na.json"}'],
                       capture_output=True, text=True, cwd=ROOT, check=True).stdout
  result = json.loads(out)
  assert list(result) == ['exact', 'f1', 'total', 'HasAns_exact', 'HasAns_f1', 'HasAns_total', 'NoAns_exact',
                          'NoAns_f1', 'NoAns_total', 'best_exact', 'best_exact_thresh', 'best_f1', 'best_f1_thresh']
  assert result['exact'] == pytest.approx(200 / 3) and result['best_exact'] == 100.0
  squad_file(tmp_path / 'v1.json', version='1.1')
  out = subprocess.run([sys.executable, '-m', 'albert_jax.downstream.squad_eval', str(tmp_path / 'v1.json'),
                        str(tmp_path / 'pred.json')], capture_output=True, text=True, cwd=ROOT, check=True).stdout
  assert json.loads(out) == {'exact_match': 100.0, 'f1': 100.0}


# ---- the v2 head, bad files ----------------------------------------------------------------------------------------

def test_v2_beam_scores_equal_the_end_logits_given_each_start():
  cfg = ModelConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                    intermediate_size=32, max_position_embeddings=16)
  model = heads.SpanV2(cfg, start_n_top=3, end_n_top=2)
  ids = jax.random.randint(jax.random.key(1), (2, 12), 0, 50)
  p_mask = jnp.zeros((2, 12)).at[:, 1:4].set(1.0)
  params = model.init(jax.random.key(0), ids, p_mask=p_mask)['params']
  beam = model.apply({'params': params}, ids, p_mask=p_mask)
  for b in range(2):
    for a in range(3):
      start = beam.start_top_index[b, a]
      assert p_mask[b, start] == 0  # masked positions never start an answer
      given = model.apply({'params': params}, ids, p_mask=p_mask, start_positions=jnp.full((2,), start))
      expected = np.sort(np.asarray(given.end_logits[b]))[::-1][:2]
      np.testing.assert_allclose(beam.end_top_log_probs[b, a * 2:a * 2 + 2], expected, atol=1e-5)
      np.testing.assert_allclose(beam.start_top_log_probs[b, a], given.start_logits[b, start], atol=1e-6)
  np.testing.assert_allclose(beam.cls_logits, given.cls_logits, atol=1e-6)  # answerability ignores the end


def test_answer_not_at_its_start_is_reported(tmp_path):
  squad_file(tmp_path / 'dev-v2.0.json', answer_start=3)
  squad_file(tmp_path / 'train-v2.0.json')
  config = finetune_defaults()
  config.task.update(name='squad_v2', data=str(tmp_path), max_seq_length=64, doc_stride=16, max_query_length=8,
                     n_best_size=5, max_answer_length=30)
  with pytest.raises(DataError, match=r"dev-v2.0.json: question a: answer '1903' is not at its answer_start 3"):
    squad.SquadTask(config).splits()
  config.task.name = 'squad_v1'
  squad_file(tmp_path / 'train-v1.1.json')
  with pytest.raises(DataError, match='question c has no answer; SQuAD 1.1'):
    squad.SquadTask(config).splits()


def squad_rows(self, split, **kwargs):
  """TFDS squad/v2.0 as tfds.testing.mock_data serves it, but with answers where their answer_start says."""
  import tensorflow as tf
  context = 'Marie Curie won the Nobel Prize in 1903 and again in 1911.'
  rows = {'id': ['a', 'b', 'c'], 'title': ['Curie'] * 3, 'context': [context] * 3,
          'question': ['When first?', 'Who?', 'Who lost?'],
          'answers': {'text': tf.ragged.constant([['1903'], ['Marie Curie'], []]),
                      'answer_start': tf.ragged.constant([[context.index('1903')], [0], []], dtype=tf.int32)},
          'is_impossible': [False, False, True]}
  return tf.data.Dataset.from_tensor_slices(rows)


def test_tfds_squad_is_regrouped_for_the_official_scorer():
  import tensorflow_datasets as tfds
  config = finetune_defaults()
  config.task.update(name='squad_v2', data='tfds', max_seq_length=64, doc_stride=16, max_query_length=8,
                     n_best_size=5, max_answer_length=30)
  task = squad.SquadTask(config)
  with tfds.testing.mock_data(as_dataset_fn=squad_rows):
    questions = task.splits()['dev'][0]
  assert [(q.qid, q.answers, q.is_impossible) for q in questions] == [
      ('a', [('1903', 35)], False), ('b', [('Marie Curie', 0)], False), ('c', [], True)]
  scores = squad_eval.evaluate_v2(task.gold['dev'], {'a': '1903', 'b': 'Curie', 'c': ''})
  assert scores['HasAns_total'] == 2 and scores['NoAns_exact'] == 100.0


@pytest.mark.parametrize('version, name, folder', [('1.1', 'squad_v1', 'plain_text'),
                                                   ('v2.0', 'squad_v2', 'squad_v2')])
def test_the_hubs_squad_reads_as_the_official_files(version, name, folder, tmp_path):
  """rajpurkar/squad and rajpurkar/squad_v2 as the Hub holds them (one row a question: id, title, context, question,
  answers {text, answer_start}; no answers: impossible in 2.0): the questions and the scorer's gold of the official
  JSON files with the same questions."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  suffix = 'v1.1' if version == '1.1' else 'v2.0'
  official = squad_file(tmp_path / 'official' / f'dev-{suffix}.json', version=version)
  squad_file(tmp_path / 'official' / f'train-{suffix}.json', version=version)
  rows = [{'id': qa['id'], 'title': article['title'], 'context': paragraph['context'], 'question': qa['question'],
           'answers': {'text': [a['text'] for a in qa['answers']],
                       'answer_start': [a['answer_start'] for a in qa['answers']]}}
          for article in official['data'] for paragraph in article['paragraphs'] for qa in paragraph['qas']]
  (tmp_path / 'hub' / folder).mkdir(parents=True)
  for split in ('train', 'validation'):
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / 'hub' / folder / f'{split}-00000-of-00001.parquet')
  config = finetune_defaults()
  config.task.update(name=name, max_seq_length=64, doc_stride=16, max_query_length=8, n_best_size=5,
                     max_answer_length=30)
  read = {}
  for layout in ('official', 'hub'):
    config.task.data = str(tmp_path / layout)
    task = squad.SquadTask(config)
    questions = task.splits()['dev'][0]
    read[layout] = ([(q.qid, q.question, q.context, q.answers, q.is_impossible) for q in questions],
                    squad_eval.evaluate_v2(task.gold['dev'], {'a': '1903', 'b': 'Curie', 'c': ''}))
  assert read['hub'] == read['official']
  config.task.data = str(tmp_path / 'hub' / folder)  # the configuration's folder named directly
  assert len(squad.SquadTask(config).splits()['train'][0]) == len(rows)


def test_every_answer_position_is_labelled_in_exactly_the_windows_that_hold_it(builtin_tokenizer):
  """Answers at every place of the context, windows edges included: a window is labelled with the answer iff it
  holds all of the answer's pieces, and the labelled pieces cut out exactly the answer's text."""
  context = 'Der Käse  kostet 1,50 € in Zürich; naïve   Kunden zahlen mehr, sagt Émile.'
  config = finetune_defaults()
  config.task.update(name='squad_v1', data='unused', max_seq_length=16, doc_stride=3, max_query_length=4,
                     n_best_size=5, max_answer_length=30)
  _, starts, ends = squad.pieces_with_spans(builtin_tokenizer, context)
  edges = 0
  position = 0
  for word in context.split():
    start = context.index(word, position)
    position = start + len(word)
    task = squad.SquadTask(config)
    features = task.features([squad.Question('q', 'Wer?', context, [(word, start)])], builtin_tokenizer, 'dev')
    first, last = squad.answer_pieces(starts, ends, start, position)
    spans = squad.windows(len(starts), 16 - len(builtin_tokenizer.encode(['Wer?'])[0]) - 3, 3)
    for i, (window_start, size) in enumerate(spans):
      holds = window_start <= first and last < window_start + size
      assert (features['start_positions'][i] > 0) == holds
      if holds:
        offset = task.windows['dev'][i][4]
        s, e = features['start_positions'][i] - offset, features['end_positions'][i] - offset
        assert context[task.windows['dev'][i][1][s]:task.windows['dev'][i][2][e]] == \
            context[starts[first]:ends[last]]
        edges += s == 0 or e == size - 1
    assert word in context[starts[first]:ends[last]]
  assert edges > 5  # answers at a window's first or last piece were among them
