"""Cloud TPU VM pods for albert_jax: create, set up, train on every worker, logs, status, stop, delete, babysit.

  python -m launch.tpu create  --name=albert --zone=europe-west4-a --accelerator=v3-64 [--capacity=spot] [--queued]
  python -m launch.tpu setup   --name=albert --zone=europe-west4-a --accelerator=v3-64
  python -m launch.tpu train   --name=albert --zone=europe-west4-a --accelerator=v3-64 \\
      --config=configs/xxlarge.py --workdir=gs://BUCKET/runs/xxlarge --tfds_data_dir=gs://BUCKET/tfds \\
      -- --config.train.batch_size=4096 --config.data.vocab=gs://BUCKET/vocab.model
  python -m launch.tpu logs | status | stop | delete   --name=... --zone=... --accelerator=...
  python -m launch.tpu babysit --name=... (the train arguments)   # restarts what fails, until it finishes
  python -m launch.tpu babysit --accelerator=v4-256,v4-128,v4-64 ...   # on the largest slice it can get

With several accelerators (one generation, in order of preference), `create` makes the first that Cloud TPU has
capacity and quota for, and `babysit` moves the run between them: when the slice is preempted or cannot be created
again it takes the next, and once --prefer_after has passed on a smaller one it stops training with a checkpoint and
tries the larger ones first again. Training continues on any of them from the workdir (its data stream does not
depend on the host count; albert_jax/data/pipeline.py).

Every command takes --dry-run: it prints the gcloud command lines it would run, and runs nothing.

Several TPU7x slices (--num_slices with a tpu7x accelerator) are joined by GKE, not by Cloud TPU's queued resources
(which Cloud's docs say TPU7x does not support): there the commands drive XPK instead (`xpk cluster create`, then
`xpk workload create` from this checkout on a Python image, restarted by JobSet up to --max_restarts times; xpk's
JobSet restarts on exit status 42 and 127-255 and fails the workload on any other, so a bad input's 2 is not
restarted).

Training runs detached on each worker (nohup), so a dropped ssh connection does not stop it; each worker logs to
~/albert_run/train.log beside its exit code, and `logs` streams all of them into logs/NAME/worker-N.log. The job
resumes from the newest checkpoint in --workdir, so `babysit` only has to bring a pod back, or stop training on
every worker, and start the same command again; it does so for the exit statuses worth restarting
(albert_jax/failures.py), a signal, or a worker's training gone.
Arguments after `--` reach the training process on every worker as exactly the same strings: each is quoted for
the remote shell, which therefore never interprets a `$`, `;`, quote or space in them.
"""
import argparse
import configparser
import dataclasses
import json
import pathlib
import re
import shlex
import subprocess
import sys
import time

from albert_jax import accelerators, failures
from albert_jax.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parent.parent
REMOTE_DIR = '$HOME/albert_jax'  # expanded by the remote shell; only our own fixed strings use it
RUN_DIR = '$HOME/albert_run'
TRAINING = '"[a]lbert_jax.train"'  # pgrep/pkill's pattern for the training processes (supervisor and child)
CAPACITY = ('on-demand', 'preemptible', 'spot', 'reserved')


def on_gke(tpu: accelerators.Slice, num_slices: int) -> bool:
  """Several slices of a generation outside the Cloud TPU API are a GKE cluster of node pools, run through XPK."""
  return num_slices > 1 and not tpu.generation.cloud_tpu_api


class Gcloud:
  """Runs gcloud (or prints it, with --dry-run). Every command line is an argv list: nothing goes through a local
  shell. `slices`: the accelerators given, in order of preference; `slice`: the one the pod is (to be) on."""

  def __init__(self, args):
    self.args, self.dry_run = args, args.dry_run
    self.slices = slices(args.accelerator)
    self.slice = self.slices[0]
    self.on_gke = on_gke(self.slice, args.num_slices)

  def nodes(self) -> list:
    """The TPU VMs: the pod itself, or each slice of a multislice queued resource (NAME-0, NAME-1, ...)."""
    a = self.args
    return [a.name] if a.num_slices == 1 else [f'{a.name}-{i}' for i in range(a.num_slices)]

  def where(self) -> list:
    return [f'--zone={self.args.zone}'] + ([f'--project={self.args.project}'] if self.args.project else [])

  def run(self, argv: list, check: bool = True, capture: bool = False, quiet: bool = False,
          **popen) -> subprocess.CompletedProcess:
    """`quiet`: not echoed (babysit's polls, every minute) unless this is a dry run."""
    if self.dry_run or not quiet:
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

  def ssh(self, command: str, worker='all', node=None) -> list:
    return ['gcloud', 'compute', 'tpus', 'tpu-vm', 'ssh', node or self.args.name, *self.where(), f'--worker={worker}',
            f'--command={command}']

  def on_every_worker(self, command: str, check: bool = True) -> None:
    for node in self.nodes():
      self.run(self.ssh(command, node=node), check=check)


