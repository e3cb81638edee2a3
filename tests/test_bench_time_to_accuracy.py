"""bench/time_to_accuracy.py: every arm starts from the same weights (their held-out MLM loss at step 0, computed by
JAX for ours and by torch for HF's, agrees), HF's learning rate follows ours's schedule step by step, runs train for
their minutes and evaluate along the way, and the time to HF's final accuracy is read off the curves as the
figures say."""

import numpy as np
import pytest

from albert_jax import optim
from albert_jax.data import pipeline
from conftest import import_bench

pytest.importorskip('transformers')
pytest.importorskip('torch')


@pytest.fixture(scope='module')
def bench():
  return import_bench('time_to_accuracy')


@pytest.fixture(scope='module')
def setting(tiny_config, builtin_tokenizer):
  config = tiny_config.copy_and_resolve_references()
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
  config.train.batch_size = 16
  opened = pipeline.open_sources(config.data)
  held_out = pipeline.held_out_sets(config.data, builtin_tokenizer, 16, 1, opened=opened)
  new_pipeline = lambda: pipeline.Pipeline(config.data, builtin_tokenizer, 16, opened=opened)
  return config, held_out, new_pipeline


def test_arms_start_from_the_same_weights_follow_ours_schedule_and_train(bench, setting):
  config, held_out, new_pipeline = setting
  params = bench.Ours(config, held_out, 'lamb', 1e-2).initial_params()
  arms = {'ours': bench.Ours(config, held_out, 'lamb', 1e-2), 'ours_adamw': bench.Ours(config, held_out, 'adamw', 1e-3),
          'hf_masked_only': bench.HuggingFace(config, held_out, params, 1e-3, masked_only=True),
          'hf': bench.HuggingFace(config, held_out, params, 1e-3, masked_only=False)}
  rounds = [{}]
  for name, arm in arms.items():
    for r in rounds:
      r[name] = bench.train_for(arm, new_pipeline, budget=1.0, evals=2, step_seconds=0.25, warmup_share=0.25)
  for r in rounds:
    start = {name: run['curve'][0] for name, run in r.items()}
    # The same weights: the same held-out loss at step 0, near ln(4000) = 8.29 for untrained weights.
    assert start['ours']['mlm_loss'] == pytest.approx(np.log(4000), abs=0.5)
    for name in arms:
      assert start[name]['mlm_loss'] == pytest.approx(start['ours']['mlm_loss'], rel=1e-4), name
      assert start[name]['step'] == 0 and start[name]['seconds'] == 0.0
    for name, run in r.items():  # 4 steps' schedule (1 s at 0.25 s/step), 1 of warmup; stopped by the clock or there
      assert run['num_steps'] == 4 and run['warmup'] == 1
      assert 1 <= run['curve'][-1]['step'] <= 4 and len(run['curve']) >= 2, name
      if run['curve'][-1]['step'] < 4:  # stopped by the clock: at the last evaluation's moment, the budget
        assert run['curve'][-1]['seconds'] >= 1.0, name
  # HF's learning rate at each step is optim.schedule's (linear warmup, then decay counted from step 0).
  hf = arms['hf']
  hf.start(10, 3)
  expected = optim.schedule(1e-3, 3, 10)
  for step in range(10):
    assert hf.optimizer.param_groups[0]['lr'] == pytest.approx(float(expected(step)), rel=1e-5, abs=1e-12), step
    hf.optimizer.step()
    hf.scheduler.step()
  # HF's decay groups are optim.decay_mask's: no decay on biases and either kind of layer norm.
  undecayed = {id(p) for p in hf.optimizer.param_groups[1]['params']}
  for name, p in hf.model.named_parameters():
    assert (id(p) in undecayed) == (name.endswith('bias') or 'LayerNorm' in name or 'layer_norm' in name), name
  summary = bench.summarize(rounds, list(arms))
  table = bench.tables(rounds, summary, list(arms), evals=2)
  assert table.count('\n| ours') == 2 and '| hf |' in table
  assert '(one round)' in table and ' ± ' not in table  # one round: no standard error


def test_time_to_reach_interpolates_between_evaluations(bench):
  curve = [{'seconds': 0.0, 'mlm_accuracy': 0.0}, {'seconds': 60.0, 'mlm_accuracy': 0.05},
           {'seconds': 120.0, 'mlm_accuracy': 0.15}]
  assert bench.time_to_reach(curve, 0.10) == pytest.approx(90.0)  # halfway between 0.05 at 60 s and 0.15 at 120 s
  assert bench.time_to_reach(curve, 0.05) == pytest.approx(60.0)
  assert bench.time_to_reach(curve, 0.2) is None
  run = lambda c: {'curve': c, 'seconds_per_step': 1.0}
  hf = [{'seconds': 0.0, 'mlm_accuracy': 0.0, 'step': 0}, {'seconds': 300.0, 'mlm_accuracy': 0.10, 'step': 100}]
  rounds = [{'hf': run(hf), 'ours': run([dict(p, step=0) for p in curve])},
            {'hf': run(hf), 'ours': run([dict(p, step=0, seconds=p['seconds'] * 2) for p in curve])}]
  summary = bench.summarize(rounds, ['ours', 'hf'])
  # ours reaches HF's final 0.10 at 90 s and 180 s of HF's 300: shares 0.3 and 0.6, mean 0.45, SE 0.15
  assert summary['ours']['shares'] == pytest.approx([0.3, 0.6])
  assert summary['ours']['share_of_hf_time'] == pytest.approx((0.45, 0.15))
  assert summary['hf']['share_of_hf_time'][0] == pytest.approx(1.0)
