"""launch.tpu on a local pod (tests/local_pod.py: each worker a namespace of this machine, gcloud a stand-in that
runs the ssh commands there), training for real over 127.0.0.1 with its workdir in a Cloud Storage server that fails
a tenth of its requests; and chaos on it: a worker's training killed (the out-of-memory killer's way), worker 0
lost whole, a worker frozen (SIGSTOP). babysit restarts each; the run ends with the figures of an unbroken one,
every checkpoint restorable, and a goodput record that counts each restart."""
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from albert_jax import paths
from conftest import ROOT, xla_flags
from local_pod import Pod
from test_gcs_train import in_bucket, inputs, scalars_in  # noqa: F401  (inputs: the corpus and vocabulary, a fixture)
from test_train import read_scalars

HOSTS, STEPS, EVERY = 2, 120, 20  # a v3-16's two workers
POD = ['--name=pod', '--zone=local-a', '--accelerator=v3-16']
TRAIN = ['--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64',
         '--config.train.batch_size=8', f'--config.train.num_steps={STEPS}', '--config.train.warmup_steps=5',
         '--config.train.log_every=2', '--config.train.eval_every=1000', '--config.train.eval_batches=1',
         f'--config.train.checkpoint_every={EVERY}', '--config.train.fill_mask_text=',
         '--config.train.fill_mask_word=', '--heartbeat_timeout=10']


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.fixture
def local_pod(tmp_path, faulty_gcs, monkeypatch):
  """An empty local pod of v3-16 slices (two workers of two CPU devices each), its storage the failing server; the
  `gcloud` on PATH drives it. Its namespaces, and so every process in them, end with the test."""
  faulty_gcs.report(rate=0.10)
  env = {k: v for k, v in faulty_gcs.env.items() if not k.startswith(('XLA_', 'JAX_', 'PYTEST', 'TPU_'))}
  env.update(XLA_FLAGS=xla_flags(2), JAX_PLATFORMS='cpu',
             JAX_COMPILATION_CACHE_DIR=os.environ['JAX_COMPILATION_CACHE_DIR'])
  pod = Pod.make(tmp_path / 'pod', HOSTS, free_port(), env)
  for name, value in pod.gcloud_on_path(tmp_path / 'bin').items():
    monkeypatch.setenv(name, value)
  try:
    yield pod
  finally:
    pod.end()


def launch(*argv, **popen):
  return subprocess.Popen([sys.executable, '-m', 'launch.tpu', *argv], cwd=ROOT, text=True, **popen)