def slices(accelerators_given: str) -> list:
  """--accelerator's slices, in its order: one, or several of one generation (a ConfigError for anything else)."""
  found = [accelerators.tpu_slice(name) for name in accelerators_given.split(',')]
  if len({tpu.generation for tpu in found}) > 1 or len({tpu.size for tpu in found}) < len(found):
    raise ConfigError(f'--accelerator {accelerators_given}: several accelerators must be distinct slices '
                    f'of one generation (v4-256,v4-128,v4-64), in order of preference.')
  return found


# What gcloud says when a slice cannot be created for want of capacity or quota, where another slice may still be
# had: Cloud TPU's "no more capacity" (its error code 8; gcloud compute tpus tpu-vm create, quoted in
# hashicorp/terraform-provider-google#16957 and thevasudevgupta/gsoc-wav2vec2#11), its reserved capacity used up
# (skypilot-org/skypilot#4579), a project's TPU quota ("Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has
# been exceeded", marin-community/marin#1612), and Compute Engine's wording of an exhausted zone
# (ZONE_RESOURCE_POOL_EXHAUSTED, "does not have enough resources available").
UNAVAILABLE = re.compile(r'no more capacity in the zone|Insufficient (reserved )?capacity|Quota limit .* has been '
                         r'exceeded|ZONE_RESOURCE_POOL_EXHAUSTED|does not have enough resources available', re.I)


def unavailable(stderr: str) -> str | None:
  """gcloud's own line where a create failed for want of capacity or quota; None where it failed otherwise."""
  line = next((line for line in (stderr or '').splitlines() if UNAVAILABLE.search(line)), None)
  return ' '.join(line.split())[:300] if line else None


def xpk(g: Gcloud, *argv: str) -> list:
  """An XPK command line for this cluster (named --name, like the pod it stands for)."""
  a = g.args
  return ['xpk', *argv, f'--cluster={a.name}', f'--zone={a.zone}'] + ([f'--project={a.project}'] if a.project else [])


def create(g: Gcloud) -> list:
  """The pod, on the first of the accelerators given that can be had: for each before it, (the slice, gcloud's
  words for why not) is returned (what was left of it deleted). None can be had: SystemExit, naming each."""
  skipped = []
  for tpu in g.slices:
    g.slice = tpu
    why = create_slice(g)
    if why is None:
      return skipped
    skipped.append((tpu, why))
    delete(g)  # a create that failed may leave a node behind
  raise SystemExit(f'{g.args.name}: no slice of {g.args.accelerator} can be created now: ' +
                   '; '.join(f'{tpu.cloud_name}: {why}' for tpu, why in skipped))


def create_slice(g: Gcloud) -> str | None:
  """Creates the pod on g.slice: None, or gcloud's line saying there is no capacity or quota for it (any other
  failure stops here)."""
  a = g.args
  if g.on_gke:  # one node pool per slice, TPU7x's 3-D placement made by XPK
    capacity = {'on-demand': ['--on-demand'], 'preemptible': ['--spot'], 'spot': ['--spot']}[a.capacity]
    g.run(xpk(g, 'cluster', 'create', f'--tpu-type={g.slice.cloud_name}', f'--num-slices={a.num_slices}', *capacity))
    return None
  if not g.slice.generation.cloud_tpu_api:
    print(f'# {g.slice.generation.name}: Cloud\'s docs route it through GKE or Compute Engine, not the Cloud TPU API '
          f'(cloud.google.com/tpu/docs/runtimes); Google\'s accelerator-microbenchmarks create a '
          f'{g.slice.generation.cloud_prefix}-8 with the command below. If your project is refused, create the slice '
          f'with GKE (XPK) and run `train` there.', flush=True)
  capacity = {'on-demand': [], 'preemptible': ['--preemptible'], 'spot': ['--spot'],
              'reserved': ['--reserved']}[a.capacity]
  if a.queued:  # waits in Cloud TPU's queue until the capacity exists, instead of failing at once
    if a.capacity == 'preemptible':
      capacity = ['--best-effort']
    # Several slices can only be created together, as one queued resource of nodes NAME-0, NAME-1, ...
    nodes = [f'--node-id={a.name}'] if a.num_slices == 1 else [f'--node-count={a.num_slices}',
                                                                f'--node-prefix={a.name}']
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'create', a.name, *nodes, *g.where(),
           f'--accelerator-type={g.slice.cloud_name}', f'--runtime-version={a.version}', *capacity])
    return None
  made = g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'create', a.name, *g.where(),
                f'--accelerator-type={g.slice.cloud_name}', f'--version={a.version}', *capacity], check=False,
               capture=True)
  sys.stderr.write(made.stderr or '')  # gcloud's progress and errors, as it would have shown them
  why = unavailable(made.stderr)
  if made.returncode and why is None:
    raise SystemExit(f'gcloud failed (exit {made.returncode}): creating {a.name} as {g.slice.cloud_name}')
  return why if made.returncode else None


def python_floor() -> str:
  """setup.cfg's python_requires (>=X.Y): the one place the project states the Python it needs."""
  parser = configparser.ConfigParser()
  parser.read(REPO / 'setup.cfg')
  return parser['options']['python_requires'].strip().removeprefix('>=')


