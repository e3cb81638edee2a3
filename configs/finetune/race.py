"""RACE (middle and high): the original's run_race settings (its README: learning rate 1e-5 and ALBERT dropout 0
for the v2 models, whose v1 settings diverge).

COMMAND: python -m albert_jax.finetune --config=configs/finetune/race.py --config.init=PATH --workdir=DIR
"""
from albert_jax.config import finetune_defaults


def get_config(arg=None):
  del arg
  config = finetune_defaults()
  config.task.name = 'race'
  config.task.data = 'tfds'  # or the RACE folder (train/, dev/, test/, each with middle/ and high/)
  config.task.levels = 'middle,high'  # the original's --middle_only / --high_only
  config.task.test_predictions = True
  config.task.max_seq_length = 512
  config.task.max_qa_length = 128  # question + option pieces kept (from their end)
  config.train.warmup_steps = 1000
  config.train.learning_rate = 1e-5
  config.train.num_steps = 12000
  config.train.checkpoint_every = 100
  config.train.batch_size = 32
  config.train.eval_batch_size = 8
  return config
