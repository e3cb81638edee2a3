"""GLUE WNLI: run_glue.sh has no WNLI line, so these are its RTE settings.

COMMAND: python -m albert_jax.finetune --config=configs/finetune/wnli.py --config.init=PATH --workdir=DIR
"""
from albert_jax.config import finetune_defaults


def get_config(arg=None):
  del arg
  config = finetune_defaults()
  config.task.name = 'wnli'
  config.task.data = 'tfds'  # or the GLUE download's folder (holding WNLI/)
  config.task.test_predictions = True  # the leaderboard's TSV files, written from the best checkpoint
  config.task.max_seq_length = 512  # run_glue.sh since 2020-03 (128 before)
  # run_glue.sh's RTE line: warmup, learning rate, steps, checkpoint interval (each checkpoint is evaluated), batch.
  config.train.warmup_steps = 200
  config.train.learning_rate = 3e-5
  config.train.num_steps = 800
  config.train.checkpoint_every = 100
  config.train.batch_size = 32
  config.train.eval_batch_size = 32
  return config