def setup(g: Gcloud) -> None:
  """This checkout (committed files) onto every worker, installed by launch/worker_setup.sh into a venv on a Python
  the project supports, with the TPU extra and the TensorFlow one (TFDS datasets made with `tfds build` are stored
  as TFRecord, which only TensorFlow reads). The venv survives a new checkout: a rerun only reinstalls."""
  generation, floor = g.slice.generation, python_floor()
  if g.on_gke:
    print(f'# {generation.name} on GKE: nothing to set up on the nodes; `train` builds the workload\'s image from this '
          f'checkout on python:{generation.image_python} and installs it there with worker_setup.sh', flush=True)
    return
  older = tuple(map(int, generation.image_python.split('.'))) < tuple(map(int, floor.split('.')))
  print(f'# {generation.name} workers run {generation.runtime} (Ubuntu {generation.image_ubuntu}, Python '
        f'{generation.image_python}); albert_jax needs Python >={floor}: worker_setup.sh '
        + ('brings one with uv' if older else 'uses the image\'s'), flush=True)
  archive = f'/tmp/albert_jax-{g.args.name}.tar.gz'
  g.run(['git', '-C', str(REPO), 'archive', '--format=tar.gz', f'--output={archive}', 'HEAD'])
  for node in g.nodes():
    g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'scp', archive, f'{node}:albert_jax.tar.gz', *g.where(),
           '--worker=all'])
  g.on_every_worker(f'mkdir -p {REMOTE_DIR} && find {REMOTE_DIR} -mindepth 1 -maxdepth 1 ! -name .venv '
                    f'-exec rm -rf {{}} + && tar xzf $HOME/albert_jax.tar.gz -C {REMOTE_DIR} && '
                    f'bash {REMOTE_DIR}/launch/worker_setup.sh {REMOTE_DIR}/.venv tpu,tf,profile')


def stop(g: Gcloud, graceful: bool = True) -> None:
  """Ends the training processes and frees the TPU: a process still holding /dev/accel* (v2-v4) or /dev/vfio
  (v5, v6) makes the next start fail on that worker. `graceful`: SIGTERM first, on which training saves a
  checkpoint and exits, then SIGKILL for whatever still runs after 90 s (a frozen or hung process ignores SIGTERM);
  else SIGKILL at once (babysit's restart of a run that has failed already). On GKE: deletes the workload."""
  if g.on_gke:
    g.run(xpk(g, 'workload', 'delete', f'--workload={workload_name(g.args)}'), check=False)
    return
  # "[a]lbert" matches the training process but not this shell, whose own command line holds the pattern.
  wait = (f'pkill -f {TRAINING}; for i in $(seq 90); do pgrep -f {TRAINING} > /dev/null || break; sleep 1; done; '
          if graceful else '')
  g.on_every_worker(f'{wait}pkill -9 -f {TRAINING} || true; '
                    'sudo lsof -t /dev/accel* /dev/vfio/* 2>/dev/null | xargs -r sudo kill -9 || true')


def training_argv(args) -> list:
  """The training process's argv, with `python` for the venv's interpreter."""
  slices = [] if args.num_slices == 1 or any(o.startswith('--config.mesh.dcn_data') for o in args.overrides) \
      else [f'--config.mesh.dcn_data={args.num_slices}']  # the data axis spans the slices
  return (['env', f'TFDS_DATA_DIR={args.tfds_data_dir}'] if args.tfds_data_dir else []) + [
      'python', '-m', 'albert_jax.train', f'--config={args.config}', f'--workdir={args.workdir}', '--distributed',
      *slices, *args.overrides]


def workload_name(args) -> str:
  return f'{args.name}-train'


def train_command(args) -> str:
  """The remote shell line that starts training on one worker, detached. Every user-supplied string is quoted;
  the inner `bash -c` script is fixed text that runs its arguments as one command ("$0" "$@"). The braces put
  only the nohup command in the background: `a && b &` would run the whole list in a background subshell that
  keeps ssh's output open, and ssh would wait for training to end."""
  argv = training_argv(args)
  quoted = ' '.join(f'"{REMOTE_DIR}/.venv/bin/python"' if x == 'python' else shlex.quote(x) for x in argv)
  script = f'"$0" "$@" > {RUN_DIR}/train.log 2>&1; echo $? > {RUN_DIR}/exit_code'
  return (f'mkdir -p {RUN_DIR} && cd {REMOTE_DIR} && rm -f {RUN_DIR}/exit_code && '
          f"{{ nohup bash -c '{script}' {quoted} < /dev/null > /dev/null 2>&1 & }}")


def train(g: Gcloud) -> None:
  if g.on_gke:
    return train_on_gke(g)
  stop(g)
  g.on_every_worker(train_command(g.args))


