"""Shared test setup: fake CPU devices (for later sharding tests), the repo root on the path for configs/, one
compilation cache for the session."""
import atexit
import json
import os
import pathlib
import shutil
import sys
import tempfile

# XLA's CPU compiler without LLVM's optimizations: the tests' programs are small and run a few steps, so compiling
# is most of their time (a tiny 3-step training subprocess: 26 s of CPU against 35, the same losses). libtpu's
# compiles for TPU topologies do not read these (the same peak memory, measured): the fit checks are a user's.
CPU_COMPILE_FLAGS = '--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true'


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a test's process with `devices` fake CPU devices."""
  return f'--xla_force_host_platform_device_count={devices} {CPU_COMPILE_FLAGS}'


# The tests' own process has 8 fake CPU devices (jax_num_cpu_devices, below) for its sharding tests; a process a test
# starts has one, as on a laptop, unless the test gives it xla_flags(N): a tiny model's 40 steps over 8 devices of 2
# cores took 25 s of CPU against 16 on one.
os.environ.setdefault('XLA_FLAGS', CPU_COMPILE_FLAGS)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')  # test workers compile for TPU topologies side by side
# Many tests compile the same small programs afresh (a new jit per run, a train CLI per subprocess): JAX's persistent
# cache, one folder for the whole session (xdist's workers and every subprocess inherit it), compiles each once.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='albert_jax_test_xla_cache_')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
# Every compile kept, not only those over a second (JAX's default): without LLVM's optimizations most of a tiny
# model's programs compile in less, and each training subprocess compiled them all again.
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
# File sources keep their corpus index in ~/.cache (data/corpus_index.py) unless told otherwise: the tests' go to a
# folder of this session's, as their corpora are its own.
if 'XDG_CACHE_HOME' not in os.environ:
  os.environ['XDG_CACHE_HOME'] = tempfile.mkdtemp(prefix='albert_jax_test_cache_')
  atexit.register(shutil.rmtree, os.environ['XDG_CACHE_HOME'], ignore_errors=True)
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402  (after the environment above, which it reads)

if '--xla_force_host_platform_device_count' not in os.environ['XLA_FLAGS']:
  try:
    jax.config.update('jax_num_cpu_devices', 8)
  except AttributeError:  # a JAX without the option: the flag, which the started processes then inherit too
    os.environ['XLA_FLAGS'] += ' --xla_force_host_platform_device_count=8'

import pytest  # noqa: E402

# The modules holding the longest tests (2 to 6 minutes each on a 2-core machine: a local pod's chaos, compiles for TPU
# topologies near their memory, sweeps and benches of several processes), run first. With xdist's worksteal (setup.cfg) a worker
# that runs out takes tests from the other's queue, so the two end together on short tests, where the default
# schedule could leave one worker alone with a long test started late (test_sweep.py's is collected near the end).
LONGEST_FIRST = ('test_pod_chaos.py', 'test_aot.py', 'test_sweep.py', 'test_journeys.py',
                 'test_bench_pretrained_vs_random.py', 'test_gcs_train.py', 'test_failures.py',
                 'test_bench_accelerator.py', 'test_finetune.py', 'test_gcs_finetune.py', 'test_without_tensorflow.py',
                 'test_launch.py', 'test_lengths.py')


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: each module's order kept


@pytest.fixture(scope='session')
def tfds_dir(tmp_path_factory):
  """A TFDS data dir holding the built-in corpus and its 4000-piece vocabulary, built once per test process."""
  return str(tmp_path_factory.mktemp('tensorflow_datasets'))


def import_bench(name: str):
  """A bench script of bench/ as a module (the benches import bench/shared.py by its bare name, as they run)."""
  import importlib
  sys.path.insert(0, str(ROOT / 'bench'))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.remove(str(ROOT / 'bench'))


def load_config(relative_path: str, *arg):
  """get_config() of a config file of the repository, e.g. 'configs/tiny.py', with its argument if given (what
  --config=FILE.py:ARG passes)."""
  from albert_jax.config import from_file
  return from_file(ROOT / relative_path, *arg)


