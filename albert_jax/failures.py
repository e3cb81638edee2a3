"""How a run ends, and what its exit status tells whatever restarts it (launch.tpu babysit, JobSet on GKE).

  0   finished.
  2   bad input (a config, a corpus, a vocabulary, a path): the message names the fix; restarting cannot help.
  42  restart me: a lost peer, a hang, a transient storage error. The run resumes from its newest checkpoint when
      started again. (42 is also the code JobSet restarts by default, as xpk configures it.)
  128+N  killed by signal N (the kernel's out-of-memory killer's SIGKILL, an abort): restartable too.
  else   a bug: the traceback says where.

A pod's processes are joined by JAX's coordination service, which, when a peer stops sending heartbeats, aborts
every other process from C++ (SIGABRT and a stack trace). So a distributed run is supervised: `supervise` runs the
same command as a child process and, when the child dies that way, replaces the C++ stack by one line that names
the lost host, exiting with status 42. A run that still answers heartbeats but makes no progress (a read that never
returns, a wedged device) is ended by its own `Watchdog`.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

FINISHED, BAD_INPUT, RESTART = 0, 2, 42
SUPERVISED = 'ALBERT_JAX_SUPERVISED'  # set in the child's environment: it trains, and is not supervised again
# How long the coordination service waits for a process's heartbeat before declaring it lost (JAX's default is
# 100 s): a survivor hears of it about 0.85 of this later (measured: 51 s at 60), well inside two minutes.
HEARTBEAT_TIMEOUT = 60



def say_restart(reason: str, status: int = RESTART) -> None:
  """The last line of a run that should be restarted."""
  print(f'error: {reason}; exit status {status}: run the same command again (training resumes from its newest '
        f'checkpoint; on a pod, launch.tpu babysit does it)', file=sys.stderr, flush=True)


# ---- Errors that pass: the chain of an exception, read for the marks of a transient failure.

# Status words of gRPC and absl (tensorstore, XLA and the coordination service report with them), and the words
# of storage clients and sockets for a request that may succeed if tried again.
_TRANSIENT_STATUS = re.compile(r'\b(UNAVAILABLE|DEADLINE_EXCEEDED|ABORTED)\b')
_TRANSIENT_HTTP = re.compile(r'\b(408|429|500|502|503|504)\b')
_LOST_PEER = re.compile(r'Gloo .*(failed|Connection)|Connection (closed|reset) by peer|Barrier timed out')


def transient(error: BaseException) -> str | None:
  """A few words on why `error` may pass if the run is started again (a peer lost mid-collective, Cloud Storage
  still failing after the clients' own retries, a barrier timed out), or None: then it is a bug or bad input."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = ' '.join(str(error).split())
    name = type(error).__name__
    if _LOST_PEER.search(text):
      return f'a collective with another host failed ({name}: {text[:160]})'
    if isinstance(error, (ConnectionError, TimeoutError)) or name in (
        'ClientConnectionError', 'ServerDisconnectedError', 'ClientPayloadError', 'ClientOSError',
        'ServiceUnavailable', 'TooManyRequests', 'InternalServerError', 'GatewayTimeout', 'BadGateway',
        'RetryError', 'ChunkedEncodingError'):
      return f'a connection failed ({name}: {text[:160]})'
    code = getattr(error, 'code', None)
    if name == 'HttpError' and (code in (408, 429) or (isinstance(code, int) and code >= 500)):
      return f'Cloud Storage answered {code} after retries ({text[:160]})'
    if _TRANSIENT_STATUS.search(text) or (name in ('ValueError', 'OSError') and _TRANSIENT_HTTP.search(text)
                                           and 'storage' in text.lower()):
      return f'{name}: {text[:200]}'
    error = error.__cause__ or error.__context__
  return None


# ---- The supervisor of a distributed run.

def _lost_hosts(text: str) -> str | None:
  """What the coordination service's fatal error (the child's stderr) says was lost, in a few words; None if the
  text holds no such error."""
  if 'Terminating process because the JAX distributed service' not in text and 'coordination' not in text:
    return None
  if (found := re.search(r'stopped sending heartbeats\):\s*((?:[\w/:]*?\d+\s*)+)', text)):
    listed = found.group(1)  # task numbers, one a line (jaxlib 0.10), or /job:NAME/replica:0/task:N (older ones)
    hosts = sorted({int(n) for n in re.findall(r'task:(\d+)' if 'task:' in listed else r'(\d+)\s', listed + ' ')})
    several = len(hosts) > 1
    return (f'lost host{"s" * several} {", ".join(map(str, hosts))}: {"they" if several else "it"} stopped sending '
            f'heartbeats (a process killed, a machine gone or frozen)')
  if 'RegisterTask' in text:
    return 'not every host joined within the initialization timeout (a host that did not start, or started late)'
  if (found := re.search(r'Shutdown barrier has failed.*?timed out task names:\s*((?:\d+\s*)+)', text, re.S)):
    return f'host(s) {", ".join(found.group(1).split())} did not reach the end of the run with the others'
  if re.search(r'Failed to send RPC to coordination service|CoordinationService/(Heartbeat|PollForError)', text):
    return 'lost host 0, the coordinator: it stopped answering (its process killed, its machine gone or frozen)'
  if 'Terminating process because the JAX distributed service' in text:
    status = re.search(r'absl::Status: ([^\n]*)', text)
    return f'the distributed runtime lost a peer ({status.group(1)[:200] if status else "no status given"})'
  return None


# Where jaxlib's log lines about the coordination service come from: a lost peer's first signs, then the abort.
_COORDINATION = ('coordination_service', 'CoordinationService', 'client.h:', 'preemption_sync_manager')


def _die_with_parent() -> None:
  """In the child, before it runs: the kernel sends it SIGKILL when the supervisor dies, so that a supervisor
  killed outright (kill -9 on the worker) leaves no training process behind holding the accelerator."""
  import ctypes
  PR_SET_PDEATHSIG = 1
  ctypes.CDLL('libc.so.6', use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def supervise(module: str, argv: list) -> int:
  """Runs `python -m module argv...` as a child with the same stdout, and its stderr through this process; returns
  the exit status to end with. A child that the coordination service aborts (a lost peer) ends in one line naming
  the lost host, status 42, its C++ stack withheld; SIGTERM and SIGINT are passed on to the child (a preempted
  worker's child saves a checkpoint first)."""
  child = subprocess.Popen([sys.executable, '-m', module, *argv], env={**os.environ, SUPERVISED: '1'},
                           stderr=subprocess.PIPE, preexec_fn=_die_with_parent if sys.platform == 'linux' else None)
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda signum, frame: child.send_signal(signum))
  withheld, since = [], 0.0  # from the coordination service's first complaint on: its fatal message, the stack
  for line in child.stderr:
    text = line.decode(errors='replace')
    if withheld and time.monotonic() - since > 30:  # the child went on: that was not its end; show it as it came
      sys.stderr.write(''.join(withheld))
      withheld = []
    if withheld or (re.match(r'[EFW]\d{4} ', text) and any(sign in text for sign in _COORDINATION)):
      since = since if withheld else time.monotonic()
      withheld.append(text)
      continue
    sys.stderr.buffer.write(line)
    sys.stderr.flush()
  status = child.wait()
  lost = _lost_hosts(''.join(withheld))
  if lost:
    say_restart(lost)
    return RESTART
  if withheld:  # not the coordination service's fatal error after all: show it as it came
    sys.stderr.write(''.join(withheld))
  if status < 0:
    name = signal.Signals(-status).name
    say_restart(f'the training process was killed by {name}' + (
        ' (the kernel\'s out-of-memory killer sends it, as does kill -9)' if -status == signal.SIGKILL else ''),
        128 - status)
    return 128 - status
  return status


# ---- A hang, bounded.

class Watchdog:
  """Ends a run that stops making progress while its processes still answer heartbeats: a read that never returns,
  a wedged collective or device. It watches the loop's current phase (goodput.Clock's): when a step, a batch or an
  evaluation has lasted longer than its limit, it prints where the main thread was, one line saying what the run was
  waiting for, and exits with status 42. Nothing is bounded before the process's first step is done, nor the first
  phase of each kind (it may compile, or start the data's workers); compiling and saving checkpoints never are.
  The limit is `limit` seconds, or where that is 0, `factor` times the longest of that kind so far and at least
  `floor` seconds."""

  WAITING_FOR = {'steps': 'the training step (the device, or a collective with the other hosts)',
                 'input': 'input (the next batch from the data pipeline)',
                 'evaluate': 'the held-out evaluation',
                 'other': 'the loop\'s own work between steps (logging, TensorBoard files, the goodput record)'}

  def __init__(self, clock, limit: float = 0, floor: float = 300, factor: float = 10, poll: float = 1.0):
    self.clock, self.limit, self.floor, self.factor, self.poll = clock, limit, floor, factor, poll
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._watch, name='albert_jax watchdog', daemon=True)
    self.thread.start()

  def limit_for(self, phase: str) -> float | None:
    """Seconds the current `phase` may last, or None (not bounded now: before this process's first step is done,
    which waits for every host's compilation, and in the first phase of its kind)."""
    if (phase not in self.WAITING_FOR or not self.clock.completed(phase)
        or self.clock.step <= self.clock.first_step):
      return None
    return self.limit or max(self.floor, self.factor * self.clock.longest(phase))

  def _watch(self) -> None:
    main = threading.main_thread().ident
    while not self.stopped.wait(self.poll):
      phase, since, step = self.clock.current()
      limit = self.limit_for(phase)
      waited = time.monotonic() - since
      if limit is None or waited <= limit:
        continue
      frames = sys._current_frames()  # pylint: disable=protected-access
      where = ''.join(traceback.format_stack(frames[main])[-8:]) if main in frames else ''
      how = 'train.stall_seconds' if self.limit else (f'{self.factor:g}x the longest so far, at least '
                                                        f'{self.floor:g} s; train.stall_seconds sets it')
      print(f'the main thread was waiting here:\n{where}', file=sys.stderr, end='', flush=True)
      say_restart(f'no progress for {waited:.0f} s after step {step} (limit {limit:.0f} s: {how}): waiting for '
                  f'{self.WAITING_FOR[phase]}')
      os._exit(RESTART)  # the main thread is stuck: nothing else would end the process

  def stop(self) -> None:
    self.stopped.set()
    self.thread.join()
