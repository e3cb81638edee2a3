"""albert_jax/profiling.py: a traced window of training steps, read back by JAX's own reader of the profiler's
format; a capture from a running process; a step out of device memory leaving its memory profile."""
import glob
import gzip
import json
import subprocess
import sys

import jax
import pytest

from albert_jax import train
from test_train import small


def trace_events(xplane: str) -> list:
  """(line, event name, stats) of every event on the host plane of a trace (jaxlib's reader of XProf's format)."""
  host = jax.profiler.ProfileData.from_file(xplane).find_plane_with_name('/host:CPU')
  return [(line.name, event.name, dict(event.stats)) for line in host.lines for event in line.events]


def test_a_window_of_steps_is_traced_and_cut_before_a_save(tiny_config, builtin_tokenizer, tmp_path, capsys):
  """profile_steps 3 from step 2, with a checkpoint and an evaluation at step 3: steps 2 and 3 are traced (the save
  is not), each marked as a step, with the compiled train step's ops; Perfetto's file beside XProf's."""
  config = small(tiny_config, profile_steps=3, profile_from=2, num_steps=6)
  train.train_and_evaluate(config, tmp_path, devices=jax.devices()[:1])
  out = capsys.readouterr().out
  folder, = glob.glob(f'{tmp_path}/profiles/plugins/profile/*')
  assert folder.endswith('/steps_2-3')  # named by its steps: every host's file in one run
  assert f'profile of steps 2-3 (host 0): {folder}; open it: pip install xprof && xprof --logdir={tmp_path}/profiles' in out
  xplane, = glob.glob(f'{folder}/*.xplane.pb')
  events = trace_events(xplane)
  assert [stats['step_num'] for _, name, stats in events if name == 'train'] == [2, 3]
  assert any(name == 'PjitFunction(jit(train_step))' for _, name, _ in events)
  # The devices' ops are the train step's alone: the evaluation and the save at step 3 came after the trace.
  modules = {stats['hlo_module'] for _, _, stats in events if 'hlo_module' in stats}
  assert modules == {'jit_train_step'}
  ops = {name for _, name, stats in events if stats.get('hlo_module') == 'jit_train_step'}
  assert any(op.startswith(('dot', 'ynn_fusion')) for op in ops), sorted(ops)[:20]  # its matrix products
  perfetto = json.load(gzip.open(f'{folder}/perfetto_trace.json.gz'))
  assert 'PjitFunction(jit(train_step))' in {e.get('name') for e in perfetto['traceEvents']}


def varint(data: bytes, i: int) -> tuple:
  value = shift = 0
  while True:
    value, shift, i = value | (data[i] & 0x7f) << shift, shift + 7, i + 1
    if data[i - 1] < 0x80:
      return value, i


def protobuf_fields(data: bytes):
  """(field number, value) of a protobuf message, read by hand (an independent reader of pprof's Profile)."""
  i = 0
  while i < len(data):
    key, i = varint(data, i)
    if key & 7 == 0:
      value, i = varint(data, i)
    elif key & 7 == 2:
      size, i = varint(data, i)
      value, i = data[i:i + size], i + size
    else:
      size = 8 if key & 7 == 1 else 4
      value, i = data[i:i + size], i + size
    yield key >> 3, value


def buffer_bytes(profile: bytes) -> list:
  """The bytes of each live buffer in a device memory profile (pprof: samples of [allocations, bytes], each
  labelled kind=buffer or kind=executable)."""
  fields = list(protobuf_fields(gzip.decompress(profile)))
  strings = [value.decode() for number, value in fields if number == 6]  # the string table
  found = []
  for sample in (value for number, value in fields if number == 2):
    values, labels = [], []
    for field, value in protobuf_fields(sample):
      if field == 2:  # the values, packed varints
        j = 0
        while j < len(value):
          v, j = varint(value, j)
          values.append(v)
      elif field == 3:  # a label: its key and text as indices into the string table
        label = dict(protobuf_fields(value))
        labels.append((strings[label[1]], strings[label.get(2, 0)]))
    if ('kind', 'buffer') in labels:
      found.append(values[1])
  return found


