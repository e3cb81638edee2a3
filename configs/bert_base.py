"""BERT-base (paper Table 2: 108M parameters): H 768, 12 layers, 12 heads, FFN 3072.

The paper's BERT rows: E == H (no factorization, no projection), no cross-layer sharing, and BERT's dropout 0.1.
COMMAND: python -m albert_jax.summary --config=configs/bert_base.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(embedding_size=768, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                      sharing='none', dropout_rate=0.1, attention_dropout_rate=0.1)
  return config
