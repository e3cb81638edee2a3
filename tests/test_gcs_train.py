"""Pretraining with every path in a bucket (gs://), against a real GCS server on 127.0.0.1 (conftest's gcs_server):
the pod command killed and resumed from a bucket, a damaged checkpoint there, TensorBoard files and evaluation read
back from it, two hosts sharing a bucket workdir (and two that share nothing, stopped), and the bad input only a
bucket has. The code under test is the local code: only the environment points it at the server."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from albert_jax import paths, train
from albert_jax.data import vocab as vocab_lib
from albert_jax.data.tokenizer import Tokenizer
from conftest import ROOT, xla_flags
from test_train import read_scalars, small, with_shards

STEPS = 60


def pretrain(tiny_config, workdir, *extra, cwd, devices=2, env=None):
  """The tiny pretraining's command line (docs/pods.md's pod command, shrunk), started in `cwd`."""
  args = [sys.executable, '-m', 'albert_jax.train', f'--config={ROOT}/configs/tiny.py', f'--workdir={workdir}',
          f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}', '--config.data.max_seq_length=64',
          '--config.model.max_position_embeddings=64', '--config.train.batch_size=8', '--config.train.log_every=1',
          '--config.train.warmup_steps=5', '--config.train.eval_every=1000', '--config.train.eval_batches=1',
          '--config.train.checkpoint_every=10', '--config.train.fill_mask_text=', '--config.train.fill_mask_word=',
          *extra]
  env = {**(os.environ if env is None else env), 'PYTHONPATH': str(ROOT),
         'XLA_FLAGS': xla_flags(devices)}
  return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=600):
  out, err = process.communicate(timeout=timeout)
  assert process.returncode == 0, err[-3000:]
  return out, err


def scalars_in(workdir, local_copy):
  """TensorBoard's own reader on the event files the run wrote to the bucket (copied down as a user would)."""
  paths.copy_tree(f'{workdir}/tensorboard', local_copy / 'tensorboard')
  return read_scalars(local_copy)


@pytest.fixture(scope='module')
def inputs(tiny_config, builtin_tokenizer, tmp_path_factory):
  """A `lines:` corpus and the vocabulary, on local disk; tests copy them into their bucket."""
  folder = tmp_path_factory.mktemp('inputs')
  docs = [' '.join(f'Sentence {d}.{i} of document {d} says {"x" * (d % 7)} things about {i * d % 13} ducks.'
                   for i in range(3 + d % 4)) for d in range(160)]
  (folder / 'corpus').mkdir()
  for part in range(2):
    (folder / 'corpus' / f'part-{part}.txt').write_text('\n\n'.join(d.replace('. ', '.\n') for d in docs[part::2]))
  vocab = vocab_lib.builtin_vocab_path(tiny_config.data.tfds_data_dir, tiny_config.model.vocab_size)
  (folder / 'vocab.model').write_bytes(vocab.read_bytes())
  return folder


def in_bucket(inputs, bucket):
  paths.copy_tree(inputs, f'{bucket}/inputs')
  return [f'--config.data.vocab={bucket}/inputs/vocab.model', f'--config.data.source=lines:{bucket}/inputs/corpus/*.txt']


@pytest.fixture(scope='module')
def local_workdir(inputs, tiny_config, tmp_path_factory):
  """The same run with every path local, uninterrupted: the trajectory and held-out figures the bucket runs must
  reproduce."""
  workdir = tmp_path_factory.mktemp('local')
  finish(pretrain(tiny_config, workdir, f'--config.train.num_steps={STEPS}', f'--config.data.vocab={inputs}/vocab.model',
                  f'--config.data.source=lines:{inputs}/corpus/*.txt', cwd=workdir))
  return workdir


@pytest.fixture(scope='module')
def local_run(local_workdir):
  return read_scalars(local_workdir)['loss']


