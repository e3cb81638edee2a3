"""LAMB and AdamW against a direct numpy transcription of the original optimizers (lamb_optimizer.py,
optimization.py: AdamWeightDecayOptimizer), and the original's schedule."""
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from ml_collections import ConfigDict

from albert_jax import optim


def original_step(params, grads, state, lr, lamb, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, clip=1.0):
  """One step of the original TF code, written with numpy; variables are (name, array) pairs."""
  norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
  scale = clip / max(norm, clip)  # tf.clip_by_global_norm
  new = {}
  for name, p in params.items():
    g = grads[name] * scale
    m = b1 * state[name][0] + (1 - b1) * g
    v = b2 * state[name][1] + (1 - b2) * g * g
    state[name] = (m, v)
    update = m / (np.sqrt(v) + eps)
    excluded = any(re.search(r, name) for r in ['LayerNorm', 'layer_norm', 'bias'])
    if wd and not excluded:
      update = update + wd * p
    ratio = 1.0
    if lamb and not excluded:
      w, u = np.linalg.norm(p), np.linalg.norm(update)
      ratio = w / u if w > 0 and u > 0 else 1.0
    new[name] = p - ratio * lr * update
  return new


def make_params(rng):
  return {
      'embeddings': {'word_embeddings': rng.normal(size=(11, 4)).astype(np.float32),
                     'layer_norm': {'scale': np.ones(4, np.float32), 'bias': np.zeros(4, np.float32)}},
      'encoder': {'block': {'ffn': {'intermediate': {'kernel': rng.normal(size=(3, 4, 5)).astype(np.float32),
                                                     'bias': rng.normal(size=(3, 5)).astype(np.float32)}}},
                  'dense': {'kernel': rng.normal(size=(4, 4)).astype(np.float32)}},
      'mlm_head': {'output_bias': np.zeros(11, np.float32)},
  }


BOXED_NAMES = {'encoder/block/ffn/intermediate/kernel', 'encoder/block/ffn/intermediate/bias'}  # stacked


def boxed(params):
  def box(path, x):
    name = '/'.join(str(k.key) for k in path)
    stacked = name in BOXED_NAMES
    return nn.LogicallyPartitioned(x, (('layers',) if stacked else (None,)) + (None,) * (x.ndim - 1))
  return jax.tree_util.tree_map_with_path(box, params)


def flatten(params):
  """Variables as the original holds them: each layer of a stacked parameter is its own variable."""
  flat = {}
  for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
    name = '/'.join(str(k.key) for k in path)
    if name in BOXED_NAMES:
      for i in range(x.shape[0]):
        flat[f'{name}/layer_{i}'] = np.asarray(x[i], np.float64)
    else:
      flat[name] = np.asarray(x, np.float64)
  return flat


@pytest.mark.parametrize('optimizer', ['lamb', 'adamw'])
def test_updates_match_the_original_rule(optimizer):
  rng = np.random.default_rng(0)
  params = make_params(rng)
  c = ConfigDict(dict(optimizer=optimizer, learning_rate=0.01, warmup_steps=2, num_steps=10, poly_power=1.0,
                      weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, clip_norm=1.0))
  tx = optim.make(c, params, boxed(params))
  state = tx.init(params)
  reference = flatten(params)
  ref_state = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in reference.items()}
  lr = optim.schedule(0.01, 2, 10)
  ours = jax.tree.map(jnp.asarray, params)
  for step in range(6):
    # Large gradients in some steps so that global-norm clipping is exercised too.
    grads = jax.tree.map(lambda p: (rng.normal(size=p.shape) * (3.0 if step % 2 else 0.1)).astype(np.float32),
                         params)
    updates, state = jax.jit(tx.update)(grads, state, ours)
    ours = optax.apply_updates(ours, updates)
    reference = original_step(reference, flatten(grads), ref_state, float(lr(step)), optimizer == 'lamb')
  for name, value in flatten(jax.tree.map(np.asarray, ours)).items():
    np.testing.assert_allclose(value, reference[name], rtol=2e-5, atol=2e-6, err_msg=name)
  if optimizer == 'lamb':
    ratios = optim.trust_ratios(state)
    assert any(r.shape == (3,) for r in ratios)  # one per layer of the stacked kernel


def test_schedule_is_warmup_then_decay_counted_from_step_zero():
  lr = optim.schedule(1.76e-3, 3125, 125_000)
  assert float(lr(0)) == 0.0
  assert float(lr(3124)) == pytest.approx(1.76e-3 * 3124 / 3125)
  assert float(lr(3125)) == pytest.approx(1.76e-3 * (1 - 3125 / 125_000))  # not the peak: decay counts from 0
  assert float(lr(125_000)) == 0.0 and float(lr(200_000)) == 0.0


def test_decay_mask_excludes_layer_norm_and_biases():
  mask = optim.decay_mask(make_params(np.random.default_rng(0)))
  assert mask['embeddings']['word_embeddings'] and mask['encoder']['dense']['kernel']
  assert not mask['embeddings']['layer_norm']['scale'] and not mask['embeddings']['layer_norm']['bias']
  assert not mask['encoder']['block']['ffn']['intermediate']['bias'] and not mask['mlm_head']['output_bias']
