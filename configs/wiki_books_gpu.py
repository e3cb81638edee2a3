"""Pretraining on real English, Wikipedia and books, in about four minutes of one H100/H200 (issue 41's lease 2).

  python -m albert_jax.train --config=configs/wiki_books_gpu.py --workdir=/tmp/albert_wiki_books_gpu/run

The CPU hour's recipe (configs/wiki_books_cpu_hour.py: the same sources, vocabulary, sequence length and masking)
scaled to what a GPU does in the time: a model of 8 shared layers at H 512 (ALBERT's sharing, its E 128
factorization) in bfloat16 with cuDNN's attention, batches of 512. By the figures of the first GPU lease
(docs/benchmarks.md: ALBERT-base at 128 trains 670k tokens/s on an H200) this shape does a third of base's work
a token; measured there, it ran 16 steps a second, so 3,500 steps of 512 sequences of 128 (229 million token
positions, 9 times the CPU hour's 25 million, several passes over the shared sample, each masked afresh) take
about four minutes.
`bench/gpu_lease.sh pretrain` runs it and fine-tunes it.
"""
import os

from albert_jax.config import from_file

HERE = os.path.dirname(os.path.abspath(__file__))


def get_config(arg=None):
  del arg
  config = from_file(os.path.join(HERE, 'wiki_books_cpu_hour.py'))
  config.data.vocab = '/tmp/albert_wiki_books/vocab-30k.model'  # the CPU recipe's vocabulary command writes it
  config.model.update(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=2048, dtype='bfloat16',
                      scan_unroll=0)  # 0: unrolled on a GPU, the faster program there (docs/benchmarks.md)
  # An H200 consumed 7,600 instances a second at this size, and would take more with the host keeping up: one core
  # makes about 4,000 at 128 (docs/data.md), so eight background processes make them, leaving cores for the main
  # process and fine-tuning beside it.
  config.data.workers = 8
  config.train.batch_size = 512
  # LAMB's rate a step is relative to each layer's norm; the CPU recipe's 1e-2 (H 128, batch 64) is near where
  # small models diverge there (4e-2 did), so a wider model at 8x the batch takes less, over longer warmup.
  config.train.learning_rate = 3e-3
  # 16 steps/s on an H200 on 2026-11-27 (docs/benchmarks.md): 3,500 steps fit the lease's 5 minutes with the start.
  config.train.num_steps = 3_500
  config.train.warmup_steps = 350
  config.train.log_every = 200
  config.train.eval_every = 2_000
  config.train.checkpoint_every = 2_000
  return config
