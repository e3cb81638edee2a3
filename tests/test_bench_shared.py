"""bench/shared.py, what every bench measures with: HF's labels for our batch give HF's pretraining loss equal to
ours from the same weights, stock and with its MLM head at the masked positions alone; the step it times is
train.py's own (or finetune.py's, against HF's classifier of the same size); the timing alternates as it says;
TensorBoard's scalars read back what metrics.Writer wrote."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

from albert_jax import finetune, metrics, sharding
from albert_jax import step as step_lib
from albert_jax.config import validate
from albert_jax.downstream import heads
from albert_jax.model import Albert, ModelConfig, init_params
from conftest import import_bench

transformers = pytest.importorskip('transformers')
torch = pytest.importorskip('torch')


@pytest.fixture(scope='module')
def shared():
  return import_bench('shared')


@pytest.fixture(scope='module')
def tiny(tiny_config):
  config = tiny_config.copy_and_resolve_references()
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
  return config


def test_hf_labels_give_hfs_loss_equal_to_ours_from_the_same_weights(shared, tiny, tmp_path):
  shape = validate(tiny)
  batch = shared.random_batch(4, 32, 5, shape.vocab_size)
  positions = batch['masked_lm_positions']
  assert (np.diff(positions, axis=1) > 0).all() and positions.min() >= 1 and positions.max() <= 30
  batch['masked_lm_weights'][1, 3:] = 0  # padding predictions: no loss on either side
  labels = shared.hf_mlm_labels(batch)
  assert (labels != -100).sum() == batch['masked_lm_weights'].sum() == 18
  assert labels[1, positions[1, 4]] == -100 and labels[0, positions[0, 2]] == batch['masked_lm_ids'][0, 2]

  model = Albert(shape)
  params = nn.unbox(init_params(model, jax.random.key(0)))
  ours = step_lib.losses(model, params, batch, jax.random.key(0), 'sop', True)[0]
  hf = shared.hf_pretraining_model(shape, params).eval()
  with torch.no_grad():
    stock, masked_only = (float(shared.hf_pretraining_loss(hf, batch, masked_only)()) for masked_only in (False, True))
  # HF's own loss from our labels, and the same modules with the head at the masked positions alone, equal ours.
  np.testing.assert_allclose([stock, masked_only], [float(ours)] * 2, rtol=1e-5)


def test_the_timed_step_is_train_pys_compiled_program(shared, tiny):
  """The bench's step gives, step after step, the losses and gradient norms of train.py's program from the same
  initial state."""
  mesh = sharding.make_mesh(tiny.mesh, jax.devices()[:1])
  program = step_lib.build(tiny, validate(tiny).for_platform('cpu'), mesh)
  batch = shared.random_batch(4, 32, 5, tiny.model.vocab_size)
  step, peak = shared.train_py_step(program, batch, mesh)
  assert peak is None  # a CPU
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    state = program.new_state(jax.random.key(0))
    for _ in range(2):
      state, expected = program.train_step(state, sharding.global_batch(batch, mesh))
      got = step()
      for name in ('loss', 'grad_norm'):
        np.testing.assert_allclose(float(got[name]), float(expected[name]), rtol=1e-6, err_msg=name)


def test_interleaved_timing_alternates_blocks_and_records_the_load(shared):
  calls = []
  steps = {name: (lambda name=name: calls.append(name)) for name in ('ours', 'hf')}
  seconds, load = shared.time_interleaved(steps, repeats=3, block=2)
  # Each warmed up once, then per repeat: one untimed step and a timed block of 2, the two frameworks in turn.
  assert calls == ['ours', 'hf'] + (['ours'] * 3 + ['hf'] * 3) * 3
  assert set(seconds) == {'ours', 'hf'} and all(s >= 0 for s in seconds.values())
  assert set(load) == {'before', 'after'} and all(v >= 0 for v in load.values())


def test_tensorboard_scalars_read_back_what_the_writer_wrote(shared, tmp_path):
  for values in ({1: 0.5, 2: 0.25}, {3: 0.125}):  # a run and its resume
    writer = metrics.Writer(tmp_path, enabled=True)
    for step, value in values.items():
      writer.scalars(step, {'loss': value, 'eval_mlm_accuracy': 1 - value})
    writer.close()
  start, series = shared.tensorboard_scalars(tmp_path)
  assert sorted((step, value) for _, step, value in series['loss']) == [(1, 0.5), (2, 0.25), (3, 0.125)]
  assert sorted(value for _, _, value in series['eval_mlm_accuracy']) == [0.5, 0.75, 0.875]
  assert all(wall >= start for points in series.values() for wall, _, _ in points)


def test_the_fine_tuning_arms_are_finetune_pys_program_and_hfs_classifier_of_its_size(shared, tiny):
  """The fine-tuning benches time finetune.py's compiled program (its step's loss is the task's loss of the same
  state) against HF's AlbertForSequenceClassification of the same shape: as many parameters (but its E -> H
  mapping), the same loss of an untrained two-way head on the same batch."""
  config, task, shape, batch = shared.fine_tuning('sst2', tiny, batch_size=4, seq_len=16)
  assert config.train.optimizer == 'adamw' and task.num_labels == 2 and task.classifier_dropout == 0.1
  # The tiny fixture's shape (it has no dropout already), with fine-tuning's remat for pretraining's search
  assert shape == dataclasses.replace(ModelConfig.from_config(tiny.model), remat='none')
  assert batch['input_ids'].shape == (4, 16) and batch['input_mask'].all()
  assert set(np.unique(batch['label_ids'])) <= {0, 1}
  # Runtime fields (the loop's unrolling, remat) are the fine-tuning config's, as finetune.py takes them from a
  # pretraining run: a checkpoint pretrained unrolled still fine-tunes with the fine-tuning default.
  pretrained_unrolled = tiny.copy_and_resolve_references()
  pretrained_unrolled.model.update(scan_unroll=4, remat='full')
  fine_tuning_defaults = shared.glue_task_config('sst2', 'unread').model
  _, _, unrolled_shape, _ = shared.fine_tuning('sst2', pretrained_unrolled, batch_size=4, seq_len=16)
  assert (unrolled_shape.scan_unroll, unrolled_shape.remat) == (fine_tuning_defaults.scan_unroll,
                                                                fine_tuning_defaults.remat) == (0, 'none')
  # ... unless the bench is told otherwise, as --config.model.scan_unroll tells finetune.py.
  assert shared.fine_tuning('sst2', pretrained_unrolled, batch_size=4, seq_len=16, scan_unroll=2)[2].scan_unroll == 2
  task.classifier_dropout = 0.0  # no dropout anywhere: the step's loss is the loss, to float32 rounding
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  program = finetune.make_program(task, shape.for_platform('cpu'), config.train, mesh)
  step, _ = shared.train_py_step(program, batch, mesh)
  ours = float(step()['loss'])
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    state = program.new_state(jax.random.key(0))
    expected = task.loss(heads.make_model(shape, task.head), state['params'], batch, jax.random.key(0), True)[0]
  np.testing.assert_allclose(ours, float(expected), rtol=1e-6)
  hf, loss = shared.hf_classifier(shape, task, batch)
  # HF always maps the embeddings to the hidden size; ours, as the original, only where they differ (not here).
  assert shape.embedding_size == shape.hidden_size and not shape.embedding_projection
  projection = shape.embedding_size * shape.hidden_size + shape.hidden_size
  assert sum(x.size for x in jax.tree.leaves(program.abstract_params)) + projection == sum(
      p.numel() for p in hf.parameters())
  hf.eval()
  with torch.no_grad():
    assert abs(float(loss()) - ours) < 0.05 and abs(ours - np.log(2)) < 0.05  # both near ln 2, untrained
