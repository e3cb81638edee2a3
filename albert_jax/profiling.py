"""Where a step's time and memory go: a trace of chosen training steps (train.profile_steps), a profiler server a
running job can be captured from on demand (train.profiler_port; `python -m albert_jax.profiling`, which `launch.tpu
profile` runs on a worker), and a step that runs out of device memory leaving its memory profile.

  python -m albert_jax.profiling --port=9999 --seconds=5 --log_dir=gs://BUCKET/run/profiles

Traces are written as JAX's profiler writes them, under LOG_DIR/plugins/profile/RUN/ (RUN: steps_A-B for a window
of steps, the time for a capture): HOST.xplane.pb (what XProf and TensorBoard's profile tab read: `pip install
xprof; xprof --logdir=LOG_DIR`), HOST.trace.json.gz (Chrome's trace format) and, for a window of steps,
perfetto_trace.json.gz (Perfetto's UI opens either). A memory profile is pprof's format.
"""
import argparse
import contextlib
import pathlib
import shutil
import sys
import tempfile
from typing import Callable

import jax

from albert_jax import fit, paths
from albert_jax.errors import ConfigError, RunError

OPEN_HINT = 'pip install xprof && xprof --logdir={logdir} --port=8791 (or TensorBoard\'s profile tab, xprof installed)'


def options() -> jax.profiler.ProfileOptions:
  """The host's and the devices' activity, not every Python call (JAX's default traces those too: a trace of a
  few steps grows to megabytes of interpreter frames)."""
  chosen = jax.profiler.ProfileOptions()
  chosen.python_tracer_level = 0
  return chosen


_serving = set()


def serve(port: int) -> None:
  """The profiler server on `port` (0: none), once per process, for captures on demand while the run trains."""
  if port and port not in _serving:
    jax.profiler.start_server(port)
    _serving.add(port)


def staging() -> str:
  """A local folder for the profiler to write a trace into, which `publish` moves to where it is bound: the
  profiler's own storage client would reach around paths.py and its retries, its Perfetto file is written with
  pathlib, and it names its folder by the second it wrote it, which hosts sharing a folder could both take."""
  return tempfile.mkdtemp(prefix='albert_profile_')


def publish(local: str, logdir, name: str = '') -> str:
  """The trace just written into `local`, moved to `logdir` (local or a bucket's) under plugins/profile/`name`, or
  under the profiler's own folder name (the time) without one; a window's `name` puts every host's file of it in
  one folder, which XProf shows as one run of several hosts. Returns its folder there."""
  written, = pathlib.Path(local).glob('plugins/profile/*')
  folder = paths.path(logdir) / 'plugins' / 'profile' / (name or written.name)
  paths.copy_tree(written, folder)
  shutil.rmtree(local)
  return str(folder)


class Window:
  """The trace of train.profile_steps steps from step train.profile_from (those steps' work on the host and the
  devices): started before the step runs, stopped once its results are back. Never the first step of a start (it
  may compile), and cut short before an evaluation or a checkpoint save the window reaches, unless
  train.profile_saves. On host 0, or on every host (train.profile_hosts 'all'). Also the guard around each step
  that turns running out of device memory into its memory profile and one line (`guard`)."""

  def __init__(self, train_config, workdir, first_step: int, say: Callable[[str], None],
               saves_after: Callable[[int], bool], finish: Callable[[], None] = lambda: None):
    """`saves_after(step)`: whether an evaluation or a checkpoint save follows the step; `finish`: what closes the
    run before it stops for memory (the loop's finish: checkpoints still being written complete)."""
    self.logdir = paths.path(workdir) / 'profiles'
    self.say, self.saves_after, self.finish = say, saves_after, finish
    self.include_saves = train_config.profile_saves
    count = train_config.profile_steps
    here = train_config.profile_hosts == 'all' or jax.process_index() == 0
    self.first = max(train_config.profile_from, first_step + 2)  # never the first step of this start
    self.last = train_config.profile_from + count - 1
    self.wanted = bool(count) and here and self.first <= self.last
    self.tracing_since = None
    serve(train_config.profiler_port)

  def begin(self, step: int) -> None:
    """Before step `step` runs."""
    if self.wanted and step == self.first:
      self.local = staging()
      jax.profiler.start_trace(self.local, create_perfetto_trace=True, profiler_options=options())
      self.tracing_since = step

  def end(self, step: int) -> None:
    """After step `step`'s results are on the host."""
    if self.tracing_since is not None and (step == self.last or (self.saves_after(step) and not self.include_saves)):
      self.stop(step)

  def stop(self, step: int) -> None:
    jax.profiler.stop_trace()
    since = self.tracing_since
    folder = publish(self.local, self.logdir, name=f'steps_{since}-{step}')
    self.tracing_since, self.wanted = None, False
    self.say(f'profile of step{"s" if step > since else ""} {since}{f"-{step}" if step > since else ""} '
             f'(host {jax.process_index()}): {folder}; open it: {OPEN_HINT.format(logdir=self.logdir)}')

  @contextlib.contextmanager
  def guard(self, step: int, program_settings: dict):
    """Around step `step`, from its dispatch until its results are on the host: running out of device memory saves
    the device memory profile next to the run and stops it with one line; `program_settings`: what was chosen for
    the step (model.remat, train.grad_accum_steps) and whether the user set it (True) or the fit check (False)."""
    self.begin(step)
    try:
      # Marked as a step for any trace, this window's or one captured on demand: XProf's step-time breakdown and the
      # trace viewer's step rows go by it. (Without a trace running it is a no-op.)
      with jax.profiler.StepTraceAnnotation('train', step_num=step):
        yield
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      if self.tracing_since is not None:
        self.stop(step)
      self.finish()
      raise out_of_memory(e, step, self.logdir, program_settings) from None
    self.end(step)


