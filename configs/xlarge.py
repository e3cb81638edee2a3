"""ALBERT-xlarge (paper Table 2: 60M parameters): H 2048, 24 layers, FFN 8192, E 128, shared.

The released config has 16 heads of size 128 (not H/64 = 32); we follow the release.
COMMAND: python -m albert_jax.summary --config=configs/xlarge.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(hidden_size=2048, num_layers=24, num_heads=16, intermediate_size=8192)
  return config
