"""Fine-tuning, checkpoint interop and the downstream readers with every path in a bucket (gs://), against a real
GCS server on 127.0.0.1 (conftest's gcs_server): the same code as for local paths, nothing written under a local
folder named 'gs:', and a missing bucket stopped with one line."""
import json
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest
import torch
import transformers

import albert_jax
from albert_jax import finetune, interop, paths, train
from albert_jax.downstream import squad_eval
from albert_jax.model import ModelConfig
from conftest import ROOT, xla_flags
from test_downstream_data import config_for, mnli_folder, race_folder
from test_interop import hf_logits, hf_model, inputs, our_logits
from test_squad import squad_file
from test_train import small


def cli(module, *args, cwd):
  """`python -m albert_jax.MODULE ARGS` in `cwd`, with the GCS server's environment (inherited)."""
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': xla_flags(1)}
  return subprocess.run([sys.executable, '-m', f'albert_jax.{module}', *map(str, args)], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300)


@pytest.fixture(scope='module')
def pretrained(gcs_server, tiny_config, builtin_tokenizer, tmp_path_factory):
  """A tiny pretraining run's workdir: checkpoints at steps 2 and 4, each with its held-out MLM accuracy. (After
  the server is up: epath picks its gs:// backend at its first use in a process, from the environment then.)"""
  workdir = tmp_path_factory.mktemp('pretrained')
  train.train_and_evaluate(small(tiny_config, num_steps=4, eval_every=2, checkpoint_every=2), workdir,
                           devices=jax.devices()[:1])
  return workdir


@pytest.fixture(scope='module')
def pretrained_in_bucket(pretrained, gcs_server):
  url = f'{gcs_server.new_bucket()}/runs/pretrained'
  paths.copy_tree(pretrained, url)
  return url


