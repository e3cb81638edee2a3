"""What fits a device's memory: the training step compiled for given devices (a pod's real ones, or libtpu's
compile-only ones for a TPU topology this machine does not have), and the search for the cheapest setting of
`model.remat` and `train.grad_accum_steps` that fits. One owner for the fit check (aot.py), which reports it, and
for training (train.py), which resolves 'auto' with it, and stops before step 1 with its suggestion when a setting
the user gave does not fit.

The search, cheapest first: the step as configured (no remat, the whole batch at once, where they are 'auto'); then
the fewest microbatches that fit (they recompute nothing); then the weakest remat policy that fits alone; then the
fewest microbatches with full remat. Each try is one compile: XLA's TPU compiler refuses a program over the HBM
(RESOURCE_EXHAUSTED); on a GPU, whose compiler does not, the compiled peak is held against the device's memory; on
a CPU everything fits.
"""
import dataclasses
import json
import math
from typing import Callable, Optional

import jax

from albert_jax import accelerators, paths, sharding
from albert_jax import step as step_lib
from albert_jax.config import validate
from albert_jax.errors import ConfigError

GIB = accelerators.GIB
AUTO = 'auto'
REMAT_BY_MEMORY = ('none', 'save_dots', 'save_dots_no_batch', 'full')  # most memory first


@dataclasses.dataclass
class Check:
  """One compile of the step: what it needs per device, or how far over the memory it went."""
  batch_size: int
  per_shard: int  # the batch of one data-parallel shard: of each device under pure data parallelism
  microbatches: int  # config.train.grad_accum_steps: the shard's batch runs in this many parts
  remat: str
  fits: bool
  params: int
  opt_state: int
  batch: int
  temporaries: Optional[int]  # bytes; None when the compiler gave up (then `required` is what it needed)
  peak: Optional[int]
  required: Optional[float] = None
  dcn_bytes: Optional[int] = None  # sent by one slice per step, over several slices (aot.py fills it)
  compiled: object = dataclasses.field(default=None, repr=False, compare=False)  # the step, where it fits
  program: object = dataclasses.field(default=None, repr=False, compare=False)  # step.Program it compiled


