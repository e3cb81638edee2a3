"""ALBERT-xxlarge (paper Table 2 prints 235M parameters; this released shape has 223M, see docs/model.md):
H 4096, 12 layers, 64 heads, FFN 16384, E 128, shared, no dropout.

COMMAND: python -m albert_jax.summary --config=configs/xxlarge.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(hidden_size=4096, num_layers=12, num_heads=64, intermediate_size=16384)
  return config
