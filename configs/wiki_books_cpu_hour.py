"""Pretraining on real English, Wikipedia and books, in an hour on a 2-core CPU (issue 26's recipe).

  python -m albert_jax.data.vocab --input='wikiextractor:../shared/data/corpora/wikipedia/*/wiki_*@7,gutenberg:../shared/data/corpora/books/*.txt@3' \
      --vocab_size=30000 --output=/tmp/albert_wiki_books/vocab-30k
  python -m albert_jax.train --config=configs/wiki_books_cpu_hour.py --workdir=/tmp/albert_wiki_books/run

Reads the shared sample next to the repository (../shared/data/corpora: 12,980 WikiExtractor articles, 259
Project Gutenberg books); point data.source elsewhere for your own copy. The shape was chosen from measured short
runs on this machine (docs/real_english.md); the number of steps fills 60 minutes there.
"""
import os

from albert_jax.config import defaults

SHARED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'data'))
CORPORA = os.path.join(SHARED, 'corpora')


def get_config(arg=None):
  del arg
  config = defaults()
  # Wikipedia and books in proportion to their words (33 M : 14 M), as the paper's mixture roughly was (3 : 1).
  config.data.source = (f'wikiextractor:{CORPORA}/wikipedia/*/wiki_*@7,'
                        f'gutenberg:{CORPORA}/books/*.txt@3')
  config.data.vocab = '/tmp/albert_wiki_books/vocab-30k.model'  # what the vocabulary command above writes
  # The best of three shapes given an hour each (docs/real_english.md): H 128 beat H 256 at 4 layers and at 2.
  config.model.update(vocab_size=30000, embedding_size=128, hidden_size=128, num_layers=4, num_heads=2,
                      intermediate_size=512, max_position_embeddings=128)
  config.data.max_seq_length = 128
  config.data.max_predictions_per_seq = 20
  config.data.eval_fraction = 0.01  # 123 articles and 48 book parts held out
  config.train.batch_size = 64
  # 1.03 s a step on 2026-11-25, a slow day for these machines (H 256 took 2.0 s a step that day, 1.33 the day
  # before): 52 minutes of steps, and the start and 6 evaluations, in 55.4.
  config.train.num_steps = 3_000
  config.train.learning_rate = 1e-2
  config.train.warmup_steps = 320
  config.train.log_every = 50
  config.train.eval_every = 500
  config.train.eval_batches = 8  # per source: 512 held-out instances of each, 16,502 masked pieces in all
  config.train.checkpoint_every = 500
  config.train.fill_mask_text = 'The river flows through the city and into the sea.'
  config.train.fill_mask_word = 'sea'
  # BLiMP's minimal pairs beside the corpora, 40 of each paradigm with each evaluation (2,040 pairs, seconds).
  if os.path.isdir(os.path.join(SHARED, 'blimp')):
    config.train.blimp = os.path.join(SHARED, 'blimp')
  return config
