"""BERT-large (paper Table 2: 334M parameters): H 1024, 24 layers, 16 heads, FFN 4096.

The paper's BERT rows: E == H (no factorization, no projection), no cross-layer sharing, and BERT's dropout 0.1.
COMMAND: python -m albert_jax.summary --config=configs/bert_large.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(embedding_size=1024, hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096,
                      sharing='none', dropout_rate=0.1, attention_dropout_rate=0.1)
  return config