def test_pod_command_in_a_bucket_killed_damaged_and_resumed_equals_the_local_run(
    local_run, inputs, tiny_config, gcs_server, bucket, tmp_path):
  workdir = f'{bucket}/runs/tiny'
  args = (f'--config.train.num_steps={STEPS}', *in_bucket(inputs, bucket))
  killed = pretrain(tiny_config, workdir, *args, cwd=tmp_path)
  deadline = time.time() + 300
  while not paths.path(f'{workdir}/checkpoints/20/commit_success.txt').exists():  # orbax's mark of a whole one
    assert killed.poll() is None and time.time() < deadline, 'the run ended before it could be killed'
    time.sleep(0.05)
  killed.send_signal(signal.SIGKILL)
  killed.communicate(timeout=60)
  # The newest whole checkpoint: 20, or a later one where a busy machine let the run go on before the kill landed.
  step = max(int(f.name) for f in paths.path(f'{workdir}/checkpoints').iterdir()
             if f.name.isdigit() and (f / 'commit_success.txt').exists())

  # That checkpoint damaged in the bucket as a preempted copy might leave it: its array files cut short. Only the
  # large files under d/: most small ones are b-tree nodes that a later commit of the same save superseded, which no
  # restore reads, and how the arrays are split among files depends on how the writes were batched (one run: five
  # files of 17 kB to 2.3 MB; another: the third largest was 1.2 kB). The largest always holds array data.
  newest = paths.path(f'{workdir}/checkpoints/{step}')
  contents = {f: (newest / f).read_bytes() for f in paths.files_under(newest) if '/ocdbt.process_0/d/' in f}
  data_files = [f for f in contents if len(contents[f]) > 10_000]
  assert data_files, {f: len(b) for f, b in contents.items()}
  for name in data_files:
    (newest / name).write_bytes(contents[name][:10])

  out, err = finish(pretrain(tiny_config, workdir, *args, cwd=tmp_path))
  set_aside = [f for f in paths.path(f'{workdir}/checkpoints').iterdir() if f.name.startswith(f'{step}.damaged-')]
  assert len(set_aside) == 1, out
  line, = [line for line in out.splitlines() if 'damaged' in line]
  assert line == f'checkpoint {step} is damaged (a file is truncated in {line.split(" in ")[1].split(")")[0]}): ' \
                 f'moved to {set_aside[0]}; resuming from step {step - 10}', out
  assert f'resumed from step {step - 10}' in out and 'Traceback' not in err and 'Event loop' not in err, err[-3000:]

  # The whole trajectory, read back from the bucket's TensorBoard files, is the local run's.
  losses = scalars_in(workdir, tmp_path / 'read-back')['loss']
  np.testing.assert_array_equal([losses[s] for s in range(1, STEPS + 1)], [local_run[s] for s in range(1, STEPS + 1)])
  written = {name for name in paths.files_under(workdir) if '/' not in name}
  assert {'config.json', 'run.json', 'result.json'} <= written, written

  # Evaluation reads the same workdir.
  evaluated = subprocess.run([sys.executable, '-m', 'albert_jax.evaluate', f'--config={ROOT}/configs/tiny.py',
                              f'--workdir={workdir}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
                              '--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64',
                              '--config.train.batch_size=8', '--config.train.eval_batches=1', *args[1:]],
                             cwd=tmp_path, env={**os.environ, 'PYTHONPATH': str(ROOT)}, capture_output=True,
                             text=True, timeout=300)
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  result = json.loads(paths.path(f'{workdir}/result.json').read_text())
  evaluation = json.loads(paths.path(f'{workdir}/eval-sop.json').read_text())
  assert evaluation['step'] == STEPS and evaluation['eval_mlm_accuracy'] == result['eval_mlm_accuracy']
  assert f'eval_mlm_accuracy {result["eval_mlm_accuracy"]:.4f}' in evaluated.stdout

  # Nothing landed on local disk under a folder named after the URL.
  assert not [p for p in tmp_path.rglob('gs:*')] and not (ROOT / 'gs:').exists()


def committed(workdir) -> list:
  """The checkpoint steps orbax has committed in a bucket (commit_success.txt marks one whole)."""
  return sorted(int(f.name) for f in paths.path(f'{workdir}/checkpoints').iterdir()
                if f.name.isdigit() and (f / 'commit_success.txt').exists())


