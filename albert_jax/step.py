"""The training program: losses, the state (parameters + optimizer), where each array lives, and the jitted
train and eval steps, and the train step's compilation (out of memory as its own error). train.py and finetune.py
run it; aot.py compiles the very same program for a TPU topology it does not have.
"""
import dataclasses
import re
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental.compilation_cache import compilation_cache
from jax.sharding import NamedSharding, PartitionSpec

from albert_jax import optim, sharding
from albert_jax.data.pipeline import collate
from albert_jax.model import Albert, ModelConfig, init_params


def normalizers(batch) -> dict:
  """What each term of the pretraining loss divides its sum by: the MLM weights (+ 1e-5, as the original) and the
  rows with a sentence label (padding rows of a held-out set have -1). Functions of the batch alone, so that the
  losses of k microbatches, each divided by the whole batch's, add up to the whole batch's loss."""
  return {'mlm': jnp.sum(batch['masked_lm_weights']) + 1e-5,
          'sop': jnp.maximum(jnp.sum(batch['sentence_order_labels'] >= 0), 1)}


def losses(model, params, batch, dropout_rng, sentence_task: str, deterministic: bool, norms=None):
  """(total loss, sums for metrics). MLM: weighted token mean over the batch; SOP/NSP: mean cross-entropy over the
  rows with a label, left out of the loss when sentence_task is 'none'. Each mean divides by `norms`
  (normalizers() of the whole batch when this is a microbatch of it; by default this batch's own)."""
  norms = normalizers(batch) if norms is None else norms
  out = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask'],
                    masked_lm_positions=batch['masked_lm_positions'], deterministic=deterministic,
                    rngs={'dropout': dropout_rng})
  weights = batch['masked_lm_weights']
  mlm_ce = optax.softmax_cross_entropy_with_integer_labels(out.mlm_logits, batch['masked_lm_ids'])
  labels = batch['sentence_order_labels']
  labelled = labels >= 0
  sop_ce = optax.softmax_cross_entropy_with_integer_labels(out.sop_logits, jnp.maximum(labels, 0)) * labelled
  sop_count = jnp.sum(labelled)
  loss = jnp.sum(mlm_ce * weights) / norms['mlm'] + (jnp.sum(sop_ce) / norms['sop'] if sentence_task != 'none'
                                                      else 0.0)
  sums = {'mlm_loss': jnp.sum(mlm_ce * weights), 'mlm_correct': jnp.sum((out.mlm_logits.argmax(-1) ==
                                                                         batch['masked_lm_ids']) * weights),
          'mlm_count': jnp.sum(weights), 'sop_loss': jnp.sum(sop_ce),
          'sop_correct': jnp.sum((out.sop_logits.argmax(-1) == labels) * labelled), 'sop_count': sop_count,
          'sop_ones': jnp.sum(labels == 1)}
  return loss, sums


def rates(sums: dict, prefix: str = '') -> dict:
  return {f'{prefix}mlm_loss': sums['mlm_loss'] / max(sums['mlm_count'], 1),
          f'{prefix}mlm_accuracy': sums['mlm_correct'] / max(sums['mlm_count'], 1),
          f'{prefix}sop_loss': sums['sop_loss'] / max(sums['sop_count'], 1),
          f'{prefix}sop_accuracy': sums['sop_correct'] / max(sums['sop_count'], 1)}


@dataclasses.dataclass
class Program:
  model: nn.Module
  tx: optax.GradientTransformation
  abstract_params: dict
  state_sharding: dict
  batch_sharding: NamedSharding
  new_state: Callable      # rng -> state, jitted onto state_sharding
  train_step: Callable     # (state, batch) -> (state, metrics); the state is donated
  eval_step: Callable      # (params, batch) -> sums for rates()

  def abstract_state(self) -> dict:
    """The state's shapes, dtypes and shardings, without computing it."""
    shapes = jax.eval_shape(self.new_state, jax.eval_shape(jax.random.key, 0))  # no concrete key: no device
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes,
                        self.state_sharding)

  def abstract_batch(self, batch_size: int, max_seq_length: int, max_predictions: int) -> dict:
    """A global batch's shapes and dtypes: those the pipeline's collate() makes."""
    empty = collate([], max_seq_length, max_predictions)
    return {k: jax.ShapeDtypeStruct((batch_size, *v.shape[1:]), v.dtype, sharding=self.batch_sharding)
            for k, v in empty.items()}


