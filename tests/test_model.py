"""Model behaviour that HF parity (test_interop.py) does not cover: layouts per sharing strategy, masking,
dropout, dtypes, remat, init statistics, logical axes, and a compiled program that does not grow with depth."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from albert_jax.errors import ConfigError
from albert_jax.model import Albert, ModelConfig, init_params

SMALL = dict(vocab_size=97, embedding_size=16, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=48,
             max_position_embeddings=32)


def build(**overrides):
  model = Albert(ModelConfig(**{**SMALL, **overrides}))
  return model, nn.unbox(init_params(model, jax.random.key(0)))


def batch(seed=0, b=2, s=12, vocab=97):
  rng = np.random.RandomState(seed)
  ids = rng.randint(5, vocab, (b, s))
  types = np.zeros_like(ids)
  types[:, s // 2:] = 1
  mask = np.ones_like(ids)
  mask[1, s - 4:] = 0
  return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


def n_params(tree):
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


# Per-block parameter counts for SMALL, by hand: attention 4 (HxH + H) + LN 2H; FFN 2 H I + I + H + LN 2H.
H, I = 32, 48
ATTENTION = 4 * (H * H + H) + 2 * H
FFN = 2 * H * I + I + H + 2 * H


@pytest.mark.parametrize('sharing, attention_sets, ffn_sets', [
    ('all', 1, 1), ('attention', 1, 4), ('ffn', 4, 1), ('none', 4, 4)])
def test_sharing_strategies_store_one_or_per_layer_copies(sharing, attention_sets, ffn_sets):
  _, params = build(sharing=sharing)
  block = params['encoder']['block']
  assert n_params(block['attention']) == attention_sets * ATTENTION
  assert n_params(block['ffn']) == ffn_sets * FFN
  # One shared part keeps the plain layer shape: no leading 'layers' axis.
  assert block['attention']['query']['kernel'].shape == ((H, H) if attention_sets == 1 else (4, H, H))


def test_groups_and_inner_groups_store_groups_times_inner_blocks():
  _, params = build(num_layers=6, num_groups=3, inner_group_num=2)
  assert params['encoder']['block']['ffn']['intermediate']['kernel'].shape == (6, H, I)
  assert ModelConfig(**{**SMALL, 'num_layers': 6, 'num_groups': 3, 'inner_group_num': 2}).num_blocks == 12


def test_layer_to_group_mapping_is_the_originals():
  # Original: group_idx = int(layer_idx / num_layers * num_groups); each layer runs all inner blocks of its group.
  cfg = ModelConfig(**{**SMALL, 'num_layers': 12, 'num_groups': 4, 'inner_group_num': 2})
  used = [cfg.block_copy(b, cfg.attention_copies) for b in range(cfg.num_blocks)]
  expected = [int(layer / 12 * 4) * 2 + inner for layer in range(12) for inner in range(2)]
  assert used == expected


def test_projection_exists_only_when_embedding_size_differs_from_hidden_size():
  _, factorized = build()
  _, unfactorized = build(embedding_size=32)
  assert factorized['encoder']['embedding_projection']['kernel'].shape == (16, 32)
  assert 'embedding_projection' not in unfactorized['encoder']


def test_mlm_logits_at_masked_positions_equal_the_full_logits_gathered():
  model, params = build()
  ids, types, mask = batch()
  positions = jnp.array([[1, 4, 0], [2, 3, 7]])
  full = model.apply({'params': params}, ids, types, mask).mlm_logits
  sparse = model.apply({'params': params}, ids, types, mask, masked_lm_positions=positions).mlm_logits
  assert full.shape == (2, 12, 97) and sparse.shape == (2, 3, 97)
  np.testing.assert_allclose(sparse, np.take_along_axis(np.asarray(full), np.asarray(positions)[..., None], 1),
                             atol=1e-5)


def test_padded_tokens_do_not_change_real_positions():
  model, params = build()
  ids, types, mask = batch()
  other = ids.at[1, -4:].set(7)  # only padded positions of row 1 change
  a = model.apply({'params': params}, ids, types, mask)
  b = model.apply({'params': params}, other, types, mask)
  np.testing.assert_allclose(a.sequence_output[1, :8], b.sequence_output[1, :8], atol=1e-5)
  np.testing.assert_allclose(a.sop_logits, b.sop_logits, atol=1e-5)
  assert not np.allclose(a.sequence_output[1, 8:], b.sequence_output[1, 8:], atol=1e-3)


def test_dropout_is_active_only_when_training_with_a_rate():
  model, params = build(dropout_rate=0.1, attention_dropout_rate=0.1)
  plain, _ = build()
  ids, types, mask = batch()
  run = lambda m, seed, det: m.apply({'params': params}, ids, types, mask, deterministic=det,
                                     rngs={'dropout': jax.random.key(seed)}).sequence_output
  np.testing.assert_array_equal(run(model, 0, True), run(plain, 0, True))
  assert not np.allclose(run(model, 0, False), run(model, 1, False), atol=1e-3)
  np.testing.assert_array_equal(run(model, 3, False), run(model, 3, False))  # reproducible from the rng


def test_bfloat16_compute_keeps_float32_params_and_close_outputs():
  model16, params = build(dtype='bfloat16')
  model32, _ = build()
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
  ids, types, mask = batch()
  out16 = model16.apply({'params': params}, ids, types, mask)
  out32 = model32.apply({'params': params}, ids, types, mask)
  assert out16.sequence_output.dtype == jnp.bfloat16 and out16.mlm_logits.dtype == jnp.float32
  np.testing.assert_allclose(out16.sop_logits, out32.sop_logits, atol=0.05)
  assert np.mean(np.argmax(out16.mlm_logits, -1) == np.argmax(out32.mlm_logits, -1)) > 0.9


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_the_heads_bias_gradient_is_the_cotangent_summed_as_autodiff_sums_it(dtype):
  """model.add_bias writes the bias's gradient as a product with ones: the same as autodiff's sum of x + bias."""
  from albert_jax.model import add_bias
  x = jax.random.normal(jax.random.key(0), (3, 5, 7), dtype)
  bias = jax.random.normal(jax.random.key(1), (7,), dtype)
  weights = jax.random.normal(jax.random.key(2), (3, 5, 7), jnp.float32)
  loss = lambda add: lambda x, b: (add(x, b).astype(jnp.float32) * weights).sum()
  ours = jax.grad(loss(add_bias), argnums=(0, 1))(x, bias)
  plain = jax.grad(loss(lambda x, b: x + b), argnums=(0, 1))(x, bias)
  assert ours[1].dtype == bias.dtype and ours[1].shape == bias.shape
  np.testing.assert_array_equal(ours[0], plain[0])
  np.testing.assert_allclose(np.asarray(ours[1], np.float32), np.asarray(plain[1], np.float32),
                             rtol=1e-6 if dtype == 'float32' else 1e-2, atol=1e-6 if dtype == 'float32' else 0.05)
  np.testing.assert_array_equal(add_bias(x, bias), x + bias)


@pytest.mark.parametrize('remat', ['full', 'save_dots', 'save_dots_no_batch'])
def test_remat_policies_give_the_same_gradients(remat):
  ids, types, mask = batch()

  def grads(model, params):
    loss = lambda p: jnp.sum(model.apply({'params': p}, ids, types, mask).mlm_logits ** 2)
    return jax.grad(loss)(params)

  # The same loop on both sides: remat keeps it (scan_unroll's platform default), so the plain model keeps it too.
  plain, params = build(sharing='attention', scan_unroll=1)
  remat_model, _ = build(sharing='attention', remat=remat)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               grads(plain, params), grads(remat_model, params))


def test_init_is_tf_truncated_normal_with_zero_biases_and_unit_scales():
  cfg = ModelConfig(hidden_size=256, num_heads=4, intermediate_size=1024, vocab_size=4000, embedding_size=64,
                    num_layers=1)
  params = nn.unbox(init_params(Albert(cfg), jax.random.key(1)))
  kernel = np.asarray(params['encoder']['block']['ffn']['intermediate']['kernel'])
  # tf.truncated_normal_initializer(0.02): N(0, 0.02) cut at +-2 sigma, not rescaled: std = 0.02 * 0.87962566.
  assert abs(kernel.std() - 0.02 * 0.87962566) < 2e-4
  assert np.abs(kernel).max() <= 0.04
  assert abs(np.asarray(params['embeddings']['word_embeddings']).std() - 0.0175925) < 2e-4
  assert not np.any(params['encoder']['block']['ffn']['intermediate']['bias'])
  assert np.all(np.asarray(params['encoder']['block']['ffn']['layer_norm']['scale']) == 1)


def test_every_parameter_carries_one_logical_axis_name_per_dimension():
  model = Albert(ModelConfig(**{**SMALL, 'sharing': 'ffn'}))
  boxed = init_params(model, jax.random.key(0))
  leaves = jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  assert leaves and all(isinstance(x, nn.LogicallyPartitioned) for x in leaves)
  assert all(len(x.names) == x.value.ndim for x in leaves)
  stacked = boxed['encoder']['block']['attention']['query']['kernel']
  assert stacked.names == ('layers', 'hidden', 'heads')


def test_scan_unroll_computes_the_same_function():
  """The loop kept (a TPU's default), partly unrolled, and every block (a CPU's default, 0)."""
  rolled, params = build(scan_unroll=1)
  ids, types, mask = batch()
  expected = rolled.apply({'params': params}, ids, types, mask).mlm_logits
  for unroll in (2, 0):
    unrolled, _ = build(scan_unroll=unroll)
    np.testing.assert_allclose(unrolled.apply({'params': params}, ids, types, mask).mlm_logits, expected, atol=1e-5)


def test_scan_unroll_by_platform_keeps_the_loop_on_a_tpu_only():
  """scan_unroll 0 (the default): every block on a GPU, where the scanned loop's stacked activations cost an H200
  8.5% (xxlarge) to 15% (base) of the step (bench/runs/gpu_h200_2026-11-26), and on a CPU (bench/compile_depth.py:
  the gradient 8% faster at 12 layers); one on a TPU, whose program stays the same size at any depth; a number the
  config names is kept everywhere."""
  grouped = ModelConfig(**{**SMALL, 'num_layers': 6, 'inner_group_num': 2})  # 12 blocks a pass
  assert grouped.scan_unroll == 0 and grouped.num_blocks == 12
  assert grouped.for_platform('gpu').scan_unroll == grouped.for_platform('cpu').scan_unroll == 12
  assert grouped.for_platform('tpu').scan_unroll == 1
  recomputing = ModelConfig(**{**SMALL, 'num_layers': 6, 'remat': 'full'})  # remat keeps the loop everywhere
  assert {recomputing.for_platform(p).scan_unroll for p in ('cpu', 'gpu', 'tpu')} == {1}
  named = ModelConfig(**{**SMALL, 'scan_unroll': 2})
  assert {named.for_platform(p).scan_unroll for p in ('cpu', 'gpu', 'tpu')} == {2}
  with pytest.raises(ConfigError, match='scan_unroll must be a positive integer .or 0: by platform., got -1'):
    ModelConfig(**{**SMALL, 'scan_unroll': -1})


def lowered_gradient(shape: tuple, output: str, **overrides):
  """The gradient of the sum of a SMALL model's `output` (with `overrides`) over a batch of `shape`, lowered."""
  model = Albert(ModelConfig(**{**SMALL, **overrides}))
  params = jax.eval_shape(lambda: nn.unbox(init_params(model, jax.random.key(0))))
  loss = lambda p, x: jnp.sum(getattr(model.apply({'params': p}, x), output))
  return jax.jit(jax.grad(loss)).lower(params, jax.ShapeDtypeStruct(shape, jnp.int32))


