"""Downstream data and metrics: GLUE's scorers against independent computations and hand-worked cases; GLUE and
RACE read from small files in the original formats and from TFDS mock data; bad files stopped with the file and
line named."""
import json

import numpy as np
import pytest
import scipy.stats
import tensorflow_datasets as tfds

from albert_jax import finetune
from albert_jax.config import finetune_defaults, from_file
from albert_jax.downstream import builtin, classification, glue, race
from albert_jax.downstream import DataError, Task
from conftest import ROOT, hub_parquet


# ---- metrics ----------------------------------------------------------------------------------------------------

def test_f1_and_matthews_on_hand_worked_cases():
  gold = np.array([1, 1, 1, 0, 0, 0, 0, 1])
  predicted = np.array([1, 1, 0, 0, 0, 1, 0, 1])
  # tp 3, fp 1, fn 1, tn 3: F1 = 6 / 8; MCC = (9 - 1) / sqrt(4 * 4 * 4 * 4) = 0.5
  assert classification.f1(predicted, gold) == pytest.approx(0.75)
  assert classification.matthews(predicted, gold) == pytest.approx(0.5)
  assert classification.matthews(np.ones(4, int), np.array([1, 0, 1, 0])) == 0.0  # an empty marginal: sklearn gives 0
  assert classification.f1(np.zeros(4, int), np.array([1, 0, 1, 0])) == 0.0


def test_correlations_equal_scipy_with_ties():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 6, 200).astype(float)  # many ties
  y = x + rng.normal(0, 2, 200)
  assert classification.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-12)
  assert classification.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-12)
  assert classification.spearman(y, np.round(y)) == pytest.approx(scipy.stats.spearmanr(y, np.round(y))[0], abs=1e-12)


def config_for(name, data, **task):
  config = finetune_defaults()
  config.task.name = name
  config.task.data = str(data)
  config.task.test_predictions = True
  config.task.max_seq_length = 32
  config.task.update(task)
  return config


def test_scores_carry_counts_and_the_task_metrics():
  task = glue.GlueTask(config_for('mrpc', 'tfds'))
  logits = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
  scores = task.score({'logits': logits}, [], {'label_ids': np.array([1, 0, 0, 1])}, 'dev')
  assert scores == {'eval_accuracy': 0.75, 'eval_accuracy_count': 4, 'eval_f1': pytest.approx(0.8),
                    'eval_f1_count': 4, 'eval_accuracy_f1': pytest.approx(0.775), 'eval_accuracy_f1_count': 4}
  stsb = glue.GlueTask(config_for('stsb', 'tfds'))
  files = stsb.prediction_files({'logits': np.array([[6.2], [-1.0], [2.5]])},
                                [classification.Example(str(i), 'a') for i in range(3)], 'test', 'STS-B.tsv')
  assert files == {'STS-B.tsv': 'index\tprediction\n0\t5.000\n1\t0.000\n2\t2.500\n'}  # clipped to GLUE's 0..5


# ---- GLUE files in the original format ----------------------------------------------------------------------------

