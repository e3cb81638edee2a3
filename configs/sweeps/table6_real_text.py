"""Paper Table 6 on real English: the real-text recipe pretrained with no sentence task, NSP or SOP, each scored on
held-out swap and random pairs of Wikipedia and books and fine-tuned on real GLUE SST-2 and MRPC (the "Avg" column).

Each run is the whole recipe (configs/wiki_books_cpu_hour.py: 3,000 steps, about 55 minutes on a 2-core CPU) with
only the sentence task changed; the SOP run is the recipe itself, so its workdir may be a copy of the recipe's.
Fine-tuning uses the settings the downstream bench chose for the recipe's checkpoint (README, "What pretraining
buys"), one seed, from the GLUE folders next to the repository (../shared/data/glue; point GLUE elsewhere for
yours).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table6_real_text.py --workdir=/tmp/albert_sweeps/table6_real
"""
import os

GLUE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'shared', 'data',
                                     'glue'))

CONFIG = 'configs/wiki_books_cpu_hour.py'
SWEEP = {'data.sentence_task': ['none', 'nsp', 'sop']}
# The MLM column on the same held-out SOP instances for all three (a 'none' run's own are single segments).
EVALUATE = [{'data.sentence_task': 'sop'}]
# Paper Table 6 (ALBERT-base), intrinsic accuracies in %; its downstream columns (SQuAD, MNLI, SST-2, RACE) are
# tasks and scales of their own, so ours are shown without them.
PAPER = {'sentence_task=none': {'MLM': 54.9, 'NSP': 52.4, 'SOP': 53.3},
         'sentence_task=nsp': {'MLM': 54.5, 'NSP': 90.5, 'SOP': 52.0},
         'sentence_task=sop': {'MLM': 54.0, 'NSP': 78.9, 'SOP': 86.5}}
PAPER_METRICS = {'MLM': 'sop_mlm_accuracy', 'NSP': 'eval_random_accuracy', 'SOP': 'eval_swap_accuracy'}
# The downstream bench's sequence lengths and the schedule and learning rate it chose for the recipe's checkpoint.
FINETUNE = [f'configs/finetune/sst2.py --config.task.data={GLUE} --config.task.test_predictions=False '
            '--config.task.max_seq_length=64 --config.train.learning_rate=3e-4 --config.train.num_steps=1000 '
            '--config.train.warmup_steps=100 --config.train.checkpoint_every=250 --config.train.log_every=250',
            f'configs/finetune/mrpc.py --config.task.data={GLUE} --config.task.test_predictions=False '
            '--config.task.max_seq_length=128 --config.train.learning_rate=3e-4 --config.train.num_steps=500 '
            '--config.train.warmup_steps=50 --config.train.checkpoint_every=125 --config.train.log_every=125']
