"""cpu_allocator: where it sets glibc's malloc, and what that does to an XLA:CPU step: the page faults each step
takes without it (its temporaries mapped afresh) against none once warm with it, at a steady resident size."""
import json
import os
import subprocess
import sys

import jax
import pytest

from albert_jax import cpu_allocator

# A gradient step of a two-layer model whose temporaries glibc would map and unmap every call; prints its page
# faults per call over calls 10-60, the compiled temporaries' size and the resident size after 40 and 60 calls.
STEP_IN_A_FRESH_PROCESS = '''
import json, resource, sys
from albert_jax import cpu_allocator, model as M
import flax.linen as nn, jax, jax.numpy as jnp
set_here = cpu_allocator.reuse_freed_memory()  # before JAX runs anything, as the command-line tools
cfg = M.ModelConfig(vocab_size=1000, embedding_size=128, hidden_size=128, num_layers=2, num_heads=2,
                    intermediate_size=512, max_position_embeddings=64).for_platform('cpu')
model = M.Albert(cfg)
params = nn.unbox(M.init_params(model, jax.random.key(0)))
ids = jnp.ones((32, 64), jnp.int32)
step = jax.jit(jax.grad(lambda p: (model.apply({'params': p}, ids).sequence_output ** 2).mean()))
compiled = step.lower(params).compile()
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
resident = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096
def call(calls):  # each call's outputs dropped, as a training loop's step drops the last state
  for _ in range(calls):
    jax.block_until_ready(compiled(params))
call(10)
before = faults()
call(30)
resident_at_40 = resident()
call(20)
print(json.dumps({'set': set_here, 'faults_per_call': (faults() - before) / 50, 'resident_at_40': resident_at_40,
                  'resident_at_60': resident(), 'temp_bytes': compiled.memory_analysis().temp_size_in_bytes}))
'''


def run_step(**environ) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith('MALLOC_')} | environ
  env.pop('JAX_PLATFORMS', None)
  done = subprocess.run([sys.executable, '-c', STEP_IN_A_FRESH_PROCESS], env=env, capture_output=True, text=True,
                        timeout=300, check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith('linux') or jax.default_backend() != 'cpu', reason='glibc, XLA:CPU')
def test_reused_memory_spares_each_step_its_page_faults():
  default = run_step(MALLOC_ARENA_MAX='8')  # a malloc variable of the user's own: left alone (the opt-out)
  reused = run_step()
  assert not default['set'] and reused['set']
  # Without it every call faults in pages for a good part of its temporaries (4 KB a fault)...
  assert default['faults_per_call'] > 0.5 * default['temp_bytes'] / 4096, default
  # ... with it, once the heap has grown to the step's peak, none; the heap may still grow once in the first
  # hundred calls (a freed block too fragmented for the next call's: one call's temporaries, ~2% of these 50
  # calls' faults without it), not from step to step.
  assert reused['faults_per_call'] < 0.05 * default['faults_per_call'], (reused, default)
  assert reused['resident_at_60'] - reused['resident_at_40'] < reused['temp_bytes'] + 8 * 2**20, reused


def test_set_only_where_jax_runs_on_the_cpu_and_the_user_chose_nothing():
  assert cpu_allocator.cpu_only('cpu') and not cpu_allocator.cpu_only('tpu,cpu') and not cpu_allocator.cpu_only('cuda')
  if not os.environ.get('JAX_PLATFORMS'):  # no setting: JAX's probe of the hardware, as JAX itself chose
    assert cpu_allocator.cpu_only(None) == (jax.default_backend() == 'cpu')
  assert not cpu_allocator.user_chose_malloc({'PATH': '/bin', 'GLIBC_TUNABLES': 'glibc.rtld.nns=4'})
  assert cpu_allocator.user_chose_malloc({'MALLOC_ARENA_MAX': '2'})
  assert cpu_allocator.user_chose_malloc({'GLIBC_TUNABLES': 'glibc.malloc.trim_threshold=0'})
  assert cpu_allocator.user_chose_malloc({'LD_PRELOAD': '/usr/lib/libtcmalloc.so.4'})