@pytest.fixture(scope='module')
def unbroken(inputs, tmp_path_factory):  # noqa: F811
  """The same training as two local processes with nothing in their way: the held-out figures the pod's runs must
  end with ({result.json}), and the loss of every step."""
  workdir = tmp_path_factory.mktemp('unbroken')
  port, data = free_port(), [f'--config.data.vocab={inputs}/vocab.model',
                             f'--config.data.source=lines:{inputs}/corpus/*.txt']
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': xla_flags(2)}
  hosts = [subprocess.Popen([sys.executable, '-m', 'albert_jax.train', '--config=configs/tiny.py',
                             f'--workdir={workdir}', *TRAIN, *data, '--distributed',
                             f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={i}'],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(HOSTS)]
  for host in hosts:
    out, err = host.communicate(timeout=600)
    assert host.returncode == 0, err[-3000:]
  return json.loads((workdir / 'result.json').read_text()), read_scalars(workdir)['loss']


def step_reached(pod: Pod) -> int:
  """The last step worker 0's log shows in this attempt (its log starts anew with each start)."""
  log = os.path.join(pod.vm('pod', 0)['home'], 'albert_run', 'train.log')
  found = re.findall(r'step (\d+)/', open(log).read()) if os.path.exists(log) else []
  return int(found[-1]) if found else -1


def on_record(starts: list, trained: set, recorded: list) -> bool:
  """Whether the goodput record's attempts (`recorded`, each one's first step) are the pod's `starts` (the step
  each resumed from, as babysit said), in order: each start in `trained` (it trained until a fault or the end) on
  record with its step; any other start (another failure, restarted) on record with its step, or with None (it
  failed before restoring), or not at all (it failed before it could write its record to the failing storage)."""
  if not starts:
    return not recorded
  here, rest = (recorded[0], recorded[1:]) if recorded else (object(), [])
  later = {k - 1 for k in trained if k}
  if here == starts[0] or (here is None and 0 not in trained):
    if on_record(starts[1:], later, rest):
      return True
  return 0 not in trained and on_record(starts[1:], later, recorded)


def test_on_record_matches_the_ledger_to_the_starts_babysit_made():
  starts, trained = [0, 0, 0, 20, 80], {1, 2, 3, 4}  # the first start failed at once; the others trained
  assert on_record(starts, trained, [0, 0, 0, 20, 80]) and on_record(starts, trained, [None, 0, 0, 20, 80])
  assert on_record(starts, trained, [0, 0, 20, 80])  # the first start never wrote its record
  assert not on_record(starts, trained, [0, 0, 20])  # the last is missing
  assert not on_record(starts, trained, [0, None, 20, 80])  # a start that trained said it restored nothing
  assert not on_record(starts, {0, 1, 2, 3, 4}, [0, 0, 20, 80])  # every start trained: none may be missing
  assert not on_record(starts, trained, [0, 0, 0, 40, 80])


def test_a_babysat_local_pod_survives_a_killed_worker_a_lost_worker_0_a_frozen_worker_and_storage_faults(
    local_pod, inputs, unbroken, faulty_gcs, bucket, tmp_path):  # noqa: F811
  expected = unbroken[0]
  workdir = f'{bucket}/runs/chaos'
  run = [*POD, '--config=configs/tiny.py', f'--workdir={workdir}']
  train = ['--', *TRAIN, *in_bucket(inputs, bucket)]
  assert launch('create', *POD).wait(timeout=60) == 0
  started = launch('train', *run, *train)  # returns at once: training runs detached on each worker
  assert started.wait(timeout=60) == 0
  console = open(tmp_path / 'babysit.log', 'w')
  babysit = launch('babysit', *run, '--poll_seconds=1', '--max_restarts=8', *train, stdout=console,
                   stderr=subprocess.STDOUT)

  def once_at(step: int, fault) -> int:
    deadline = time.time() + 400
    while step_reached(local_pod) < step:
      assert babysit.poll() is None and time.time() < deadline, open(tmp_path / 'babysit.log').read()[-3000:]
      time.sleep(0.1)
    reached = step_reached(local_pod)
    fault()
    while step_reached(local_pod) >= reached:  # until babysit has started the run again (a new log)
      assert babysit.poll() is None and time.time() < deadline, open(tmp_path / 'babysit.log').read()[-3000:]
      time.sleep(0.1)
    return reached

  draw = random.Random(7)  # the faults' steps, seeded: one in each third of the run
  steps = [draw.randrange(21, 40), draw.randrange(46, 80), draw.randrange(86, 112)]
  children = lambda worker: [pid for pid in local_pod.processes('pod', worker)
                             if 'ALBERT_JAX_SUPERVISED=1' in open(f'/proc/{pid}/environ', 'rb').read().decode()]
  reached = [
      once_at(steps[0], lambda: [os.kill(pid, signal.SIGKILL) for pid in children(1)]),  # as the OOM killer does
      once_at(steps[1], lambda: local_pod.signal('pod', 0, signal.SIGKILL)),  # worker 0 lost, with its wrapper
      once_at(steps[2], lambda: local_pod.signal('pod', 1, signal.SIGSTOP)),  # a frozen VM: no heartbeats
  ]
  assert babysit.wait(timeout=600) == 0, open(tmp_path / 'babysit.log').read()[-4000:]
  console.close()
  said = open(tmp_path / 'babysit.log').read()

  # One line per restart: the worker, the cause, the step resumed from and the steps lost. The three faults' restarts
  # come in order; on a loaded machine behind the faulty storage another restartable failure may come between them
  # (a storage error that outlasted the clients' retries): it too is restarted, and the run still ends as the
  # unbroken one did.
  restarts = [line for line in said.splitlines() if re.match(r'pod: restart \d of at most 8: ', line)]
  shown = '\n'.join(restarts) + '\n' + said[-4000:]
  causes = [r'worker 1: exit code 137 \(killed by a signal\)', r'worker 0: gone \(no exit code',
            r'worker 0: exit code 42 \(restartable\).*lost host 1: it stopped sending heartbeats']
  ours, faulted = [], {len(restarts)}  # the injected faults' restart lines; the starts a fault ended, and the last
  for k, line in enumerate(restarts):
    if len(ours) < len(causes) and re.search(causes[len(ours)], line):
      ours.append(line)
      faulted.add(k)
    else:
      assert re.search(r': (exit code 42 \(restartable\)|exit code 1[3-9]\d \(killed by a signal\)|gone)', line), shown
  assert len(ours) == 3 and len(restarts) <= 5, shown
  resumed = [int(re.search(r'resuming from step (\d+)', line).group(1)) for line in restarts]
  for step, line in zip(resumed, restarts):
    assert step % EVERY == 0 and re.search(r'resuming from step \d+(, the newest whole checkpoint| \(no whole '
                                           r'checkpoint yet\)): \d+ steps to compute again', line), line
  assert f'training finished (exit code 0); {len(restarts)} restart(s)' in said and 'nothing is training' not in said

  # status, logs and delete on the pod as it is now.
  status = launch('status', *POD, stdout=subprocess.PIPE)
  out, _ = status.communicate(timeout=60)
  assert re.search(r'^worker 0: exit code 0 \(finished\), at step 120; its log ends: ', out, re.M), out
  assert re.search(r'^worker 1: exit code 0 \(finished\)', out, re.M), out
  # Ctrl-C reaches it as at a terminal even where pytest itself was started with SIGINT ignored (a background job).
  logs = launch('logs', *POD, f'--log_dir={tmp_path / "logs"}', stdout=subprocess.PIPE,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  deadline = time.time() + 60
  while not all((tmp_path / 'logs' / 'pod' / f'worker-{w}.log').exists() for w in range(HOSTS)):
    assert time.time() < deadline
    time.sleep(0.2)
  time.sleep(3)
  logs.send_signal(signal.SIGINT)  # Ctrl-C: the streaming stops, not the training
  streamed, _ = logs.communicate(timeout=60)
  assert '[worker 0] [host 0/2] step 120/120' in streamed
  assert 'Gloo' in (tmp_path / 'logs' / 'pod' / 'worker-1.log').read_text()
  assert launch('delete', *POD).wait(timeout=60) == 0
  assert local_pod.read()['nodes'] == {}

  # The figures of the unbroken run; every checkpoint whole and restorable, with both hosts' data positions.
  assert json.loads(paths.path(f'{workdir}/result.json').read_text()) == expected
  import jax
  import orbax.checkpoint as ocp
  steps = sorted(int(p.name) for p in paths.path(f'{workdir}/checkpoints').iterdir()
                 if p.name.isdigit() and (p / 'commit_success.txt').exists())
  assert steps and steps[-1] == STEPS and not [p for p in paths.path(f'{workdir}/checkpoints').iterdir()
                                               if p.name.isdigit() and int(p.name) not in steps]  # none half-written
  here = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # written by two processes, read back on one device
  for step in steps:
    state = f'{workdir}/checkpoints/{step}/state'
    saved = ocp.StandardCheckpointer().metadata(state).item_metadata
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=here), saved)
    assert int(ocp.StandardCheckpointer().restore(state, target)['step']) == step
    data = json.loads(paths.path(f'{workdir}/checkpoints/{step}/data/metadata').read_text())
    assert data['step'] == step and data['host_count'] == 2 and len(data['shards']) == 2

  # The goodput record: an attempt per start (on_record says which may be missing), each resumed from the newest
  # checkpoint whole when its run stopped (babysit's line says which, from the bucket's listing): no restart lost
  # more than the steps since it.
  attempts = json.loads(paths.path(f'{workdir}/goodput.json').read_text())['attempts']
  starts = [0, *resumed]
  assert on_record(starts, faulted, [a['first_step'] for a in attempts]), (starts, attempts, shown)
  assert all(int(re.search(r'resuming from step (\d+)', line).group(1)) <= fault_step
             for line, fault_step in zip(ours, reached))
  report = subprocess.run([sys.executable, '-m', 'albert_jax.goodput', workdir], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, 'PYTHONPATH': str(ROOT)})
  assert report.returncode == 0 and f'({len(attempts)} attempts, {len(attempts) - 1} restarts)' in report.stdout, \
      report.stderr
  # What the run's record says (pytest -s shows it; docs/pods.md quotes it).
  print(f'faults at steps {reached}', *restarts, report.stdout, sep='\n')
  assert re.search(r'restarts .* down [\d:]+, start-up [\d:]+, \d+ steps recomputed', report.stdout), report.stdout
  faults = faulty_gcs.report()
  assert faults['faults'] >= 0.09 * faults['requests'], faults  # the storage failed throughout


def test_babysit_moves_the_run_to_the_slice_it_can_get_and_back_with_the_unbroken_runs_figures(
    local_pod, inputs, unbroken, faulty_gcs, bucket, tmp_path):  # noqa: F811
  """A run babysat on v3-16 (2 hosts) or else v3-8 (1 host): its v3-16 is preempted and has no capacity when babysit
  creates it again, so the run moves to a v3-8 and continues from its last checkpoint; there, once v3-16 can be had
  again, its training is killed, and at that restart babysit takes the v3-16 first. Each move is one line; the
  goodput record says where each attempt ran; every step's loss after a move is the unbroken run's (within 1e-3,
  floating-point order) and so are the held-out figures at the end (within 0.005, over the same instances)."""
  faulty_gcs.report(rate=0.0)
  expected, expected_loss = unbroken
  workdir = f'{bucket}/runs/moving'
  pod = ['--name=pod', '--zone=local-a', '--accelerator=v3-16,v3-8']
  console = open(tmp_path / 'babysit.log', 'w')
  babysit = launch('babysit', *pod, '--config=configs/tiny.py', f'--workdir={workdir}', '--poll_seconds=1',
                   '--max_restarts=4', '--prefer_after=100000', '--', *TRAIN, *in_bucket(inputs, bucket),
                   stdout=console, stderr=subprocess.STDOUT)
  said = lambda: open(tmp_path / 'babysit.log').read()

  def when(test, what: str) -> None:
    deadline = time.time() + 400
    while not test():
      assert babysit.poll() is None and time.time() < deadline, f'waiting for {what}:\n' + said()[-3000:]
      time.sleep(0.1)

  hosts = lambda: len(local_pod.read()['nodes'].get('pod', {}).get('vms', []))
  whole = lambda step: paths.path(f'{workdir}/checkpoints/{step}/commit_success.txt').exists()
  when(lambda: hosts() == 2 and step_reached(local_pod) >= 25 and whole(20), 'step 25 on v3-16')
  local_pod.unavailable('v3-16')
  local_pod.preempt('pod')
  # Killed as soon as its first checkpoint on v3-8 is whole: on one host the rest of the run takes seconds, and a
  # kill that came after its end would find nothing to move.
  when(lambda: hosts() == 1 and whole(60), 'checkpoint 60 on v3-8')
  local_pod.unavailable()  # v3-16 can be had again
  training = [pid for pid in local_pod.processes('pod', 0)
              if 'ALBERT_JAX_SUPERVISED=1' in open(f'/proc/{pid}/environ', 'rb').read().decode()]
  assert training, 'no training process on v3-8 to kill:\n' + said()[-3000:]
  for pid in training:
    os.kill(pid, signal.SIGKILL)
  newest = max(s for s in range(EVERY, STEPS, EVERY) if whole(s))  # where the move to v3-16 resumes
  assert step_reached(local_pod) < STEPS, 'the run on v3-8 ended before it was killed'
  assert babysit.wait(timeout=600) == 0, said()[-4000:]
  console.close()
  lines = said().splitlines()
  moves = [line for line in lines if line.startswith('pod: moved from')]
  assert len(moves) == 2, '\n'.join(lines[-40:])
  assert re.fullmatch(r'pod: moved from v3-16 to v3-8 \(1 host\): v3-16: ERROR: \(gcloud\.compute\.tpus\.tpu-vm\.create\) '
                      r'There is no more capacity in the zone "local-a"; .*; resuming from step 20, the newest whole '
                      r'checkpoint', moves[0]), moves[0]
  assert re.fullmatch(r'pod: moved from v3-8 to v3-16 \(2 hosts\): worker 0: exit code 137 \(killed by a signal\).*; '
                      rf'larger slices tried first; resuming from step {newest}, the newest whole checkpoint',
                      moves[1]), moves[1]
  assert 'pod: restart' not in moves[1] and not [line for line in lines if 'still on' in line]
  restarts = [line for line in lines if line.startswith('pod: restart ')]
  assert len(restarts) == 2 and 'the pod is PREEMPTED' in restarts[0], restarts
  status = launch('status', *pod, stdout=subprocess.PIPE)
  assert 'pod is on v3-16 (2 hosts), choice 1 of v3-16,v3-8' in status.communicate(timeout=60)[0]

  # Every attempt on record with its slice; the run's figures are the unbroken run's.
  attempts = json.loads(paths.path(f'{workdir}/goodput.json').read_text())['attempts']
  assert [(a['slice'], a['first_step']) for a in attempts] == [
      ('4 cpu devices, 2 hosts', 0), ('2 cpu devices, 1 host', 20), ('4 cpu devices, 2 hosts', newest)], attempts
  loss = scalars_in(workdir, tmp_path / 'read-back')['loss']
  after = [s for s in sorted(expected_loss) if s > 20]  # every logged step after the first move
  assert len(after) == (STEPS - 20) // 2
  np.testing.assert_allclose([loss[s] for s in after], [expected_loss[s] for s in after], rtol=1e-3)
  result = json.loads(paths.path(f'{workdir}/result.json').read_text())
  assert {k: v for k, v in result.items() if k.endswith('_count')} == {
      k: v for k, v in expected.items() if k.endswith('_count')}
  for name in [k for k in expected if k.endswith('_accuracy')]:
    assert abs(result[name] - expected[name]) <= 0.005, (name, result[name], expected[name])
  report = subprocess.run([sys.executable, '-m', 'albert_jax.goodput', workdir], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, 'PYTHONPATH': str(ROOT)})
  assert re.search(r'attempt 2 on 2 cpu devices, 1 host: steps 20\.\.\d+, [\d.]+ steps/s', report.stdout), report.stdout
  print(*moves, report.stdout, sep='\n')  # what the run's record says (pytest -s shows it)
