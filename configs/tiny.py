"""A tiny ALBERT that trains in minutes on a laptop CPU: H 64, 4 layers, E 64, all shared, 4,000 pieces.

COMMAND: python -m albert_jax.summary --config=configs/tiny.py
"""
from albert_jax.config import defaults


def get_config(arg=None):
  del arg
  config = defaults()
  # Two heads of 32 rather than four of 16: attention at S² per head is most of a small CPU step.
  # E = H, no factorization: at H 64 an E of 32 learns MLM as fast but sentence order far slower (held-out swap
  # pairs after 2,000 steps: 0.551 at E 32, 0.616 at E 64); configs/sweeps/table4_embedding.py varies E.
  config.model.update(vocab_size=4000, embedding_size=64, hidden_size=64, num_layers=4, num_heads=2,
                      intermediate_size=256, max_position_embeddings=64)
  config.data.source = 'builtin'  # Python's own documentation: real prose, no download
  config.data.vocab = 'builtin'
  # 10% of the corpus's ~1,850 documents: about 1,050 held-out swap pairs, enough to see order being learned.
  config.data.eval_fraction = 0.1
  # Short sequences and more steps learn more per CPU-minute than long ones: at 64 tokens the step is 3x faster.
  config.data.max_seq_length = 64
  config.data.max_predictions_per_seq = 10
  config.train.batch_size = 64
  config.train.num_steps = 2000  # about 5 minutes on 2 CPU cores
  config.train.learning_rate = 1e-2  # LAMB at batch 64: 5e-3 and 2e-2 learn alike, 4e-2 diverges
  config.train.warmup_steps = 100
  config.train.log_every = 100
  config.train.eval_every = 500
  config.train.eval_batches = 40  # all ~5,700 masked tokens of the held-out documents
  config.train.checkpoint_every = 500
  config.train.fill_mask_text = 'If the file does not exist, an exception is raised.'
  config.train.fill_mask_word = 'is'
  return config