@pytest.mark.parametrize('given', [True, False])
def test_a_step_out_of_device_memory_leaves_its_memory_profile_and_one_line(tiny_config, tmp_path, given):
  """A step whose output XLA cannot allocate (4 TiB) fails as a device out of memory does: the memory profile of
  what the device held (here the 1000 x 128 float32 array kept alive, 512,000 bytes) is saved next to the run, and
  the error is one line naming the setting to change: bad input (ConfigError, exit status 2) where the user set it,
  a RunError (exit status 1) where the fit check chose it."""
  from albert_jax import profiling
  from albert_jax.errors import ConfigError, RunError
  import jax.numpy as jnp
  finished = []  # the run is closed (its checkpoints' writes completed) before the error goes up
  window = profiling.Window(small(tiny_config).train, tmp_path, 0, print, saves_after=lambda step: False,
                            finish=lambda: finished.append(True))
  too_big = jax.jit(lambda: jnp.zeros((2 ** 40,), jnp.float32))
  kept = jnp.ones((1000, 128), jnp.float32)
  with pytest.raises(ConfigError if given else RunError) as stopped:
    with window.guard(5, {'model.remat': ('none', given), 'train.grad_accum_steps': (2, given)}):
      too_big().block_until_ready()
  profile = tmp_path / 'profiles' / 'memory-step5-host0.prof'
  # XLA's own words first (their wording is XLA's: the code and the size are what is certain), then ours.
  what, ours = str(stopped.value).split(') with ', 1)
  assert what.startswith('step 5 ran out of device memory (RESOURCE_EXHAUSTED: ') and '4398046511104' in what
  assert ours == (
      'model.remat none, train.grad_accum_steps 2' + ('' if given else ' (the fit check\'s choice: it judged them to '
                                                      'fit)') +
      f'; the devices\' memory profile (pprof) is {profile}. Set --config.train.grad_accum_steps=4 or a later '
      '--config.model.remat (save_dots, save_dots_no_batch, full), and resume.')
  assert kept.nbytes in buffer_bytes(profile.read_bytes()) and finished == [True]


def test_a_running_training_is_captured_on_demand_and_trains_on(tiny_config, tmp_path):
  """A run serving its profiler (train.profiler_port) is traced for a second by `python -m albert_jax.profiling`
  (what `launch.tpu profile` runs on a worker) while it trains: the trace holds consecutive steps of it, and the
  run goes on to its last step."""
  from test_train import free_port, run_cli
  port = free_port()
  run = run_cli(tiny_config, tmp_path / 'run', '--config.train.num_steps=300', f'--config.train.profiler_port={port}',
                devices=1)
  try:
    seen = []
    for line in run.stdout:  # until the run is well into its steps
      seen.append(line)
      if line.startswith('step 20/'):
        break
    capture = subprocess.run([sys.executable, '-m', 'albert_jax.profiling', f'--port={port}', '--seconds=1',
                              f'--log_dir={tmp_path}/profiles'], capture_output=True, text=True, timeout=300)
    out, err = run.communicate(timeout=600)
  finally:
    if run.poll() is None:
      run.kill()
  assert capture.returncode == 0, capture.stderr[-2000:]
  folder, = glob.glob(f'{tmp_path}/profiles/plugins/profile/*')
  assert capture.stdout.splitlines()[-1].startswith(f'profile of 1 s of 127.0.0.1:{port}: {folder}; open it: pip install xprof')
  events = trace_events(glob.glob(f'{folder}/*.xplane.pb')[0])
  steps = sorted({stats['step_num'] for _, name, stats in events if name == 'train'})
  assert steps and steps == list(range(steps[0], steps[-1] + 1)) and 20 <= steps[0] and steps[-1] < 300, steps
  assert any(stats.get('hlo_module') == 'jit_train_step' for _, _, stats in events)
  assert run.returncode == 0 and 'step 300/300' in out, err[-2000:]


def test_launch_profile_captures_on_each_worker_asked(tmp_path):
  """`launch.tpu profile` runs the capture on the workers over ssh, into the run's bucket."""
  from test_launch import COMMON, dry_run
  lines = dry_run('profile', *COMMON, '--accelerator=v3-32', '--workdir=gs://my-bucket/run', '--worker=all',
                  '--seconds=3', '--profiler_port=9012')[::2]
  assert lines == [f'gcloud compute tpus tpu-vm ssh albert --zone=europe-west4-a --worker={w} \'--command=cd '
                   f'$HOME/albert_jax && .venv/bin/python -m albert_jax.profiling --port=9012 --seconds=3 '
                   f'--log_dir=gs://my-bucket/run/profiles\'' for w in range(4)]
  assert len(dry_run('profile', *COMMON, '--accelerator=v3-32', '--workdir=gs://my-bucket/run')[::2]) == 1


def test_a_run_error_is_one_line_with_exit_status_1(tmp_path):
  """What the command-line tools do with a RunError (the fit check's choice out of memory): the line alone on
  stderr, no traceback, exit status 1 (status 2 is kept for input the user can fix)."""
  script = ('from albert_jax.config import run_cli\nfrom albert_jax.errors import RunError\n'
            'def main(argv):\n  raise RunError("step 5 ran out of device memory (...)")\nrun_cli(main)\n')
  ran = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120)
  assert ran.returncode == 1 and ran.stderr == 'error: step 5 ran out of device memory (...)\n', ran.stderr
