"""Will this run fit on that TPU pod? Compiles the exact training step (model, optimizer, shardings, batch) for a
TPU topology on a machine without TPUs, with libtpu's compile-only devices (the [tpu] extra).

  python -m albert_jax.aot --config=configs/xxlarge.py --topology=v3-512 [--config.model.remat=full] [--mfu=0.4]
  python -m albert_jax.aot --config=configs/base.py --topology=v3-64,v3-128 --format=markdown   # table rows
  python -m albert_jax.aot --config=configs/large.py --topology=v6e-256 --smallest   # and the smallest v6e slice
  python -m albert_jax.aot --config=configs/xxlarge.py --topology=v5e-256 --smallest --accumulate

Reports per-device memory (parameters, optimizer state, batch, temporaries, peak) against the device's HBM, whether
it fits, the analytic FLOPs per step and the step time they imply at a stated MFU. When it does not fit it looks
for a remat policy that fits and for the fewest microbatches (train.grad_accum_steps) that fit, alone or with full
remat, else the largest per-device batch that does; --largest_batch looks for the largest batch even when the
configured one fits; --smallest walks down from each slice to the smallest one of its generation that still fits the
configured batch (with --accumulate, splitting it into more microbatches as the slices shrink). Over several slices (2xv5e-256) it reports what the compiled step sends over
the data-center network. Each try is one compile (seconds to a minute).
"""
import dataclasses
import math
import os
import re
from typing import Optional

import jax
from absl import flags
from ml_collections import config_flags

from albert_jax import accelerators, fit, metrics, pretrained, sharding
from albert_jax.config import run_cli, validate
from albert_jax.data import pipeline
from albert_jax.errors import ConfigError
from albert_jax.summary import count_params, training_flops_per_sequence

GIB = accelerators.GIB
Check, REMAT_BY_MEMORY, gib = fit.Check, fit.REMAT_BY_MEMORY, fit.gib


@dataclasses.dataclass(frozen=True)
class Topology:
  name: str  # v3-512 (several slices: 2xv5e-256)
  chip_grid: str  # as libtpu takes it: v3:16x16
  chip_config: Optional[str]
  devices: int  # in all slices
  hbm_bytes: int  # per JAX device
  num_slices: int = 1
  slice: Optional[accelerators.Slice] = None  # one of them

  def compile_only_devices(self):
    from jax.experimental import topologies
    kwargs = {'chip_config_name': self.chip_config} if self.chip_config else {}
    if self.num_slices > 1:
      kwargs['num_slices'] = self.num_slices
    if self.slice and self.slice.chips == 1:  # libtpu's default host of 2x2 chips does not divide a 1x1 grid
      kwargs['chips_per_host_bounds'] = [1, 1, 1]
    try:
      return topologies.get_topology_desc(topology_name=self.chip_grid, platform='tpu', **kwargs).devices
    except (RuntimeError, ValueError) as e:
      raise RuntimeError(f'libtpu could not describe {self.name} ({self.chip_grid}): {e}. The check needs the '
                         f"TPU build of jaxlib: pip install -e '.[tpu]'.") from e


