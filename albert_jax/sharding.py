"""The device mesh, the logical-axis rules that map parameters and activations onto it, and global batches.

Mesh axes: 'data' (batch only), 'fsdp' (batch, and parameters' hidden axis), 'model' (heads and FFN columns).
`mesh.data=-1` (the default) puts every device on 'data': pure data parallelism.
"""
import math

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from albert_jax.errors import ConfigError

MESH_AXES = ('data', 'fsdp', 'model')
BATCH_AXES = ('data', 'fsdp')

# Logical axis names (model.py) -> mesh axes. Activations have their own names so that FSDP's sharding of the
# parameters' hidden axis never shards activations along hidden.
RULES = (
    ('batch', BATCH_AXES),
    ('length', None),
    ('act_hidden', None),
    ('act_mlp', 'model'),
    ('hidden', 'fsdp'),
    ('heads', 'model'),
    ('mlp', 'model'),
    ('hidden_out', None),
    ('embedding', None),
    ('vocab', None),  # E = 128: the V x E table is small; replicating it avoids uneven vocabulary shards
    ('layers', None),
)


def make_mesh(mesh_config, devices=None) -> jax.sharding.Mesh:
  """The mesh over `devices`. With mesh.dcn_data = S > 1 the devices form S slices (TPU slices joined over the
  data-center network; elsewhere S equal groups of devices in order, e.g. the hosts of a GPU cluster) and the
  data axis is S times the per-slice data size, slice after slice: parameters are sharded only within a slice,
  so only the gradients' all-reduce crosses slices."""
  devices = list(devices if devices is not None else jax.devices())
  slices = mesh_config.get('dcn_data', 1)
  if slices < 1 or len(devices) % slices:
    raise ValueError(f'config.mesh.dcn_data {slices}: {len(devices)} devices do not split into {slices} slices.')
  per_slice = len(devices) // slices
  sizes = [mesh_config[axis] for axis in MESH_AXES]
  shown = {**dict(zip(MESH_AXES, sizes)), **({'dcn_data': slices} if slices > 1 else {})}
  if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f'config.mesh {shown}: give positive sizes, at most one of them -1 (the rest of the devices).')
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if per_slice % known:
      raise ValueError(f'config.mesh {shown}: {per_slice} devices per slice are not divisible by {known}.')
    sizes[sizes.index(-1)] = per_slice // known
  if math.prod(sizes) != per_slice:
    raise ValueError(f'config.mesh {shown} needs {math.prod(sizes)} devices per slice; there are {per_slice}. Use '
                     f'-1 for one axis to take the rest.')
  axis_types = (jax.sharding.AxisType.Auto,) * 3
  if slices == 1:
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=axis_types, devices=devices)
  if all(hasattr(d, 'slice_index') for d in devices):  # TPU slices: ICI within, DCN across, as JAX lays them out
    from jax.experimental import mesh_utils
    found = len({d.slice_index for d in devices})
    if found != slices:
      raise ValueError(f'config.mesh.dcn_data {slices}: these devices are in {found} slice(s).')
    grid = mesh_utils.create_hybrid_device_mesh(tuple(sizes), (slices, 1, 1), devices)
  else:
    grid = np.array(devices).reshape(slices * sizes[0], *sizes[1:])
  return jax.sharding.Mesh(grid, MESH_AXES, axis_types=axis_types)


def data_parallel_size(mesh) -> int:
  return mesh.shape['data'] * mesh.shape['fsdp']


def check_batch_size(batch_size: int, mesh, where: str = '', microbatches: int = 1) -> None:
  """The global batch must split evenly over the data-parallel devices, and each device's part into the
  microbatches (config.train.grad_accum_steps): say so before anything compiles."""
  if batch_size % data_parallel_size(mesh):
    raise ConfigError(f'config.train.batch_size {batch_size} is not divisible by the data-parallel size '
                      f'{data_parallel_size(mesh)}{where} (mesh {dict(mesh.shape)}).')
  if batch_size // data_parallel_size(mesh) % microbatches:
    raise ConfigError(f'config.train.batch_size {batch_size} is {batch_size // data_parallel_size(mesh)} per '
                      f'data-parallel device{where}, which config.train.grad_accum_steps {microbatches} does not '
                      f'divide: choose a batch of a multiple of {data_parallel_size(mesh) * microbatches}, or '
                      f'microbatches that divide {batch_size // data_parallel_size(mesh)}.')


def param_shardings(boxed_abstract_params, mesh):
  specs = nn.get_partition_spec(boxed_abstract_params)
  return nn.logical_to_mesh_sharding(specs, mesh, RULES)


def opt_state_shardings(abstract_opt_state, params_sharding, mesh):
  """Optimizer slots that mirror a parameter (Adam's m and v) take its sharding; everything else is replicated."""
  by_path = {tuple(str(getattr(k, 'key', k)) for k in path): s
             for path, s in jax.tree_util.tree_flatten_with_path(params_sharding)[0]}

  def shard(path, leaf):
    names = tuple(str(getattr(k, 'key', getattr(k, 'name', k))) for k in path)
    for start in range(len(names)):
      spec = by_path.get(names[start:])
      if spec is not None and len(spec.spec) <= leaf.ndim:
        return spec
    return NamedSharding(mesh, P())

  return jax.tree_util.tree_map_with_path(shard, abstract_opt_state)


def batch_sharding(mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def global_batch(local_batch: dict, mesh) -> dict:
  """This host's numpy batch -> global arrays sharded over the batch axes (every host passes its own part)."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local_batch.items()}
