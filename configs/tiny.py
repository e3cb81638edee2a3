"""A tiny ALBERT that trains in minutes on a laptop CPU: H 64, 4 layers, E 32, all shared.

COMMAND: python -m albert_jax.summary --config=configs/tiny.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  config.model.update(vocab_size=2000, embedding_size=32, hidden_size=64, num_layers=4, num_heads=4,
                      intermediate_size=256, max_position_embeddings=128)
  config.data.source = 'builtin'  # Python's own documentation: real prose, no download
  config.data.vocab = 'builtin'
  config.data.eval_fraction = 0.05  # 20 of the corpus's ~400 documents
  config.data.max_seq_length = 128
  config.train.batch_size = 32
  config.train.num_steps = 800  # 3-6 minutes on 2 CPU cores
  config.train.learning_rate = 1e-2  # LAMB at batch 32 takes a larger step than the paper's 1.76e-3 at 4096
  config.train.warmup_steps = 100
  config.train.log_every = 100
  config.train.eval_every = 200
  config.train.eval_batches = 10
  config.train.checkpoint_every = 200
  config.train.fill_mask_text = 'If the file does not exist, an exception is raised.'
  config.train.fill_mask_word = 'is'
  return config
