"""Cloud TPU VM pods for albert_jax: create, set up, train on every worker, logs, status, stop, delete, babysit.

  python -m launch.tpu create  --name=albert --zone=europe-west4-a --accelerator=v3-64 [--capacity=spot] [--queued]
  python -m launch.tpu setup   --name=albert --zone=europe-west4-a --accelerator=v3-64
  python -m launch.tpu train   --name=albert --zone=europe-west4-a --accelerator=v3-64 \\
      --config=configs/xxlarge.py --workdir=gs://BUCKET/runs/xxlarge --tfds_data_dir=gs://BUCKET/tfds \\
      -- --config.train.batch_size=4096 --config.data.vocab=gs://BUCKET/vocab.model
  python -m launch.tpu logs | status | stop | delete   --name=... --zone=... --accelerator=...
  python -m launch.tpu babysit --name=... (the train arguments)   # re-creates a preempted pod and resumes

Every command takes --dry-run: it prints the gcloud command lines it would run, and runs nothing.

Training runs detached on each worker (nohup), so a dropped ssh connection does not stop it; each worker logs to
~/albert_run/train.log, and `logs` streams all of them into logs/NAME/worker-N.log. The job resumes from the
newest checkpoint in --workdir, so `babysit` only has to bring a pod back and start the same command again.
Arguments after `--` reach the training process on every worker as exactly the same strings: each is quoted for
the remote shell, which therefore never interprets a `$`, `;`, quote or space in them.
"""
import argparse
import pathlib
import shlex
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
REMOTE_DIR = '$HOME/albert_jax'  # expanded by the remote shell; only our own fixed strings use it
RUN_DIR = '$HOME/albert_run'
CAPACITY = ('on-demand', 'preemptible', 'spot', 'reserved')


def workers(accelerator: str) -> int:
  """TPU VM hosts of a pod: 8 cores (4 chips) per host on v2, v3, v4 and v5p; 4 chips per host on v5e and v6e
  slices larger than one host (8 chips share one host below that)."""
  family, size = accelerator.rsplit('-', 1)
  size = int(size)
  if family in ('v2', 'v3', 'v4', 'v5p'):
    return max(size // 8, 1)
  return 1 if size <= 8 else size // 4


class Gcloud:
  """Runs gcloud (or prints it, with --dry-run). Every command line is an argv list: nothing goes through a local
  shell."""

  def __init__(self, args):
    self.args, self.dry_run = args, args.dry_run

  def where(self) -> list:
    return [f'--zone={self.args.zone}'] + ([f'--project={self.args.project}'] if self.args.project else [])

  def run(self, argv: list, check: bool = True, capture: bool = False, **popen) -> subprocess.CompletedProcess:
    print(shlex.join(argv), flush=True)
    remote = next((a[len('--command='):] for a in argv if a.startswith('--command=')), None)
    if self.dry_run and remote:  # the same line unquoted once, as the worker's shell reads it
      print(f'#   remote shell: {remote}', flush=True)
    if self.dry_run:
      return subprocess.CompletedProcess(argv, 0, stdout='', stderr='')
    result = subprocess.run(argv, text=True, capture_output=capture, **popen)
    if check and result.returncode:
      raise SystemExit(f'gcloud failed (exit {result.returncode}): {shlex.join(argv)}\n{result.stderr or ""}')
    return result

  def ssh(self, command: str, worker='all') -> list:
    return ['gcloud', 'compute', 'tpus', 'tpu-vm', 'ssh', self.args.name, *self.where(), f'--worker={worker}',
            f'--command={command}']


def create(g: Gcloud) -> None:
  a = g.args
  capacity = {'on-demand': [], 'preemptible': ['--preemptible'], 'spot': ['--spot'],
              'reserved': ['--reserved']}[a.capacity]
  if a.queued:  # waits in Cloud TPU's queue until the capacity exists, instead of failing at once
    if a.capacity == 'preemptible':
      capacity = ['--best-effort']
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'create', a.name, f'--node-id={a.name}', *g.where(),
           f'--accelerator-type={a.accelerator}', f'--runtime-version={a.version}', *capacity])
  else:
    g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'create', a.name, *g.where(), f'--accelerator-type={a.accelerator}',
           f'--version={a.version}', *capacity])


