"""Paper Table 6 on real English: the real-text recipe pretrained with no sentence task, NSP or SOP, each scored on
held-out swap and random pairs of Wikipedia and books and fine-tuned on real GLUE SST-2 and MRPC (the "Avg" column).

Each run is the whole recipe (configs/wiki_books_cpu_hour.py: 3,000 steps, about 55 minutes on a 2-core CPU) with
only the sentence task changed; the SOP run is the recipe itself, so its workdir may be a copy of the recipe's.
Fine-tuning is configs/finetune/wiki_books_cpu_hour.py's (the settings the downstream bench chose for the recipe's
checkpoint, docs/downstream_results.md), three seeds per task, on the GLUE sample next to the repository: one
fine-tuning run's dev score moves by about 0.013 (SST-2) and 0.023 (MRPC) from seed to seed, as much as the
differences between the arms.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table6_real_text.py --workdir=/tmp/albert_sweeps/table6_real
"""
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
# The recipe's fine-tuning config: the settings the downstream bench chose for the recipe's checkpoint, the GLUE
# sample next to the repository (add ' --config.task.data=DIR' for another copy).
FINETUNE = ['configs/finetune/wiki_books_cpu_hour.py:sst2', 'configs/finetune/wiki_books_cpu_hour.py:mrpc']
# Each task fine-tuned once per seed (about 8 minutes for SST-2 and 4 for MRPC on a 2-core CPU).
FINETUNE_SEEDS = [0, 1, 2]