def write_tsv(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(''.join('\t'.join(row) + '\n' for row in rows), encoding='utf-8')


def mnli_folder(root):
  header = ['index', 'promptID', 'pairID', 'genre', 'p1', 'p2', 'p3', 'p4', 'sentence1', 'sentence2', 'label1',
            'gold_label']
  row = lambda i, a, b, label: [str(i), '1', '2', 'fiction', '', '', '', '', a, b, label, label]
  write_tsv(root / 'MNLI' / 'train.tsv', [header, row(0, 'A man sleeps.', 'A person rests.', 'entailment'),
                                          row(1, 'Café au lait.', 'No coffee.', 'contradiction')])
  for split in ('dev_matched', 'dev_mismatched'):
    write_tsv(root / 'MNLI' / f'{split}.tsv', [header, row(7, 'It rains.', 'It is wet.', 'neutral')])
  test_header = header[:10]
  for split in ('test_matched', 'test_mismatched'):
    write_tsv(root / 'MNLI' / f'{split}.tsv', [test_header, row(3, 'x y', 'z', '')[:10]])
  write_tsv(root / 'diagnostic' / 'diagnostic.tsv', [['index', 'sentence1', 'sentence2'], ['0', 'p', 'h']])


def test_glue_tsv_folders_read_as_the_original_processors(tmp_path):
  mnli_folder(tmp_path)
  splits = glue.GlueTask(config_for('mnli', tmp_path)).splits()
  assert list(splits) == ['train', 'dev', 'dev_mismatched', 'test', 'test_mismatched', 'ax']
  train = splits['train'][0]
  assert [(e.text_a, e.text_b, e.label) for e in train] == [('A man sleeps.', 'A person rests.', 'entailment'),
                                                             ('Café au lait.', 'No coffee.', 'contradiction')]
  assert splits['test'][1] == 'MNLI-m.tsv' and splits['ax'][1] == 'AX.tsv'
  assert splits['test'][0][0].guid == '3' and splits['test'][0][0].label is None
  # CoLA's train and dev files have no header; the sentence is the fourth column, the label the second.
  write_tsv(tmp_path / 'CoLA' / 'train.tsv', [['gj04', '1', '', 'The book is red.'], ['gj04', '0', '*', 'Book red.']])
  write_tsv(tmp_path / 'CoLA' / 'dev.tsv', [['gj04', '1', '', 'It is.']])
  write_tsv(tmp_path / 'CoLA' / 'test.tsv', [['index', 'sentence'], ['0', 'Is it?']])
  cola = glue.GlueTask(config_for('cola', tmp_path)).splits()
  assert [(e.text_a, e.label) for e in cola['train'][0]] == [('The book is red.', '1'), ('Book red.', '0')]
  assert cola['test'][0][0].text_a == 'Is it?'


def test_glue_file_errors_name_the_file_line_and_fix(tmp_path):
  mnli_folder(tmp_path)
  (tmp_path / 'MNLI' / 'dev_mismatched.tsv').unlink()
  with pytest.raises(DataError, match=r'dev_mismatched.tsv is missing.*config.task.data'):
    glue.GlueTask(config_for('mnli', tmp_path)).splits()
  mnli_folder(tmp_path)
  (tmp_path / 'MNLI' / 'test_matched.tsv').unlink()
  with pytest.raises(DataError, match='test_predictions=False'):
    glue.GlueTask(config_for('mnli', tmp_path)).splits()
  assert 'test' not in glue.GlueTask(config_for('mnli', tmp_path, test_predictions=False)).splits()
  mnli_folder(tmp_path)
  with open(tmp_path / 'MNLI' / 'train.tsv', 'a') as f:
    f.write('2\t1\t2\tfiction\tonly five columns\n')
  with pytest.raises(DataError, match=r'MNLI/train.tsv, line 4: 5 tab-separated fields'):
    glue.GlueTask(config_for('mnli', tmp_path)).splits()
  mnli_folder(tmp_path)
  with open(tmp_path / 'MNLI' / 'train.tsv', 'a') as f:
    f.write('\t'.join(['9', '1', '2', 'g', '', '', '', '', 'a', 'b', 'x', 'maybe']) + '\n')
  with pytest.raises(DataError, match=r"line 4: label 'maybe' is not one of mnli's labels"):
    glue.GlueTask(config_for('mnli', tmp_path)).splits()
  with pytest.raises(DataError, match='is not a number'):
    glue.GlueTask(config_for('stsb', 'tfds')).label_id('high', 'STS-B/train.tsv, line 2')


def test_pairs_are_cut_from_the_longer_side(builtin_tokenizer):
  a, b = 'one two three four five six seven eight nine ten eleven twelve', 'the file'
  ids, segments = classification.encode(builtin_tokenizer, a, b, 12)
  b_ids = list(builtin_tokenizer.encode([b])[0])
  assert len(b_ids) < 12 // 2 - 1
  assert len(ids) == 12 and ids[-len(b_ids) - 1:-1] == b_ids  # the short side kept whole
  assert segments == [0] * (12 - len(b_ids) - 1) + [1] * (len(b_ids) + 1)


# ---- TFDS mock data -----------------------------------------------------------------------------------------------

def race_rows(self, split, **kwargs):
  """TFDS race as tfds.testing.mock_data serves it, but well formed: 2 questions of 4 options per article."""
  import tensorflow as tf
  level = self.builder_config.name if self.builder_config else 'middle'
  rows = {'article': [f'{level} article {i} about a ball.' for i in range(3)],
          'questions': [['What is it about?', 'It is _.']] * 3,
          'options': [[['a ball', 'a cat', 'a dog', 'a kite'], ['red', 'blue', 'green', 'old']]] * 3,
          'answers': [['A', 'D']] * 3, 'example_id': [f'{level}{i}.txt' for i in range(3)]}
  return tf.data.Dataset.from_tensor_slices(rows)


def test_glue_and_race_read_tfds(builtin_tokenizer):
  with tfds.testing.mock_data(num_examples=5):
    splits = glue.GlueTask(config_for('mnli', 'tfds')).splits()
    task = glue.GlueTask(config_for('stsb', 'tfds'))
    stsb = task.splits()
    # Mock data's random option lists are what a broken download would hold: stopped, named.
    with pytest.raises(DataError, match=r'TFDS race/middle train .*: question 0 has \d+ options'):
      race.RaceTask(config_for('race', 'tfds', levels='middle', max_qa_length=8)).splits()
  assert {s: len(e) for s, (e, _) in splits.items()} == {s: 5 for s in splits}
  assert all(e.label in glue.GLUE['mnli'].labels for e in splits['dev'][0])
  assert all(e.label is None for e in splits['test'][0] + splits['ax'][0])
  features = task.features(stsb['train'][0], builtin_tokenizer, 'train')
  assert features['label_ids'].dtype == np.float32 and features['input_ids'].shape == (5, 32)
  with tfds.testing.mock_data(as_dataset_fn=race_rows):
    questions = race.RaceTask(config_for('race', 'tfds', levels='middle,high', max_qa_length=8)).splits()['dev'][0]
  assert len(questions) == 12 and {q.level for q in questions} == {'middle', 'high'}
  assert questions[0].endings == ['What is it about? a ball', 'What is it about? a cat', 'What is it about? a dog',
                                  'What is it about? a kite'] and questions[1].endings[3] == 'It is old.'
  assert [q.label for q in questions[:2]] == [0, 3]


# ---- RACE files ---------------------------------------------------------------------------------------------------

def race_folder(root, **overrides):
  article = {'id': 'middle1.txt', 'article': 'Tom has a red ball. He plays with it every day.',
             'questions': ['What colour is the ball?', 'Tom plays with _ every day.'],
             'options': [['red', 'blue', 'green', 'black'], ['a ball', 'a cat', 'a dog', 'a kite']],
             'answers': ['A', 'A'], **overrides}
  for split in ('train', 'dev', 'test'):
    for level in ('middle', 'high'):
      folder = root / 'RACE' / split / level
      folder.mkdir(parents=True, exist_ok=True)
      (folder / f'{level}1.txt').write_text(json.dumps(article))


def test_race_files_become_four_endings_as_the_original(tmp_path, builtin_tokenizer):
  race_folder(tmp_path)
  task = race.RaceTask(config_for('race', tmp_path, levels='middle', max_qa_length=6))
  questions = task.splits()['dev'][0]
  assert [q.level for q in questions] == ['middle', 'middle']
  assert questions[0].endings[1] == 'What colour is the ball? blue'
  assert questions[1].endings[2] == 'Tom plays with a dog every day.'  # '_' filled by the option
  features = task.features(questions, builtin_tokenizer, 'dev')
  ending = list(builtin_tokenizer.encode([questions[0].endings[1]])[0])[-6:]
  row = features['input_ids'][0, 1]
  length = int(features['input_mask'][0, 1].sum())
  assert list(row[length - 7:length - 1]) == ending and row[length - 1] == 3  # ... [SEP] ending [SEP]
  assert features['segment_ids'][0, 1, :length].tolist() == [0] * (length - 7) + [1] * 7
  scores = task.score({'logits': np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])}, questions, features, 'dev')
  assert scores['eval_accuracy'] == 0.5 and scores['eval_middle_accuracy_count'] == 2