def train_on_gke(g: Gcloud) -> None:
  """The committed checkout, unpacked here, becomes the workload's image (XPK copies --script-dir onto the base
  image); every pod of every slice sets up its venv with worker_setup.sh and trains. JobSet restarts the whole
  workload when a pod fails or a slice is preempted, and training resumes from the workdir's last checkpoint."""
  a, generation = g.args, g.slice.generation
  source = f'/tmp/albert_jax-{a.name}-image'
  g.run(['rm', '-rf', source])
  g.run(['mkdir', '-p', source])
  g.run(['git', '-C', str(REPO), 'archive', '--format=tar', f'--output={source}.tar', 'HEAD'])
  g.run(['tar', 'xf', f'{source}.tar', '-C', source])
  argv = ['.venv/bin/python' if x == 'python' else x for x in training_argv(a)]
  command = f'bash launch/worker_setup.sh .venv tpu,tf,profile && {shlex.join(argv)}'
  stop(g)
  g.run(xpk(g, 'workload', 'create', f'--workload={workload_name(a)}', f'--tpu-type={g.slice.cloud_name}',
            f'--num-slices={a.num_slices}', f'--base-docker-image=python:{generation.image_python}',
            f'--script-dir={source}', f'--max-restarts={a.max_restarts}', f'--command={command}'))


def logs(g: Gcloud) -> None:
  """Streams every worker's log into logs/NAME/worker-N.log (with several slices, NAME-S-worker-N.log); the first
  worker's also to the console. Ctrl-C stops. On GKE: every pod's log, each line prefixed by its pod."""
  if g.on_gke:
    region = g.args.zone.rsplit('-', 1)[0]  # XPK's clusters are regional
    g.run(['gcloud', 'container', 'clusters', 'get-credentials', g.args.name, f'--region={region}',
           *g.where()[1:]])
    g.run(['kubectl', 'logs', '--follow', '--prefix', f'--max-log-requests={g.slice.hosts * g.args.num_slices}',
           f'--selector=jobset.sigs.k8s.io/jobset-name={workload_name(g.args)}'], check=False)
    return
  out_dir = pathlib.Path(g.args.log_dir) / g.args.name
  out_dir.mkdir(parents=True, exist_ok=True)
  streams = []
  for node, worker in ((node, worker) for node in g.nodes() for worker in range(g.slice.hosts)):
    argv = g.ssh(f'tail -n +1 -F {RUN_DIR}/train.log', worker=worker, node=node)
    if g.dry_run:
      g.run(argv)
      continue
    name = f'worker-{worker}.log' if g.args.num_slices == 1 else f'{node}-worker-{worker}.log'
    print(f'{node} worker {worker} -> {out_dir}/{name}: {shlex.join(argv)}', flush=True)
    with open(out_dir / name, 'a') as f:
      streams.append(subprocess.Popen(argv, stdout=subprocess.PIPE if worker == 0 else f,
                                      stderr=subprocess.STDOUT, text=True))
  if not streams:
    return
  try:
    first = 'worker-0.log' if g.args.num_slices == 1 else f'{g.nodes()[0]}-worker-0.log'
    with open(out_dir / first, 'a') as f:
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
  if g.on_gke:
    g.run(xpk(g, 'workload', 'list', f'--filter-by-job={workload_name(a)}'), check=False)
    return
  if a.queued:
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'describe', a.name, *g.where()], check=False)
  for node in g.nodes():
    g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'describe', node, *g.where(),
           '--format=value(state,health,acceleratorType)'], check=False)
  if len(g.slices) > 1 and not g.dry_run:
    on = pod_slice(g)
    print(f'{a.name} is on {on.cloud_name} ({on.hosts} host{"s" * (on.hosts > 1)}), ' + (
        f'choice {g.slices.index(on) + 1} of {a.accelerator}' if on in g.slices else f'not one of {a.accelerator}')
        if on else f'{a.name} is on no slice now', flush=True)
  if g.dry_run:
    g.on_every_worker(WORKER_STATUS, check=False)
    return
  for worker in workers(g):
    print(worker.describe(), flush=True)


def delete(g: Gcloud) -> None:
  a = g.args
  if g.on_gke:
    g.run(xpk(g, 'cluster', 'delete', '--force'), check=False)
    return
  if a.queued:
    g.run(['gcloud', 'compute', 'tpus', 'queued-resources', 'delete', a.name, *g.where(), '--force', '--quiet'],
          check=False)
  else:
    g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'delete', a.name, *g.where(), '--quiet'], check=False)


def pod_state(g: Gcloud) -> str:
  """READY, CREATING, PREEMPTED, TERMINATED, ... or MISSING; with several slices, the first that is not READY
  (one preempted slice stops the whole job). UNKNOWN where gcloud failed otherwise (the network, a quota on
  requests): the next poll asks again."""
  states = []
  for node in g.nodes():
    result = g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'describe', node, *g.where(), '--format=value(state)'],
                   check=False, capture=True, quiet=True)
    if result.returncode == 0:
      states.append(result.stdout.strip() or 'MISSING')
    else:
      states.append('MISSING' if re.search(r'NOT_FOUND|not found', result.stderr or '') else 'UNKNOWN')
  return next((state for state in states if state != 'READY'), 'READY')


