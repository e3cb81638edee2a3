"""Fine-tune the GPU recipe's checkpoint (configs/wiki_books_gpu.py) on a GLUE task, on one GPU.

  python -m albert_jax.finetune --config=configs/finetune/wiki_books_gpu.py:sst2 \
      --config.init=/tmp/albert_wiki_books_gpu/run --workdir=/tmp/albert_wiki_books_gpu/sst2

As configs/finetune/wiki_books_cpu_hour.py (the task after the colon, the shared GLUE sample by default,
--config.init=none for random weights of the checkpoint's shape), with the GPU recipe's shape, bfloat16, and the
learning rate and steps of BERT's fine-tuning recipe for a model of this width (5e-5; 1.4 epochs of SST-2, 7 of
MRPC) rather than the rate the CPU bench chose for H 128.
"""
import os

from albert_jax.config import from_file
from albert_jax.model import model_shape

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = {'sst2': 3_000, 'mrpc': 800}  # others: the CPU config's (the original's, at most 3,000)


def get_config(arg='sst2'):
  task = arg or 'sst2'
  config = from_file(os.path.join(HERE, 'wiki_books_cpu_hour.py'), task)
  config.init = '/tmp/albert_wiki_books_gpu/run'  # where configs/wiki_books_gpu.py's command trains it
  recipe = from_file(os.path.join(HERE, '..', 'wiki_books_gpu.py'))
  config.model.update(model_shape(recipe.model))
  config.model.dtype = recipe.model.dtype
  config.train.learning_rate = 5e-5
  config.train.num_steps = STEPS.get(task, config.train.num_steps)
  # One padded length, not four: on a GPU each length's steps compile in seconds to tens of seconds, and four
  # lengths' compiles took 80-190 s of a run whose 3,000 steps of SST-2 trained in 34 s (H200, 2026-11-27).
  config.task.length_buckets = 1
  return config
