"""Paper Table 6 in miniature: no sentence task, next-sentence prediction (NSP) or sentence-order prediction (SOP).
Each trained model is then evaluated on held-out NSP and SOP pairs, as the paper's intrinsic columns.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table6_sentence_task.py --workdir=/tmp/albert_sweeps/table6
"""
CONFIG = 'configs/tiny.py'
SWEEP = {'data.sentence_task': ['none', 'nsp', 'sop']}
# 2,000 steps (about 10 minutes a run on 2 cores): at 500 neither sentence task is learned yet.
FIXED = {'train.num_steps': 2000, 'train.eval_every': 1000, 'train.checkpoint_every': 1000}
EVALUATE = [{'data.sentence_task': 'nsp'}, {'data.sentence_task': 'sop'}]
# Paper Table 6 (ALBERT-base), intrinsic accuracies in %: MLM, NSP, SOP.
PAPER = {'sentence_task=none': {'MLM': 54.9, 'NSP': 52.4, 'SOP': 53.3},
         'sentence_task=nsp': {'MLM': 54.5, 'NSP': 90.5, 'SOP': 52.0},
         'sentence_task=sop': {'MLM': 54.0, 'NSP': 78.9, 'SOP': 86.5}}
