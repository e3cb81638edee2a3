"""Paper Table 4 in miniature: the embedding size E of the factorized embedding, all layers shared.

The paper varies E in 64/128/256/768 at H 768 (E/H = 1/12 ... 1); here E in 8/16/32/64 at the tiny H 64 (E/H = 1/8
... 1), trained briefly on the built-in corpus. The paper reports downstream averages (SQuAD, MNLI, SST-2, RACE);
we can only compare held-out MLM accuracy, i.e. the trend, not the numbers.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table4_embedding.py --workdir=/tmp/albert_sweeps/table4
"""
CONFIG = 'configs/tiny.py'
SWEEP = {'model.embedding_size': [8, 16, 32, 64]}
FIXED = {'train.num_steps': 500, 'train.eval_every': 500, 'train.checkpoint_every': 500}
# Paper Table 4, ALBERT-base all-shared: parameters and the downstream average, at E = 64 / 128 / 256 / 768.
PAPER = {'embedding_size=8': {'E': 64, 'params': '10M', 'avg': 79.8},
         'embedding_size=16': {'E': 128, 'params': '12M', 'avg': 80.1},
         'embedding_size=32': {'E': 256, 'params': '16M', 'avg': 79.6},
         'embedding_size=64': {'E': 768, 'params': '31M', 'avg': 79.8}}
