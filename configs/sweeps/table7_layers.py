"""Paper Table 7: ALBERT-large (all layers shared, so 18M parameters at any depth) with 1, 3, 6, 12, 24 and 48
layers. The paper: depth helps up to 12-24 layers, then no more (48 is below 24).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table7_layers.py --workdir=gs://BUCKET/table7 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table7_layers.py --miniature --workdir=/tmp/albert_sweeps/table7
"""
CONFIG = 'configs/large.py'
SWEEP = {'model.num_layers': [1, 3, 6, 12, 24, 48]}
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 7: parameters and the downstream average.
PAPER = {'num_layers=1': {'params': '18M', 'Avg': 52.9}, 'num_layers=3': {'params': '18M', 'Avg': 71.2},
         'num_layers=6': {'params': '18M', 'Avg': 77.2}, 'num_layers=12': {'params': '18M', 'Avg': 81.5},
         'num_layers=24': {'params': '18M', 'Avg': 82.1}, 'num_layers=48': {'params': '18M', 'Avg': 81.8}}
# On a 2-core CPU: the real-English recipe's corpus at H 64 (E 64, FFN 256, shared) at the same depths, 1,000 steps of
# 32 (at this width 300 steps left every depth near the most frequent pieces); evaluated at the start and the end,
# 16 batches of 32 held out per source as the recipe's 8 of 64.
MINIATURE = {'config': 'configs/wiki_books_cpu_hour.py', 'sweep': {'model.num_layers': [1, 3, 6, 12, 24, 48]},
             'fixed': {'model.hidden_size': 64, 'model.embedding_size': 64, 'model.intermediate_size': 256,
                       'train.batch_size': 32, 'train.eval_batches': 16, 'train.num_steps': 1000,
                       'train.warmup_steps': 100, 'train.eval_every': 1000, 'train.checkpoint_every': 250}}
