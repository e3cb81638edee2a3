"""Where a run's wall time went, by cause, across all its restarts: productive steps, compilation, waiting for
input, checkpoint saves, evaluation, start-up, and what restarts cost (the time down, the new start-up, the steps
computed again).

  python -m albert_jax.goodput WORKDIR      # the table, at any time, for a run going or done (a bucket path too)

The training loop says what it is doing through a `Clock` (each phase a `with clock.phase(...)`); host 0 keeps each
attempt's totals in WORKDIR/goodput.json (written as the attempt starts, then every 10 s of its loop and with each
checkpoint), from which the next attempt, the TensorBoard scalars goodput/* and the closing table are made. What a
restart cost is known once the next attempt has started: the time from the failed attempt's last record to the new
start, the new start-up, and the step time the failed attempt spent after the checkpoint the new one resumed from.
"""
import contextlib
import json
import sys
import threading
import time

from albert_jax import paths

# The causes, in the table's order, with their names there.
CAUSES = {'steps': 'productive steps', 'compile': 'compilation', 'input': 'waiting for input',
          'checkpoint': 'checkpoint saves', 'evaluate': 'evaluation', 'startup': 'start-up', 'other': 'other'}
LEDGER = 'goodput.json'


def process_start_time() -> float:
  """When this process started (wall clock): its imports are start-up too. From /proc on Linux, else now."""
  try:
    with open('/proc/self/stat') as f:
      ticks = int(f.read().rsplit(')', 1)[1].split()[19])  # field 22, starttime, in clock ticks since boot
    with open('/proc/stat') as f:
      boot = next(int(line.split()[1]) for line in f if line.startswith('btime'))
    import os
    return boot + ticks / os.sysconf('SC_CLK_TCK')
  except (OSError, ValueError, StopIteration, IndexError):
    return time.time()


class Span:
  """A phase's length, known when it ends."""
  seconds = 0.0


class Clock:
  """The loop's phases and the seconds spent in each cause. Time outside any phase is start-up until the loop
  begins (`loop_begins`), then 'other'. Safe to read from another thread (the watchdog's). The step the attempt
  resumes from is None until its checkpoint is restored (`resumes_from`): a start that failed before then did none."""

  def __init__(self, started: float):
    self.started, self.first_step, self.step = started, None, 0
    self.slice = None  # what the attempt runs on, in words (`on`)
    self.seconds = dict.fromkeys(CAUSES, 0.0)
    self.seconds['startup'] = max(time.time() - started, 0.0)
    self.cause, self.since = 'startup', time.monotonic()
    self.counts, self.longests = {}, {}
    self.saves = {}  # checkpoint step -> productive step seconds when it was saved
    self.lock = threading.Lock()

  def _switch(self, cause: str) -> tuple:
    with self.lock:
      now = time.monotonic()
      self.seconds[self.cause] += now - self.since
      before = (self.cause, self.since)
      self.cause, self.since = cause, now
      return before

  @contextlib.contextmanager
  def phase(self, cause: str):
    previous, _ = self._switch(cause)
    span, started = Span(), time.monotonic()
    try:
      yield span
    finally:
      self._switch(previous)
      span.seconds = time.monotonic() - started
      with self.lock:
        self.counts[cause] = self.counts.get(cause, 0) + 1
        self.longests[cause] = max(self.longests.get(cause, 0.0), span.seconds)

  def on(self, slice_words: str) -> None:
    """What this attempt runs on (accelerators.slice_words): a run that moves between slices shows each."""
    with self.lock:
      self.slice = slice_words

  def resumes_from(self, step: int) -> None:
    """The attempt's first step: 0, or the restored checkpoint's."""
    with self.lock:
      self.first_step = self.step = step

  def loop_begins(self) -> None:
    """From now on time outside a phase is 'other'."""
    self._switch('other')

  def step_done(self, step: int) -> None:
    self.step = step

  def overlapped(self, seconds: float) -> None:
    """`seconds` of input that the device's work hid (the step was still running when the batch was ready):
    steps' time, not waiting."""
    with self.lock:
      self.seconds['input'] -= seconds
      self.seconds['steps'] += seconds

  def saved(self, step: int) -> None:
    with self.lock:
      self.saves[step] = self.seconds['steps'] + (time.monotonic() - self.since) * (self.cause == 'steps')

  def current(self) -> tuple:
    """(the current cause, since when on the monotonic clock, the last step done)."""
    with self.lock:
      return self.cause, self.since, self.step

  def completed(self, cause: str) -> int:
    with self.lock:
      return self.counts.get(cause, 0)

  def longest(self, cause: str) -> float:
    with self.lock:
      return self.longests.get(cause, 0.0)

  def record(self) -> dict:
    """This attempt as the ledger keeps it."""
    with self.lock:
      seconds = dict(self.seconds)
      seconds[self.cause] += time.monotonic() - self.since
      return {'start': self.started, 'last_seen': time.time(), 'slice': self.slice, 'first_step': self.first_step,
              'last_step': self.step, 'seconds': seconds, 'saves': {str(k): v for k, v in self.saves.items()}}


