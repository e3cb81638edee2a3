"""ALBERT-large (paper Table 2: 18M parameters): H 1024, 24 layers, 16 heads, FFN 4096, E 128, shared.

COMMAND: python -m albert_jax.summary --config=configs/large.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096)
  return config
