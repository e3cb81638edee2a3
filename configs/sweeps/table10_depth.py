"""Paper Table 10: ALBERT-xxlarge with 12 and with 24 layers. The paper: the same downstream average (88.7), so the
12-layer model, half the computation, is the one released.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table10_depth.py --workdir=gs://BUCKET/table10 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table10_depth.py --miniature --workdir=/tmp/albert_sweeps/table10
"""
CONFIG = 'configs/xxlarge.py'
SWEEP = {'model.num_layers': [12, 24]}
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 10: parameters and the downstream average.
PAPER = {'num_layers=12': {'params': '235M', 'Avg': 88.7}, 'num_layers=24': {'params': '235M', 'Avg': 88.7}}
# On a 2-core CPU: the real-English recipe (4 shared layers) against 8.
MINIATURE = {'config': 'configs/wiki_books_cpu_hour.py', 'sweep': {'model.num_layers': [4, 8]},
             'fixed': {'train.num_steps': 1000, 'train.warmup_steps': 100, 'train.eval_every': 250,
                       'train.checkpoint_every': 500}}
