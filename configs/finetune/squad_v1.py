"""SQuAD 1.1: the original run_squad_v1 settings and its README's hyperparameters.

COMMAND: python -m albert_jax.finetune --config=configs/finetune/squad_v1.py --config.init=PATH --workdir=DIR
"""
from albert_jax.config import finetune_defaults


def get_config(arg=None):
  del arg
  config = finetune_defaults()
  config.task.name = 'squad_v1'
  config.task.data = 'tfds'  # or the folder holding train-v1.1.json and dev-v1.1.json
  config.task.max_seq_length = 384
  config.task.doc_stride = 128  # pieces between the starts of consecutive context windows
  config.task.max_query_length = 64  # question pieces kept
  config.task.n_best_size = 20
  config.task.max_answer_length = 30  # pieces
  # README: batch 48, learning rate 5e-5, 2 epochs (88k training windows: 3,700 steps), warmup 10%.
  config.train.batch_size = 48
  config.train.eval_batch_size = 48
  config.train.learning_rate = 5e-5
  config.train.num_steps = 3700
  config.train.warmup_steps = 370
  config.train.checkpoint_every = 500
  return config
