"""Compile time of the full training gradient (MLM + SOP loss) against depth: nn.scan keeps it flat.

  python bench/compile_depth.py [--layers=12,24,48] [--config=configs/base.py]

Prints one line per depth: seconds to lower and compile, size of the optimized program, ratio to the first.
"""
import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from albert_jax.config import from_file, validate
from albert_jax.model import Albert, abstract_params


def compile_seconds(config, layers, batch, seq_len):
  config.model.num_layers = layers
  model = Albert(validate(config))
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
  return seconds, len(compiled.as_text())


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/base.py')
  parser.add_argument('--layers', default='12,24,48')
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--seq_len', type=int, default=128)
  args = parser.parse_args()
  print(f'{jax.devices()[0].platform}: {args.config}, batch {args.batch} x {args.seq_len}')
  first = None
  for layers in map(int, args.layers.split(',')):
    seconds, size = compile_seconds(from_file(args.config), layers, args.batch, args.seq_len)
    first = first or seconds
    print(f'  {layers:3d} layers: compile {seconds:6.2f} s   program {size:8,d} chars   x{seconds / first:.2f}',
          flush=True)


if __name__ == '__main__':
  main()