def read(workdir) -> list:
  """The attempts recorded in `workdir` so far (none for a new run or one started before this was kept)."""
  ledger = paths.path(workdir) / LEDGER
  if not ledger.exists():
    return []
  return json.loads(ledger.read_text())['attempts']


class Ledger:
  """Host 0's record of every attempt of the run in the workdir: the earlier attempts as read at start, and this
  one, written at once (a start that fails before its loop, reading data, compiling or restoring, is on record too),
  then every `every` seconds of the loop by a thread of its own (`keep_writing`: the loop never waits on storage for
  it), at once with each checkpoint, and at the end. What a failed attempt did after its last record counts as time
  lost to its restart (down)."""

  def __init__(self, workdir, clock: Clock, enabled: bool, every: float = 10.0):
    self.file, self.clock, self.enabled, self.every = paths.path(workdir) / LEDGER, clock, enabled, every
    self.earlier = read(workdir) if enabled else []
    self.writing, self.stopped = threading.Lock(), threading.Event()
    self.thread = threading.Thread(target=self._keep_writing, name='albert_jax goodput record', daemon=True)
    self.write()

  def attempts(self) -> list:
    return self.earlier + [self.clock.record()]

  def write(self) -> None:
    if self.enabled:
      with self.writing:
        paths.write_whole(self.file, (json.dumps({'attempts': self.attempts()}, indent=1) + '\n').encode())

  def keep_writing(self) -> None:
    """From the loop's start to `close`."""
    if self.enabled:
      self.thread.start()

  def _keep_writing(self) -> None:
    while not self.stopped.wait(self.every):
      try:
        self.write()
      except Exception:  # pylint: disable=broad-except  (storage failing for now: the next write tries again, and
        pass             # the checkpoint's, on the main thread, raises what persists)

  def close(self) -> None:
    self.stopped.set()
    if self.thread.is_alive():
      self.thread.join()
    self.write()