def test_a_run_through_failing_storage_killed_mid_save_resumes_to_the_local_runs_figures(
    local_workdir, inputs, tiny_config, faulty_gcs, bucket, tmp_path):
  """Every reader and writer of a run (the corpus and its index, the vocabulary, config.json and run.json,
  checkpoints through tensorstore, TensorBoard files, the goodput record, result.json) through a server failing 12%
  of requests, seeded: 503, 429, connections dropped before or after the request is done, slow answers. The clients'
  retries hold; the run, killed while a checkpoint is being written, resumes from the newest whole one, and ends
  with the local uninterrupted run's trajectory and held-out figures."""
  workdir = f'{bucket}/runs/faults'
  args = (f'--config.train.num_steps={STEPS}', '--config.train.checkpoint_every=20', *in_bucket(inputs, bucket))
  killed = pretrain(tiny_config, workdir, *args, cwd=tmp_path, env=faulty_gcs.env)
  deadline = time.time() + 600
  while not (paths.path(f'{workdir}/checkpoints/40').exists() and 20 in committed(workdir)):
    assert killed.poll() is None and time.time() < deadline, killed.communicate()[1][-3000:]
    time.sleep(0.05)
  killed.send_signal(signal.SIGKILL)  # checkpoint 40 is being written (or just whole: then it is the newest)
  killed.communicate(timeout=60)
  newest = committed(workdir)[-1]
  half_written = not (paths.path(f'{workdir}/checkpoints/40') / 'commit_success.txt').exists()

  out, err = finish(pretrain(tiny_config, workdir, *args, cwd=tmp_path, env=faulty_gcs.env))
  assert f'resumed from step {newest}' in out and 'Traceback' not in err, err[-3000:]
  if half_written:  # never taken for a checkpoint, and cleaned away when the run wrote step 40 again
    assert newest == 20 and 40 in committed(workdir)

  faults = faulty_gcs.report()
  assert faults['faults'] >= 0.10 * faults['requests'] and faults['requests'] > 500, faults
  assert all(faults[kind] > 0 for kind in ('503', '429', 'drop', 'lost_answer', 'slow')), faults
  assert faults['by_method']['POST']['faults'] > 5 and faults['by_method']['GET']['faults'] > 5, faults

  # What it wrote is all there, and the figures are the local run's.
  written = {name for name in paths.files_under(workdir) if '/' not in name}
  assert {'config.json', 'run.json', 'result.json', 'goodput.json'} <= written, written
  assert len(paths.listing(f'{bucket}/inputs/corpus/.albert_index/lines-v1/part-*.json')) == 1  # one host's part
  losses, local = scalars_in(workdir, tmp_path / 'read-back')['loss'], read_scalars(local_workdir)['loss']
  np.testing.assert_array_equal([losses[s] for s in range(1, STEPS + 1)], [local[s] for s in range(1, STEPS + 1)])
  result = json.loads(paths.path(f'{workdir}/result.json').read_text())
  assert result == json.loads((local_workdir / 'result.json').read_text())
  attempts = json.loads(paths.path(f'{workdir}/goodput.json').read_text())['attempts']
  assert [a['first_step'] for a in attempts] == [0, newest] and attempts[-1]['last_step'] == STEPS


def test_storage_failing_past_the_clients_retries_ends_the_run_with_status_42(tiny_config, builtin_tokenizer,
                                                                              faulty_gcs, bucket, tmp_path):
  """An outage of writes that outlasts gcsfs's six tries (about 30 s of backoff): the run stops with one line and
  the restartable status, not a traceback or the bad-input status."""
  faulty_gcs.report(rate=1.0, methods='POST,PUT,PATCH,DELETE')
  run = pretrain(tiny_config, f'{bucket}/runs/outage', '--config.train.num_steps=20', cwd=tmp_path,
                 env=faulty_gcs.env)
  out, err = run.communicate(timeout=300)
  assert run.returncode == 42, err[-3000:]
  last = err.rstrip().splitlines()[-1]
  assert last.startswith('error: ') and 'exit status 42: run the same command again' in last, err[-3000:]
  assert 'Traceback' not in err and 'parameters, mesh' not in out


