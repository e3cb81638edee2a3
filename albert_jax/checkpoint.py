"""Training checkpoints with orbax: the train state and the data pipeline's state, saved together.

Saves are asynchronous; orbax writes into a temporary directory and renames it when complete, so a run killed
mid-save leaves no half checkpoint behind. The last `keep` checkpoints and the best by held-out MLM accuracy
are kept. A committed checkpoint that cannot be restored (a damaged file) is reported and skipped: restore falls
back to the previous one, and never loads partial state.
"""
import dataclasses
import json
import logging as std_logging
import os
import re
import sys
import time
import warnings

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint.checkpoint_managers import preservation_policy as preservation

from albert_jax import paths
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig, model_shape

BEST_METRIC = 'eval_mlm_accuracy'

# Orbax warns on the console about what is so by design here: a checkpoint between evaluations has no metric (the
# best is ranked among those that have one), and a manager opened to read (convert, from_pretrained) creates nothing.
_BY_DESIGN = ('did not provide metrics', 'read_only=True, setting', 'Given directory is read only')
logging.get_absl_logger().addFilter(lambda record: not any(text in record.getMessage() for text in _BY_DESIGN))


def manager(workdir, keep: int, best_metric: str = BEST_METRIC, read_only: bool = False) -> ocp.CheckpointManager:
  """Keeps the latest `keep` checkpoints and the one with the highest `best_metric`. `read_only`: another run's
  checkpoints, read while that run may still be writing (nothing is cleaned up or deleted)."""
  policy = preservation.AnyPreservationPolicy([
      preservation.LatestN(keep),
      preservation.BestN(get_metric_fn=lambda metrics: metrics[best_metric], reverse=False, n=1,
                         keep_checkpoints_without_metrics=False),
  ])
  # best_fn as well: without it orbax writes no metrics with a checkpoint, and BestN has nothing to rank.
  options = ocp.CheckpointManagerOptions(preservation_policy=policy, best_fn=lambda metrics: metrics[best_metric],
                                         best_mode='max', enable_async_checkpointing=True,
                                         cleanup_tmp_directories=not read_only, read_only=read_only)
  return ocp.CheckpointManager(paths.path(workdir) / 'checkpoints', options=options,
                               item_names=('state', 'data'))


def save(mngr: ocp.CheckpointManager, step: int, state, data_state: dict, metrics: dict | None = None,
         force: bool = False) -> None:
  mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)),
            metrics=metrics, force=force)


def restore_state(mngr: ocp.CheckpointManager, step: int, abstract_state):
  return mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))).state


def restore_latest(mngr: ocp.CheckpointManager, abstract_state):
  """(step, state, data_state) of the newest checkpoint that restores, or None. `abstract_state` carries the
  target shardings, so a checkpoint written on another mesh shape restores onto this one. Each damaged checkpoint
  on the way is moved aside and reported in one line; its full error goes to the log (--verbosity=0 shows it)."""
  damaged, found = [], None
  quiet_abandoned_reads()
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                                            data=ocp.args.JsonRestore()))
    except Exception as e:  # orbax and tensorstore raise many types for damaged or missing files
      logging.info('checkpoint %d in %s cannot be restored: %r, from %r', step, mngr.directory, e, _innermost(e))
      damaged.append((step, damage(e), _set_aside(mngr, step)))
      continue
    found = step, restored.state, restored.data
    break
  then = f'resuming from step {found[0]}' if found else 'no earlier checkpoint: starting from step 0'
  for step, why, aside in damaged:
    print(f'checkpoint {step} is damaged ({why}): moved to {aside}; {then}', flush=True)
  return found


def damage(error: BaseException) -> str:
  """A few words on why a checkpoint did not restore, from the innermost error (orbax's own message wraps it with
  a 40-line tensorstore spec)."""
  error = _innermost(error)
  text = ' '.join(str(error).split())
  where = re.search(r'reading "([^"/]+)', text)
  array = f' in {where.group(1)}' if where else ''
  if isinstance(error, FileNotFoundError) or 'NOT_FOUND' in text:
    return f'a file is missing{array}'
  if any(sign in text for sign in ('OUT_OF_RANGE', 'nexpected end', 'Content-Range')):  # bytes past the end
    return f'a file is truncated{array}'
  if 'DATA_LOSS' in text or 'INVALID_ARGUMENT' in text or isinstance(error, json.JSONDecodeError):
    return f'a file is corrupt{array}'
  return f'{type(error).__name__}: {text[:120]}'


def _innermost(error: BaseException) -> BaseException:
  """The first error of the chain Python would print: causes, and contexts not raised past `from None`."""
  while error.__cause__ or (error.__context__ and not error.__suppress_context__):
    error = error.__cause__ or error.__context__
  return error