def account(attempts: list) -> dict:
  """Seconds by cause over all `attempts`, the restarts' cost ('restarts', and its parts 'down', 'restart_startup'
  and 'recomputed'; the steps recomputed under 'recomputed_steps'), the wall time and the productive share."""
  totals = dict.fromkeys(list(CAUSES) + ['restarts', 'down', 'restart_startup', 'recomputed'], 0.0)
  totals['recomputed_steps'] = 0
  for i, attempt in enumerate(attempts):
    seconds = dict(attempt['seconds'])
    # The next attempt that restored a checkpoint (one that failed before it did resumes nothing): the steps after
    # its checkpoint were lost.
    resumed = next((later['first_step'] for later in attempts[i + 1:] if later['first_step'] is not None), None)
    if resumed is not None and attempt['first_step'] is not None:
      kept = max((float(v) for k, v in attempt['saves'].items() if int(k) <= resumed), default=0.0)
      lost = max(seconds['steps'] - kept, 0.0) if resumed < attempt['last_step'] else 0.0
      seconds['steps'] -= lost
      totals['recomputed'] += lost
      totals['recomputed_steps'] += max(attempt['last_step'] - max(resumed, attempt['first_step']), 0)
    if i + 1 < len(attempts):
      totals['down'] += max(attempts[i + 1]['start'] - attempt['last_seen'], 0.0)
    if i > 0:  # a restart's start-up
      totals['restart_startup'] += seconds.pop('startup')
    for cause, value in seconds.items():
      totals[cause] += value
  totals['restarts'] = totals['down'] + totals['restart_startup'] + totals['recomputed']
  totals['wall'] = (attempts[-1]['last_seen'] - attempts[0]['start']) if attempts else 0.0
  # What no phase covered, down to rounding: the time between the records and the causes' sum.
  totals['other'] += max(totals['wall'] - sum(totals[c] for c in CAUSES) - totals['restarts'], 0.0)
  totals['goodput'] = totals['steps'] / totals['wall'] if totals['wall'] else 0.0
  totals['attempts'] = len(attempts)
  return totals


def clock_time(seconds: float) -> str:
  seconds = int(round(seconds))
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


def table(attempts: list) -> str:
  """The report: one line per cause, its time and share of the wall time, restarts with their parts."""
  totals = account(attempts)
  wall = totals['wall'] or 1.0
  restarts = len(attempts) - 1
  lines = [f'goodput {totals["goodput"]:.1%}: where {clock_time(totals["wall"])} went ({len(attempts)} attempt'
           f'{"s" * (len(attempts) != 1)}, {restarts} restart{"s" * (restarts != 1)})']
  for cause, name in CAUSES.items():
    lines.append(f'  {name:<20} {clock_time(totals[cause]):>10} {totals[cause] / wall:7.1%}')
  lines.append(f'  {"restarts":<20} {clock_time(totals["restarts"]):>10} {totals["restarts"] / wall:7.1%}'
               + (f'   down {clock_time(totals["down"])}, start-up {clock_time(totals["restart_startup"])}, '
                  f'{totals["recomputed_steps"]:,} steps recomputed {clock_time(totals["recomputed"])}'
                  if restarts else ''))
  if len({attempt.get('slice') for attempt in attempts}) > 1:  # a run that moved: where each attempt ran, how fast
    for i, attempt in enumerate(attempts, 1):
      trained = attempt['last_step'] - (attempt['first_step'] or 0) if attempt['first_step'] is not None else 0
      rate = f', {trained / attempt["seconds"]["steps"]:.2f} steps/s' if trained and attempt['seconds']['steps'] else ''
      lines.append(f'  attempt {i} on {attempt.get("slice") or "?"}: '
                   + (f'steps {attempt["first_step"]}..{attempt["last_step"]}{rate}' if trained else 'no step'))
  return '\n'.join(lines)


def scalars(attempts: list) -> dict:
  """TensorBoard's goodput/* scalars: each cause's hours so far, the restarts', and the productive share."""
  totals = account(attempts)
  return {'goodput/productive_share': totals['goodput'], 'goodput/restarts': len(attempts) - 1,
          **{f'goodput/{cause}_hours': totals[cause] / 3600 for cause in list(CAUSES) + ['restarts']}}


def main(argv=None) -> int:
  import argparse
  parser = argparse.ArgumentParser(prog='python -m albert_jax.goodput',
                                   description='Where a training run\'s wall time went, by cause, across its restarts.')
  parser.add_argument('workdir', help='a training run\'s workdir (local or gs://)')
  workdir = parser.parse_args(argv).workdir
  attempts = read(workdir)
  if not attempts:
    print(f'error: {workdir} holds no {LEDGER}: not a training workdir, or its run has not recorded yet (it does '
          f'once its configuration and vocabulary are checked, then every 10 s)', file=sys.stderr)
    return 2
  print(table(attempts))
  return 0


if __name__ == '__main__':
  sys.exit(main())
