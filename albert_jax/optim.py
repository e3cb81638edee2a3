"""LAMB and AdamW with the original ALBERT semantics (albert-original.md section 3), built from optax pieces.

  g  <- clip_by_global_norm(g, 1.0)
  m  <- b1 m + (1 - b1) g;   v <- b2 v + (1 - b2) g^2         no bias correction
  u  <- m / (sqrt(v) + eps) + wd p                              wd only where decay(p)
  u  <- u * ||p|| / ||u||  (1 when either norm is 0)            LAMB only, where adapt(p)
  p  <- p - lr(step) u

decay(p) = adapt(p) = not LayerNorm and not a bias (the original's exclude list: 'LayerNorm', 'layer_norm',
'bias'). Norms are per variable as in the original, whose unshared layers are separate variables: a parameter
stacked on a leading 'layers' axis gets one trust ratio per layer. The schedule is linear warmup to the peak,
then polynomial decay counted from step 0 (so at the end of warmup the rate drops to lr * (1 - W/T)).
"""
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

OPTIMIZERS = ('lamb', 'adamw')


def schedule(learning_rate: float, warmup_steps: int, num_steps: int, power: float = 1.0) -> optax.Schedule:
  def lr(step):
    step = jnp.asarray(step, jnp.float32)
    decay = learning_rate * (1.0 - jnp.minimum(step, num_steps) / num_steps) ** power
    if warmup_steps == 0:
      return decay
    return jnp.where(step < warmup_steps, learning_rate * step / warmup_steps, decay)
  return lr


def _path_names(path) -> list:
  return [str(getattr(k, 'key', k)) for k in path]


def decay_mask(params) -> Any:
  """True where weight decay and the trust ratio apply: not LayerNorm parameters, not biases."""
  def applies(path, _):
    names = _path_names(path)
    return not any('layer_norm' in n or 'LayerNorm' in n for n in names) and 'bias' not in names[-1]
  return jax.tree_util.tree_map_with_path(applies, params)


def stacked_mask(boxed_params) -> Any:
  """True for parameters stacked on a leading 'layers' axis (one copy per layer or group)."""
  return jax.tree.map(lambda x: isinstance(x, nn.LogicallyPartitioned) and x.names[:1] == ('layers',),
                      boxed_params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


class UnbiasedAdamState(NamedTuple):
  mu: Any
  nu: Any


def scale_by_unbiased_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
  """Adam's direction m / (sqrt(v) + eps) without bias correction, as the original's optimizers."""
  def init(params):
    zeros = lambda: jax.tree.map(lambda p: jnp.zeros_like(p, jnp.float32), params)
    return UnbiasedAdamState(mu=zeros(), nu=zeros())  # two trees: donated buffers must not alias

  def update(grads, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, grads)
    return jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu), UnbiasedAdamState(mu, nu)

  return optax.GradientTransformation(init, update)


class TrustRatioState(NamedTuple):
  ratios: Any  # the last step's trust ratios: a scalar per variable, a [copies] vector per stacked one


def scale_by_layerwise_trust_ratio(adapt: Any, stacked: Any) -> optax.GradientTransformation:
  """u * ||p|| / ||u|| per variable (per layer copy for stacked ones), 1 where a norm is 0 or adapt is False."""
  def ratio(update, param, is_adapted, is_stacked):
    axes = tuple(range(1, param.ndim)) if is_stacked else None
    p_norm = jnp.sqrt(jnp.sum(jnp.square(param.astype(jnp.float32)), axis=axes))
    u_norm = jnp.sqrt(jnp.sum(jnp.square(update), axis=axes))
    r = jnp.where((p_norm > 0) & (u_norm > 0), p_norm / jnp.where(u_norm > 0, u_norm, 1.0), 1.0)
    return r if is_adapted else jnp.ones_like(r)

  def init(params):
    return TrustRatioState(jax.tree.map(lambda p, s: jnp.ones((p.shape[0],) if s else (), jnp.float32),
                                        params, stacked))

  def update(updates, state, params):
    ratios = jax.tree.map(ratio, updates, params, adapt, stacked)
    scaled = jax.tree.map(lambda u, r: u * r.reshape(r.shape + (1,) * (u.ndim - r.ndim)), updates, ratios)
    return scaled, TrustRatioState(ratios)

  return optax.GradientTransformation(init, update)


def make(train_config, params, boxed_params) -> optax.GradientTransformation:
  """The configured optimizer for `params` (unboxed); `boxed_params` tells which are stacked per layer."""
  c = train_config
  if c.optimizer not in OPTIMIZERS:
    raise ValueError(f'config.train.optimizer {c.optimizer!r}: expected one of {", ".join(OPTIMIZERS)}.')
  mask = decay_mask(params)
  chain = [optax.clip_by_global_norm(c.clip_norm), scale_by_unbiased_adam(c.beta1, c.beta2, c.epsilon),
           optax.add_decayed_weights(c.weight_decay, mask=mask)]
  if c.optimizer == 'lamb':
    chain.append(scale_by_layerwise_trust_ratio(mask, stacked_mask(boxed_params)))
  chain.append(optax.scale_by_learning_rate(schedule(c.learning_rate, c.warmup_steps, c.num_steps, c.poly_power)))
  return optax.chain(*chain)


def trust_ratios(opt_state) -> list:
  """The last step's LAMB trust ratios, flattened (empty for AdamW): for logging their spread."""
  for s in opt_state:
    if isinstance(s, TrustRatioState):
      return [jnp.ravel(r) for r in jax.tree.leaves(s.ratios)]
  return []