def pod_slice(g: Gcloud) -> accelerators.Slice | None:
  """The slice the pod is on, as Cloud TPU describes it; None where there is none (or gcloud cannot tell)."""
  found = g.run(['gcloud', 'compute', 'tpus', 'tpu-vm', 'describe', g.nodes()[0], *g.where(),
                 '--format=value(acceleratorType)'], check=False, capture=True, quiet=True)
  try:
    return accelerators.tpu_slice(found.stdout.strip()) if found.returncode == 0 else None
  except ConfigError:
    return None


# What each worker says of its training, one line: its number (GKE and the local pod set TPU_WORKER_ID; a TPU VM's
# metadata server knows it), the exit code (- while it runs or before it started), whether a training process is
# alive, the last "step N/M" its log shows, and the log's last line.
WORKER_STATUS = (
    'id=${TPU_WORKER_ID:-$(curl -sf -m 5 -H Metadata-Flavor:Google '
    'http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number || hostname)}; '
    f'code=$(cat {RUN_DIR}/exit_code 2>/dev/null || echo -); '
    f'alive=$(pgrep -f {TRAINING} > /dev/null && echo 1 || echo 0); '
    f'step=$(tail -n 300 {RUN_DIR}/train.log 2>/dev/null | grep -o "step [0-9]*/[0-9]*" | tail -n 1); '
    f'last=$(tail -n 1 {RUN_DIR}/train.log 2>/dev/null | cut -c1-400); '
    'echo "albert-worker|$id|$code|$alive|$step|$last"')


@dataclasses.dataclass
class Worker:
  name: str  # 'worker 3', or with several slices 'albert-1 worker 3'
  id: str
  code: int | None  # training's exit status, None while it runs or if it never ended
  alive: bool  # a training process runs
  step: int | None  # the last step its log shows (worker 0's; the others print none)
  last: str  # its log's last line

  def describe(self) -> str:
    state = ('running' if self.alive else 'gone (no exit code: its process or machine died)') if self.code is None \
        else f'exit code {self.code} ({MEANING.get(self.code) or ("killed by a signal" if self.code > 128 else "a bug")})'
    last = self.last.split('; exit status ')[0]  # the run's own line: what follows says what babysit does
    return f'{self.name}: {state}' + (f', at step {self.step}' if self.step else '') + (
        f'; its log ends: {last}' if last else '')


MEANING = {0: 'finished', failures.BAD_INPUT: 'bad input', failures.RESTART: 'restartable'}


def workers(g: Gcloud) -> list:
  """Every worker's training as WORKER_STATUS reports it (one ssh per slice, on all its workers at once); a
  worker that did not answer is left out."""
  found = []
  for node in g.nodes():
    result = g.run(g.ssh(WORKER_STATUS, node=node), check=False, capture=True, quiet=True)
    for line in result.stdout.splitlines():
      if not line.startswith('albert-worker|'):
        continue
      _, worker, code, alive, step, last = (line.split('|', 5) + [''] * 6)[:6]
      name = f'worker {worker}' if g.args.num_slices == 1 else f'{node} worker {worker}'
      found.append(Worker(name, worker, int(code) if code.lstrip('-').isdigit() else None, alive == '1',
                          int(step.split()[1].split('/')[0]) if step.startswith('step ') else None, last.strip()))
  return sorted(found, key=lambda w: (w.name.split(' worker ')[0], int(w.id) if w.id.isdigit() else 0, w.id))


def judge(found: list, hosts: int) -> tuple:
  """What the workers' states call for: ('running' | 'finished' | 'bad input' | 'bug' | 'restart' | 'idle' |
  'unknown', the workers it is about). Bad input and bugs end the job (a person must look); a restartable status,
  a signal, or a worker whose training is gone while others run, restart it."""
  if len(found) < hosts:
    return 'unknown', []  # some worker did not answer (ssh failed): ask again at the next poll
  by = lambda test: [w for w in found if test(w)]
  if by(lambda w: w.code == failures.BAD_INPUT):
    return 'bad input', by(lambda w: w.code == failures.BAD_INPUT)
  if by(lambda w: w.code not in (None, 0, failures.RESTART) and w.code < 128):
    return 'bug', by(lambda w: w.code not in (None, 0, failures.RESTART) and w.code < 128)
  failed = by(lambda w: (w.code is not None and w.code >= 128) or (w.code is None and not w.alive))
  restartable = by(lambda w: w.code == failures.RESTART)
  if not by(lambda w: w.alive) and all(w.code == 0 or w.code is None for w in found) and by(lambda w: w.code == 0):
    return 'finished', by(lambda w: w.code == 0)
  if not by(lambda w: w.alive) and all(w.code is None for w in found):
    return 'idle', found
  if failed or restartable:  # the workers where it began first: killed or gone; those that saw it, after
    return 'restart', failed or restartable
  return 'running', []