def hub_parquet(folder, split, rows, features, files=1):
  """A dataset's split as the Hugging Face Hub stores it: SPLIT-0000K-of-0000N.parquet in its configuration's
  folder, the datasets library's features (None: none) in the schema's metadata."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  folder.mkdir(parents=True, exist_ok=True)
  for k in range(files):
    part = rows[k::files]
    table = pa.Table.from_pylist(part) if part else pa.table({name: [] for name in features})
    metadata = {'huggingface': json.dumps({'info': {'features': features}})} if features is not None else {}
    pq.write_table(table.replace_schema_metadata(metadata), folder / f'{split}-{k:05d}-of-{files:05d}.parquet')


@pytest.fixture(scope='session')
def tiny_config(tfds_dir):
  config = load_config('configs/tiny.py')
  config.data.tfds_data_dir = tfds_dir
  return config


@pytest.fixture(scope='session')
def builtin_tokenizer(tiny_config):
  from albert_jax.data import vocab
  return vocab.load_tokenizer(tiny_config.data.vocab, tiny_config.model.vocab_size, tiny_config.data.tfds_data_dir)


class GcsServer:
  """A real Cloud Storage server (gcp-storage-emulator, in memory; tests/gcs_emulator.py) on 127.0.0.1, and the
  environment that points every client albert_jax uses at it: gcsfs (epath), tensorstore (orbax's arrays),
  google-cloud-storage (orbax's bucket lookup) and array_record. The code under test has no branch for it: only
  this environment differs."""

  def __init__(self, port: int):
    import subprocess
    self.url = f'http://127.0.0.1:{port}'
    self.process = subprocess.Popen([sys.executable, str(ROOT / 'tests' / 'gcs_emulator.py'), str(port)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    self.env = {
        'STORAGE_EMULATOR_HOST': self.url, 'CLOUD_STORAGE_EMULATOR_ENDPOINT': self.url,
        'TENSORSTORE_GCS_HTTP_URL': self.url, 'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test',
        'FSSPEC_GCS_TOKEN': 'anon',
        # gcsfs 2026 otherwise asks each bucket for its layout over gRPC, which the emulator never answers (60 s).
        'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false'}
    self._buckets = 0

  def wait_until_up(self) -> None:
    import time
    import urllib.request
    for _ in range(200):
      try:
        urllib.request.urlopen(f'{self.url}/storage/v1/b', timeout=1).read()
        return
      except OSError:
        time.sleep(0.05)
    raise RuntimeError(f'the GCS emulator did not start on {self.url}')

  def new_bucket(self) -> str:
    import json
    import urllib.request
    self._buckets += 1
    name = f'bucket-{os.getpid()}-{self._buckets}'
    request = urllib.request.Request(f'{self.url}/storage/v1/b?project=test', method='POST',
                                     data=json.dumps({'name': name}).encode(),
                                     headers={'Content-Type': 'application/json'})
    urllib.request.urlopen(request, timeout=10).read()
    return f'gs://{name}'


@pytest.fixture(scope='session')
def gcs_server():
  """One GCS server per test process; its environment is set in this process for good (tensorstore reads it once),
  and so passed to every subprocess a test starts."""
  import socket
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  server = GcsServer(port)
  try:
    server.wait_until_up()
    os.environ.update(server.env)
    yield server
  finally:
    server.process.terminate()
    server.process.wait(timeout=10)


class FaultyGcs:
  """The GCS server behind tests/gcs_faults.py's proxy, which fails a seeded share of requests (503, 429, a dropped
  connection, an answer lost, a slow answer); `env` points a subprocess's storage clients at the proxy."""

  def __init__(self, server: GcsServer, rate: float, seed: int):
    import socket
    import subprocess
    with socket.socket() as s:
      s.bind(('127.0.0.1', 0))
      port = s.getsockname()[1]
    self.url = f'http://127.0.0.1:{port}'
    self.process = subprocess.Popen([sys.executable, str(ROOT / 'tests' / 'gcs_faults.py'), server.url, str(port),
                                     str(rate), str(seed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    self.env = {**os.environ, **{k: self.url if v == server.url else v for k, v in server.env.items()}}
    self.report()  # up

  def report(self, **change) -> dict:
    """What the proxy did so far; with `rate` (and `methods`, comma-separated) changes what it does first."""
    import time
    import urllib.parse
    import urllib.request
    query = urllib.parse.urlencode(change)
    for _ in range(200):
      try:
        request = urllib.request.Request(f'{self.url}/__faults__?{query}', method='POST' if change else 'GET')
        return json.loads(urllib.request.urlopen(request, timeout=10).read())
      except OSError:
        time.sleep(0.05)
    raise RuntimeError(f'the faulty GCS proxy did not start on {self.url}')


@pytest.fixture
def faulty_gcs(gcs_server):
  """A proxy failing 12% of requests, seeded, in front of the session's GCS server."""
  proxy = FaultyGcs(gcs_server, rate=0.12, seed=1234)
  try:
    yield proxy
  finally:
    proxy.process.terminate()
    proxy.process.wait(timeout=10)


@pytest.fixture
def bucket(gcs_server) -> str:
  """A new, empty bucket on the test GCS server: 'gs://NAME'."""
  return gcs_server.new_bucket()


# --- the gcloud binary, which cannot exist here: a recording stand-in ---------------------------------------------

# Records each call's argv; answers `describe` from a queue of states; for ssh, runs the start-training line in a
# fake worker's home (as the remote shell would) and answers the workers' status query (launch.tpu.WORKER_STATUS)
# for GCLOUD_WORKERS workers (default 8, a v3-64's), each with exit code GCLOUD_EXIT_CODE, else the fake worker's
# own (none: nothing ran yet); `storage cp -r SRC gs://DEST/` copies for real, into the GCS server the environment
# names; creating a slice of a type in GCLOUD_NO_CAPACITY (comma-separated) fails as Cloud TPU does when a zone has
# none free.
STAND_IN = '''#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
with open(os.environ['GCLOUD_RECORD'], 'a') as f:
    f.write(json.dumps(argv) + '\\n')
if 'create' in argv and any(a.split('=', 1)[-1] in os.environ.get('GCLOUD_NO_CAPACITY', '').split(',')
                            for a in argv if a.startswith('--accelerator-type=')):
    print('ERROR: (gcloud.compute.tpus.tpu-vm.create) There is no more capacity in the zone "europe-west4-a"; you '
          'can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)',
          file=sys.stderr)
    sys.exit(1)
if 'describe' in argv:
    states = open(os.environ['GCLOUD_STATES']).read().split()
    open(os.environ['GCLOUD_STATES'], 'w').write(' '.join(states[1:]))
    print(states[0] if states else 'READY')
command = next((a[len('--command='):] for a in argv if a.startswith('--command=')), '')
if command.startswith('mkdir -p $HOME/albert_run'):
    subprocess.run(['bash', '-c', command], env={{**os.environ, 'HOME': os.environ['WORKER_HOME']}}, check=True)
    import time  # the fake worker's python, detached, writes its exit code within moments: wait for it
    ran = os.path.join(os.environ['WORKER_HOME'], 'albert_run', 'exit_code')
    for _ in range(200):
        if os.path.exists(ran) and open(ran).read().strip():
            break
        time.sleep(0.05)
if 'albert-worker|' in command:
    ran = os.path.join(os.environ['WORKER_HOME'], 'albert_run', 'exit_code')
    code = os.environ.get('GCLOUD_EXIT_CODE') or (open(ran).read().strip() if os.path.exists(ran) else '-')
    alive = int('GCLOUD_EXIT_CODE' in os.environ and code == '-')
    for worker in range(int(os.environ.get('GCLOUD_WORKERS', 8))):
        print(f'albert-worker|{{worker}}|{{code}}|{{alive}}|step 7/7|')
if argv[:3] == ['storage', 'cp', '-r']:
    from albert_jax import paths
    paths.copy_tree(argv[3], argv[4].rstrip('/') + '/' + os.path.basename(argv[3].rstrip('/')))
'''

# The worker's python: writes down the argv and environment it was started with.
FAKE_PYTHON = '''#!{python}
import json, os, sys
json.dump({{'argv': sys.argv[1:], 'tfds': os.environ.get('TFDS_DATA_DIR')}}, open(os.environ['HOME'] + '/argv.json', 'w'))
'''


@pytest.fixture
def gcloud(tmp_path, monkeypatch):
  """The gcloud binary replaced on PATH by STAND_IN, and a fake worker's home whose albert_jax python is
  FAKE_PYTHON: (calls(), the list of gcloud argvs so far; the worker's home)."""
  bin_dir, worker_home = tmp_path / 'bin', tmp_path / 'worker'
  python = worker_home / 'albert_jax' / '.venv' / 'bin' / 'python'
  for path, text in ((bin_dir / 'gcloud', STAND_IN), (python, FAKE_PYTHON)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.format(python=sys.executable))
    path.chmod(0o755)
  (tmp_path / 'states').write_text('')
  monkeypatch.setenv('PATH', f'{bin_dir}:{os.environ["PATH"]}')
  monkeypatch.setenv('GCLOUD_RECORD', str(tmp_path / 'record'))
  monkeypatch.setenv('GCLOUD_STATES', str(tmp_path / 'states'))
  monkeypatch.setenv('WORKER_HOME', str(worker_home))

  def calls():
    record = tmp_path / 'record'
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

  return calls, worker_home