def per_device_bytes(abstract_tree) -> int:
  """Bytes of one device's shards of a tree of ShapeDtypeStructs with shardings (the largest shard counts)."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(abstract_tree))


def device_memory(devices) -> Optional[int]:
  """The bytes a program may use on one of `devices` (the allocator's limit, on a GPU or a TPU that is here); None
  where it is not known: CPUs, and libtpu's compile-only devices, whose compiler holds a program to the HBM itself."""
  if devices[0].platform == 'cpu':
    return None
  try:
    return (devices[0].memory_stats() or {}).get('bytes_limit')
  except Exception:  # pylint: disable=broad-except  (compile-only devices have no memory to report)
    return None


def with_settings(config, remat: str, microbatches: int, batch_size: Optional[int] = None):
  """A copy of `config` with model.remat, train.grad_accum_steps (and the batch) set."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    del config.train['grad_accum_steps']  # a count where 'auto' was: a field of another type
    config.model.remat, config.train.grad_accum_steps = remat, microbatches
    if batch_size:
      config.train.batch_size = batch_size
  return config


def once_each(try_config: Callable) -> Callable:
  """`try_config` (config -> Check) that compiles each setting (model.remat, train.grad_accum_steps, the batch)
  once: a search and a report over the same settings share its compiles."""
  done = {}

  def tried(config) -> Check:
    setting = (config.model.remat, config.train.grad_accum_steps, config.train.batch_size)
    if setting not in done:
      done[setting] = try_config(config)
    return done[setting]
  return tried


def check(config, devices, where: str = '') -> Check:
  """The training step of `config` compiled for `devices` ('auto' as the search starts: no remat, the whole batch),
  and what it needs per device."""
  config = start(config) if any(autos(config)) else config
  mesh = sharding.make_mesh(config.mesh, devices)
  sharding.check_batch_size(config.train.batch_size, mesh, where, config.train.grad_accum_steps)
  dp = sharding.data_parallel_size(mesh)
  program = step_lib.build(config, validate(config).for_platform(devices[0].platform), mesh)
  state = program.abstract_state()
  batch = program.abstract_batch(config.train.batch_size, config.data.max_seq_length,
                                 config.data.max_predictions_per_seq)
  sizes = dict(batch_size=config.train.batch_size, per_shard=config.train.batch_size // dp,
               microbatches=config.train.grad_accum_steps, remat=config.model.remat,
               params=per_device_bytes(state['params']), opt_state=per_device_bytes(state['opt_state']),
               batch=per_device_bytes(batch))
  try:
    compiled = step_lib.compile_train_step(program, state, batch, mesh)
  except step_lib.OutOfMemory as e:
    return Check(fits=False, temporaries=None, peak=None, required=e.required, **sizes)
  memory = compiled.memory_analysis()
  limit, peak = device_memory(devices), getattr(memory, 'peak_memory_in_bytes', None)
  if limit and peak and peak > limit:
    return Check(fits=False, temporaries=memory.temp_size_in_bytes, peak=peak, required=memory.temp_size_in_bytes,
                 **sizes)
  return Check(fits=True, temporaries=memory.temp_size_in_bytes, peak=peak, compiled=compiled, program=program,
               **sizes)


def fewest_microbatches(try_config: Callable, config, remat: str, per_shard: int, start: int,
                        tries: list) -> Optional[Check]:
  """The check of the fewest microbatches, from `start` up, with which the configured batch fits under `remat`
  (None if not even one row per microbatch does); every try (try_config(config) -> Check) is appended to `tries`.
  The counts are the divisors of the shard's batch, and memory falls as they grow. The search goes up from below
  and stops at the first count that fits: a TPU's compiler gives up on a program over its HBM in seconds, where a
  compile that fits runs to the end (a minute or more for a large model), so every count but the answer should
  fail. Up by doubling the count; past the first that fits, the counts between it and the last that failed, upward."""
  counts = [k for k in range(max(start, 1), per_shard + 1) if per_shard % k == 0]
  if not counts:
    return None

  def fits(i: int) -> bool:
    tries.append(try_config(with_settings(config, remat, counts[i])))
    return tries[-1].fits

  failed, i = -1, 0  # counts[failed] does not fit
  while not fits(i):
    failed = i
    i = next((j for j in range(i + 1, len(counts)) if counts[j] >= 2 * counts[i]), len(counts) - 1)
    if i == failed:  # the last count (one row per microbatch) did not fit either
      return None
  fitting = tries[-1]
  for j in range(failed + 1, i):  # between the last failure and the doubled count that fit
    if fits(j):
      return tries[-1]
  return fitting


def search(try_config: Callable, config, per_shard: int, remat_auto: bool, microbatches_auto: bool) -> tuple:
  """(the cheapest fitting check, or None; every try) where model.remat and train.grad_accum_steps may change as
  far as they are 'auto' (the module's order), starting from `config`'s own values for them."""
  remat, microbatches = config.model.remat, config.train.grad_accum_steps
  tries = [try_config(config)]
  if tries[0].fits:
    return tries[0], tries
  found = None
  if microbatches_auto:
    found = fewest_microbatches(try_config, config, remat, per_shard, microbatches + 1, tries)
  if not found and remat_auto:
    for policy in REMAT_BY_MEMORY[REMAT_BY_MEMORY.index(remat) + 1:]:
      tries.append(try_config(with_settings(config, policy, microbatches)))
      if tries[-1].fits:
        return tries[-1], tries
    if microbatches_auto:
      found = fewest_microbatches(try_config, config, REMAT_BY_MEMORY[-1], per_shard, microbatches + 1, tries)
  return found, tries


def gib(n) -> str:
  return '?' if n is None else f'{n / GIB:.2f} GiB'


def describe(c: Check, memory: Optional[int]) -> str:
  """One check in words; `memory`: the bytes a device has (None: not known here)."""
  parts = f', in {c.microbatches} microbatches of {c.per_shard // c.microbatches}' if c.microbatches > 1 else ''
  head = f'batch {c.batch_size} ({c.per_shard} per data shard{parts}), remat {c.remat}'
  of = f' of {gib(memory)}' if memory else ''
  if c.fits:
    # XLA's temporary area is its allocation as laid out, not what is live at once: it can exceed the peak.
    return (f'{head}: fits, peak {gib(c.peak)}{of} per device (parameters {gib(c.params)}, optimizer state '
            f'{gib(c.opt_state)}, batch {gib(c.batch)}; the compiler\'s temporary area {gib(c.temporaries)}, its size '
            f'as laid out rather than what is live at the peak)')
  return (f'{head}: does NOT fit, needs {gib(c.required)} of temporaries on top of parameters {gib(c.params)} and '
          f'optimizer state {gib(c.opt_state)}{f"; {gib(memory)} per device" if memory else ""}')


def setting(c: Check, given=None) -> str:
  """The overrides that make `given`'s config into `c`'s (all of them, without `given`)."""
  return ' '.join(([f'--config.train.grad_accum_steps={c.microbatches}']
                   if not given or c.microbatches != given.microbatches else []) +
                  ([f'--config.model.remat={c.remat}'] if not given or c.remat != given.remat else []) +
                  ([f'--config.train.batch_size={c.batch_size}']
                   if given and c.batch_size != given.batch_size else []))


def autos(config) -> tuple:
  """(model.remat is 'auto', train.grad_accum_steps is 'auto')."""
  return config.model.remat == AUTO, config.train.get('grad_accum_steps', 1) == AUTO


def start(config):
  """`config` with its 'auto' fields at the search's start: no remat, the whole batch at once."""
  remat_auto, microbatches_auto = autos(config)
  return with_settings(config, 'none' if remat_auto else config.model.remat,
                       1 if microbatches_auto else config.train.grad_accum_steps)


def choose(config, devices, where: str = '', try_config: Optional[Callable] = None, remembered=None) -> tuple:
  """(`config` with model.remat and train.grad_accum_steps set to the cheapest that fits on `devices` where they are
  'auto', its fitting check (whose `compiled` is the step), a line saying what was chosen and why, or None where
  nothing was 'auto'). A setting the user gave that does not fit stops here (ConfigError) with what would: the
  same search with both free. `try_config`: how one config is checked (default: compiled for `devices`);
  `remembered`: (remat, microbatches) chosen at the run's last start, tried first."""
  tried = once_each(try_config or (lambda c: check(c, devices, where)))
  remat_auto, microbatches_auto = autos(config)
  first = start(config)
  memory = device_memory(devices)
  if remembered and (remat_auto or microbatches_auto):
    again = tried(with_settings(first, *remembered))
    if again.fits:
      return (with_settings(first, again.remat, again.microbatches), again,
              f'auto: model.remat {again.remat}, train.grad_accum_steps {again.microbatches}, as at the run\'s '
              f'last start (peak {gib(again.peak)}{f" of {gib(memory)}" if memory else ""} per device)')
  per_shard = first.train.batch_size // sharding.data_parallel_size(sharding.make_mesh(first.mesh, devices))
  found, tries = search(tried, first, per_shard, remat_auto, microbatches_auto)
  if found is None:
    free = None if remat_auto and microbatches_auto else search(
        tried, with_settings(first, 'none', 1), per_shard, True, True)[0]
    fix = (f'{setting(free, tries[0])} (or set model.remat and train.grad_accum_steps to auto)' if free else
           'a smaller train.batch_size, or parameters sharded over mesh.fsdp or mesh.model (python -m '
           'albert_jax.aot --largest_batch finds the largest batch that fits)')
    raise ConfigError(f'the training step does not fit in device memory{where}: {describe(tries[0], memory)}. '
                      f'Set {fix}.')
  if not (remat_auto or microbatches_auto) or (found is tries[0] and devices[0].platform == 'cpu'):
    return first, found, None  # nothing chosen, or nothing to say: a CPU's memory is not checked
  names = [f'model.remat {found.remat}'] * remat_auto + [
      f'train.grad_accum_steps {found.microbatches}'] * microbatches_auto
  why = ('as configured, it fits' if found is tries[0] else
         f'with {tries[0].microbatches} microbatch{"es" * (tries[0].microbatches > 1)} and remat {tries[0].remat} '
         f'it needs {gib(tries[0].required)} of temporaries, more than a device holds')
  line = (f'auto: {" and ".join(names)} ({why}; peak {gib(found.peak)}'
          f'{f" of {gib(memory)}" if memory else ""} per device, {len(tries)} compile{"s" * (len(tries) > 1)})')
  return with_settings(first, found.remat, found.microbatches), found, line


def key(config, devices) -> str:
  """What decides a fit: the devices and every field of the config the step's memory depends on ('auto' as given)."""
  return json.dumps({'devices': [devices[0].device_kind, len(devices)], 'model': config.model.to_dict(),
                     'mesh': config.mesh.to_dict(), 'batch_size': config.train.batch_size,
                     'data': [config.data.max_seq_length, config.data.max_predictions_per_seq],
                     'optimizer': config.train.optimizer}, sort_keys=True, default=str)


RECORD = 'fit.json'  # in a workdir: the setting 'auto' chose, by what decided it


def remembered(workdir, config, devices) -> Optional[tuple]:
  """(remat, microbatches) that the run in `workdir` chose at an earlier start for this config on these devices:
  a restart tries it first instead of searching again (each try is a compile)."""
  record = paths.path(workdir) / RECORD
  try:
    entry = json.loads(record.read_text()).get(key(config, devices)) if record.exists() else None
  except ValueError:  # damaged: search again, and write it anew
    return None
  return (entry['remat'], entry['microbatches']) if entry else None


def remember(workdir, config, devices, found: Check) -> None:
  """Keeps what `config` (with 'auto' as given) chose on these devices in the workdir's record."""
  record = paths.path(workdir) / RECORD
  try:
    entries = json.loads(record.read_text()) if record.exists() else {}
  except ValueError:
    entries = {}
  entries[key(config, devices)] = {'remat': found.remat, 'microbatches': found.microbatches}
  paths.write_whole(record, (json.dumps(entries, indent=1) + '\n').encode())
