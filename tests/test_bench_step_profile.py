"""bench/step_profile.py reads a compiled program's HLO: each operation XLA:CPU runs is assigned to the forward
pass, the backward pass or the rest by JAX's own op_name metadata, as the gradient's structure says it must be."""

import jax
import jax.numpy as jnp
import pytest

from conftest import import_bench


@pytest.fixture(scope='module')
def bench():
  return import_bench('step_profile')


def test_operations_are_assigned_to_forward_backward_and_the_rest(bench):
  def loss(w, x):
    return jnp.tanh(x @ w).sum()

  def train_step(w, x):  # value_and_grad's forward and backward, then an update outside both
    value, grad = jax.value_and_grad(loss)(w, x)
    return w - 0.1 * grad * jnp.sqrt(value), value

  w, x = jnp.ones((16, 8)), jnp.ones((32, 16))
  names = bench.hlo_names(jax.jit(train_step).lower(w, x).compile().as_text())
  # A product is a dot, or a fusion around one (XLA:CPU hands some to YNNPACK): its op_name ends in the JAX op.
  dots = {phase for phase, what in names.values() if what.endswith('dot_general') or what.endswith('transpose')
          and what.startswith('dot')}
  # One product in the forward pass (x @ w) and one in the backward (xᵀ @ the tanh's gradient for w).
  assert dots == {'forward', 'backward'}
  phases = {phase for phase, _ in names.values()}
  assert phases <= set(bench.PHASES) and {'forward', 'backward'} <= phases
  assert bench.phase_of('jit(train_step)/transpose(jvp(Albert))/encoder/dot_general') == 'backward'
  assert bench.phase_of('jit(train_step)/jvp(Albert)/encoder/dot_general') == 'forward'
  assert bench.phase_of('jit(train_step)/mul') == 'rest'
