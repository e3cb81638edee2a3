"""The built-in task (albert_jax/downstream/builtin.py): is a sentence as written, or are two neighbouring words
swapped? Made from the documents the quickstart's pretraining holds out; runs in minutes on a CPU.

COMMAND: python -m albert_jax.finetune --config=configs/finetune/builtin.py --config.init=/tmp/albert_tiny --workdir=/tmp/albert_tiny_builtin
"""
import pathlib

from albert_jax.config import finetune_defaults, from_file


def get_config(arg=None):
  del arg
  config = finetune_defaults()
  # The shape of --config.init=none, the control: the quickstart's.
  config.model = from_file(pathlib.Path(__file__).parents[1] / 'tiny.py').model
  config.data.vocab = 'builtin'
  config.task.name = 'builtin'
  config.task.data = 'builtin'
  config.task.eval_fraction = 0.1  # the pretraining run's data.eval_fraction: only its held-out documents are used
  config.task.dev_fraction = 0.4  # of those documents, the last 40% are dev
  config.task.seed = 0
  # 'shuffle': the words in a random order; 'swap': two neighbouring words exchanged (too subtle for the
  # quickstart's model: dev accuracy 0.51 after fine-tuning, as from random weights).
  config.task.corruption = 'shuffle'
  config.task.max_seq_length = 64
  config.train.batch_size = 32
  config.train.eval_batch_size = 64
  config.train.num_steps = 600
  config.train.learning_rate = 1e-3
  config.train.warmup_steps = 60
  config.train.log_every = 50
  config.train.checkpoint_every = 100
  return config