def build(config, model_config: ModelConfig, mesh) -> Program:
  """The pretraining program for `config` on `mesh`. Trace and run its steps inside `jax.set_mesh(mesh)` and
  `nn.logical_axis_rules(sharding.RULES)`: activations are constrained by name."""
  model = Albert(model_config)
  task, eval_rng = config.data.sentence_task, jax.random.key(0)  # no dropout in evaluation: the key is unused
  return make_program(
      model, lambda rng: init_params(model, rng),
      lambda params, batch, rng, deterministic, norms: losses(model, params, batch, rng, task, deterministic, norms),
      normalizers, lambda params, batch: losses(model, params, batch, eval_rng, task, True)[1], config.train, mesh)


def make_program(model: nn.Module, init: Callable, loss: Callable, loss_normalizers: Callable,
                 evaluate_batch: Callable, train_config, mesh) -> Program:
  """The state, its shardings and the jitted steps of any model: pretraining (build) and fine-tuning share it.

  init(rng) -> boxed params; loss(params, batch, dropout_rng, deterministic, norms) -> (loss, sums for metrics),
  its means divided by `norms`; loss_normalizers(batch) -> those of a whole batch (see normalizers());
  evaluate_batch(params, batch) -> what an eval step returns (replicated on every device).

  With train_config.grad_accum_steps k > 1 a step runs the batch as k microbatches, one after another, each spread
  over every data shard, and applies one update with the sum of their gradients: each microbatch's loss divides by
  the whole batch's normalizers, so the sum is the whole batch's loss and gradient (dropout aside, whose masks
  differ), and the metrics' sums are the whole batch's."""
  boxed = jax.eval_shape(init, jax.random.key(0))
  abstract_params = nn.unbox(boxed)
  tx = optim.make(train_config, abstract_params, boxed)
  params_sharding = sharding.param_shardings(boxed, mesh)
  replicated = NamedSharding(mesh, PartitionSpec())
  state_sharding = {'step': replicated, 'params': params_sharding,
                    'opt_state': sharding.opt_state_shardings(jax.eval_shape(tx.init, abstract_params),
                                                              params_sharding, mesh)}

  def new_state(rng):
    params = nn.unbox(init(rng))
    return {'step': jnp.zeros((), jnp.int32), 'params': params, 'opt_state': tx.init(params)}

  train = train_config
  base_rng = jax.random.key(train.seed + 1)
  learning_rate = optim.schedule(train.learning_rate, train.warmup_steps, train.num_steps, train.poly_power)

  batch_sharding = sharding.batch_sharding(mesh)
  microbatches = 1 if train.grad_accum_steps == 'auto' else train.grad_accum_steps  # unresolved: the whole batch

  def value_and_grads(params, batch, rng):
    """((loss, sums), gradients) of the whole batch, in `microbatches` parts when there are several."""
    grad_fn = jax.value_and_grad(lambda p, b, r, norms: loss(p, b, r, False, norms), has_aux=True)
    if microbatches == 1:
      return grad_fn(params, batch, rng, None)
    norms = loss_normalizers(batch)
    # Row j of microbatch i is row j*k + i: every data shard's contiguous rows hold an equal part of each
    # microbatch, so each runs on all devices with no data moved between them.
    split = NamedSharding(mesh, PartitionSpec(None, *batch_sharding.spec))
    parts = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(
        jnp.swapaxes(x.reshape(x.shape[0] // microbatches, microbatches, *x.shape[1:]), 0, 1), split), batch)

    def add_one(total, part):
      i, microbatch = part
      return jax.tree.map(jnp.add, total, grad_fn(params, microbatch, jax.random.fold_in(rng, i), norms)), None

    zero = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(
        grad_fn, params, jax.tree.map(lambda x: x[0], parts), rng, norms))
    return jax.lax.scan(add_one, zero, (jnp.arange(microbatches), parts))[0]

  def train_step(state, batch):
    rng = jax.random.fold_in(base_rng, state['step'])
    (value, sums), grads = value_and_grads(state['params'], batch, rng)
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    out = {'loss': value, 'grad_norm': optax.tree.norm(grads), 'param_norm': optax.tree.norm(params),
           'learning_rate': learning_rate(state['step']), 'sums': sums}
    ratios = optim.trust_ratios(opt_state)
    if ratios:
      flat = jnp.concatenate(ratios)
      out.update(trust_ratio_min=flat.min(), trust_ratio_mean=flat.mean(), trust_ratio_max=flat.max())
    return {'step': state['step'] + 1, 'params': params, 'opt_state': opt_state}, out

  return Program(
      model=model, tx=tx, abstract_params=abstract_params, state_sharding=state_sharding,
      batch_sharding=batch_sharding,
      new_state=jax.jit(new_state, out_shardings=state_sharding),
      train_step=jax.jit(train_step, in_shardings=(state_sharding, batch_sharding),
                         out_shardings=(state_sharding, replicated), donate_argnums=0),
      eval_step=jax.jit(evaluate_batch, in_shardings=(params_sharding, batch_sharding), out_shardings=replicated))


def evaluate(program: Program, params, held_out: dict, mesh, sentence_task: str) -> dict:
  """Held-out metrics over each set of batches in `held_out` (pipeline.held_out_sets), summed before dividing.

  'sop' (the run's own sentence task) gives eval_mlm_* and eval_sop_* (no eval_sop_* under sentence_task 'none':
  its instances are single segments, all labelled 0, so an accuracy on them measures nothing); with several
  sources, the sets 'sop/<label>' give those over all of them together and eval_<label>_mlm_* for each; every other
  set gives its sentence accuracy as eval_<name>_*. Each accuracy comes with its count and its majority rate (the
  share of the commoner label: what always guessing it would score)."""
  metrics, own = {}, None
  for name, batches in held_out.items():
    batches = _same_count_on_every_host(batches)
    totals = None
    for batch in batches:
      with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
        sums = jax.device_get(program.eval_step(params, sharding.global_batch(batch, mesh)))
      totals = sums if totals is None else {k: totals[k] + sums[k] for k in sums}
    if name.startswith('sop/'):
      label = name.split('/', 1)[1]
      metrics.update({k: v for k, v in rates(totals, f'eval_{label}_').items() if 'mlm' in k},
                     **{f'eval_{label}_mlm_count': int(totals['mlm_count'])})
    if name == 'sop' or name.startswith('sop/'):
      own = totals if own is None else {k: own[k] + totals[k] for k in totals}
    else:
      metrics.update(_sentence_metrics(totals, name))
  metrics.update({k: v for k, v in rates(own, 'eval_').items() if 'mlm' in k}, eval_mlm_count=int(own['mlm_count']))
  if sentence_task != 'none':
    metrics.update(_sentence_metrics(own, 'sop'))
  return metrics


def _sentence_metrics(totals: dict, name: str) -> dict:
  count = max(int(totals['sop_count']), 1)
  return {f'eval_{name}_accuracy': totals['sop_correct'] / count, f'eval_{name}_loss': totals['sop_loss'] / count,
          f'eval_{name}_count': int(totals['sop_count']),
          f'eval_{name}_majority': max(totals['sop_ones'], totals['sop_count'] - totals['sop_ones']) / count}


def _same_count_on_every_host(batches: list) -> list:
  """Hosts hold held-out shards of different sizes, but each must run as many eval steps as the others: the
  shorter lists are padded with unlabelled batches."""
  if jax.process_count() == 1:
    return batches
  from jax.experimental import multihost_utils
  most = int(multihost_utils.process_allgather(np.int32(len(batches))).max())
  empty = collate([], batches[0]['input_ids'].shape[1], batches[0]['masked_lm_ids'].shape[1],
                  rows=len(batches[0]['input_ids']))
  return batches + [empty] * (most - len(batches))


class OutOfMemory(Exception):
  """The compiler's out-of-memory error for a step; `required` is the memory it said it needed, where it said."""

  def __init__(self, message: str):
    super().__init__(message)
    found = re.search(r'\(([\d.]+)([KMGT])\) exceeds available HBM \(([\d.]+)([KMGT])\)', message)
    unit = lambda u: {'K': 2 ** 10, 'M': 2 ** 20, 'G': 2 ** 30, 'T': 2 ** 40}[u]
    self.required = float(found.group(1)) * unit(found.group(2)) if found else None


def compile_train_step(program: Program, state, batch, mesh):
  """The train step compiled for the abstract `state` and `batch` on `mesh`'s devices (real or compile-only);
  OutOfMemory if it does not fit."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    lowered = program.train_step.lower(state, batch)
  # A persistent compilation cache (JAX_COMPILATION_CACHE_DIR) cannot load what compile-only devices compile (no
  # client to load it onto: a warning on every hit), so their compiles bypass it. JAX decides once per process
  # whether the cache is used: resetting it makes the switch count, both ways.
  caching = jax.config.jax_enable_compilation_cache
  bypass = caching and type(mesh.devices.flat[0].client).__name__ == 'CompileOnlyPyClient'
  if bypass:
    jax.config.update('jax_enable_compilation_cache', False)
    compilation_cache.reset_cache()
  try:
    return lowered.compile()
  except jax.errors.JaxRuntimeError as e:
    if 'RESOURCE_EXHAUSTED' in str(e):
      raise OutOfMemory(str(e)) from None
    raise
  finally:
    if bypass:
      jax.config.update('jax_enable_compilation_cache', True)
      compilation_cache.reset_cache()