def two_hosts(tiny_config, workdirs, *extra, cwd):
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  distributed = ['--distributed', f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2']
  hosts = [pretrain(tiny_config, workdir, *extra, *distributed, f'--process_id={i}', cwd=cwd)
           for i, workdir in enumerate(workdirs)]
  return [(host, *host.communicate(timeout=600)) for host in hosts]


def test_two_hosts_share_a_workdir_in_a_bucket_train_as_one_device_and_resume_on_one(inputs, tiny_config, bucket,
                                                                                      tmp_path, capsys):
  """Two processes as two hosts of a pod, one workdir in a bucket: they index the corpus together, once; host 0
  reports and writes each checkpoint once, with both data shards' positions; the losses equal one device's serving
  both shards (which shows that each host read its own); a second launch resumes the run on one host."""
  workdir = f'{bucket}/runs/pod'
  data = in_bucket(inputs, bucket)
  ran = two_hosts(tiny_config, [workdir, workdir], '--config.train.num_steps=6', *data,
                  '--config.train.checkpoint_every=3', cwd=tmp_path)
  for host, out, err in ran:
    assert host.returncode == 0, err[-3000:]
  assert "mesh {'data': 4, 'fsdp': 1, 'model': 1}, 2 host(s)" in ran[0][1]
  assert '[host 0/2] step 6/6' in ran[0][1] and 'step 6/6' not in ran[1][1]
  # The corpus indexed once, by both hosts (a file each, a part each, beside it in the bucket).
  assert '2 of 2 files (0 MB) have no index entry' in ran[0][1]
  assert len(paths.listing(f'{bucket}/inputs/corpus/.albert_index/lines-v1/part-*.json')) == 2
  pod = scalars_in(workdir, tmp_path / 'read-back')['loss']
  data_state = json.loads(paths.path(f'{workdir}/checkpoints/6/data/metadata').read_text())
  assert data_state['step'] == 6 and data_state['host_count'] == 2 and len(data_state['shards']) == 2
  assert not [p for p in paths.files_under(workdir) if '.host0-marker' in p]  # the check leaves nothing behind

  # One device serving both hosts' data shards: the same global batches.
  assert json.loads(paths.path(f'{workdir}/config.json').read_text())['data']['shards'] == 2  # CPUs: one per host
  config = small(tiny_config, warmup_steps=5, eval_every=1000, checkpoint_every=3)
  config.data.update(dict(override[len('--config.data.'):].split('=', 1) for override in data))
  train.train_and_evaluate(with_shards(config, 2), tmp_path / 'one', devices=jax.devices()[:1])
  one = read_scalars(tmp_path / 'one')['loss']
  np.testing.assert_allclose([pod[s] for s in range(1, 7)], [one[s] for s in range(1, 7)], rtol=2e-5)

  # The pod's run continued on one host, with the same settings: its two data shards served here, its index read.
  capsys.readouterr()
  config.train.update(num_steps=9, profile_steps=2, profile_from=7)  # the first step of a start is never traced
  train.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
  out = capsys.readouterr().out
  assert 'resuming step 6 on 1 host(s) (was 2): global batch 8 per step; the data stream continues at step 6' in out
  # The trace of step 8 alone, copied into the bucket.
  traced, = paths.listing(f'{workdir}/profiles/plugins/profile/steps_8-8/*.xplane.pb')
  assert f'profile of step 8 (host 0): {traced.name.rsplit("/", 1)[0]}; open it' in out
  assert 'have no index entry' not in out
  checkpoints = sorted(int(p.name) for p in paths.path(f'{workdir}/checkpoints').iterdir() if p.name.isdigit())
  assert checkpoints == [3, 6, 9]
  data_state = json.loads(paths.path(f'{workdir}/checkpoints/9/data/metadata').read_text())
  assert data_state['host_count'] == 1 and data_state['shard_count'] == 2


def test_hosts_that_do_not_share_the_workdir_all_stop_before_compiling(tiny_config, builtin_tokenizer, tmp_path):
  """Each worker of a pod with a local workdir: host 1 cannot see what host 0 writes in its own folder."""
  workdirs = [tmp_path / 'run', tmp_path / 'elsewhere' / 'run']
  ran = two_hosts(tiny_config, workdirs, '--config.train.num_steps=6', cwd=tmp_path)
  for workdir, (host, out, err) in zip(workdirs, ran):
    assert host.returncode == 2, err[-3000:]
    assert err.rstrip().splitlines()[-1].startswith(f'error: --workdir {workdir} is not one folder shared by all '
                                                    f'hosts: host(s) 1 of 2 do not see'), err[-3000:]
    assert 'Use a gs:// workdir' in err and 'parameters, mesh' not in out and 'Traceback' not in err


def no_credentials(home):
  """This process's environment without the GCS server and without any Google credentials (nor a metadata
  server: the one a TPU VM has is pointed at a closed port)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(('STORAGE_EMULATOR', 'CLOUD_STORAGE_EMULATOR',
                                                                   'TENSORSTORE_GCS', 'GOOGLE_', 'FSSPEC_GCS'))}
  return {**env, 'HOME': str(home), 'CLOUDSDK_CONFIG': str(home / 'gcloud'), 'GCE_METADATA_HOST': '127.0.0.1:9',
          'GCE_METADATA_IP': '127.0.0.1:9'}


BAD_INPUT = {
    'a bucket that does not exist': (
        'gs://no-such-bucket-here/run', [], None,
        'bucket gs://no-such-bucket-here does not exist (or this machine\'s account cannot see it): create it with '
        'gcloud storage buckets create gs://no-such-bucket-here'),
    'no credentials': (
        '{bucket}/run', [], no_credentials,
        'no Google Cloud credentials on this machine. On a TPU VM its service account provides them; elsewhere run '
        'gcloud auth application-default login'),
    'a vocabulary that is not there': (
        '{bucket}/run', ['--config.data.vocab={bucket}/missing.model'], None, '{bucket}/missing.model'),
    'a corpus glob that matches nothing': (
        '{bucket}/run', ['--config.data.source=lines:{bucket}/corpus/*.txt'], None,
        'lines:{bucket}/corpus/*.txt'),
}


@pytest.mark.parametrize('case', list(BAD_INPUT))
def test_bad_input_in_a_bucket_stops_early_with_one_line(case, tiny_config, builtin_tokenizer, bucket, tmp_path):
  workdir, args, environment, message = BAD_INPUT[case]
  process = pretrain(tiny_config, workdir.format(bucket=bucket), '--config.train.num_steps=20',
                     *(a.format(bucket=bucket) for a in args), cwd=tmp_path,
                     env=environment(tmp_path) if environment else None)
  out, err = process.communicate(timeout=300)
  assert process.returncode == 2, err[-3000:]
  last = err.rstrip().splitlines()[-1]
  assert last.startswith('error: ') and message.format(bucket=bucket) in last, err[-3000:]
  assert 'Traceback' not in err and 'parameters, mesh' not in out
  assert not list(tmp_path.rglob('gs:*'))


def test_a_vocabulary_trained_from_a_bucket_into_a_bucket_equals_the_local_one(inputs, bucket, tmp_path):
  def train_vocab(source, prefix):
    out = subprocess.run([sys.executable, '-m', 'albert_jax.data.vocab', f'--input=lines:{source}/corpus/*.txt',
                          '--vocab_size=60', f'--output={prefix}'], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f'wrote {prefix}.model: 60 pieces' in out.stdout
  in_bucket(inputs, bucket)
  train_vocab(f'{bucket}/inputs', f'{bucket}/vocab/corpus-60')
  train_vocab(inputs, tmp_path / 'corpus-60')
  # SentencePiece is seeded: the same pieces and scores (the .model also records the folder it was trained in).
  assert paths.path(f'{bucket}/vocab/corpus-60.vocab').read_bytes() == (tmp_path / 'corpus-60.vocab').read_bytes()
  sentence = ['Sentence 3.1 of document 3 says xxx things about 3 ducks.']
  assert (Tokenizer(f'{bucket}/vocab/corpus-60.model').encode(sentence)[0].tolist()
          == Tokenizer(tmp_path / 'corpus-60.model').encode(sentence)[0].tolist())
  assert not list(tmp_path.rglob('gs:*'))


def test_the_built_in_corpus_with_a_tfds_data_dir_in_a_bucket(tiny_config, builtin_tokenizer, bucket, tmp_path,
                                                              monkeypatch):
  """The pod command sets TFDS_DATA_DIR=gs://...: ArrayRecord cannot be written there, so the built-in corpus is
  read from the bucket if it was copied there, else made in TFDS's local default folder (~/tensorflow_datasets)."""
  from albert_jax.data import sources
  prepared = sources.builtin_builder(tiny_config.data.tfds_data_dir)
  home = tmp_path / 'home'
  paths.copy_tree(tiny_config.data.tfds_data_dir, home / 'tensorflow_datasets')  # as if prepared there before
  monkeypatch.setenv('HOME', str(home))
  local = sources.builtin_builder(f'{bucket}/tfds')  # (TFDS_DATA_DIR, read when TFDS is imported, takes this path)
  assert str(local.data_dir).startswith(str(home / 'tensorflow_datasets'))
  assert local.info.splits['train'].num_examples == prepared.info.splits['train'].num_examples
  paths.copy_tree(prepared.data_dir, f'{bucket}/tfds/{paths.path(prepared.data_dir).relative_to(tiny_config.data.tfds_data_dir)}')
  in_bucket = sources.builtin_builder(f'{bucket}/tfds')
  assert str(in_bucket.data_dir).startswith(f'{bucket}/tfds/')
  assert in_bucket.info.splits['train'].num_examples == prepared.info.splits['train'].num_examples