def topology(name: str) -> Topology:
  """'v3-512' -> the v3:16x16 grid of 256 chips, 512 devices; '2xv5e-256' -> two such slices. Chips are laid out
  as Cloud TPU does: a square or 2:1 grid for 2-D generations, and for 3-D ones 2x2x1 at 4 chips, then doubling
  z, y, x in turn from 2x2x2."""
  several = re.fullmatch(r'(\d+)x(.+)', name.strip().lower())  # 2xv5e-256, 2xtpu7x-16
  slices, one = several.groups() if several else ('1', name)
  tpu = accelerators.tpu_slice(one)
  generation, chips, num_slices = tpu.generation, tpu.chips, int(slices)
  if num_slices > 1 and not generation.multislice:
    raise ConfigError(f'{name}: {generation.name} slices cannot be joined (multislice is v4 and later).')
  if generation.grid_dims == 2:
    x = 2 ** (int(math.log2(chips)) // 2)
    grid = (x, chips // x)
  elif chips < 8:
    grid = (min(chips, 2), max(chips // 2, 1), 1)
  else:
    grid, axis = [2, 2, 2], 2
    while math.prod(grid) < chips:
      grid[axis] *= 2
      axis = (axis - 1) % 3
    grid = tuple(grid)
  one_name = f'{generation.name}-{tpu.size}'
  return Topology(one_name if num_slices == 1 else f'{num_slices}x{one_name}',
                  f'{generation.name}:{"x".join(map(str, grid))}', generation.chip_config,
                  tpu.devices * num_slices, generation.hbm_bytes, num_slices, tpu)


# XLA's TPU compiler lowers the part of a collective that crosses slices to host transfers handled by its
# "megascale" runtime over the data-center network: one send per device and transfer, its shape what that device
# sends (a 1/N share of a large gradient; small ones, packed together, go whole from every device).
_DCN_SEND = re.compile(r'= \(([a-z]+[0-9]*)\[([0-9,]*)\][^\n]* send\([^\n]*xla_megascale_runtime')
_BYTES_PER_ELEMENT = {'pred': 1, 's8': 1, 'u8': 1, 'bf16': 2, 'f16': 2, 's16': 2, 'f32': 4, 's32': 4, 'u32': 4,
                      'f64': 8, 's64': 8, 'u64': 8}


def cross_slice_bytes(compiled_text: str, devices_per_slice: int) -> int:
  """Bytes one slice sends over the data-center network per step, read from the compiled program's transfers
  (shapes include the TPU's tile padding, so a model of small dimensions reads high)."""
  return devices_per_slice * sum(_BYTES_PER_ELEMENT[dtype] * math.prod(int(d) for d in dims.split(',') if d)
                                 for dtype, dims in _DCN_SEND.findall(compiled_text))


def check_libtpu(generation: accelerators.TpuGeneration) -> None:
  """A libtpu too old for the generation crashes the process while compiling: say so first, with the fix."""
  if not generation.min_libtpu:
    return
  from importlib import metadata
  number = lambda version: tuple(int(x) for x in re.findall(r'\d+', version))
  installed = metadata.version('libtpu')
  if number(installed) < number(generation.min_libtpu):
    raise ConfigError(f'{generation.name}: libtpu {installed} crashes compiling steps for it; install libtpu '
                      f'{generation.min_libtpu} or newer (the newest jax[tpu], which needs Python 3.12: '
                      f"pip install -e '.[tpu]' in a Python 3.12 venv).")


def check(config, topo: Topology, devices=None) -> Check:
  """The step of `config` compiled for `topo` (its compile-only devices, or `devices`): fit.check, with what one
  slice sends over the data-center network where there are several."""
  check_libtpu(topo.slice.generation)
  devices = devices if devices is not None else topo.compile_only_devices()
  found = fit.check(config, devices, f' of {topo.name}')
  if found.fits and topo.num_slices > 1:
    found.dcn_bytes = cross_slice_bytes(found.compiled.as_text(), topo.devices // topo.num_slices)
  found.compiled = None  # the report keeps its figures, not the executable
  return found


def suggest(config, checked, first: Check, largest_batch: bool) -> list:
  """Further checks. Where the configured step does not fit: stronger remat policies at the configured batch, and
  the fewest microbatches (train.grad_accum_steps) that fit it, with the configured policy or else with full remat;
  if none fits, the largest batch that fits with full remat. If asked, the largest batch that fits as configured.
  Batches are searched over multiples of the data-parallel size, doubling or halving, then bisecting to within an
  eighth. `checked(config) -> Check` compiles each (once)."""
  tries, remat = [], config.model.remat
  if not first.fits:
    for policy in REMAT_BY_MEMORY[REMAT_BY_MEMORY.index(remat) + 1:]:
      tries.append(checked(fit.with_settings(config, policy, config.train.grad_accum_steps)))
      if tries[-1].fits:
        break
    for policy in dict.fromkeys((remat, REMAT_BY_MEMORY[-1])):  # accumulation alone, else with full remat
      if fit.fewest_microbatches(checked, config, policy, first.per_shard, first.microbatches + 1, tries):
        break
    if any(t.fits for t in tries):
      return tries
    remat = REMAT_BY_MEMORY[-1]
  elif not largest_batch:
    return tries
  dp = first.batch_size // first.per_shard
  fits = lambda per_shard: tries.append(checked(fit.with_settings(
      config, remat, config.train.grad_accum_steps, per_shard * dp))) or tries[-1].fits
  if first.fits:
    low, high = config.train.batch_size // dp, None
    while high is None:
      low, high = (2 * low, None) if fits(2 * low) else (low, 2 * low)
  else:
    low, high = None, config.train.batch_size // dp
    while low is None and high > 1:
      low, high = (high // 2, high) if fits(high // 2) else (None, high // 2)
    if low is None:
      return tries
  while high - low > max(1, low // 8):
    middle = (low + high) // 2
    low, high = (middle, high) if fits(middle) else (low, middle)
  return tries


def smallest_slice(config, topo: Topology, fitting: Check, accumulate: bool = False):
  """The smallest slice of `topo`'s generation that fits the configured batch, and its check: halving while the
  step fits with full remat (with `accumulate`, in more microbatches where it does not, as many more as the slice
  has fewer devices), then on the last that does, the first policy that fits, from the one that fitted on
  `topo` (a smaller slice holds more of the batch per device, so it needs at least as strong a policy); with
  `accumulate`, the fewest microbatches that fit there alone, else with the weakest policy that fits."""
  smallest, found, batch, full = topo, fitting, config.train.batch_size, REMAT_BY_MEMORY[-1]
  candidate = topo.slice.smaller()
  while candidate:
    smaller = topology(candidate.cloud_name)
    tried = check(fit.with_settings(config, full, found.microbatches, batch), smaller)
    if not tried.fits and accumulate:  # as many rows per microbatch as on the larger slice (4 -> 1 chip: 4x)
      more = found.microbatches * smallest.devices // smaller.devices
      tried = check(fit.with_settings(config, full, more, batch), smaller)
    if not tried.fits:
      break
    smallest, found, candidate = smaller, tried, candidate.smaller()
  if smallest is topo:
    return smallest, found
  if accumulate:
    tries = []
    on_smallest = lambda c: check(c, smallest)
    alone = fit.fewest_microbatches(on_smallest, config, config.model.remat, found.per_shard, 1, tries)
    if alone:
      return smallest, alone
    found = fit.fewest_microbatches(on_smallest, config, full, found.per_shard, 1, tries) or found
  for policy in REMAT_BY_MEMORY[REMAT_BY_MEMORY.index(fitting.remat):-1]:
    weaker = check(fit.with_settings(config, policy, found.microbatches, batch), smallest)
    if weaker.fits:
      return smallest, weaker
  return smallest, found


def describe(c: Check, topo: Topology) -> str:
  return fit.describe(c, topo.hbm_bytes)


def on_slices(config, topo: Topology):
  """The config with its data axis over the topology's slices (mesh.dcn_data), which must match them."""
  if config.mesh.get('dcn_data', 1) == topo.num_slices:
    return config
  if config.mesh.get('dcn_data', 1) != 1:
    raise ConfigError(f'config.mesh.dcn_data {config.mesh.dcn_data} does not match {topo.name}, '
                      f'{topo.num_slices} slice(s).')
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.mesh.dcn_data = topo.num_slices
  return config


def report(config, topo: Topology, mfu: float, largest_batch: bool = False, devices=None,
           smallest: bool = False, accumulate: bool = False) -> dict:
  if smallest and topo.num_slices > 1:
    raise ConfigError(f'--smallest looks for the smallest single slice: give one slice ({topo.slice.cloud_name}), '
                      f'not {topo.name}.')
  devices = devices if devices is not None else topo.compile_only_devices()
  checked = fit.once_each(lambda c: check(c, topo, devices))  # for the report and train's choice alike
  given = on_slices(config, topo)
  train_line = None
  if any(fit.autos(given)):  # what train.py will choose on this slice, by the same search
    try:
      train_line = fit.choose(given, devices, f' of {topo.name}', try_config=checked)[2]
    except ConfigError as e:
      train_line = f'stops before step 1: {e}'
  config = fit.start(given)  # 'auto' at the search's start: the step as configured, no remat, the whole batch
  first = checked(config)
  tries = suggest(config, checked, first, largest_batch)
  model_config = validate(config)
  flops = training_flops_per_sequence(model_config, config.data.max_seq_length,
                                      config.data.max_predictions_per_seq) * config.train.batch_size
  peak_flops = accelerators.bf16_peak(devices[0].device_kind)
  if peak_flops is None:
    raise ConfigError(f'no bf16 peak is known for {devices[0].device_kind!r} devices ({topo.name}): add it to '
                      f'albert_jax/accelerators.py.')
  step_seconds = flops / (topo.devices * peak_flops * mfu)
  lines = [f'{topo.name} ({topo.chip_grid}, {topo.devices} x {devices[0].device_kind}, {gib(topo.hbm_bytes)} HBM '
           f'each), mesh {dict(sharding.make_mesh(config.mesh, devices).shape)}, sequence '
           f'{config.data.max_seq_length}',
           '  ' + describe(first, topo),
           f'  {flops:.3g} FLOPs per step (analytic), {flops / topo.devices:.3g} per device; at {mfu:.0%} MFU of '
           f'{peak_flops / 1e12:g} TFLOP/s: {step_seconds:.3g} s/step, {config.train.num_steps:,} steps in '
           f'{metrics.format_eta(step_seconds * config.train.num_steps)}']
  for t in tries:
    lines.append('  try ' + describe(t, topo))
  if train_line:
    lines.append(f'  train: {train_line}')
  fitting = [t for t in tries if t.fits]
  # At the configured batch: the fewest microbatches alone, else a policy alone, else the two together.
  options = sorted((t for t in fitting if t.batch_size == first.batch_size),
                   key=lambda t: (t.remat != first.remat, t.microbatches != first.microbatches, t.microbatches,
                                  REMAT_BY_MEMORY.index(t.remat)))
  best = options[0] if options else max(fitting, key=lambda t: t.batch_size) if fitting else None
  at_batch = first if first.fits else best if best and best.batch_size == first.batch_size else None
  dcn_bytes = at_batch.dcn_bytes if at_batch else None
  if dcn_bytes is not None:  # data parallelism over slices: what crosses them should be the fp32 gradients
    gradients = 4 * count_params(model_config)['total']
    ratio, rate = dcn_bytes / gradients, dcn_bytes / step_seconds
    lines.append(f'  between slices (mesh.dcn_data={topo.num_slices}, remat {at_batch.remat}): the compiled step '
                 f'sends {dcn_bytes / 1e9:.3g} GB per slice per step over the data-center network ({ratio:.2f} x '
                 f'the {gradients / 1e9:.3g} GB of fp32 gradients), {rate / 1e9:.3g} GB/s at that step time')
  suggestion = None
  if not first.fits:
    others = [fit.setting(t, first) for t in options[1:] if t.microbatches == first.microbatches]  # a policy alone
    suggestion = (fit.setting(best, first) + ''.join(f' (or {other})' for other in others[:1]) if best else
                  'nothing tried fits: shard parameters over mesh.fsdp or mesh.model')
    if not train_line:  # with 'auto', the train line says what it will take
      lines.append(f'  suggestion: {suggestion}')
  elif largest_batch and best:
    lines.append(f'  largest batch that fits with remat {best.remat}: {best.batch_size}')
  smallest_found = None
  if smallest:
    if at_batch is None:
      lines.append(f'  no {topo.slice.generation.name} slice up to {topo.name} fits batch {first.batch_size}')
    else:
      slice_, found = smallest_slice(config, topo, at_batch, accumulate)
      seconds = step_seconds * topo.devices / slice_.devices
      smallest_found = (slice_, found, seconds)
      lines.append(f'  smallest {topo.slice.generation.name} slice that fits batch {found.batch_size}: {slice_.name}, '
                   f'{describe(found, slice_)}; {seconds:.3g} s/step, {config.train.num_steps:,} steps in '
                   f'{metrics.format_eta(seconds * config.train.num_steps)}')
  return {'text': '\n'.join(lines), 'first': first, 'tries': tries, 'best': best, 'suggestion': suggestion,
          'train': train_line,
          'flops_per_step': flops, 'step_seconds': step_seconds, 'num_steps': config.train.num_steps,
          'dcn_bytes_per_step': dcn_bytes, 'smallest': smallest_found}


def moves(config, topologies: list) -> str:
  """Which of `topologies` a run begun on the first can continue on: those whose hosts share its data shards evenly
  (data.shards, 'auto' as training resolves it on the first; data/pipeline.py)."""
  hosts = [t.slice.hosts * t.num_slices for t in topologies]
  setting = config.data.shards
  shards = pipeline.auto_shards(config.train.batch_size, hosts[0], 'tpu') if setting == 'auto' else setting
  fits = [f'{t.name} ({h} host{"s" * (h > 1)})' for t, h in zip(topologies[1:], hosts[1:]) if shards % h == 0]
  not_ = [f'{t.name} ({h} hosts)' for t, h in zip(topologies[1:], hosts[1:]) if shards % h]
  return (f'data: a run begun on {topologies[0].name} has {shards} data shards (data.shards {setting}); it continues '
          f'on ' + (', '.join(fits) or 'none of the others') +
          (f'; not on {", ".join(not_)} (its hosts do not divide {shards})' if not_ else ''))


def markdown_header(mfu: float, smallest: bool = False) -> str:
  columns = ['config', 'pod', 'batch per device', 'peak per device as configured', 'fits', 'what fits', 'peak then',
             f's/step at {mfu:.0%} MFU', 'hours for the run']
  columns += ['smallest slice that fits: setting, peak, hours'] if smallest else []
  return '| ' + ' | '.join(columns) + ' |\n|' + '---|' * len(columns)


def markdown_row(config_name: str, topo: Topology, out: dict, smallest: bool = False) -> str:
  first, best = out['first'], out['best']
  peak = gib(first.peak) if first.fits else f'needs {gib(first.required)} + state'
  fix = 'as configured' if first.fits else (out['suggestion'].replace('--config.', '') if best else 'nothing tried')
  then = gib(first.peak if first.fits else best.peak if best else None)
  row = (f'| {config_name} | {topo.name} | {first.per_shard} | {peak} | {"yes" if first.fits else "no"} | {fix} | '
         f'{then} | {out["step_seconds"]:.2f} | {out["step_seconds"] * out["num_steps"] / 3600:.1f} |')
  if smallest and out['smallest']:
    slice_, found, seconds = out['smallest']
    setting = ', '.join(([f'remat={found.remat}'] if found.remat != first.remat else []) +
                        ([f'grad_accum_steps={found.microbatches}'] if found.microbatches != first.microbatches
                         else [])) or 'as configured'
    row += f' {slice_.name}: {setting}, {gib(found.peak)}, {seconds * out["num_steps"] / 3600:.1f} h |'
  elif smallest:
    row += ' none at this batch |'
  return row


def main(argv):
  del argv
  # libtpu takes a machine-wide lock to keep two processes off one TPU; compile-only devices need no such lock,
  # and without this a second check on the same machine fails.
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  name = os.path.splitext(os.path.basename(config_flags.get_config_filename(flags.FLAGS['config'])))[0]
  if _FORMAT.value == 'markdown':
    print(markdown_header(_MFU.value, _SMALLEST.value))
  config, _ = pretrained.for_pretraining(_CONFIG.value)  # a continued run's shape is its config.init's
  topologies = [topology(t) for t in _TOPOLOGY.value.split(',')]  # every name is checked before any compile
  for topo in topologies:
    out = report(config, topo, _MFU.value, _LARGEST_BATCH.value, smallest=_SMALLEST.value,
                 accumulate=_ACCUMULATE.value)
    print(markdown_row(name, topo, out, _SMALLEST.value) if _FORMAT.value == 'markdown' else out['text'], flush=True)
  if len(topologies) > 1 and _FORMAT.value == 'text':  # slices a run may move between (launch.tpu --accelerator)
    print(moves(config, topologies))


if __name__ == '__main__':
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Path to a config file in configs/.', lock_config=True)
  _TOPOLOGY = flags.DEFINE_string('topology', None, 'Cloud TPU accelerator type(s), comma-separated: v3-8 ... '
                                  'v3-1024, v4-128, v5e-256, ...')
  _FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'markdown'], 'A report, or one markdown table row per pod.')
  _MFU = flags.DEFINE_float('mfu', 0.4, 'Model FLOPs utilization assumed for the step-time estimate.')
  _LARGEST_BATCH = flags.DEFINE_bool('largest_batch', False, 'Also search for the largest batch that fits.')
  _SMALLEST = flags.DEFINE_bool('smallest', False, 'Also find the smallest slice of each topology\'s generation '
                                'that fits the configured batch, walking down from it.')
  _ACCUMULATE = flags.DEFINE_bool('accumulate', False, 'With --smallest: walk further down by splitting the batch '
                                  'into more microbatches (train.grad_accum_steps), and report the fewest that fit.')
  flags.mark_flags_as_required(['config', 'topology'])
  run_cli(main)
