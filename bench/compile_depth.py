"""Compile time of the full training gradient (MLM + SOP loss) against depth: nn.scan keeps it flat.

  python bench/compile_depth.py [--layers=12,24,48] [--config=configs/base.py] [--unroll=1,all]

Prints one line per depth and loop setting: seconds to lower and compile, size of the optimized program, ratio to
the first, the program's temporary memory, and with --time_steps the gradient's median seconds a call (what
unrolling the loop buys at run time). --remat sets model.remat.
"""
import argparse
import dataclasses
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from albert_jax import cpu_allocator
from albert_jax.config import from_file, validate
from albert_jax.model import Albert, abstract_params
from shared import time_interleaved


def measure(config, layers, unroll, batch, seq_len, time_steps):
  """The gradient of `config`'s model at `layers` layers, its loop unrolled by `unroll` ('all': every block):
  (seconds to lower and compile, optimized program's characters, temporary bytes, median seconds a call or None)."""
  config.model.num_layers = layers
  shape = validate(config)
  model = Albert(dataclasses.replace(shape, scan_unroll=shape.num_blocks if unroll == 'all' else int(unroll)))
  params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), nn.unbox(abstract_params(model)))
  ids = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32)
  positions = jax.ShapeDtypeStruct((batch, config.data.max_predictions_per_seq), jnp.int32)
  labels = jax.ShapeDtypeStruct((batch,), jnp.int32)

  def loss(p, ids, positions, labels):
    out = model.apply({'params': p}, ids, masked_lm_positions=positions)
    mlm = optax.softmax_cross_entropy_with_integer_labels(out.mlm_logits, jnp.take_along_axis(ids, positions, 1))
    return mlm.mean() + optax.softmax_cross_entropy_with_integer_labels(out.sop_logits, labels).mean()

  start = time.perf_counter()
  compiled = jax.jit(jax.grad(loss)).lower(params, ids, positions, labels).compile()
  seconds = time.perf_counter() - start
  step = None
  if time_steps:  # random weights and batch: the gradient's cost does not depend on the values
    rng = np.random.default_rng(0)
    values = (jax.tree.map(lambda x: rng.normal(0, 0.02, x.shape).astype(x.dtype), params),
              rng.integers(0, config.model.vocab_size, ids.shape).astype(np.int32),
              rng.integers(0, seq_len, positions.shape).astype(np.int32),
              rng.integers(0, 2, labels.shape).astype(np.int32))
    values = jax.device_put(values)
    step = time_interleaved({'gradient': lambda: jax.block_until_ready(compiled(*values))}, time_steps)[0]['gradient']
  return seconds, len(compiled.as_text()), compiled.memory_analysis().temp_size_in_bytes, step


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/base.py')
  parser.add_argument('--layers', default='12,24,48')
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--seq_len', type=int, default=128)
  parser.add_argument('--unroll', default='1', help="model.scan_unroll values, comma-separated; 'all': every block")
  parser.add_argument('--time_steps', type=int, default=0, help='also time this many gradient calls (median)')
  parser.add_argument('--remat', default='none', help='model.remat')
  args = parser.parse_args()
  print(f'{jax.devices()[0].platform}: {args.config}, batch {args.batch} x {args.seq_len}, remat {args.remat}')
  first = None
  for layers in map(int, args.layers.split(',')):
    for unroll in args.unroll.split(','):
      config = from_file(args.config)
      config.model.remat = args.remat
      seconds, size, temporaries, step = measure(config, layers, unroll, args.batch, args.seq_len,
                                                 args.time_steps)
      first = first or seconds
      timed = f'   gradient {step:.3f} s a call' if step is not None else ''
      print(f'  {layers:3d} layers, unroll {unroll:>3}: compile {seconds:6.2f} s   program {size:9,d} chars   '
            f'x{seconds / first:.2f}   temporaries {temporaries / 2**20:7.1f} MiB{timed}', flush=True)


if __name__ == '__main__':
  cpu_allocator.reuse_freed_memory()  # as the command-line tools run: each call reuses the last one's pages
  main()
