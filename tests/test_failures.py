"""How a run ends (albert_jax/failures.py) and where its time went (albert_jax/goodput.py): which errors count as
transient, the coordination service's fatal messages (as jaxlib prints them) read for the lost host, two processes as
two hosts losing one (the survivor's one line and status 42, within the heartbeat bound), a hang ended by the
watchdog, and the goodput accounting of restarts against figures worked out by hand."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import pytest

from albert_jax import failures, goodput
from albert_jax.errors import ConfigError
from conftest import ROOT, xla_flags


def chained(outer: Exception, inner: Exception) -> Exception:
  try:
    try:
      raise inner
    except Exception as e:
      raise outer from e
  except Exception as e:  # pylint: disable=broad-except
    return e


def test_transient_errors_are_told_from_bugs_and_bad_input():
  from gcsfs.retry import HttpError
  import jax
  assert failures.transient(HttpError({'code': 503, 'message': 'Service Unavailable'}))
  assert failures.transient(HttpError({'code': 429, 'message': 'rate'}))
  assert not failures.transient(HttpError({'code': 403, 'message': 'Forbidden'}))  # a permission: a person's
  assert failures.transient(aiohttp.ServerDisconnectedError())
  assert failures.transient(asyncio.TimeoutError())
  assert failures.transient(jax.errors.JaxRuntimeError(
      'UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer '
      '[127.0.0.1]:17831'))
  # tensorstore's words for a write that kept failing, wrapped by orbax in its own error
  assert failures.transient(chained(RuntimeError('saving failed'), ValueError(
      'UNAVAILABLE: Error writing "d/abc" in OCDBT database at gs://b/run/checkpoints/20/state/')))
  assert not failures.transient(jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB'))
  assert not failures.transient(KeyError('embedding_size'))
  assert not failures.transient(ConfigError('config.train.batch_size must be positive'))
  assert not failures.transient(FloatingPointError('non-finite loss'))


# What jaxlib 0.10.2 prints when the coordination service aborts a process (the F line and what follows it), for
# each way a peer goes; from two local processes (python -m albert_jax.train --distributed).
HEARTBEATS = '''E1128 09:02:35.706215    2425 coordination_service.cc:1549] Use error polling to propagate the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']
F1128 09:02:35.707016    2436 client.h:80] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details.
*** Check failure stack trace: ***
'''
COORDINATOR_KILLED = '''E1128 09:07:53.153168    5250 coordination_service_agent.cc:289] Polled an error from coordination service (this can be an error from this or another task).
F1128 09:07:53.153173    5250 client.h:80] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues.
RPC: /xla.coordination.CoordinationService/PollForError
'''
COORDINATOR_FROZEN = '''F1128 09:11:16.733251    5663 client.h:80] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded

RPC: /xla.coordination.CoordinationService/Heartbeat
'''
NEVER_JOINED = '''F1128 09:12:13.148366    5910 client.h:80] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded

RPC: /xla.coordination.CoordinationService/RegisterTask
'''


@pytest.mark.parametrize('text, says', [
    (HEARTBEATS, 'lost host 1: it stopped sending heartbeats'),
    (HEARTBEATS.replace('\n1\n', '\n2\n3\n'), 'lost hosts 2, 3: they stopped sending heartbeats'),
    (HEARTBEATS.replace('\n1\n', '\n/job:jax_worker/replica:0/task:3\n'), 'lost host 3: it stopped'),
    (COORDINATOR_KILLED, 'lost host 0, the coordinator'),
    (COORDINATOR_FROZEN, 'lost host 0, the coordinator'),
    (NEVER_JOINED, 'not every host joined within the initialization timeout'),
    ('Traceback (most recent call last):\nKeyError: 3\n', None),
])
def test_the_coordination_services_fatal_messages_name_the_lost_host(text, says):
  found = failures._lost_hosts(text)  # pylint: disable=protected-access
  assert (found is None) if says is None else found.startswith(says), found


def two_hosts(tmp_path, heartbeat: int):
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': xla_flags(2)}
  return [subprocess.Popen(
      [sys.executable, '-m', 'albert_jax.train', '--config=configs/tiny.py', f'--workdir={tmp_path / "run"}',
       '--config.train.num_steps=5000', '--config.train.warmup_steps=5', '--config.train.log_every=5',
       '--config.train.eval_every=100000', '--config.train.checkpoint_every=100000',
       '--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64', '--config.train.batch_size=8',
       '--distributed', f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={i}',
       f'--heartbeat_timeout={heartbeat}'], cwd=ROOT, env=env, stdout=open(tmp_path / f'host{i}.out', 'w'),
      stderr=subprocess.PIPE, text=True) for i in range(2)]


def training_child(supervisor: subprocess.Popen) -> list:
  return [int(c) for c in open(f'/proc/{supervisor.pid}/task/{supervisor.pid}/children').read().split()]


def at_step(path, step: int, hosts: list) -> None:
  deadline = time.time() + 300
  while f'step {step}/' not in path.read_text():
    assert all(h.poll() is None for h in hosts) and time.time() < deadline, path.read_text()[-2000:]
    time.sleep(0.1)


@pytest.mark.parametrize('lost, how', [(0, signal.SIGKILL), (1, signal.SIGSTOP)])
def test_the_survivor_of_a_lost_host_stops_within_the_heartbeat_bound_in_one_line(lost, how, tiny_config,
                                                                                  builtin_tokenizer, tmp_path):
  """Two processes as two hosts (a 5 s heartbeat timeout); at step 10 the coordinator's training process is killed,
  or host 1 is frozen whole (SIGSTOP: a VM that stops): the other host ends with status 42 and one line naming the
  lost host, its C++ stack withheld, within the heartbeat timeout and a margin."""
  hosts = two_hosts(tmp_path, heartbeat=5)
  try:
    at_step(tmp_path / 'host0.out', 10, hosts)
    struck = training_child(hosts[lost]) if how == signal.SIGKILL else [hosts[lost].pid, *training_child(hosts[lost])]
    for pid in struck:
      os.kill(pid, how)
    started = time.monotonic()
    survivor = hosts[1 - lost]
    _, err = survivor.communicate(timeout=120)
    seconds = time.monotonic() - started
  finally:
    for host in hosts:
      if host.poll() is None:
        for pid in [host.pid, *training_child(host)]:
          os.kill(pid, signal.SIGKILL)
        host.wait()
  assert survivor.returncode == failures.RESTART, err[-3000:]
  last = err.rstrip().splitlines()[-1]
  named = 'lost host 0, the coordinator' if lost == 0 else 'lost host 1: it stopped sending heartbeats'
  assert last.startswith(f'error: {named}') and 'exit status 42: run the same command again' in last, err[-3000:]
  assert 'Check failure stack trace' not in err and 'client.h' not in err, err[-3000:]
  assert seconds < 5 + 10, seconds  # the heartbeat timeout, and a margin for a loaded machine


def test_a_hang_is_ended_within_its_limit_saying_what_it_waited_for(tiny_config, builtin_tokenizer, tmp_path):
  """One process reading through a data worker; at step 30 the worker is frozen (a read that never returns): under
  train.stall_seconds=5 the run ends with status 42 within the limit and the watchdog's second, naming input."""
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': xla_flags(1)}
  run = subprocess.Popen([sys.executable, '-m', 'albert_jax.train', '--config=configs/tiny.py',
                          f'--workdir={tmp_path / "run"}', '--config.train.num_steps=5000',
                          '--config.train.warmup_steps=5', '--config.train.log_every=5',
                          '--config.train.eval_every=100000', '--config.train.checkpoint_every=100000',
                          '--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64',
                          '--config.train.batch_size=8', '--config.data.workers=1', '--config.data.chunk_documents=4',
                          '--config.train.stall_seconds=5'], cwd=ROOT, env=env, stdout=open(tmp_path / 'out', 'w'),
                         stderr=open(tmp_path / 'err', 'w'))  # a file: the frozen worker keeps a pipe open
  workers = []
  try:
    at_step(tmp_path / 'out', 30, [run])
    workers = [pid for pid in training_child(run) if b'multiprocessing' in open(f'/proc/{pid}/cmdline', 'rb').read()]
    assert workers
    for pid in workers:
      os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    run.wait(timeout=120)
    seconds = time.monotonic() - started
  finally:
    for pid in workers:
      os.kill(pid, signal.SIGKILL)
    if run.poll() is None:
      run.kill()
      run.wait()
  err = (tmp_path / 'err').read_text()
  assert run.returncode == failures.RESTART, err[-3000:]
  last = err.rstrip().splitlines()[-1]
  assert last.startswith('error: no progress for ') and 'limit 5 s: train.stall_seconds' in last, last
  assert 'waiting for input (the next batch from the data pipeline)' in last
  assert 'the main thread was waiting here:' in err and 'next_batch' in err
  assert seconds < 5 + 2 + 5, seconds  # the limit, the watchdog's poll, what the batches in hand still fed