def test_race_errors_name_the_file_and_question(tmp_path):
  race_folder(tmp_path, options=[['red', 'blue', 'green'], ['a', 'b', 'c', 'd']])
  with pytest.raises(DataError, match=r'middle1.txt: question 0 has 3 options'):
    race.RaceTask(config_for('race', tmp_path, levels='middle', max_qa_length=6)).splits()
  race_folder(tmp_path, answers=['E', 'A'])
  with pytest.raises(DataError, match=r"question 0 has answer 'E'"):
    race.RaceTask(config_for('race', tmp_path, levels='middle', max_qa_length=6)).splits()
  with pytest.raises(DataError, match='is missing'):
    race.RaceTask(config_for('race', tmp_path / 'nowhere', levels='high', max_qa_length=6)).splits()


# ---- the built-in task ------------------------------------------------------------------------------------------

def test_builtin_examples_are_made_without_a_model():
  documents = [['the cat sat on the mat today', 'short one'], ['we read the old book in the garden']]
  train = builtin.make_examples(documents, 'train', seed=0)
  assert [e.label for e in train] == ['1', '0', '1', '0']  # both versions of each long-enough sentence
  assert train[0].text_a == 'the cat sat on the mat today'
  assert sorted(train[1].text_a.split()) == sorted(train[0].text_a.split()) and train[1].text_a != train[0].text_a
  words, swapped = train[0].text_a.split(), train[1].text_a.split()
  differ = [i for i in range(len(words)) if words[i] != swapped[i]]
  assert len(differ) == 2 and differ[1] == differ[0] + 1  # two neighbours exchanged
  dev = builtin.make_examples(documents, 'dev', seed=0)
  assert len(dev) == 2  # one version per sentence