def setup(g: Gcloud) -> None:
  """This checkout (committed files) onto every worker, installed with the TPU extra into a venv there, and the
  TensorFlow one: TFDS datasets made with `tfds build` are stored as TFRecord, which only TensorFlow reads."""
  archive = f'/tmp/albert_jax-{g.args.name}.tar.gz'
  g.run(['git', '-C', str(REPO), 'archive', '--format=tar.gz', f'--output={archive}', 'HEAD'])
  g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'scp', archive, f'{g.args.name}:albert_jax.tar.gz', *g.where(),
         '--worker=all'])
  g.run(g.ssh(f'rm -rf {REMOTE_DIR} && mkdir -p {REMOTE_DIR} && tar xzf $HOME/albert_jax.tar.gz -C {REMOTE_DIR} && '
              f'python3 -m venv {REMOTE_DIR}/.venv && '
              f'{REMOTE_DIR}/.venv/bin/pip install -q -e "{REMOTE_DIR}[tpu,tf]"'))


def stop(g: Gcloud) -> None:
  """Ends the training processes and frees the TPU: a process still holding /dev/accel* (v2-v4) or /dev/vfio
  (v5, v6) makes the next start fail on that worker."""
  # "[a]lbert" matches the training process but not this shell, whose own command line holds the pattern.
  g.run(g.ssh('pkill -f "[a]lbert_jax.train" || true; '
              'sudo lsof -t /dev/accel* /dev/vfio/* 2>/dev/null | xargs -r sudo kill -9 || true'))


def train_command(args) -> str:
  """The remote shell line that starts training on one worker, detached. Every user-supplied string is quoted;
  the inner `bash -c` script is fixed text that runs its arguments as one command ("$0" "$@")."""
  argv = (['env', f'TFDS_DATA_DIR={args.tfds_data_dir}'] if args.tfds_data_dir else []) + [
      'python', '-m', 'albert_jax.train', f'--config={args.config}', f'--workdir={args.workdir}', '--distributed',
      *args.overrides]
  quoted = ' '.join(f'"{REMOTE_DIR}/.venv/bin/python"' if x == 'python' else shlex.quote(x) for x in argv)
  script = f'"$0" "$@" > {RUN_DIR}/train.log 2>&1; echo $? > {RUN_DIR}/exit_code'
  return (f'mkdir -p {RUN_DIR} && cd {REMOTE_DIR} && rm -f {RUN_DIR}/exit_code && '
          f"nohup bash -c '{script}' {quoted} < /dev/null > /dev/null 2>&1 &")


def train(g: Gcloud) -> None:
  stop(g)
  g.run(g.ssh(train_command(g.args)))


def logs(g: Gcloud) -> None:
  """Streams every worker's log into logs/NAME/worker-N.log; worker 0's also to the console. Ctrl-C stops."""
  out_dir = pathlib.Path(g.args.log_dir) / g.args.name
  out_dir.mkdir(parents=True, exist_ok=True)
  streams = []
  for worker in range(workers(g.args.accelerator)):
    argv = g.ssh(f'tail -n +1 -F {RUN_DIR}/train.log', worker=worker)
    if g.dry_run:
      g.run(argv)
      continue
    print(f'worker {worker} -> {out_dir}/worker-{worker}.log: {shlex.join(argv)}', flush=True)
    with open(out_dir / f'worker-{worker}.log', 'a') as f:
      streams.append(subprocess.Popen(argv, stdout=subprocess.PIPE if worker == 0 else f,
                                      stderr=subprocess.STDOUT, text=True))
  if not streams:
    return
  try:
    with open(out_dir / 'worker-0.log', 'a') as f:
      for line in streams[0].stdout:
        f.write(line)
        f.flush()
        print(f'[worker 0] {line}', end='', flush=True)
  except KeyboardInterrupt:
    pass
  finally:
    for s in streams:
      s.terminate()


def status(g: Gcloud) -> None:
  a = g.args
  if a.queued:
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'describe', a.name, *g.where()], check=False)
  g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'describe', a.name, *g.where(),
         '--format=value(state,health,acceleratorType)'], check=False)
  g.run(g.ssh(f'echo "$(hostname): exit code $(cat {RUN_DIR}/exit_code 2>/dev/null || echo -), '
              f'$(tail -n 1 {RUN_DIR}/train.log 2>/dev/null)"'), check=False)


def delete(g: Gcloud) -> None:
  a = g.args
  if a.queued:
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'delete', a.name, *g.where(), '--force', '--quiet'],
          check=False)
  else:
    g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'delete', a.name, *g.where(), '--quiet'], check=False)