def test_remat_saves_activation_memory_at_the_platform_default():
  """Recomputing each block's forward pass in the backward pass must shrink the gradient's temporaries. Unrolled,
  XLA:CPU schedules the recomputation early and keeps every activation (as much memory as without remat), which
  is why the platform default keeps the loop when remat is on."""
  def temporaries(remat):
    lowered = lowered_gradient((4, 64), 'sop_logits', num_layers=8, hidden_size=64, intermediate_size=256,
                               max_position_embeddings=64, remat=remat)
    return lowered.compile().memory_analysis().temp_size_in_bytes

  assert temporaries('full') < 0.5 * temporaries('none')  # measured: 2.6 MB against 14.3


def test_compiled_program_does_not_grow_with_depth():
  """nn.scan with the loop kept (a TPU's default): a 48-layer model lowers to the same program as a 12-layer one, up
  to the trip count. The model used directly on this CPU takes the CPU's default, every block unrolled."""
  def lowered_size(layers, scan_unroll=1):
    return len(lowered_gradient((2, 12), 'mlm_logits', num_layers=layers, scan_unroll=scan_unroll).as_text())

  assert abs(lowered_size(48) - lowered_size(12)) < 100
  assert lowered_size(24, scan_unroll=0) - lowered_size(12, scan_unroll=0) > 12 * 1000  # calls of the block, each way
