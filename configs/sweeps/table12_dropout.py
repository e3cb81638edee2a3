"""Paper Table 12 and Figure 3: ALBERT-xxlarge with dropout (0.1) and without, from the start, and a run with
dropout that has it removed partway (CONTINUED: the first run's checkpoint of step 60,000 continued without it, as
the paper removed it from a running model). The paper: without dropout, higher held-out MLM accuracy (Figure 3)
and a better downstream average (90.4 with, 90.7 without). curves.png draws Figure 3.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table12_dropout.py --workdir=gs://BUCKET/table12 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table12_dropout.py --miniature --workdir=/tmp/albert_sweeps/table12
"""
CONFIG = 'configs/xxlarge.py'
MODE = 'zip'
SWEEP = {'model.dropout_rate': [0.1, 0.0], 'model.attention_dropout_rate': [0.1, 0.0]}
# Checkpoints every 5,000 steps; the newest 14 kept, so the branch's step 60,000 is there when the run ends.
FIXED = {'train.keep_checkpoints': 14}
CONTINUED = [{'from': 'dropout_rate=0.1,attention_dropout_rate=0.1', 'step': 60_000, 'miniature_step': 300,
              'overrides': {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0}}]
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 12: the downstream average.
PAPER = {'dropout_rate=0.1,attention_dropout_rate=0.1': {'Avg': 90.4},
         'dropout_rate=0.0,attention_dropout_rate=0.0': {'Avg': 90.7}}
CURVES = ['loss', 'eval_mlm_accuracy']
# On a 2-core CPU: the real-English recipe for 600 steps, evaluated every 200, the branch at step 300.
MINIATURE = {'config': 'configs/wiki_books_cpu_hour.py', 'mode': 'zip',
             'sweep': {'model.dropout_rate': [0.1, 0.0], 'model.attention_dropout_rate': [0.1, 0.0]},
             'fixed': {'train.num_steps': 600, 'train.warmup_steps': 60, 'train.eval_every': 200,
                       'train.checkpoint_every': 300, 'train.keep_checkpoints': 4}}
