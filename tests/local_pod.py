"""A stand-in TPU slice on this machine, and the gcloud that drives it: launch.tpu's commands run on it end to end.

Each worker of a slice is a "VM": a PID and mount namespace of its own (unshare), whose processes its own `pkill`
and `pgrep` see alone, with its own home folder. `gcloud compute tpus tpu-vm ssh` runs the command in the worker's
namespace with bash, as the real ssh runs it on a TPU VM, in the environment a launcher gives each process
elsewhere than on a TPU VM (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID; TPU_WORKER_ID, as GKE sets
it), so that `python -m albert_jax.train --distributed` finds its peers over 127.0.0.1. Deleting the slice ends its
namespaces and everything in them, as a VM's end does. A worker's home holds this checkout (linked) and, as
`launch.tpu setup` would leave it, a venv: this interpreter's. What `setup` sends (its archive, and the ssh command
that installs it) is answered as done and not run (it would install the project into this very venv): installing
needs a real pod.

  tests/local_pod.py gcloud ARGS...       # what the `gcloud` stand-in on PATH runs (LOCAL_POD names the folder)

A slice has as many workers as Cloud TPU's slice of its --accelerator-type has hosts (v3-8: 1, v3-16: 2, v3-32: 4;
each worker's devices are what the environment gives a process). The accelerator types named `unavailable` fail to
be created as Cloud TPU fails when a zone has no capacity for them, in its words.

The folder (LOCAL_POD) holds pod.json: the hosts of a slice whose type is not given, the coordinator's port, the
workers' environment, the unavailable types, and each slice's accelerator, state and VMs; and calls, one JSON line
per gcloud call.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Cloud TPU's words when a zone has none of a slice type free, as gcloud prints them (thevasudevgupta/gsoc-wav2vec2#11
# quotes them from an execution-groups create; the Cloud TPU API's error code 8 carries the same message).
NO_CAPACITY = ('ERROR: (gcloud.compute.tpus.tpu-vm.create) There is no more capacity in the zone "{zone}"; you can '
               'try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) '
               '[EID: 0x1f2e3d4c5b6a7980]')
# The namespace's first process: it reaps the orphans (a detached training process's parent, once its ssh ends).
INIT = 'import os, time\nwhile True:\n  try:\n    os.wait()\n  except ChildProcessError:\n    time.sleep(0.2)\n'


class Pod:
  def __init__(self, folder):
    self.folder = pathlib.Path(folder)
    self.file = self.folder / 'pod.json'

  def read(self) -> dict:
    return json.loads(self.file.read_text())

  def write(self, state: dict) -> None:
    temporary = self.file.with_suffix('.tmp')
    temporary.write_text(json.dumps(state, indent=1))
    os.replace(temporary, self.file)

  @classmethod
  def make(cls, folder, hosts: int, port: int, env: dict) -> 'Pod':
    """A folder for slices of `hosts` workers, each worker's processes given `env` (and their own variables)."""
    pod = cls(folder)
    pod.folder.mkdir(parents=True, exist_ok=True)
    pod.write({'hosts': hosts, 'port': port, 'env': env, 'nodes': {}, 'unavailable': []})
    return pod

  def unavailable(self, *accelerator_types: str) -> None:
    """From now on, creating a slice of these types fails for want of capacity (none: all can be had)."""
    state = self.read()
    state['unavailable'] = list(accelerator_types)
    self.write(state)

  def gcloud_on_path(self, bin_dir) -> dict:
    """A `gcloud` in `bin_dir` that drives this pod: the environment variables that put it first on PATH."""
    bin_dir = pathlib.Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    gcloud = bin_dir / 'gcloud'
    gcloud.write_text(f'#!/bin/sh\nexec {sys.executable} {__file__} gcloud "$@"\n')
    gcloud.chmod(0o755)
    return {'PATH': f'{bin_dir}:{os.environ["PATH"]}', 'LOCAL_POD': str(self.folder)}

  def calls(self) -> list:
    record = self.folder / 'calls'
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

  # ---- The slice's VMs.

  def create(self, node: str, accelerator: str = None) -> None:
    state = self.read()
    hosts = state['hosts']
    if accelerator:
      from albert_jax import accelerators
      hosts = accelerators.tpu_slice(accelerator).hosts
    vms = []
    for worker in range(hosts):
      home = self.folder / node / f'worker-{worker}'
      checkout = home / 'albert_jax'
      checkout.mkdir(parents=True, exist_ok=True)
      for name, target in [(name, ROOT / name) for name in ('albert_jax', 'configs', 'launch', 'setup.cfg')] + [
          ('.venv', sys.prefix)]:
        if not (checkout / name).is_symlink():  # a home kept from a slice of this name deleted before
          (checkout / name).symlink_to(target)
      vm = subprocess.Popen(['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', sys.executable, '-c', INIT],
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
      vms.append({'pid': vm.pid, 'init': _first_child(vm.pid), 'home': str(home)})
    state['nodes'][node] = {'state': 'READY', 'vms': vms, 'accelerator': accelerator or 'local'}
    self.write(state)

  def delete(self, node: str) -> None:
    state = self.read()
    for vm in state['nodes'].pop(node, {'vms': []})['vms']:
      _kill(vm['pid'], signal.SIGKILL)  # unshare --kill-child takes the namespace's first process, and so all
    self.write(state)

  def preempt(self, node: str) -> None:
    """Cloud TPU takes the slice back: its VMs end, and it says PREEMPTED until it is deleted."""
    state = self.read()
    for vm in state['nodes'][node]['vms']:
      _kill(vm['pid'], signal.SIGKILL)
    state['nodes'][node].update(state='PREEMPTED', vms=[])
    self.write(state)

  def vm(self, node: str, worker: int) -> dict:
    return self.read()['nodes'][node]['vms'][worker]

  def processes(self, node: str, worker: int, pattern: str = 'albert_jax.train') -> list:
    """The pids (as this machine numbers them) of the worker's processes whose command line holds `pattern`."""
    init = self.vm(node, worker)['init']
    found, todo = [], [init]
    while todo:
      pid = todo.pop()
      try:
        children = [int(c) for t in os.listdir(f'/proc/{pid}/task')
                    for c in open(f'/proc/{pid}/task/{t}/children').read().split()]
        command = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode(errors='replace')
      except OSError:
        continue
      todo += children
      if pid != init and pattern in command:
        found.append(pid)
    return found

  def signal(self, node: str, worker: int, signum: int, pattern: str = 'albert_jax.train') -> list:
    """Sends `signum` to the worker's processes matching `pattern`; their pids."""
    pids = self.processes(node, worker, pattern)
    for pid in pids:
      _kill(pid, signum)
    return pids

  def end(self) -> None:
    """Deletes every slice (the test's teardown)."""
    for node in list(self.read()['nodes']):
      self.delete(node)

  # ---- gcloud.

  def ssh(self, node: str, workers, command: str) -> int:
    """Runs `command` on the node's `workers` (a list of numbers, or 'all'); the first failing status."""
    state = self.read()
    if node not in state['nodes']:
      print(f'ERROR: (gcloud.compute.tpus.tpu-vm.ssh) NOT_FOUND: {node}', file=sys.stderr)
      return 1
    running, vms = [], state['nodes'][node]['vms']
    workers = list(range(len(vms))) if workers == 'all' else workers
    for worker in workers:
      vm = vms[worker]
      env = {**state['env'], 'HOME': vm['home'], 'TPU_WORKER_ID': str(worker), 'JAX_PROCESS_ID': str(worker),
             'JAX_NUM_PROCESSES': str(len(vms)), 'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{state["port"]}'}
      # One worker's output streams as it comes (`logs` follows a file); several workers' come whole, in order.
      running.append(subprocess.Popen(['nsenter', f'--target={vm["init"]}', '--pid', '--mount', '--', 'bash', '-c',
                                       command], env=env, cwd=vm['home'], text=True,
                                      stdout=subprocess.PIPE if len(workers) > 1 else None))
    status = 0
    for process in running:
      out, _ = process.communicate()
      sys.stdout.write(out or '')
      status = status or process.returncode
    sys.stdout.flush()
    return status


def _first_child(pid: int) -> int:
  for _ in range(500):
    try:
      children = open(f'/proc/{pid}/task/{pid}/children').read().split()
    except OSError:
      children = []
    if children:
      return int(children[0])
    time.sleep(0.01)
  raise RuntimeError(f'unshare (pid {pid}) started no process')


def _kill(pid: int, signum: int) -> None:
  try:
    os.kill(pid, signum)
  except ProcessLookupError:
    pass


def gcloud(argv: list) -> int:
  pod = Pod(os.environ['LOCAL_POD'])
  with open(pod.folder / 'calls', 'a') as f:
    f.write(json.dumps(argv) + '\n')
  option = lambda name, default=None: next((a.split('=', 1)[1] for a in argv if a.startswith(f'--{name}=')), default)
  if argv[:2] in (['storage', 'cat'], ['storage', 'ls']):  # through the GCS server the environment names
    from albert_jax import paths
    found = [info.name for info in paths.listing(argv[2])]
    if not found:
      print(f'ERROR: (gcloud.storage.{argv[1]}) One or more URLs matched no objects.', file=sys.stderr)
      return 1
    for name in found:
      sys.stdout.write(paths.path(name).read_text() if argv[1] == 'cat' else name + '\n')
    return 0
  if argv[:3] != ['compute', 'tpus', 'tpu-vm']:
    print(f'the local pod does not run: gcloud {" ".join(argv)}', file=sys.stderr)
    return 2
  verb, node = argv[3], argv[4]
  state = pod.read()
  if verb == 'create':
    accelerator = option('accelerator-type')
    if accelerator in state['unavailable']:
      print(NO_CAPACITY.format(zone=option('zone')), file=sys.stderr)
      return 1
    pod.create(node, accelerator)
    return 0
  if verb == 'delete':
    pod.delete(node)
    return 0
  if verb == 'describe':
    if node not in state['nodes']:
      print(f'ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: {node}', file=sys.stderr)
      return 1
    fields = {'state': state['nodes'][node]['state'], 'health': 'HEALTHY',
              'acceleratorType': state['nodes'][node].get('accelerator', 'local')}
    wanted = option('format', 'value(state)')[len('value('):-1].split(',')
    print('\t'.join(fields[name] for name in wanted))
    return 0
  if verb == 'scp' or (verb == 'ssh' and 'worker_setup.sh' in option('command', '')):
    return 0  # setup: the workers come set up (this checkout, and a venv: this interpreter's)
  if verb == 'ssh':
    worker = option('worker', '0')
    return pod.ssh(node, 'all' if worker == 'all' else [int(worker)], option('command'))
  print(f'the local pod does not run: gcloud {" ".join(argv)} (its workers come set up: setup needs a real pod)',
        file=sys.stderr)
  return 2


if __name__ == '__main__':
  assert sys.argv[1] == 'gcloud'
  sys.exit(gcloud(sys.argv[2:]))