# The GLUE download's layouts, task by task: (header or None, a train/dev row) and (test header, a test row).
GLUE_LAYOUTS = {
    'sst2': (['sentence', 'label'], ['A fine film', '1'], ['index', 'sentence'], ['0', 'A dull film']),
    'qqp': (['id', 'qid1', 'qid2', 'question1', 'question2', 'is_duplicate'], ['5', '1', '2', 'How?', 'Why?', '0'],
            ['id', 'question1', 'question2'], ['0', 'Who?', 'What?']),
    'qnli': (['index', 'question', 'sentence', 'label'], ['0', 'Who?', 'Tom did.', 'entailment'],
             ['index', 'question', 'sentence'], ['0', 'When?', 'Now.']),
    'rte': (['index', 'sentence1', 'sentence2', 'label'], ['0', 'It rains.', 'It is wet.', 'not_entailment'],
            ['index', 'sentence1', 'sentence2'], ['0', 'A.', 'B.']),
    'wnli': (['index', 'sentence1', 'sentence2', 'label'], ['0', 'It fell.', 'The cup fell.', '1'],
             ['index', 'sentence1', 'sentence2'], ['0', 'A.', 'B.']),
    'stsb': (['index', 'genre', 'filename', 'year', 'old_index', 'source1', 'source2', 'sentence1', 'sentence2',
              'score'], ['0', 'main', 'f', '2012', '1', 'none', 'none', 'A plane.', 'An airplane.', '4.800'],
             ['index', 'genre', 'filename', 'year', 'old_index', 'source1', 'source2', 'sentence1', 'sentence2'],
             ['0', 'main', 'f', '2012', '1', 'none', 'none', 'A cat.', 'A dog.']),
}


@pytest.mark.parametrize('name', list(GLUE_LAYOUTS))
def test_each_glue_layout_reads_its_texts_and_labels(name, tmp_path):
  header, row, test_header, test_row = GLUE_LAYOUTS[name]
  folder = tmp_path / glue.GLUE[name].directory
  for split in ('train', 'dev'):
    write_tsv(folder / f'{split}.tsv', [header, row])
  write_tsv(folder / 'test.tsv', [test_header, test_row])
  splits = glue.GlueTask(config_for(name, tmp_path)).splits()
  example = splits['dev'][0][0]
  texts = [c for c in row if c and c[0].isupper()]  # the sentences of the row, in order
  assert [example.text_a, example.text_b][:len(texts)] == texts and example.label == row[-1]
  test = splits['test'][0][0]
  assert test.guid == '0' and test.label is None and test.text_a == [c for c in test_row if c[0].isupper()][0]


@pytest.mark.parametrize('name', list(glue.GLUE))
def test_every_glue_task_reads_tfds(name, builtin_tokenizer):
  with tfds.testing.mock_data(num_examples=4):
    task = glue.GlueTask(config_for(name, 'tfds'))
    splits = task.splits()
  train = splits['train'][0]
  assert len(train) == 4 and all(e.text_a for e in train)
  assert all((e.text_b is None) == (len(glue.GLUE[name].tfds_keys) == 1) for e in train)
  features = task.features(train, builtin_tokenizer, 'train')
  assert features['input_ids'].shape == (4, 32) and (features['input_ids'][:, 0] == 2).all()  # [CLS]


