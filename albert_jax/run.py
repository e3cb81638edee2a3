"""What a pretraining run (train.py) and a fine-tuning run (finetune.py) share around their own steps: the workdir
checks and the mesh, host 0's voice, the compiled step with out of memory as a one-line error, and the loop's frame
(TensorBoard, progress, SIGTERM, the non-finite check, a clean stop). Each entry point keeps its own main, which
reads top to bottom in the order things happen; these are the steps of it that both take alike.
"""
import gc
import signal
from typing import Callable

import jax
import numpy as np

from albert_jax import checkpoint, failures, goodput, metrics, paths, sharding
from albert_jax import step as step_lib
from albert_jax.errors import ConfigError


def check_workdir_and_make_mesh(workdir: paths.Path, config, devices=None):
  """The mesh from config.mesh over `devices` (default: all), once the workdir (made by paths.make_folder, the
  entry point's first check) is known to be shared by every host and to hold no other model's run."""
  checkpoint.check_shared(workdir)
  checkpoint.check_workdir(workdir, config)
  return sharding.make_mesh(config.mesh, devices)


def host_voice() -> Callable[[str], None]:
  """print for host 0, which speaks for all; on a pod its lines say so, as each worker's log is read on its own."""
  host, hosts = jax.process_index(), jax.process_count()
  return lambda text: print(f'[host 0/{hosts}] ' * (hosts > 1) + text, flush=True) if host == 0 else None


def compile_step(program, abstract_state, abstract_batch, mesh, what: str, fix: str):
  """The train step compiled ahead of time; a step too big for the devices stops here, before a checkpoint is
  restored or a batch is made, in one line: the `what` step does not fit, and `fix`."""
  try:
    return step_lib.compile_train_step(program, abstract_state, abstract_batch, mesh)
  except step_lib.OutOfMemory as e:
    raise ConfigError(f'the {what} step does not fit in device memory ({e}): {fix}') from None


class Loop:
  """The frame of a training loop: TensorBoard's writer (host 0), steps/s and MFU, SIGTERM turned into a flag the
  loop checks after each step (a preempted VM gets a checkpoint, then a clean exit), and the non-finite check.
  Given the attempt's goodput.Ledger, also its record kept up to date (host 0) and the watchdog on its clock that
  ends a run that hangs."""

  def __init__(self, workdir, num_steps: int, flops_per_step: float, mesh, ledger=None, stall_seconds: float = 0):
    self.stop_signal = None
    if jax.process_count() == 1:
      signal.signal(signal.SIGTERM, lambda signum, frame: setattr(self, 'stop_signal', signum))
    # else JAX's own SIGTERM handler (its preemption service) tells the hosts, which agree on the step to stop at
    self.writer = metrics.Writer(workdir, enabled=jax.process_index() == 0)
    self.peak, self.peak_source = metrics.peak_flops_per_device()
    self.progress = metrics.Progress(num_steps, flops_per_step, self.peak, len(mesh.devices.flat))
    self.ledger = ledger
    if ledger:
      ledger.keep_writing()
    self.watchdog = failures.Watchdog(ledger.clock, stall_seconds) if ledger else None

  def preempted(self, step: int) -> bool:
    """Whether to save and stop after `step`: SIGTERM came (a preempted VM, `launch.tpu stop`). On several hosts,
    JAX's preemption service makes every host answer True at the same step, whichever got the signal, so that they
    save that step's checkpoint together."""
    if jax.process_count() == 1:
      return self.stop_signal is not None
    from jax.experimental import multihost_utils
    return multihost_utils.reached_preemption_sync_point(step)

  def log(self, step: int, report: dict) -> None:
    """A log step's scalars to TensorBoard, with the goodput so far."""
    self.writer.scalars(step, {**report, **goodput.scalars(self.ledger.attempts())})

  def saved(self, step: int) -> None:
    """After a checkpoint's save began: the curves and the goodput record in step with it (in a bucket too)."""
    self.writer.flush()
    self.ledger.clock.saved(step)
    self.ledger.write()

  def check_finite(self, step: int, step_metrics: dict, checkpoints, advice: str, close=()) -> None:
    """Stops the run where the loss or the gradient is not finite, saving nothing from this step; what is open
    (`close`, the checkpoints' writes, the curves up to here, which are what tells why) is closed first."""
    if all(np.isfinite(step_metrics[k]) for k in ('loss', 'grad_norm')):
      return
    self.finish(checkpoints, close)
    raise FloatingPointError(f'non-finite loss or gradient at step {step} (loss {step_metrics["loss"]}, gradient '
                             f'norm {step_metrics["grad_norm"]}); nothing was saved from this step. The last '
                             f'checkpoint is intact: {advice} and resume.')

  def finish(self, checkpoints, close=()) -> None:
    """Closes what is open, waits for the checkpoints' writes, and writes the curves out; what train.py froze
    before its loop (gc.freeze) goes back to the garbage collector, so that a process that trains again (a sweep
    in one process, the tests) frees it."""
    if self.watchdog:  # what follows may wait on storage, which the clients' own retries bound
      self.watchdog.stop()
    for thing in close:
      thing.close()
    checkpoints.wait_until_finished()
    self.writer.close()
    if self.ledger:
      self.ledger.close()
    gc.unfreeze()