def out_of_memory(error: Exception, step: int, logdir, program_settings: dict) -> Exception:
  """The memory profile of the devices as the step failed, saved, and the one-line error to stop with: bad input
  (ConfigError) where the user set what the step holds at once; a RunError where the fit check chose it."""
  profile = paths.path(logdir) / f'memory-step{step}-host{jax.process_index()}.prof'
  profile.parent.mkdir(parents=True, exist_ok=True)
  profile.write_bytes(jax.profiler.device_memory_profile())
  what = str(error).strip().splitlines()[0]
  settings = ', '.join(f'{name} {value}' for name, (value, _) in program_settings.items())
  given = all(by_user for _, by_user in program_settings.values())
  remat = program_settings['model.remat'][0]
  lighter = fit.REMAT_BY_MEMORY[fit.REMAT_BY_MEMORY.index(remat) + 1:] if remat in fit.REMAT_BY_MEMORY else ()
  lighter = (f'--config.train.grad_accum_steps={2 * program_settings["train.grad_accum_steps"][0]}'
             + (f' or a later --config.model.remat ({", ".join(lighter)})' if lighter else ''))
  message = (f'step {step} ran out of device memory ({what}) with {settings}'
             + ('' if given else ' (the fit check\'s choice: it judged them to fit)')
             + f'; the devices\' memory profile (pprof) is {profile}. Set {lighter}, and resume.')
  return ConfigError(message) if given else RunError(message)


def capture(address: str, seconds: float, logdir: str) -> str:
  """A trace of `seconds` of the process serving a profiler at `address` (host:port), written under `logdir`
  (local or gs://) while it runs on; returns the folder written. Needs XProf's client (pip install xprof)."""
  try:
    from xprof.convert import _pywrap_profiler_plugin  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConfigError('capturing a profile needs XProf\'s client: pip install xprof (or albert_jax[profile]).') from None
  local = staging()
  _pywrap_profiler_plugin.trace(address, local, '', True, int(seconds * 1000), 3,
                                {'host_tracer_level': 2, 'python_tracer_level': 0, 'device_tracer_level': 1})
  return publish(local, logdir)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m albert_jax.profiling', description=__doc__.split('\n')[0])
  parser.add_argument('--port', type=int, required=True, help='the run\'s train.profiler_port')
  parser.add_argument('--host', default='127.0.0.1', help='where the run is (default: this machine)')
  parser.add_argument('--seconds', type=float, default=5.0, help='how long to trace')
  parser.add_argument('--log_dir', required=True, help='where to write the trace (the run\'s WORKDIR/profiles)')
  args = parser.parse_args(argv)
  try:
    folder = capture(f'{args.host}:{args.port}', args.seconds, args.log_dir)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except jax.errors.JaxRuntimeError as e:  # nothing listening there, or the capture failed
    print(f'error: no profile from {args.host}:{args.port} ({str(e).splitlines()[0]}): is a run with '
          f'--config.train.profiler_port={args.port} training there?', file=sys.stderr)
    return 1
  print(f'profile of {args.seconds:g} s of {args.host}:{args.port}: {folder}; open it: '
        f'{OPEN_HINT.format(logdir=args.log_dir)}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
