"""How fast a pod run's survivors stop when a host is lost, and how fast a hang is ended: measured on this machine,
two processes as two hosts (`--distributed` over 127.0.0.1, two CPU devices each, configs/tiny.py shrunk), at the
settings a user gets (a 60 s heartbeat timeout; the watchdog's adaptive limit, or train.stall_seconds).

  python bench/failure_bounds.py [--repeats=2] [--heartbeat_timeout=60] [--out=DIR] [--quick]

Each fault in a fresh run, once it has trained 20 steps: host 1's training process killed (SIGKILL, as the kernel's
out-of-memory killer does), host 0's (the coordinator), host 1 frozen (SIGSTOP on all its processes: a VM that
stops), host 0 frozen; then one process whose data worker is frozen (a read that never returns), under
train.stall_seconds=30 and under the default limit (ten times the longest batch so far, at least 300 s). Reports
for each: the survivor's exit status, the seconds from the fault to its exit, and its last line. --quick: one
repeat, a 10 s heartbeat timeout, no run at the default limit (the smoke test's).
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SHRINK = ['--config=configs/tiny.py', '--config.train.num_steps=5000', '--config.train.warmup_steps=5',
          '--config.train.log_every=5', '--config.train.eval_every=100000', '--config.train.checkpoint_every=100000',
          '--config.data.max_seq_length=64', '--config.model.max_position_embeddings=64',
          '--config.train.batch_size=8', '--config.train.fill_mask_text=', '--config.train.fill_mask_word=']


def children(pid: int) -> list:
  try:
    return [int(c) for t in os.listdir(f'/proc/{pid}/task') for c in open(f'/proc/{pid}/task/{t}/children').read().split()]
  except OSError:
    return []


def start(argv: list, folder: pathlib.Path, name: str, devices: int) -> subprocess.Popen:
  env = {**os.environ, 'PYTHONPATH': str(REPO), 'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'}
  return subprocess.Popen([sys.executable, '-m', 'albert_jax.train', *argv], cwd=REPO, env=env,
                          stdout=open(folder / f'{name}.out', 'w'), stderr=open(folder / f'{name}.err', 'w'))


def wait_for_step(process: subprocess.Popen, out: pathlib.Path, step: int) -> None:
  deadline = time.time() + 600
  while f'step {step}/' not in out.read_text():
    if process.poll() is not None or time.time() > deadline:
      raise SystemExit(f'failure_bounds: the run ended or stalled before step {step}; see {out}')
    time.sleep(0.1)


def last_line(path: pathlib.Path) -> str:
  lines = path.read_text().strip().splitlines()
  return lines[-1] if lines else ''


def lost_host(victim: int, how: str, heartbeat: int, folder: pathlib.Path) -> dict:
  """Two hosts; at step 20 `how` ('kill': SIGKILL to the victim's training process; 'freeze': SIGSTOP to all its
  processes) strikes host `victim`; the other's exit is timed."""
  folder.mkdir(parents=True, exist_ok=True)
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  hosts = [start([*SHRINK, f'--workdir={folder / "run"}', '--distributed', f'--coordinator_address=127.0.0.1:{port}',
                  '--num_processes=2', f'--process_id={i}', f'--heartbeat_timeout={heartbeat}'], folder, f'host{i}', 2)
           for i in range(2)]
  try:
    wait_for_step(hosts[0], folder / 'host0.out', 20)
    supervisor = hosts[victim].pid
    training = children(supervisor)
    struck = training if how == 'kill' else [supervisor, *training]
    for pid in struck:
      os.kill(pid, signal.SIGKILL if how == 'kill' else signal.SIGSTOP)
    started = time.monotonic()
    survivor = hosts[1 - victim]
    status = survivor.wait(timeout=600)
    seconds = time.monotonic() - started
  finally:
    for host in hosts:
      if host.poll() is None:
        for pid in [host.pid, *children(host.pid)]:
          os.kill(pid, signal.SIGKILL)
        host.wait()
  return {'fault': f'host {victim} {"killed" if how == "kill" else "frozen"}', 'survivor_status': status,
          'seconds': round(seconds, 1), 'last_line': last_line(folder / f'host{1 - victim}.err')}


def hang(limit: float, folder: pathlib.Path) -> dict:
  """One process reading through a data worker; at step 30 the worker is frozen; the run's exit is timed."""
  folder.mkdir(parents=True, exist_ok=True)
  run = start([*SHRINK, f'--workdir={folder / "run"}', '--config.data.workers=1', '--config.data.chunk_documents=4',
               f'--config.train.stall_seconds={limit}'], folder, 'run', 1)
  try:
    wait_for_step(run, folder / 'run.out', 30)
    workers = [pid for pid in children(run.pid) if b'multiprocessing' in open(f'/proc/{pid}/cmdline', 'rb').read()]
    for pid in workers:
      os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    status = run.wait(timeout=900)
    seconds = time.monotonic() - started
  finally:
    for pid in children(run.pid):
      os.kill(pid, signal.SIGKILL)
    if run.poll() is None:
      run.kill()
    run.wait()
  return {'fault': f'a data worker frozen, stall limit {"adaptive (default)" if not limit else f"{limit:g} s"}',
          'survivor_status': status, 'seconds': round(seconds, 1), 'last_line': last_line(folder / 'run.err')}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--heartbeat_timeout', type=int, default=60)
  parser.add_argument('--out', default=None, help='where the runs and report.json go (default: a temporary folder)')
  parser.add_argument('--quick', action='store_true', help='one repeat, a 10 s heartbeat, no default-limit hang')
  args = parser.parse_args(argv)
  if args.quick:
    args.repeats, args.heartbeat_timeout = 1, 10
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='failure_bounds_'))
  rows = []
  for repeat in range(args.repeats):
    for victim, how in ((1, 'kill'), (0, 'kill'), (1, 'freeze'), (0, 'freeze')):
      rows.append(lost_host(victim, how, args.heartbeat_timeout, out / f'{how}{victim}-{repeat}'))
      print(f'{rows[-1]["fault"]}: the survivor exited {rows[-1]["survivor_status"]} after {rows[-1]["seconds"]} s: '
            f'{rows[-1]["last_line"][:160]}', flush=True)
  for limit in ((30,) if args.quick else (30, 0)):
    rows.append(hang(limit, out / f'hang-{limit}'))
    print(f'{rows[-1]["fault"]}: exited {rows[-1]["survivor_status"]} after {rows[-1]["seconds"]} s: '
          f'{rows[-1]["last_line"][:160]}', flush=True)
  report = {'heartbeat_timeout': args.heartbeat_timeout, 'repeats': args.repeats, 'rows': rows,
            'date': time.strftime('%Y-%m-%d'), 'machine': f'{os.cpu_count()} cores'}
  (out / 'report.json').write_text(json.dumps(report, indent=1) + '\n')
  print(f'report: {out / "report.json"}')
  return report


if __name__ == '__main__':
  main()