def pod_state(g: Gcloud) -> str:
  """READY, CREATING, PREEMPTED, TERMINATED, ... or MISSING."""
  result = g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'describe', g.args.name, *g.where(),
                  '--format=value(state)'], check=False, capture=True)
  return (result.stdout.strip() or 'MISSING') if result.returncode == 0 else 'MISSING'


def exit_code(g: Gcloud):
  """Worker 0's training exit code, or None while it runs (or before it started)."""
  result = g.run(g.ssh(f'cat {RUN_DIR}/exit_code 2>/dev/null || true', worker=0), check=False, capture=True)
  text = result.stdout.strip()
  return int(text) if text.lstrip('-').isdigit() else None


def babysit(g: Gcloud) -> None:
  """Keeps the job going through preemptions: while the pod is gone or preempted, delete it, create it again, set
  it up and start the same training command (which resumes from the last checkpoint). Ends when training exits."""
  a = g.args
  restarts = 0
  while True:
    state = 'MISSING' if g.dry_run and restarts == 0 else pod_state(g)
    if state in ('MISSING', 'PREEMPTED', 'TERMINATED', 'STOPPED', 'FAILED'):
      if restarts > a.max_restarts:
        raise SystemExit(f'{a.name}: gave up after {a.max_restarts} re-creations')
      print(f'{a.name} is {state}: (re)creating it, restart {restarts}', flush=True)
      if state != 'MISSING':
        delete(g)
      create(g)
      setup(g)
      train(g)
      restarts += 1
    elif state == 'READY':
      code = exit_code(g)
      if code is not None:
        print(f'{a.name}: training exited with code {code}', flush=True)
        if code == 0 and a.delete_when_done:
          delete(g)
        raise SystemExit(code)
    if g.dry_run:
      return
    time.sleep(a.poll_seconds)


COMMANDS = {'create': create, 'setup': setup, 'train': train, 'logs': logs, 'status': status, 'stop': stop,
            'delete': delete, 'babysit': babysit}


def parse(argv: list) -> argparse.Namespace:
  overrides = []
  if '--' in argv:
    argv, overrides = argv[:argv.index('--')], argv[argv.index('--') + 1:]
  parser = argparse.ArgumentParser(prog='python -m launch.tpu', description=__doc__.split('\n')[0])
  parser.add_argument('command', choices=COMMANDS)
  parser.add_argument('--name', required=True, help='TPU VM (and queued resource) name')
  parser.add_argument('--zone', required=True, help='e.g. europe-west4-a (v3 pods) or us-central2-b (v4)')
  parser.add_argument('--project', help='defaults to gcloud config')
  parser.add_argument('--accelerator', default='v3-64', help='accelerator type: v3-8 ... v3-1024, v4-128, ...')
  parser.add_argument('--version', default='tpu-ubuntu2204-base', help='TPU VM runtime version')
  parser.add_argument('--capacity', choices=CAPACITY, default='on-demand')
  parser.add_argument('--queued', action='store_true', help='create through queued resources (waits for capacity)')
  parser.add_argument('--config', default='configs/base.py', help='config file, relative to the repository')
  parser.add_argument('--workdir', help='gs:// directory for checkpoints and TensorBoard files')
  parser.add_argument('--tfds_data_dir', help='gs:// TFDS data directory, set as TFDS_DATA_DIR on the workers')
  parser.add_argument('--log_dir', default='logs', help='where `logs` saves worker-N.log files')
  parser.add_argument('--max_restarts', type=int, default=100, help='babysit: re-creations before giving up')
  parser.add_argument('--poll_seconds', type=float, default=60)
  parser.add_argument('--delete_when_done', action='store_true', help='babysit: delete the pod after success')
  parser.add_argument('--dry-run', '--dry_run', dest='dry_run', action='store_true',
                      help='print the gcloud command lines and run nothing')
  args = parser.parse_args(argv)
  args.overrides = overrides
  if args.command in ('train', 'babysit') and not args.workdir:
    parser.error(f'{args.command} needs --workdir (a gs:// path every worker can reach)')
  if args.workdir and not args.workdir.startswith('gs://') and workers(args.accelerator) > 1:
    parser.error(f'--workdir {args.workdir}: a pod with several workers needs a shared gs:// workdir')
  return args


def main(argv=None) -> None:
  args = parse(sys.argv[1:] if argv is None else argv)
  COMMANDS[args.command](Gcloud(args))


if __name__ == '__main__':
  main()
