"""SQuAD 2.0: the original run_squad_v2 settings and its README's hyperparameters (the XLNet-style head: see albert_jax/downstream/heads.py).

COMMAND: python -m albert_jax.finetune --config=configs/finetune/squad_v2.py --config.init=PATH --workdir=DIR
"""
from albert_jax.config import finetune_defaults


def get_config(arg=None):
  del arg
  config = finetune_defaults()
  config.task.name = 'squad_v2'
  config.task.data = 'tfds'  # or the folder holding train-v2.0.json and dev-v2.0.json
  config.task.max_seq_length = 384
  config.task.doc_stride = 128  # pieces between the starts of consecutive context windows
  config.task.max_query_length = 64  # question pieces kept
  config.task.n_best_size = 20
  config.task.max_answer_length = 30  # pieces
  config.task.start_n_top = 5  # the v2 head's beam: starts, and ends for each start
  config.task.end_n_top = 5
  # README: batch 48, learning rate 5e-5, 2 epochs (88k training windows: 3,700 steps), warmup 10%.
  config.train.batch_size = 48
  config.train.eval_batch_size = 48
  config.train.learning_rate = 5e-5
  config.train.num_steps = 5450
  config.train.warmup_steps = 545
  config.train.checkpoint_every = 500
  return config
