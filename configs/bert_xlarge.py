"""BERT-xlarge (paper Table 2: 1270M parameters): H 2048, 24 layers, 32 heads (H/64), FFN 8192.

The paper's BERT rows: E == H (no factorization, no projection), no cross-layer sharing, and BERT's dropout 0.1.
COMMAND: python -m albert_jax.summary --config=configs/bert_xlarge.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(embedding_size=2048, hidden_size=2048, num_layers=24, num_heads=32, intermediate_size=8192,
                      sharing='none', dropout_rate=0.1, attention_dropout_rate=0.1)
  return config