@pytest.mark.parametrize('name', sorted(finetune.TASKS))
def test_every_task_provides_what_finetune_asks_of_a_task(name):
  """downstream.Task lists what finetune.py uses of a task; every task it names has all of it (a new one missing a
  member would fail here, not halfway through a run)."""
  path = ROOT / 'configs' / 'finetune' / f'{name}.py'
  config = from_file(path if path.exists() else ROOT / 'configs' / 'finetune' / 'mrpc.py')
  config.task.name = name
  task = finetune.make_task(config)
  members = [k for k in vars(Task) if not k.startswith('_')] + list(Task.__annotations__)
  assert len(members) == 12 and not [k for k in members if not hasattr(task, k)]
  assert task.name == name and task.metric.startswith('eval_') and task.scale in (1.0, 100.0)


# ---- the Hugging Face Hub's downloads: a folder per configuration of Parquet files ----------------------------------

# The datasets library's ClassLabel names of nyu-mll/glue (the same classes, in the same order, as TFDS's).
HUB_CLASSES = {'cola': ['unacceptable', 'acceptable'], 'sst2': ['negative', 'positive'],
               'mrpc': ['not_equivalent', 'equivalent'], 'qqp': ['not_duplicate', 'duplicate'],
               'mnli': ['entailment', 'neutral', 'contradiction'], 'qnli': ['entailment', 'not_entailment'],
               'rte': ['entailment', 'not_entailment'], 'wnli': ['not_entailment', 'entailment'],
               'ax': ['entailment', 'neutral', 'contradiction']}


def hub_glue_task(root, name, splits, metadata=True):
  """One task's folder of nyu-mll/glue from {hub split: [(texts..., label)]}: its columns, label and idx."""
  keys = glue._TFDS_AX_KEYS if name == 'ax' else glue.GLUE[name].tfds_keys  # pylint: disable=protected-access
  label = ({'dtype': 'float32', '_type': 'Value'} if name == 'stsb' else
           {'names': HUB_CLASSES[name], '_type': 'ClassLabel'})
  features = {**{k: {'dtype': 'string', '_type': 'Value'} for k in keys}, 'label': label,
              'idx': {'dtype': 'int32', '_type': 'Value'}} if metadata else None
  for split, examples in splits.items():
    rows = [{**dict(zip(keys, example[:-1])), 'label': example[-1], 'idx': i} for i, example in enumerate(examples)]
    hub_parquet(root / name, split, rows, features, files=2 if len(rows) > 3 else 1)


def test_glue_reads_the_hubs_download_as_its_original_files(tmp_path):
  """SST-2 and MRPC, the real files: the same examples, texts and labels from the original TSVs and from the same
  rows laid out as nyu-mll/glue is on the Hub (in two files a split); the test split unlabelled (-1)."""
  shared = ROOT.parent / 'shared' / 'data' / 'glue'
  if not shared.is_dir():
    pytest.skip(f'the real GLUE files are at {shared}')
  for name, directory in (('sst2', 'SST-2'), ('mrpc', 'MRPC')):
    original = glue.GlueTask(config_for(name, shared, test_predictions=False)).splits()
    spec, hub_splits = glue.GLUE[name], {}
    for split, hub_split in (('train', 'train'), ('dev', 'validation')):
      examples = original[split][0][:50]
      label = lambda e: spec.labels.index(e.label)  # the original's '0'/'1': the Hub's class index
      hub_splits[hub_split] = [(e.text_a, e.label and label(e)) if e.text_b is None else
                               (e.text_a, e.text_b, label(e)) for e in examples]
    hub_splits['test'] = [texts[:-1] + (-1,) for texts in hub_splits['validation'][:5]]
    hub_glue_task(tmp_path / 'glue', name, hub_splits)
    read = glue.GlueTask(config_for(name, tmp_path / 'glue')).splits()
    for split in ('train', 'dev'):
      assert [(e.text_a, e.text_b, e.label) for e in read[split][0]] == [
          (e.text_a, e.text_b, e.label) for e in original[split][0][:50]]
    assert [e.label for e in read['test'][0]] == [None] * 5 and read['test'][1] == f'{directory}.tsv'
    # The task's own folder named directly reads the same.
    direct = glue.GlueTask(config_for(name, tmp_path / 'glue' / name, test_predictions=False)).splits()
    assert [e.text_a for e in direct['train'][0]] == [e.text_a for e in read['train'][0]]