def checkpoint_progress(g: Gcloud) -> tuple:
  """(the newest whole checkpoint's step, 0 if none, the last step the run's goodput record shows), each None
  where gcloud storage cannot tell. Whole: orbax's commit_success.txt is in its folder (a save still being written
  when training stopped has none, and the run resumes from the one before)."""
  workdir = g.args.workdir.rstrip('/')
  listed = g.run(['gcloud', 'storage', 'ls', f'{workdir}/checkpoints/*/commit_success.txt'], check=False,
                 capture=True, quiet=True)
  steps = [int(step) for step in re.findall(r'/checkpoints/(\d+)/commit_success\.txt', listed.stdout or '')]
  none_yet = 'matched no objects' in (listed.stderr or '')
  checkpoint = max(steps) if steps else (0 if none_yet else None)
  record = g.run(['gcloud', 'storage', 'cat', f'{workdir}/goodput.json'], check=False, capture=True, quiet=True)
  try:
    reached = json.loads(record.stdout)['attempts'][-1]['last_step']
  except (ValueError, KeyError, TypeError, IndexError):
    reached = None
  return checkpoint, reached


def babysit(g: Gcloud) -> None:
  """Keeps the job going until it finishes: a pod gone or preempted is deleted, created again, set up and started;
  on a pod that is up, training that failed in a way worth restarting (exit status 42, a signal, a worker's
  process gone) is stopped on every worker and started again, with backoff; both resume from the newest
  checkpoint, and both count against --max_restarts. Bad input (status 2) and bugs end it, as does a finished
  run. Every restart is one line: the cause, the worker, the step resumed from and the steps lost.

  With several accelerators, the pod is (re)created on the first of them that can be had (create), and every move
  between them is one line (from, to, why, the step resumed from). On a smaller one, every restart tries the larger
  ones first (its start-up is paid anyway); and once --prefer_after seconds have passed since the run moved there (or
  last tried to move up), babysit stops training with a checkpoint (SIGTERM: no step is computed again) to try them,
  which is a move, not a restart."""
  a = g.args
  restarts, stalled, seen_running = 0, 0, False
  last_checkpoint = 'none yet'  # the newest whole checkpoint at the last restart (None: it could not be read)
  moved_at = time.monotonic()  # when the run last moved, or tried to move up

  def restart(why: str, then, found=()) -> None:
    """One line (why, the step resumed from, the steps lost), backoff if no checkpoint came since the last
    restart, then `then` (which starts training again)."""
    nonlocal restarts, stalled, last_checkpoint
    if restarts >= a.max_restarts:
      raise SystemExit(f'{a.name}: gave up after {a.max_restarts} restarts (--max_restarts); the last: {why}')
    restarts += 1
    checkpoint, recorded = checkpoint_progress(g)
    reached = max([s for s in [recorded] + [w.step for w in found] if s is not None], default=None)
    stalled = stalled + 1 if checkpoint == last_checkpoint else 0  # unknown twice counts as no progress
    last_checkpoint = checkpoint
    lost = (f': {max(reached - checkpoint, 0)} steps to compute again' if None not in (checkpoint, reached) else '')
    wait = min(a.poll_seconds * 2 ** (stalled - 1), 600) if stalled else 0
    print(f'{a.name}: restart {restarts} of at most {a.max_restarts}: {why}; {resuming_from(checkpoint)}{lost}'
          + (f'; no new checkpoint since the last restart: waiting {wait:g} s first' if wait else ''), flush=True)
    time.sleep(0 if g.dry_run else wait)
    try:
      then()
    except SystemExit as e:  # gcloud failed (g.run): a network blip, no slice to be had; the next poll retries
      print(f'{a.name}: {e}; trying again at the next poll', flush=True)

  def recreate(state: str, why: str) -> None:
    """The pod deleted (unless missing), created on the first slice that can be had, set up and trained; a move
    to another slice said in one line (at the first start, where it was created, if not on the first choice)."""
    nonlocal moved_at
    before = g.slice
    if state != 'MISSING':
      delete(g)
    skipped = create(g)
    if g.slice != before or skipped:  # a move, or a try to move up
      moved_at = time.monotonic()
      reasons = '; '.join(f'{tpu.cloud_name}: {reason}' for tpu, reason in skipped)
      on = f'{g.slice.cloud_name} ({g.slice.hosts} host{"s" * (g.slice.hosts > 1)})'
      now = (f'still on {on}' if g.slice == before else
             f'moved from {before.cloud_name} to {on}' if seen_running else f'created on {on}')
      print(f'{a.name}: {now}: {reasons or why}; {resuming_from(checkpoint_progress(g)[0])}', flush=True)
    setup(g)
    train(g)

  while True:
    state = 'MISSING' if g.dry_run and restarts == 0 else pod_state(g)
    if state in ('MISSING', 'PREEMPTED', 'TERMINATED', 'STOPPED', 'FAILED'):
      if seen_running or state != 'MISSING':
        restart(f'the pod is {state}: creating it again', lambda: recreate(state, f'the pod was {state}'))
      else:
        print(f'{a.name} does not exist: creating it, setting it up and starting training', flush=True)
        recreate(state, 'the first start')
      seen_running = True
    elif state == 'READY':
      if not seen_running and len(g.slices) > 1:  # a pod made before babysit began: which of them is it on?
        g.slice = pod_slice(g) or g.slice
      found = workers(g) if not g.dry_run else []
      what, which = judge(found, g.slice.hosts * a.num_slices) if not g.dry_run else ('running', [])
      if what == 'finished':
        print(f'{a.name}: training finished (exit code 0); {restarts} restart(s)', flush=True)
        if a.delete_when_done:
          delete(g)
        raise SystemExit(0)
      if what in ('bad input', 'bug'):
        stop(g, graceful=False)
        worker = which[0]
        print(f'{a.name}: {worker.describe()}', flush=True)
        raise SystemExit(f'{a.name}: training ended with {what} (exit code {worker.code}) on {worker.name}: not '
                         f'restarted; fix it and run train (or babysit) again')
      if what == 'restart':
        origin = which[0]
        stop(g, graceful=False)
        if g.slice != g.slices[0]:  # on a smaller slice, whose start-up is paid anyway: the larger ones first
          restart(origin.describe(), lambda: recreate(state, f'{origin.describe()}; larger slices tried first'),
                  found)
        else:
          restart(origin.describe(), lambda: train(g), found)
      elif what == 'idle':
        if seen_running:  # everything it ran is gone, with no exit code: the machines rebooted
          restart('no training process on any worker and no exit code (the workers rebooted?)', lambda: train(g))
        else:
          print(f'{a.name}: nothing is training on the pod: starting it', flush=True)
          train(g)
      elif what == 'running' and g.slice != g.slices[0] and time.monotonic() - moved_at >= a.prefer_after:
        larger = ', '.join(tpu.cloud_name for tpu in g.slices[:g.slices.index(g.slice)])
        print(f'{a.name}: {time.monotonic() - moved_at:.0f} s on {g.slice.cloud_name} (--prefer_after '
              f'{a.prefer_after:g}): stopping training with a checkpoint to try {larger} first', flush=True)
        moved_at = time.monotonic()
        stop(g)  # SIGTERM: the workers save the step they are at, then exit
        try:
          recreate(state, f'{larger} tried first after {a.prefer_after:g} s')
        except SystemExit as e:  # none could be had, not even this one: the next poll finds the pod MISSING
          print(f'{a.name}: {e}; trying again at the next poll', flush=True)
      seen_running = seen_running or what in ('running', 'restart', 'idle')
    if g.dry_run:
      return
    time.sleep(a.poll_seconds)


