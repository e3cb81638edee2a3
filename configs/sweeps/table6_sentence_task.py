"""Paper Table 6: no sentence task, next-sentence prediction (NSP) or sentence-order prediction (SOP), ALBERT-base.

Every run is evaluated on the same held-out probes, the paper's intrinsic columns: swap pairs (two consecutive
segments in order or swapped: what SOP asks, eval_swap_accuracy) and random pairs (the next segment or one from
another document: what NSP asks, eval_random_accuracy), both exactly balanced (majority rate 0.5).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table6_sentence_task.py --workdir=gs://BUCKET/table6 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table6_sentence_task.py --miniature --workdir=/tmp/albert_sweeps/table6
"""
CONFIG = 'configs/base.py'
SWEEP = {'data.sentence_task': ['none', 'nsp', 'sop']}
# On a 2-core CPU: the tiny model, 5,000 steps of the built-in corpus.
MINIATURE = {'config': 'configs/tiny.py', 'sweep': {'data.sentence_task': ['none', 'nsp', 'sop']},
             'fixed': {'train.num_steps': 5000, 'train.eval_every': 1000, 'train.checkpoint_every': 1000},
             'finetune': ['configs/finetune/builtin.py']}
# Each run's own eval_mlm_accuracy is measured on instances made for its own task (a 'none' run's are single
# segments): the MLM column compares the three on the same held-out SOP instances instead (sop_mlm_accuracy).
EVALUATE = [{'data.sentence_task': 'sop'}]
# Paper Table 6 (ALBERT-base), intrinsic accuracies in %: MLM, NSP, SOP.
PAPER = {'sentence_task=none': {'MLM': 54.9, 'NSP': 52.4, 'SOP': 53.3},
         'sentence_task=nsp': {'MLM': 54.5, 'NSP': 90.5, 'SOP': 52.0},
         'sentence_task=sop': {'MLM': 54.0, 'NSP': 78.9, 'SOP': 86.5}}
PAPER_METRICS = {'MLM': 'sop_mlm_accuracy', 'NSP': 'eval_random_accuracy', 'SOP': 'eval_swap_accuracy'}
# The paper scores every variant downstream (Table 6's "Avg" columns); in miniature, the built-in word-order task.
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