def quiet_abandoned_reads() -> None:
  """When one read of a restore fails, orbax closes its event loop while tensorstore completes the reads it had
  started. Each completion then reports 'Event loop is closed', each abandoned read its own error, to
  sys.unraisablehook and asyncio's log, and a read never started warns that it was never awaited: hundreds of
  tracebacks, some seconds later, for one damaged file. Before a restore that may fail, drop exactly those;
  anything else still reaches the console."""
  previous = sys.unraisablehook
  if getattr(previous, 'drops_abandoned_reads', False):
    return

  def hook(unraisable) -> None:
    error, code = unraisable.exc_value, getattr(unraisable.object, 'cr_code', None)
    closed_loop = isinstance(error, RuntimeError) and str(error) == 'Event loop is closed'
    orbax_read = code is not None and f'{os.sep}orbax{os.sep}' in code.co_filename
    if not (closed_loop or orbax_read):
      previous(unraisable)

  hook.drops_abandoned_reads = True
  sys.unraisablehook = hook
  warnings.filterwarnings('ignore', message=r"coroutine '_read_array\w*' was never awaited", category=RuntimeWarning)
  std_logging.getLogger('asyncio').addFilter(lambda record: not (
      'exception was never retrieved' in record.getMessage()
      and any(sign in record.getMessage() for sign in ('orbax', 'OCDBT', 'TensorStore'))))


def _set_aside(mngr: ocp.CheckpointManager, step: int) -> paths.Path:
  """Moves a damaged checkpoint out of the way (kept for inspection, never deleted) so that the run can
  write that step again."""
  path = paths.path(mngr.directory) / str(step)
  aside = path.parent / f'{step}.damaged-{int(time.time())}'
  if jax.process_index() == 0:
    paths.move_tree(path, aside)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices('albert_jax: damaged checkpoint set aside')
  mngr.reload()
  return aside


def has_steps(workdir) -> bool:
  """Whether `workdir` holds checkpoints (a folder per step; one not committed yet counts too)."""
  folder = paths.path(workdir) / 'checkpoints'
  return folder.is_dir() and any(p.name.isdigit() for p in folder.iterdir())


def check_workdir(workdir: paths.Path, config) -> None:
  """A workdir holds one run: refuse to resume it with a model of another shape (how it runs, its dtype, remat or
  dropout, may change between starts)."""
  saved = workdir / 'config.json'
  if saved.exists():
    before = model_shape(json.loads(saved.read_text()).get('model', {}))
    now = model_shape(json.loads(config.model.to_json_best_effort()))
    # A field added since that run began holds its default there.
    before = {**model_shape(dataclasses.asdict(ModelConfig())), **before}
    changed = {k: (before.get(k), v) for k, v in now.items() if before.get(k) != v}
    if changed:
      raise ConfigError(f'{workdir} holds a run of a different model ({", ".join(f"model.{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())}). '
                        f'Use a new --workdir, or the config that run used.')


def data_shards(workdir: paths.Path, setting, default: int) -> int:
  """The data shards of the run in `workdir` (pipeline.py): the count it began with, which its config.json keeps;
  for a run from before data shards, which had one per host, the host count its run.json gives; for a new run,
  `setting` (data.shards), or `default` where that is 'auto'. A setting that differs from the run's own is
  refused: the stream, and so every checkpoint's data position, is defined on it."""
  saved = workdir / 'config.json'
  kept = json.loads(saved.read_text()).get('data', {}).get('shards') if saved.exists() else None
  kept = None if kept == 'auto' else kept
  if kept is None and has_steps(workdir) and (workdir / 'run.json').exists():
    kept = json.loads((workdir / 'run.json').read_text()).get('hosts')
  if kept is None:
    return default if setting == 'auto' else setting
  if setting != 'auto' and setting != kept:
    raise ConfigError(f'{workdir} holds a run whose data stream has {kept} shards (data.shards, fixed when it '
                      f'began), not {setting}: leave data.shards out (or set it to {kept}) to continue it, or use a '
                      f'new --workdir.')
  return kept


def check_shared(workdir: paths.Path) -> None:
  """Orbax writes each checkpoint once, from all hosts, into one folder: every host must see the same workdir. Host
  0 writes a marker there holding a fresh token; every host reads it back; if any cannot (a local disk on each
  worker of a pod), all stop now, before anything compiles or is written."""
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils
  token = int(multihost_utils.broadcast_one_to_all(np.int32(np.random.SeedSequence().entropy % 2 ** 31)))
  marker = workdir / f'.host0-marker-{token}'
  if jax.process_index() == 0:
    marker.write_text(str(token))
  multihost_utils.sync_global_devices('albert_jax: workdir marker written')
  sees = marker.exists() and marker.read_text() == str(token)
  seen = multihost_utils.process_allgather(np.int32(sees))
  multihost_utils.sync_global_devices('albert_jax: workdir marker read')
  if jax.process_index() == 0:
    marker.unlink()
  blind = [host for host, ok in enumerate(np.ravel(seen)) if not ok]
  if blind:
    raise ConfigError(f'--workdir {workdir} is not one folder shared by all hosts: host(s) {", ".join(map(str, blind))} '
                      f'of {jax.process_count()} do not see what host 0 wrote there (a local disk on each worker?). '
                      f'Use a gs:// workdir, which every host sees.')