def resuming_from(checkpoint) -> str:
  """Where training resumes, from checkpoint_progress's newest whole checkpoint (None: unknown)."""
  return ('resuming from the newest whole checkpoint' if checkpoint is None else
          f'resuming from step {checkpoint}' + (', the newest whole checkpoint' if checkpoint else
                                                ' (no whole checkpoint yet)'))


def profile(g: Gcloud) -> None:
  """A trace of --seconds of the training running on --worker (or on 'all'), taken on the worker from the profiler
  server training runs with --config.train.profiler_port (given to train or babysit after --), written into
  WORKDIR/profiles. Training goes on meanwhile."""
  a = g.args
  workers = range(g.slice.hosts) if a.worker == 'all' else [int(a.worker)]
  log_dir = shlex.quote(f'{a.workdir.rstrip("/")}/profiles')
  for node in g.nodes():
    for worker in workers:
      g.run(g.ssh(f'cd {REMOTE_DIR} && .venv/bin/python -m albert_jax.profiling --port={a.profiler_port} '
                  f'--seconds={a.seconds:g} --log_dir={log_dir}', worker=worker, node=node))


COMMANDS = {'create': create, 'setup': setup, 'train': train, 'logs': logs, 'status': status, 'stop': stop,
            'delete': delete, 'babysit': babysit, 'profile': profile}