@pytest.mark.parametrize('name', list(glue.GLUE))
def test_every_glue_task_reads_the_hubs_layout(name, tmp_path):
  """Every task's Hub folder (MNLI's matched and mismatched splits, the diagnostic set in ax/), labels as the
  datasets library names them, or as indices where a file carries no names."""
  keys = glue.GLUE[name].tfds_keys
  texts = lambda i: tuple(f'{k} {i}.' for k in keys)
  classes = HUB_CLASSES.get(name)
  labelled = [texts(i) + ((i * 0.5,) if name == 'stsb' else (i % len(classes),)) for i in range(4)]
  unlabelled = [texts(i) + (-1,) for i in range(2)]
  splits = ({'train': labelled, 'validation_matched': labelled, 'validation_mismatched': labelled,
             'test_matched': unlabelled, 'test_mismatched': unlabelled} if name == 'mnli' else
            {'train': labelled, 'validation': labelled, 'test': unlabelled})
  for metadata in (True, False):
    hub_glue_task(tmp_path / str(metadata), name, splits, metadata)
    if name == 'mnli':
      hub_glue_task(tmp_path / str(metadata), 'ax', {'test': [('p.', 'h.', -1)]}, metadata)
    read = glue.GlueTask(config_for(name, tmp_path / str(metadata))).splits()
    dev = read['dev'][0]
    assert [(e.text_a, e.text_b) for e in dev] == [(t[0], t[1] if len(keys) > 1 else None) for t in labelled]
    if name == 'stsb':
      assert [e.label for e in dev] == [0.0, 0.5, 1.0, 1.5]
    else:  # the original's label names: MNLI's, QNLI's and RTE's by name, the others' as 0 and 1
      expected = [classes[t[-1]] if classes[t[-1]] in glue.GLUE[name].labels else str(t[-1]) for t in labelled]
      assert [e.label for e in dev] == expected
    assert all(e.label is None for e in read['test'][0])
    if name == 'mnli':
      assert read['ax'][0][0].text_a == 'p.' and read['ax'][1] == 'AX.tsv'


def test_a_hub_folder_without_a_split_or_with_a_damaged_file_says_which(tmp_path):
  hub_glue_task(tmp_path, 'rte', {'train': [('a.', 'b.', 0)]})
  with pytest.raises(DataError, match=r'rte holds no validation split of GLUE rte \(validation-\*.parquet\); it has: '
                                      r'train'):
    glue.GlueTask(config_for('rte', tmp_path)).splits()
  hub_glue_task(tmp_path, 'rte', {'validation': [('a.', 'b.', 0)], 'test': [('a.', 'b.', -1)]})
  (tmp_path / 'rte' / 'train-00000-of-00001.parquet').write_bytes(b'PAR1 cut short')
  with pytest.raises(DataError, match=r'train-00000-of-00001.parquet cannot be read as Parquet .*download it again'):
    glue.GlueTask(config_for('rte', tmp_path)).splits()


def test_race_reads_the_hubs_download_as_its_original_files(tmp_path):
  """ehovy/race: one row a question; its level's folder or all/ (both levels, told apart by the article's file)."""
  race_folder(tmp_path / 'original')
  for split in ('train', 'dev', 'test'):  # each level's article under its own file name, as RACE ships them
    high = tmp_path / 'original' / 'RACE' / split / 'high' / 'high1.txt'
    high.write_text(json.dumps({**json.loads(high.read_text()), 'id': 'high1.txt'}))
  original = race.RaceTask(config_for('race', tmp_path / 'original', levels='middle,high', max_qa_length=6))
  expected = original.splits()
  article = json.loads((tmp_path / 'original' / 'RACE' / 'train' / 'middle' / 'middle1.txt').read_text())
  for layout in ('levels', 'all'):
    for split in ('train', 'validation', 'test'):
      rows = {level: [{'example_id': f'{level}1.txt', 'article': article['article'], 'question': question,
                       'options': options, 'answer': answer}
                      for question, options, answer in zip(article['questions'], article['options'],
                                                            article['answers'])] for level in ('middle', 'high')}
      if layout == 'levels':
        for level in rows:
          hub_parquet(tmp_path / layout / level, split, rows[level], None)
      else:
        hub_parquet(tmp_path / layout / 'all', split, rows['high'] + rows['middle'], None)
    read = race.RaceTask(config_for('race', tmp_path / layout, levels='middle,high', max_qa_length=6)).splits()
    for split in ('train', 'dev', 'test'):
      got = sorted((q.guid, q.level, q.endings, q.label) for q in read[split][0])
      assert got == sorted((q.guid, q.level, q.endings, q.label) for q in expected[split][0]), (layout, split)