def attempt(start, last_seen, first_step, last_step, saves, **seconds):
  return {'start': start, 'last_seen': last_seen, 'first_step': first_step, 'last_step': last_step,
          'saves': {str(k): v for k, v in saves.items()},
          'seconds': {**dict.fromkeys(goodput.CAUSES, 0.0), **seconds}}


def test_goodput_counts_each_restart_as_down_time_start_up_and_the_steps_recomputed():
  """Two attempts worked out by hand: the first trains steps 0-130 (1 s each) from t=0 to t=160, saving at 50 and
  100; it dies; the second starts at t=200, resumes from 100 and trains to 200."""
  first = attempt(0, 160, 0, 130, {50: 50.0, 100: 100.0}, startup=20, compile=5, steps=130, checkpoint=3, input=2)
  second = attempt(200, 330, 100, 200, {150: 50.0, 200: 100.0}, startup=15, compile=5, steps=100, checkpoint=4,
                   evaluate=6)
  totals = goodput.account([first, second])
  assert totals['recomputed'] == 30 and totals['recomputed_steps'] == 30  # steps 101-130 of the first
  assert totals['down'] == 40 and totals['restart_startup'] == 15 and totals['restarts'] == 85
  assert totals['steps'] == 200 and totals['startup'] == 20 and totals['compile'] == 10
  assert totals['wall'] == 330 and totals['goodput'] == pytest.approx(200 / 330)
  assert sum(totals[c] for c in goodput.CAUSES) + totals['restarts'] == pytest.approx(330)  # all accounted
  table = goodput.table([first, second])
  assert table.splitlines()[0] == 'goodput 60.6%: where 0:05:30 went (2 attempts, 1 restart)'
  assert 'restarts                0:01:25   25.8%   down 0:00:40, start-up 0:00:15, 30 steps recomputed 0:00:30' in table
  # A restart before the first checkpoint loses every step of the attempt.
  totals = goodput.account([attempt(0, 60, 0, 40, {}, startup=10, steps=40), attempt(70, 90, 0, 10, {}, steps=10)])
  assert totals['recomputed'] == 40 and totals['recomputed_steps'] == 40
  # A start that failed before restoring (reading its data, say) did no steps: the first attempt's loss is counted
  # against the checkpoint the next one that did restore resumed from, and the failed start's time is a restart's.
  failed = attempt(170, 180, None, 0, {}, startup=10)
  totals = goodput.account([first, failed, second])
  assert totals['recomputed'] == 30 and totals['recomputed_steps'] == 30 and totals['steps'] == 200
  assert totals['down'] == 10 + 20 and totals['restart_startup'] == 10 + 15
  assert goodput.table([first, failed, second]).splitlines()[0].endswith('(3 attempts, 2 restarts)')
  scalars = goodput.scalars([first, second])
  assert scalars['goodput/restarts'] == 1 and scalars['goodput/steps_hours'] == pytest.approx(200 / 3600)


def test_the_goodput_command_reads_a_workdir_and_refuses_one_without_a_record(tmp_path):
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'goodput.json').write_text(json.dumps({'attempts': [
      attempt(0, 100, 0, 90, {50: 50.0}, startup=10, steps=90)]}))
  ran = subprocess.run([sys.executable, '-m', 'albert_jax.goodput', str(tmp_path / 'run')], cwd=ROOT,
                       capture_output=True, text=True)
  assert ran.returncode == 0 and ran.stdout.startswith('goodput 90.0%: where 0:01:40 went (1 attempt, 0 restarts)')
  ran = subprocess.run([sys.executable, '-m', 'albert_jax.goodput', str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True)
  assert ran.returncode == 2 and ran.stderr.startswith(f'error: {tmp_path} holds no goodput.json')
