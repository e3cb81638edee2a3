"""The training program's step on a mesh of fake devices: gradient accumulation (config.train.grad_accum_steps)
makes the update one batch of the whole size makes, with the same metrics, in less memory."""
import flax.linen as nn
import jax
import numpy as np
import pytest

from albert_jax import sharding
from albert_jax import step as step_lib
from albert_jax.config import defaults, validate
from albert_jax.data.pipeline import collate

BATCH, SEQ, PREDICTIONS, VOCAB = 32, 32, 5, 97


def config_with(optimizer: str, microbatches: int):
  config = defaults()
  config.model.update(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4,
                      intermediate_size=48, max_position_embeddings=SEQ)
  config.data.update(max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS)
  config.train.update(batch_size=BATCH, grad_accum_steps=microbatches, optimizer=optimizer, learning_rate=1e-2,
                      warmup_steps=1, num_steps=10)
  config.mesh.update(data=4, fsdp=2)
  return config


def batches(count: int) -> list:
  """Random batches whose rows differ in masked positions and sentence labels, so that microbatches differ in
  what they count: a row with no masked position, rows of a held-out set's padding (sentence label -1)."""
  rng = np.random.default_rng(0)
  out = []
  for _ in range(count):
    batch = collate([], SEQ, PREDICTIONS, rows=BATCH)
    lengths = rng.integers(PREDICTIONS + 3, SEQ + 1, BATCH)
    for row, length in enumerate(lengths):
      batch['input_ids'][row, :length] = rng.integers(5, VOCAB, length)
      batch['input_mask'][row, :length] = 1
      batch['segment_ids'][row, length // 2:length] = 1
      masked = rng.integers(0, PREDICTIONS + 1)  # 0 to all of the slots used
      batch['masked_lm_positions'][row, :masked] = np.sort(rng.choice(np.arange(1, length - 1), masked, False))
      batch['masked_lm_ids'][row, :masked] = rng.integers(5, VOCAB, masked)
      batch['masked_lm_weights'][row, :masked] = 1.0
      batch['sentence_order_labels'][row] = rng.integers(-1, 2)
    out.append(batch)
  return out


def run(config, steps: int):
  """(final params, each step's metrics, the compiled step's temporary bytes)."""
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  program = step_lib.build(config, validate(config).for_platform('cpu'), mesh)
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    state = program.new_state(jax.random.key(0))
    compiled = program.train_step.lower(state, program.abstract_batch(BATCH, SEQ, PREDICTIONS)).compile()
    history = []
    for batch in batches(steps):
      state, metrics = compiled(state, sharding.global_batch(batch, mesh))
      history.append(jax.device_get(metrics))
  return jax.device_get(state['params']), history, compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize('optimizer', ['lamb', 'adamw'])
def test_microbatches_make_the_update_of_one_batch(optimizer):
  """Three steps of batch 32 over 8 devices, whole and as 4 microbatches (one row per device each): the same
  parameters within float32 rounding, the same loss, gradient norm and metric sums, in less memory."""
  whole, whole_metrics, whole_bytes = run(config_with(optimizer, 1), 3)
  parts, parts_metrics, parts_bytes = run(config_with(optimizer, 4), 3)
  largest = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(parts)))
  print(f'{optimizer}: largest parameter difference after 3 steps {largest:.2e}; temporary bytes '
        f'{whole_bytes:,} whole, {parts_bytes:,} in 4 microbatches')
  assert largest < 2e-6
  for one, other in zip(whole_metrics, parts_metrics):
    for key in ('loss', 'grad_norm', 'param_norm'):
      np.testing.assert_allclose(one[key], other[key], rtol=1e-5)
    for key, value in one['sums'].items():  # counts exactly, sums of losses to rounding
      np.testing.assert_allclose(value, other['sums'][key], rtol=1e-5)
  assert whole_metrics[0]['sums']['sop_count'] < BATCH  # the -1 rows are left out of the sentence loss
  assert parts_bytes < whole_bytes


def test_microbatches_that_do_not_divide_a_devices_rows_are_refused():
  from albert_jax.errors import ConfigError
  mesh = sharding.make_mesh(config_with('lamb', 1).mesh, jax.devices())
  with pytest.raises(ConfigError, match='is 4 per data-parallel device, which config.train.grad_accum_steps 3 does '
                                        'not divide: choose a batch of a multiple of 24, or microbatches that '
                                        'divide 4'):
    sharding.check_batch_size(BATCH, mesh, microbatches=3)
