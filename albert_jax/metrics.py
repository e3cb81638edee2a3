"""Throughput, MFU against the device's peak, progress lines with ETA, and TensorBoard scalars."""
import io
import os
import resource
import socket
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2

from albert_jax import accelerators, paths


def measured_matmul_flops(size: int = 1024, repeats: int = 5, dtype: str = 'float32') -> float:
  """FLOP/s of a square matmul on the default device, queued back to back (one stream: the last done means all
  are): the peak we compare CPUs with, and the benches' measured rate."""
  x = jax.random.normal(jax.random.key(0), (size, size), jnp.dtype(dtype))
  matmul = jax.jit(lambda a: a @ a)
  matmul(x).block_until_ready()
  start = time.perf_counter()
  for _ in range(repeats):
    y = matmul(x)
  y.block_until_ready()
  return 2 * size ** 3 * repeats / (time.perf_counter() - start)


def peak_flops_per_device() -> tuple:
  """(FLOP/s, where the figure comes from)."""
  kind = jax.devices()[0].device_kind
  if accelerators.bf16_peak(kind):
    return accelerators.bf16_peak(kind), f'{kind} bf16 peak'
  return measured_matmul_flops(), f'{kind} measured fp32 matmul'


def memory_in_use() -> dict:
  stats = jax.local_devices()[0].memory_stats() or {}  # jax.devices()[0] belongs to host 0 only
  out = {'host_max_rss_gib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}
  if 'bytes_in_use' in stats:
    out['device_gib_in_use'] = stats['bytes_in_use'] / 2 ** 30
  return out


class Progress:
  """Steps/s, examples/s, tokens/s, MFU and ETA between reports. The clock starts when the first step after a
  start or resume has finished: that one warms up (first transfers and allocations) and would skew the rates."""

  def __init__(self, last_step: int, flops_per_step: float, peak_flops: float, devices: int):
    self.last_step, self.flops_per_step, self.peak = last_step, flops_per_step, peak_flops * devices
    self.mark_time = None
    self.steps = self.examples = self.tokens = self.flops = 0

  def add(self, examples: int, tokens: int, flops: Optional[float] = None) -> None:
    """One step has finished; `flops`: its work where steps differ (fine-tuning's lengths), else flops_per_step."""
    if self.mark_time is None:
      self.mark_time = time.perf_counter()
      return
    self.steps, self.examples, self.tokens = self.steps + 1, self.examples + examples, self.tokens + tokens
    self.flops += self.flops_per_step if flops is None else flops

  def report(self, step: int) -> dict:
    """Rates since the last report; empty while warming up."""
    if not self.steps:
      return {}
    now = time.perf_counter()
    seconds = now - self.mark_time
    out = {'steps_per_sec': self.steps / seconds, 'examples_per_sec': self.examples / seconds,
           'tokens_per_sec': self.tokens / seconds, 'mfu': self.flops / seconds / self.peak,
           'eta_seconds': (self.last_step - step) * seconds / self.steps}
    self.mark_time, self.steps, self.examples, self.tokens, self.flops = now, 0, 0, 0, 0
    return out

  @staticmethod
  def line(report: dict) -> str:
    if 'steps_per_sec' not in report:
      return 'warming up (rates from the next report on)'
    return (f'{report["steps_per_sec"]:.2f} steps/s  {report["examples_per_sec"]:.0f} ex/s  MFU '
            f'{100 * report["mfu"]:.1f}%  ETA {format_eta(report["eta_seconds"])}')


def format_eta(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


def _majority_and_count(metrics: dict, name: str) -> str:
  return f'(majority {metrics[f"eval_{name}_majority"]:.3f}, n {metrics[f"eval_{name}_count"]:,})'


def held_out_line(metrics: dict) -> str:
  """Held-out metrics for the console: each sentence accuracy with its majority rate (what always guessing the
  commoner label scores) and its count."""
  parts = [f'mlm_accuracy {metrics["eval_mlm_accuracy"]:.4f} (n {metrics["eval_mlm_count"]:,})',
           f'mlm_loss {metrics["eval_mlm_loss"]:.4f}']
  for key in metrics:  # with several sources, each one's
    if key.endswith('_mlm_accuracy') and key != 'eval_mlm_accuracy':
      label = key[len('eval_'):-len('_mlm_accuracy')]
      parts.append(f'{label} {metrics[key]:.4f} (n {metrics[f"eval_{label}_mlm_count"]:,})')
  for name in ('sop', 'swap', 'random'):
    if f'eval_{name}_accuracy' in metrics:
      parts.append(f'{name}_accuracy {metrics[f"eval_{name}_accuracy"]:.4f} {_majority_and_count(metrics, name)}')
  if 'eval_blimp_accuracy' in metrics:  # chance 0.5
    parts.append(f'blimp {metrics["eval_blimp_accuracy"]:.4f} (n {metrics["eval_blimp_count"]:,} pairs)')
  return '  '.join(parts)


def held_out_change(first: dict, last: dict, sentence_task: str) -> str:
  """The run's closing line: each held-out accuracy from the first evaluation to the last, the probes with their
  majority rates and counts, and the run's own pairs only if it has a sentence task (else they have no labels)."""
  def change(name, what):
    return (f'{what} {first[f"eval_{name}_accuracy"]:.3f} -> {last[f"eval_{name}_accuracy"]:.3f} '
            f'{_majority_and_count(last, name)}')
  parts = [f'MLM accuracy {first["eval_mlm_accuracy"]:.3f} -> {last["eval_mlm_accuracy"]:.3f}',
           change('swap', 'sentence order on swap pairs'), change('random', 'random pairs')]
  if sentence_task != 'none':
    parts.append(change('sop', f'its own {sentence_task} pairs'))
  if 'eval_blimp_accuracy' in first and 'eval_blimp_accuracy' in last:
    parts.append(f'BLiMP {first["eval_blimp_accuracy"]:.3f} -> {last["eval_blimp_accuracy"]:.3f} (chance 0.5, '
                 f'n {last["eval_blimp_count"]:,} pairs)')
  return 'held-out ' + '; '.join(parts)


class Writer:
  """TensorBoard event files (process 0 only), written without TensorFlow: each scalar is an Event record holding
  a `simple_value`, framed as TFRecords (tensorboard's RecordWriter), in a new file per run or resume, as
  tf.summary does. The tags are the metric names.

  A local file grows as records come. An object in a bucket cannot be appended to, so there the file is written
  whole again (what tf.io.gfile does on a flush): at most every `upload_every` seconds, and on flush(), which the
  loop calls with each checkpoint so that the curves are never behind the run's resumable state."""

  def __init__(self, workdir, enabled: bool, upload_every: float = 60.0):
    self.file = None
    if enabled:
      from tensorboard.summary.writer.record_writer import RecordWriter
      directory = paths.path(workdir) / 'tensorboard'
      directory.mkdir(parents=True, exist_ok=True)
      now = time.time()
      self.file = directory / f'events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.v2'
      self.whole_file = paths.is_url(self.file)
      self.upload_every, self.uploaded_at = upload_every, 0.0
      self.pending = io.BytesIO()  # in a bucket: the whole file; on a disk: what is not yet appended
      self.records = RecordWriter(self.pending)
      self.records.write(event_pb2.Event(wall_time=now, file_version='brain.Event:2').SerializeToString())
      self.flush()

  def scalars(self, step: int, values: dict) -> None:
    if self.file is None:
      return
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=name, simple_value=float(value))
                                         for name, value in values.items()
                                         if np.ndim(value) == 0 and np.isfinite(value)])
    self.records.write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())
    if not self.whole_file or time.time() - self.uploaded_at >= self.upload_every:
      self.flush()

  def flush(self) -> None:
    if self.file is None:
      return
    if self.whole_file:
      self.file.write_bytes(self.pending.getvalue())
      self.uploaded_at = time.time()
    else:
      with self.file.open('ab') as f:
        f.write(self.pending.getvalue())
      self.pending.seek(0)
      self.pending.truncate()

  close = flush  # nothing stays open between flushes


def tensorboard_scalars(workdir) -> tuple:
  """(the wall time of the run's first event, {tag: [(wall time, step, value)]}) from all of a run's TensorBoard
  files (a resumed run writes one more), read by TensorBoard's own reader; a bucket's files are read through a local
  copy (the reader opens local paths)."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  series, start = {}, None
  for path in sorted((paths.path(workdir) / 'tensorboard').glob('events.out.tfevents.*')):
    with paths.local_copy(path) as local:
      events = EventAccumulator(local, size_guidance={'scalars': 0})
      events.Reload()
    first = events.FirstEventTimestamp()
    start = first if start is None else min(start, first)
    for tag in events.Tags()['scalars']:
      series.setdefault(tag, []).extend((e.wall_time, e.step, e.value) for e in events.Scalars(tag))
  return start, series
