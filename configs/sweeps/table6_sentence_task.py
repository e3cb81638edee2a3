"""Paper Table 6 in miniature: no sentence task, next-sentence prediction (NSP) or sentence-order prediction (SOP).

Every run is evaluated on the same held-out probes, the paper's intrinsic columns: swap pairs (two consecutive
segments in order or swapped: what SOP asks, eval_swap_accuracy) and random pairs (the next segment or one from
another document: what NSP asks, eval_random_accuracy), both exactly balanced (majority rate 0.5).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table6_sentence_task.py --workdir=/tmp/albert_sweeps/table6
"""
CONFIG = 'configs/tiny.py'
SWEEP = {'data.sentence_task': ['none', 'nsp', 'sop']}
FIXED = {'train.num_steps': 5000, 'train.eval_every': 1000, 'train.checkpoint_every': 1000}
# Each run's own eval_mlm_accuracy is measured on instances made for its own task (a 'none' run's are single
# segments): the MLM column compares the three on the same held-out SOP instances instead (sop_mlm_accuracy).
EVALUATE = [{'data.sentence_task': 'sop'}]
# Paper Table 6 (ALBERT-base), intrinsic accuracies in %: MLM, NSP, SOP.
PAPER = {'sentence_task=none': {'MLM': 54.9, 'NSP': 52.4, 'SOP': 53.3},
         'sentence_task=nsp': {'MLM': 54.5, 'NSP': 90.5, 'SOP': 52.0},
         'sentence_task=sop': {'MLM': 54.0, 'NSP': 78.9, 'SOP': 86.5}}
PAPER_METRICS = {'MLM': 'sop_mlm_accuracy', 'NSP': 'eval_random_accuracy', 'SOP': 'eval_swap_accuracy'}
# The paper scores every variant downstream (Table 6's "Avg" columns): here the built-in word-order task.
FINETUNE = ['configs/finetune/builtin.py']
