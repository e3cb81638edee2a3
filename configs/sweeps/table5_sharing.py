"""Paper Table 5 in miniature: which parameters the layers share (E factorized, as the paper's E = 128 rows).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table5_sharing.py --workdir=/tmp/albert_sweeps/table5
"""
CONFIG = 'configs/tiny.py'
SWEEP = {'model.sharing': ['all', 'attention', 'ffn', 'none']}
FIXED = {'model.embedding_size': 32, 'train.num_steps': 500, 'train.eval_every': 500, 'train.checkpoint_every': 500}
# Paper Table 5, ALBERT-base E = 128: parameters and the downstream average (SQuAD, MNLI, SST-2, RACE).
PAPER = {'sharing=all': {'params': '12M', 'avg': 80.1}, 'sharing=attention': {'params': '64M', 'avg': 81.7},
         'sharing=ffn': {'params': '38M', 'avg': 80.2}, 'sharing=none': {'params': '89M', 'avg': 81.6}}
