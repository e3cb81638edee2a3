"""The fine-tuning entry point: it starts from a pretraining workdir's best checkpoint, keeps the best checkpoint
by dev, writes result.json and the leaderboards' files, resumes after SIGKILL exactly, and refuses bad setups
before training."""
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

import albert_jax

from albert_jax import checkpoint, finetune, interop, train
from albert_jax import pretrained as pretrained_lib
from albert_jax.data.tokenizer import VocabError
from albert_jax.errors import CheckpointError
from albert_jax.config import validate_finetune
from albert_jax.errors import ConfigError
from albert_jax.model import RUNTIME_FIELDS, ModelConfig
from test_profiling import trace_events
from conftest import ROOT, load_config, xla_flags
from test_downstream_data import mnli_folder, race_folder, write_tsv
from test_squad import squad_file
from test_train import read_scalars, small


def builtin_config(tiny_config, init='none', **train_overrides):
  config = load_config('configs/finetune/builtin.py')
  config.init = str(init)
  config.data.tfds_data_dir = tiny_config.data.tfds_data_dir
  config.train.update({**dict(batch_size=8, eval_batch_size=64, num_steps=12, warmup_steps=2, log_every=1,
                              checkpoint_every=4), **train_overrides})
  return config


@pytest.fixture(scope='module')
def pretrained(tiny_config, builtin_tokenizer, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('pretrained')
  train.train_and_evaluate(small(tiny_config, num_steps=20, eval_every=10, checkpoint_every=10), workdir,
                           devices=jax.devices()[:1])
  return workdir


def test_init_from_a_pretraining_workdir_takes_its_best_checkpoint(pretrained, tiny_config):
  mngr = checkpoint.manager(pretrained, 3)
  scores = {step: mngr.metrics(step)[checkpoint.BEST_METRIC] for step in mngr.all_steps()}
  assert sorted(scores) == [10, 20]  # the held-out MLM accuracy is saved with each evaluated checkpoint
  best = max(scores, key=lambda s: (scores[s], s))
  start = pretrained_lib.load(builtin_config(tiny_config, pretrained))
  params = start.params
  assert f'step {best}' in start.description and start.vocab.endswith('vocab-4000.model')
  state = checkpoint.restore_state(mngr, best, None)
  for part in interop.BACKBONE:
    jax.tree.map(np.testing.assert_array_equal, params[part], jax.device_get(state['params'][part]))


def convert(*args):
  return subprocess.run([sys.executable, '-m', 'albert_jax.convert', *map(str, args)], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


def hf_reference():
  """(torch, transformers, test_interop), or the test is skipped where the [hf] extra is not installed (CI's venv
  of the newest JAX on Python 3.12 has no torch: its PyPI build for Linux is CUDA's, gigabytes)."""
  torch, transformers = pytest.importorskip('torch'), pytest.importorskip('transformers')
  import test_interop
  return torch, transformers, test_interop


def test_a_pretraining_workdir_exports_to_hf_its_best_checkpoint_or_a_given_step(pretrained, tmp_path):
  """A pretraining run's result leaves its workdir: convert and from_pretrained read the workdir itself."""
  _, transformers, reference = hf_reference()
  mngr = checkpoint.manager(pretrained, 3, read_only=True)
  best = mngr.best_step()
  out = convert(f'--input={pretrained}', f'--output={tmp_path / "hf"}', '--to=hf')
  assert out.returncode == 0, out.stderr[-3000:]
  assert f'{pretrained} step {best}, held-out MLM accuracy' in out.stdout
  hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path / 'hf').eval()
  model, params, _ = albert_jax.from_pretrained(pretrained)
  for ours, theirs in zip(reference.our_logits(model, params, *reference.inputs()),
                          reference.hf_logits(hf, *reference.inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  # step=: that checkpoint's parameters, not the best one's.
  other = next(step for step in mngr.all_steps() if step != best)
  _, chosen, _ = albert_jax.from_pretrained(pretrained, step=other)
  saved = jax.device_get(checkpoint.restore_state(mngr, other, None)['params'])
  jax.tree.map(np.testing.assert_array_equal, chosen, saved)
  assert not np.array_equal(chosen['embeddings']['word_embeddings'], params['embeddings']['word_embeddings'])


def test_a_workdir_without_that_step_or_without_checkpoints_is_one_line(pretrained, tmp_path):
  missing = convert(f'--input={pretrained}', f'--output={tmp_path / "out"}', '--to=hf', '--step=7')
  assert missing.returncode == 2, missing.stderr[-3000:]
  assert missing.stderr.strip().splitlines()[-1] == (
      f'error: {pretrained} has no checkpoint of step 7; its checkpoints are of steps 10, 20.')
  empty = tmp_path / 'empty'  # a run that has not saved a checkpoint yet
  (empty / 'checkpoints').mkdir(parents=True)
  (empty / 'config.json').write_text((pretrained / 'config.json').read_text())
  with pytest.raises(CheckpointError, match='without a checkpoint yet'):
    albert_jax.from_pretrained(empty)
  assert not (tmp_path / 'out').exists()
  hf_reference()[2].hf_model(num_hidden_layers=1).save_pretrained(tmp_path / 'hf')
  with pytest.raises(CheckpointError, match='one checkpoint .hf format.: a step can be chosen only among'):
    albert_jax.from_pretrained(tmp_path / 'hf', step=3)


def test_finetune_keeps_the_best_checkpoint_by_dev_and_writes_its_predictions(pretrained, tiny_config,
                                                                             builtin_tokenizer, tmp_path, capsys):
  # Profiled as pretraining is: steps 2-4 traced, cut before step 4's dev score and save.
  result = finetune.finetune_and_evaluate(builtin_config(tiny_config, pretrained, profile_steps=5, profile_from=2),
                                          tmp_path, jax.devices()[:1])
  printed = capsys.readouterr().out
  traced, = (tmp_path / 'profiles' / 'plugins' / 'profile').glob('*/*.xplane.pb')
  assert f'profile of steps 2-4 (host 0): {traced.parent}; open it' in printed
  assert [s['step_num'] for _, name, s in trace_events(str(traced)) if name == 'train'] == [2, 3, 4]
  dev = read_scalars(tmp_path)['eval_accuracy']
  assert sorted(dev) == [4, 8, 12]
  dev_at_12 = dev[12]
  best = max(dev, key=lambda s: (dev[s], s))
  assert result['best_step'] == best and result['eval_accuracy'] == pytest.approx(dev[best], abs=1e-6)
  saved = json.loads((tmp_path / 'result.json').read_text())
  assert saved['eval_accuracy_count'] > 100 and saved['best_step'] == best
  lines = (tmp_path / 'predictions' / 'dev.tsv').read_text().splitlines()
  assert lines[0] == 'index\tprediction' and len(lines) == saved['eval_accuracy_count'] + 1
  assert {line.split('\t')[1] for line in lines[1:]} <= {'0', '1'}
  # The predictions are the best checkpoint's: their accuracy against the dev labels is the reported one.
  task = finetune.make_task(builtin_config(tiny_config))
  dev = task.splits()['dev'][0]
  assert np.mean([line.split('\t')[1] == e.label for line, e in zip(lines[1:], dev)]) == pytest.approx(
      saved['eval_accuracy'])
  # Beside each dev accuracy, the floor: always the most frequent training label, counted here from the examples.
  # (A tie goes to the first of the task's labels.)
  train_labels = [e.label for e in task.splits()['train'][0]]
  majority = np.mean([e.label == max(task.labels, key=train_labels.count) for e in dev])
  assert saved['eval_majority'] == pytest.approx(majority) and 0 < majority < 1
  assert f'step 12 dev: accuracy {dev_at_12:.4f} (majority {majority:.3f})' in printed, printed
  assert f'eval_accuracy {saved["eval_accuracy"]:.4f} (n {len(dev):,}, majority {majority:.3f})' in printed
  # The best model is exported with its head: loaded back, it makes the same predictions; HF's class too.
  model, params, config = albert_jax.from_pretrained(tmp_path / 'best')
  assert config.head.architecture == 'AlbertForSequenceClassification' and config.head.labels == ['0', '1']
  features = task.features(dev[:16], builtin_tokenizer, 'dev')
  ours = model.apply({'params': params}, features['input_ids'], features['segment_ids'], features['input_mask'])
  assert [task.labels[i] for i in np.argmax(ours.logits, -1)] == [line.split('\t')[1] for line in lines[1:17]]
  torch, transformers, _ = hf_reference()
  interop.save_hf(tmp_path / 'hf', params, model.config, config.head)
  hf = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / 'hf').eval()
  with torch.no_grad():
    theirs = hf(input_ids=torch.tensor(features['input_ids'], dtype=torch.long),
                token_type_ids=torch.tensor(features['segment_ids'], dtype=torch.long),
                attention_mask=torch.tensor(features['input_mask'], dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(ours.logits, theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize('task', ['mrpc_tsv', 'stsb_tfds', 'mnli_tsv', 'race_files', 'squad_v1_files',
                                  'squad_v2_files'])
def test_each_task_family_fine_tunes_end_to_end(task, tiny_config, builtin_tokenizer, tmp_path):
  if task == 'stsb_tfds':  # TFDS registers its glue builder only where TensorFlow imports (the [tf] extra)
    pytest.importorskip('tensorflow')
  config = builtin_config(tiny_config, num_steps=2, warmup_steps=1, checkpoint_every=1, eval_batch_size=8)
  config.data.vocab = builtin_tokenizer.path  # TFDS's mock would also stand in for the built-in corpus
  name, kind = task.rsplit('_', 1)
  config.task.name, config.task.data, config.task.test_predictions = name, str(tmp_path / 'data'), True
  config.task.max_seq_length = 32
  if name == 'mrpc':
    header = ['Quality', '#1 ID', '#2 ID', '#1 String', '#2 String']
    for split, rows in (('train', [['1', 'a', 'b', 'It is raining.', 'Rain falls.'], ['0', 'c', 'd', 'x', 'y']]),
                        ('dev', [['1', 'a', 'b', 'The file exists.', 'A file is there.']])):
      write_tsv(tmp_path / 'data' / 'MRPC' / f'{split}.tsv', [header] + rows)
    write_tsv(tmp_path / 'data' / 'MRPC' / 'test.tsv', [['index'] + header[1:], ['0', 'a', 'b', 'One.', 'Two.']])
  elif name == 'mnli':
    mnli_folder(tmp_path / 'data')
  elif name == 'race':
    config.task.update(levels='middle,high', max_qa_length=16)
    race_folder(tmp_path / 'data')
  elif name.startswith('squad'):
    version = 'v2.0' if name == 'squad_v2' else 'v1.1'
    config.task.update(doc_stride=8, max_query_length=8, n_best_size=5, max_answer_length=10, start_n_top=3,
                       end_n_top=3)
    for split in ('train', 'dev'):
      squad_file(tmp_path / 'data' / f'{split}-{version}.json', version='1.1' if version == 'v1.1' else version)
  if kind == 'tfds':
    config.task.data = 'tfds'
  data = lambda: tfds.testing.mock_data(num_examples=6) if kind == 'tfds' else contextlib.nullcontext()
  with data():
    result = finetune.finetune_and_evaluate(config, tmp_path / 'run', jax.devices()[:1])
  expected = {'mrpc': {'eval_accuracy', 'eval_f1', 'eval_accuracy_f1'},
              'stsb': {'eval_pearson', 'eval_spearman', 'eval_pearson_spearman'},
              'mnli': {'eval_accuracy', 'eval_mismatched_accuracy'},
              'race': {'eval_accuracy', 'eval_middle_accuracy', 'eval_high_accuracy'},
              'squad_v1': {'eval_exact_match', 'eval_f1'},
              'squad_v2': {'eval_exact', 'eval_f1', 'eval_HasAns_f1', 'eval_NoAns_f1', 'eval_best_f1'}}[name]
  assert expected <= set(result) and all(f'{k}_count' in result for k in expected)
  # A majority rate for each dev split of a task with class labels; none for regression or spans.
  assert {k for k in result if k.endswith('_majority')} == {
      'mrpc': {'eval_majority'}, 'mnli': {'eval_majority', 'eval_mismatched_majority'},
      'race': {'eval_majority'}}.get(name, set())
  files = {'mrpc': {'dev.tsv', 'MRPC.tsv'}, 'stsb': {'dev.tsv', 'STS-B.tsv'},
           'mnli': {'dev.tsv', 'dev_mismatched.tsv', 'MNLI-m.tsv', 'MNLI-mm.tsv', 'AX.tsv'},
           'race': {'dev.tsv', 'test.tsv'}, 'squad_v1': {'dev_predictions.json'},
           'squad_v2': {'dev_predictions.json', 'dev_null_odds.json'}}[name]
  assert {p.name for p in (tmp_path / 'run' / 'predictions').iterdir() if not p.name.startswith('outputs-')} == files
  # Its raw outputs are kept for ensembles: one member combined alone, or twice with itself, scores as it did.
  from albert_jax import ensemble
  for members in ([tmp_path / 'run'], [tmp_path / 'run'] * 2):
    with data():  # the ensemble reads the task's data as its members did
      combined = ensemble.ensemble([str(m) for m in members], len(members), str(tmp_path / f'ensemble{len(members)}'))
    for key in expected:
      assert combined[key] == pytest.approx(result[key], abs=1e-9), (key, len(members))
    assert {p.name for p in (tmp_path / f'ensemble{len(members)}' / 'predictions').iterdir()} == files


def test_bad_setups_fail_before_training(tiny_config, builtin_tokenizer, tmp_path):
  config = builtin_config(tiny_config)
  config.data.vocab = builtin_tokenizer.path
  config.model.vocab_size = 3000  # the model (init none) and the 4000-piece vocabulary disagree
  with pytest.raises(VocabError, match='4000 pieces but model.vocab_size is 3000'):
    finetune.finetune_and_evaluate(config, tmp_path / 'a', jax.devices()[:1])
  config = builtin_config(tiny_config)
  config.task.name = 'sst3'
  with pytest.raises(ConfigError, match="'sst3' is not a task; known: cola, sst2"):
    finetune.finetune_and_evaluate(config, tmp_path / 'b', jax.devices()[:1])
  config = builtin_config(tiny_config)
  config.task.max_seq_length = 128
  with pytest.raises(ConfigError, match='at most the model.s max_position_embeddings 64'):
    finetune.finetune_and_evaluate(config, tmp_path / 'c', jax.devices()[:1])
  with pytest.raises(CheckpointError, match='no checkpoint found'):
    finetune.finetune_and_evaluate(builtin_config(tiny_config, tmp_path / 'nothing'), tmp_path / 'd')
  finetuned = tmp_path / 'finetuned'  # a fine-tuning workdir is not a pretraining one
  (finetuned / 'checkpoints').mkdir(parents=True)
  (finetuned / 'config.json').write_text(json.dumps({'init': 'none', 'task': {'name': 'builtin'}}))
  with pytest.raises(ConfigError, match='is a fine-tuning workdir; its best model is .*best: use that'):
    finetune.finetune_and_evaluate(builtin_config(tiny_config, finetuned), tmp_path / 'e')
  for workdir in 'abcde':
    assert not (tmp_path / workdir / 'checkpoints').exists()


@pytest.mark.parametrize('task', ['cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte', 'wnli'])
def test_the_recipes_fine_tuning_config_fits_its_model_for_every_glue_task(task):
  original = load_config(f'configs/finetune/{task}.py')
  config = load_config('configs/finetune/wiki_books_cpu_hour.py', task)
  recipe = ModelConfig.from_config(load_config('configs/wiki_books_cpu_hour.py').model)
  validate_finetune(config, recipe)  # the sequence fits the positions the recipe pretrained
  assert config.task.name == task and config.train.batch_size == original.train.batch_size
  assert config.train.num_steps == min(original.train.num_steps, 3000)
  assert 0 < config.train.warmup_steps < config.train.num_steps and not config.task.test_predictions
  # --config.init=none is the control: random weights of the recipe's shape, read with its vocabulary.
  assert ModelConfig.from_config(config.model) == dataclasses.replace(
      recipe, **{k: getattr(ModelConfig.from_config(config.model), k) for k in RUNTIME_FIELDS})
  assert config.data.vocab == '/tmp/albert_wiki_books/vocab-30k.model'


def test_the_recipes_fine_tuning_config_refuses_a_task_it_does_not_know_in_one_line():
  out = subprocess.run([sys.executable, '-m', 'albert_jax.finetune',
                        '--config=configs/finetune/wiki_books_cpu_hour.py:sst3', '--workdir=unused'],
                       cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 2 and out.stderr.strip() == (
      'error: configs/finetune/wiki_books_cpu_hour.py:sst3: not a GLUE task; name one of cola, sst2, mrpc, stsb, '
      'qqp, mnli, qnli, rte, wnli after the colon.')


def test_a_training_subset_is_seeded_shared_across_inits_and_keeps_the_label_mix(tmp_path):
  glue = ROOT.parent / 'shared' / 'data' / 'glue'
  if not (glue / 'SST-2').is_dir():
    pytest.skip(f'the shared GLUE files are not at {glue}')
  config = load_config('configs/finetune/sst2.py')
  config.task.data, config.task.test_predictions = str(glue), False
  examples = finetune.make_task(config).splits()['train'][0]
  assert len(examples) == 67_349  # GLUE's SST-2 train
  subset = finetune.train_subset(examples, 2000, 0, 'sst2')
  assert len(subset) == 2000 and len({e.guid for e in subset}) == 2000
  assert [e.guid for e in subset] == [e.guid for e in finetune.train_subset(examples, 2000, 0, 'sst2')]
  assert len({e.guid for e in subset} & {e.guid for e in finetune.train_subset(examples, 2000, 1, 'sst2')}) < 200
  # A uniform draw: the positive share within 4 binomial standard errors of the whole file's.
  whole = np.mean([e.label == '1' for e in examples])
  assert abs(np.mean([e.label == '1' for e in subset]) - whole) < 4 * np.sqrt(whole * (1 - whole) / 2000)
  assert finetune.train_subset(examples, 0, 3, 'sst2') is examples
  with pytest.raises(ConfigError, match='train_examples 70,000 is more than the 67,349 sst2 training examples'):
    finetune.train_subset(examples, 70_000, 0, 'sst2')


# --- interrupted runs, as separate processes ------------------------------------------------------------------------

def run_cli(tiny_config, workdir):
  args = [sys.executable, '-m', 'albert_jax.finetune', '--config=configs/finetune/builtin.py', '--config.init=none',
          f'--workdir={workdir}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
          '--config.train.batch_size=8', '--config.train.num_steps=24', '--config.train.log_every=1',
          '--config.train.warmup_steps=4', '--config.train.checkpoint_every=8', '--config.train.eval_batch_size=128']
  env = {**os.environ, 'XLA_FLAGS': xla_flags(2)}
  return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope='module')
def uninterrupted(tiny_config, builtin_tokenizer, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('whole')
  whole = run_cli(tiny_config, workdir)
  out, err = whole.communicate(timeout=600)
  assert whole.returncode == 0, err[-3000:]
  return workdir


@pytest.mark.parametrize('how', [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_finetuning_resumes_identically(how, uninterrupted, tiny_config, tmp_path):
  interrupted = run_cli(tiny_config, tmp_path / 'killed')
  deadline = time.time() + 300
  while not (tmp_path / 'killed' / 'checkpoints' / '8').exists():
    assert interrupted.poll() is None and time.time() < deadline, 'the run ended before it could be interrupted'
    time.sleep(0.05)
  interrupted.send_signal(how)
  out, err = interrupted.communicate(timeout=120)
  if how == signal.SIGTERM:  # a checkpoint at the step it stopped, and status 42: start it again to resume
    assert interrupted.returncode == 42 and 'SIGTERM at step' in out, err[-3000:]
  resumed = run_cli(tiny_config, tmp_path / 'killed')
  out, err = resumed.communicate(timeout=600)
  assert resumed.returncode == 0, err[-3000:]
  assert 'resumed from step' in out
  expected, got = read_scalars(uninterrupted), read_scalars(tmp_path / 'killed')
  np.testing.assert_array_equal([got['loss'][s] for s in range(1, 25)], [expected['loss'][s] for s in range(1, 25)])
  assert json.loads((tmp_path / 'killed' / 'result.json').read_text()) == json.loads(
      (uninterrupted / 'result.json').read_text())
