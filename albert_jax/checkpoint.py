"""Training checkpoints with orbax: the train state and the data pipeline's state, saved together.

Saves are asynchronous; orbax writes into a temporary directory and renames it when complete, so a run killed
mid-save leaves no half checkpoint behind. The last `keep` checkpoints and the best by held-out MLM accuracy
are kept. A committed checkpoint that cannot be restored (a damaged file) is reported and skipped: restore falls
back to the previous one, and never loads partial state.
"""
import dataclasses
import json
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint.checkpoint_managers import preservation_policy as preservation

from albert_jax import paths
from albert_jax.model import ConfigError, ModelConfig

BEST_METRIC = 'eval_mlm_accuracy'


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
  target shardings, so a checkpoint written on another mesh shape restores onto this one."""
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                                            data=ocp.args.JsonRestore()))
    except Exception as e:  # orbax and tensorstore raise many types for damaged or missing files
      aside = _set_aside(mngr, step)
      logging.error('checkpoint %d in %s cannot be restored (%s: %s); moved to %s and skipped', step,
                    mngr.directory, type(e).__name__, str(e)[:300], aside)
      print(f'checkpoint {step} cannot be restored ({type(e).__name__}); kept as {aside}, resuming from an '
            f'earlier one', flush=True)
      continue
    return step, restored.state, restored.data
  return None


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


def check_workdir(workdir: paths.Path, config) -> None:
  """A workdir holds one run: refuse to resume it with a different model."""
  saved = workdir / 'config.json'
  if saved.exists():
    before = json.loads(saved.read_text()).get('model', {})
    now = json.loads(config.model.to_json_best_effort())
    # A field added since that run began holds its default there.
    before = {**dataclasses.asdict(ModelConfig()), **before}
    changed = {k: (before.get(k), v) for k, v in now.items() if before.get(k) != v}
    if changed:
      raise ConfigError(f'{workdir} holds a run of a different model ({", ".join(f"model.{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())}). '
                        f'Use a new --workdir, or the config that run used.')


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
