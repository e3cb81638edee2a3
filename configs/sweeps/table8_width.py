"""Paper Table 8: a 3-layer ALBERT-large with hidden size 1024, 2048, 4096 and 6144 (heads H/64, FFN 4H, E 128).
The paper: width helps up to 4096, then 6144 is worse.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table8_width.py --workdir=gs://BUCKET/table8 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table8_width.py --miniature --workdir=/tmp/albert_sweeps/table8
"""
CONFIG = 'configs/large.py'
MODE = 'zip'
SWEEP = {'model.hidden_size': [1024, 2048, 4096, 6144], 'model.num_heads': [16, 32, 64, 96],
         'model.intermediate_size': [4096, 8192, 16384, 24576]}
FIXED = {'model.num_layers': 3}
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 8: parameters and the downstream average.
PAPER = {'hidden_size=1024,num_heads=16,intermediate_size=4096': {'params': '18M', 'Avg': 71.2},
         'hidden_size=2048,num_heads=32,intermediate_size=8192': {'params': '60M', 'Avg': 74.6},
         'hidden_size=4096,num_heads=64,intermediate_size=16384': {'params': '225M', 'Avg': 76.3},
         'hidden_size=6144,num_heads=96,intermediate_size=24576': {'params': '499M', 'Avg': 74.0}}
# On a 2-core CPU: 3 layers of the real-English recipe (E 128) at H 64, 128, 256 and 384 (the paper's 1 : 2 : 4 : 6),
# 600 steps of 32, evaluated at the start and the end on 16 batches of 32 per source (the recipe's 8 of 64).
MINIATURE = {'config': 'configs/wiki_books_cpu_hour.py', 'mode': 'zip',
             'sweep': {'model.hidden_size': [64, 128, 256, 384], 'model.num_heads': [1, 2, 4, 6],
                       'model.intermediate_size': [256, 512, 1024, 1536]},
             'fixed': {'model.num_layers': 3, 'train.batch_size': 32, 'train.eval_batches': 16,
                       'train.num_steps': 600, 'train.warmup_steps': 60, 'train.eval_every': 600,
                       'train.checkpoint_every': 300}}