def parse(argv: list) -> argparse.Namespace:
  overrides = []
  if '--' in argv:
    argv, overrides = argv[:argv.index('--')], argv[argv.index('--') + 1:]
  parser = argparse.ArgumentParser(prog='python -m launch.tpu', description=__doc__.split('\n')[0])
  parser.add_argument('command', choices=COMMANDS)
  parser.add_argument('--name', required=True, help='TPU VM (and queued resource) name')
  parser.add_argument('--zone', required=True, help='e.g. europe-west4-a (v3 pods) or us-central2-b (v4)')
  parser.add_argument('--project', help='defaults to gcloud config')
  parser.add_argument('--accelerator', default='v3-64', help='accelerator type of one slice: v3-8 ... v3-1024, '
                      'v4-128, v5litepod-256 (or v5e-256), v5p-128, v6e-256, tpu7x-8; or several of one generation '
                      'in order of preference (v4-256,v4-128,v4-64): create and babysit take the first that can be '
                      'had, and babysit moves the run between them')
  parser.add_argument('--version', help='TPU VM runtime version (default: the one Cloud TPU gives for JAX on this '
                      'generation)')
  parser.add_argument('--num_slices', '--num-slices', type=int, default=1,
                      help='slices joined over the data-center network (multislice; v4 and later): created together '
                      'as one queued resource, nodes NAME-0, NAME-1, ...; every command acts on all of them (TPU7x: '
                      'a GKE cluster NAME made and run by XPK)')
  parser.add_argument('--capacity', choices=CAPACITY, default='on-demand')
  parser.add_argument('--queued', action='store_true', help='create through queued resources (waits for capacity; '
                      'always with several slices)')
  parser.add_argument('--config', default='configs/base.py', help='config file, relative to the repository')
  parser.add_argument('--workdir', help='gs:// directory for checkpoints and TensorBoard files')
  parser.add_argument('--tfds_data_dir', help='gs:// TFDS data directory, set as TFDS_DATA_DIR on the workers')
  parser.add_argument('--log_dir', default='logs', help='where `logs` saves worker-N.log files')
  parser.add_argument('--max_restarts', type=int, default=100, help='babysit: re-creations before giving up; '
                      'several TPU7x slices: restarts of the GKE workload')
  parser.add_argument('--poll_seconds', type=float, default=60)
  parser.add_argument('--delete_when_done', action='store_true', help='babysit: delete the pod after success')
  parser.add_argument('--prefer_after', type=float, default=3600, help='babysit with several accelerators: seconds '
                      'on a smaller one after which the larger are tried first again (training stops with a '
                      'checkpoint for it), and no more often than that')
  parser.add_argument('--seconds', type=float, default=5, help='profile: how long to trace')
  parser.add_argument('--worker', default='0', help='profile: the worker to trace (0, 1, ...) or all')
  parser.add_argument('--profiler_port', type=int, default=9999, help='profile: the port training serves its '
                      'profiler on (its --config.train.profiler_port)')
  parser.add_argument('--dry-run', '--dry_run', dest='dry_run', action='store_true',
                      help='print the gcloud command lines and run nothing')
  args = parser.parse_args(argv)
  args.overrides = overrides
  try:
    given = slices(args.accelerator)
  except ValueError as e:
    parser.error(str(e))
  tpu = given[0]
  args.version = args.version or tpu.generation.runtime
  if len(given) > 1 and on_gke(tpu, args.num_slices):
    parser.error(f'--accelerator {args.accelerator}: an XPK workload runs on its cluster\'s node pools of one TPU '
                 f'type, where JobSet restarts it: give one accelerator')
  if len(given) > 1 and (args.queued or args.num_slices > 1):
    parser.error(f'--accelerator {args.accelerator}: a queued request (--queued, and every multislice one) waits for '
                 f'its slice\'s capacity instead of failing, so it never moves on to the next: give one accelerator, '
                 f'or several without --queued and --num_slices')
  if args.num_slices < 1 or (args.num_slices > 1 and not tpu.generation.multislice):
    parser.error(f'--num_slices {args.num_slices}: {tpu.generation.name} slices cannot be joined (multislice is v4 '
                 f'and later)' if args.num_slices > 1 else '--num_slices must be positive')
  if on_gke(tpu, args.num_slices):
    if args.command == 'babysit':
      parser.error(f'babysit: several {tpu.generation.name} slices run as a GKE workload, which JobSet restarts '
                   f'itself (up to --max_restarts times); run create, then train')
    if args.command == 'create' and args.capacity == 'reserved':
      parser.error('--capacity=reserved: XPK needs the reservation\'s name; create the cluster with '
                   '`xpk cluster create --reservation=NAME` and use train, logs, status here')
  elif args.num_slices > 1:
    args.queued = True  # Cloud TPU creates several slices only as one queued resource
  if args.command == 'profile' and on_gke(tpu, args.num_slices):
    parser.error('profile: a GKE workload\'s pods are reached with kubectl, not ssh: run `kubectl exec POD -- python -m '
                 'albert_jax.profiling --port=PORT --log_dir=WORKDIR/profiles` on the pod')
  if args.worker != 'all' and not (args.worker.isdigit() and int(args.worker) < max(t.hosts for t in given)):
    parser.error(f'--worker {args.worker}: a worker of the slice (0 to {max(t.hosts for t in given) - 1}) or all')
  if args.command in ('train', 'babysit', 'profile') and not args.workdir:
    parser.error(f'{args.command} needs --workdir (a gs:// path every worker can reach)')
  if args.workdir and not args.workdir.startswith('gs://') and max(t.hosts for t in given) * args.num_slices > 1:
    parser.error(f'--workdir {args.workdir}: a pod with several workers needs a shared gs:// workdir')
  return args


def main(argv=None) -> None:
  args = parse(sys.argv[1:] if argv is None else argv)
  g = Gcloud(args)
  if args.command in ('logs', 'status') and len(g.slices) > 1 and not args.dry_run:
    g.slice = pod_slice(g) or g.slice  # as many workers as the slice the pod is on
  if args.command == 'create':
    for tpu, why in create(g):
      print(f'{args.name}: {tpu.cloud_name} cannot be created now ({why}); took the next', flush=True)
    return
  COMMANDS[args.command](g)


if __name__ == '__main__':
  main()
