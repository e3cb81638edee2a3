"""ALBERT-base (paper Table 2: 12M parameters): H 768, 12 layers, 12 heads, E 128, all layers shared.

COMMAND: python -m albert_jax.summary --config=configs/base.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg  # no variants: override fields with --config.model.x=...
  return defaults()  # the defaults are ALBERT-base