def test_finetune_with_init_and_workdir_in_a_bucket(pretrained_in_bucket, tiny_config, builtin_tokenizer, bucket,
                                                    tmp_path):
  workdir = f'{bucket}/finetune/builtin'
  out = cli('finetune', f'--config={ROOT}/configs/finetune/builtin.py', f'--config.init={pretrained_in_bucket}',
            f'--workdir={workdir}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
            '--config.train.batch_size=8', '--config.train.num_steps=4', '--config.train.warmup_steps=1',
            '--config.train.log_every=1', '--config.train.checkpoint_every=2', cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  assert f'starting from {pretrained_in_bucket} step' in out.stdout
  result = json.loads(paths.path(f'{workdir}/result.json').read_text())
  assert result['best_step'] in (2, 4) and result['eval_accuracy_count'] > 100
  files = set(paths.files_under(workdir))
  assert {'config.json', 'predictions/dev.tsv'} <= files
  assert any(f.startswith('tensorboard/events.out.tfevents.') for f in files)
  assert any(f.startswith(f'checkpoints/{result["best_step"]}/') for f in files)
  # The best model, read from the bucket: its dev predictions are the ones written there.
  model, params, config = albert_jax.from_pretrained(f'{workdir}/best')
  assert config.head.architecture == 'AlbertForSequenceClassification'
  task = finetune.make_task(ml_collections.ConfigDict(json.loads(paths.path(f'{workdir}/config.json').read_text())))
  dev = task.splits()['dev'][0][:16]
  features = task.features(dev, builtin_tokenizer, 'dev')  # the pretraining run's vocabulary
  logits = model.apply({'params': params}, features['input_ids'], features['segment_ids'],
                       features['input_mask']).logits
  lines = paths.path(f'{workdir}/predictions/dev.tsv').read_text().splitlines()[1:17]
  assert [task.labels[i] for i in np.argmax(logits, -1)] == [line.split('\t')[1] for line in lines]
  assert not [name for name in os.listdir(tmp_path) if name.startswith('gs:')]
  assert not [name for name in os.listdir(ROOT) if name.startswith('gs:')]


def test_convert_a_workdir_in_a_bucket_to_hf_in_a_bucket(pretrained, pretrained_in_bucket, bucket, tmp_path):
  out = cli('convert', f'--input={pretrained_in_bucket}', f'--output={bucket}/hf', '--to=hf', '--step=2',
            cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  assert f'{pretrained_in_bucket} step 2' in out.stdout
  with paths.local_copy(f'{bucket}/hf') as local:
    hf = transformers.AlbertForPreTraining.from_pretrained(local).eval()
  model, params, _ = albert_jax.from_pretrained(pretrained, step=2)
  for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  again = cli('convert', f'--input={pretrained_in_bucket}', f'--output={bucket}/hf', '--to=hf', cwd=tmp_path)
  assert again.returncode != 0 and 'is not empty' in again.stderr
  assert not [name for name in os.listdir(tmp_path) if name.startswith('gs:')]


def test_convert_to_a_missing_bucket_is_one_line(gcs_server, tmp_path):
  # Checked before the input is read: the input need not exist.
  out = cli('convert', f'--input={tmp_path}/run', '--output=gs://no-such-bucket-here/hf', '--to=hf', cwd=tmp_path)
  assert out.returncode == 2, out.stderr[-3000:]
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: bucket gs://no-such-bucket-here does not exist'), lines


def test_every_checkpoint_format_reads_and_writes_in_a_bucket(bucket, tmp_path):
  hf = hf_model(seed=5, num_hidden_layers=2, num_hidden_groups=2)
  hf.save_pretrained(tmp_path / 'hf')
  (tmp_path / 'bin').mkdir()  # the older pickled layout, as in test_interop
  torch.save(hf.state_dict(), tmp_path / 'bin' / 'pytorch_model.bin')
  (tmp_path / 'bin' / 'config.json').write_text((tmp_path / 'hf' / 'config.json').read_text())
  paths.copy_tree(tmp_path, bucket)
  expected = hf_logits(hf, *inputs())

  def assert_matches_hf(name):
    model, params, config = albert_jax.from_pretrained(name)
    for ours, theirs in zip(our_logits(model, params, *inputs()), expected):
      np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0, err_msg=name)
    return params, config

  params, config = assert_matches_hf(f'{bucket}/hf')
  assert_matches_hf(f'{bucket}/bin')
  cfg = ModelConfig.from_config(config.model)
  interop.save_tf(f'{bucket}/tf', params, cfg)
  interop.save(f'{bucket}/ours', params, config)
  interop.save_hf(f'{bucket}/hf_again', params, cfg)
  for name in ('tf', 'tf/model.ckpt', 'ours'):
    assert_matches_hf(f'{bucket}/{name}')
  with paths.local_copy(f'{bucket}/hf_again') as local:
    again = transformers.AlbertForPreTraining.from_pretrained(local).state_dict()
  for name, tensor in hf.state_dict().items():
    assert torch.equal(again[name], tensor), name


def test_downstream_data_in_a_bucket_reads_as_from_a_disk(bucket, tmp_path):
  mnli_folder(tmp_path / 'glue')
  race_folder(tmp_path / 'race')
  squad_file(tmp_path / 'squad' / 'train-v2.0.json')
  squad_file(tmp_path / 'squad' / 'dev-v2.0.json')
  paths.copy_tree(tmp_path, bucket)
  for name, folder, task in [('mnli', 'glue', {}), ('race', 'race', dict(levels='middle,high', max_qa_length=6)),
                             ('squad_v2', 'squad', dict(doc_stride=8, max_query_length=8, n_best_size=5,
                                                         max_answer_length=30))]:
    local = finetune.make_task(config_for(name, tmp_path / folder, **task)).splits()
    remote = finetune.make_task(config_for(name, f'{bucket}/{folder}', **task)).splits()
    assert remote == local, name
  # squad_eval reads its files from the bucket too.
  paths.path(f'{bucket}/predictions.json').write_text(json.dumps({'a': '1903', 'b': 'Curie', 'c': ''}))
  out = subprocess.run([sys.executable, '-m', 'albert_jax.downstream.squad_eval', f'{bucket}/squad/dev-v2.0.json',
                        f'{bucket}/predictions.json'], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, 'PYTHONPATH': str(ROOT)})
  assert out.returncode == 0, out.stderr[-3000:]
  data = json.loads((tmp_path / 'squad' / 'dev-v2.0.json').read_text())
  assert json.loads(out.stdout) == squad_eval.evaluate_v2(data['data'], {'a': '1903', 'b': 'Curie', 'c': ''})
