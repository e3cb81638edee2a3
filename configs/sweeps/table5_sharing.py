"""Paper Table 5: which parameters the layers share, ALBERT-base at E 768 and at E 128. The paper: sharing the
FFN costs most, sharing attention little; all-shared is 6 to 9 times smaller.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table5_sharing.py --workdir=gs://BUCKET/table5 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table5_sharing.py --miniature --workdir=/tmp/albert_sweeps/table5
"""
CONFIG = 'configs/base.py'
SWEEP = {'model.embedding_size': [768, 128], 'model.sharing': ['all', 'attention', 'ffn', 'none']}
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 5: parameters and the downstream average (SQuAD1.1 and 2.0, MNLI, SST-2, RACE).
PAPER = {'embedding_size=768,sharing=all': {'params': '31M', 'Avg': 79.8},
         'embedding_size=768,sharing=attention': {'params': '83M', 'Avg': 81.6},
         'embedding_size=768,sharing=ffn': {'params': '57M', 'Avg': 79.5},
         'embedding_size=768,sharing=none': {'params': '108M', 'Avg': 82.3},
         'embedding_size=128,sharing=all': {'params': '12M', 'Avg': 80.1},
         'embedding_size=128,sharing=attention': {'params': '64M', 'Avg': 81.7},
         'embedding_size=128,sharing=ffn': {'params': '38M', 'Avg': 80.2},
         'embedding_size=128,sharing=none': {'params': '89M', 'Avg': 81.6}}
# On a 2-core CPU: the tiny model (H 64) at E 64 (= H) and E 32 (factorized), briefly on the built-in corpus.
MINIATURE = {'config': 'configs/tiny.py',
             'sweep': {'model.embedding_size': [64, 32], 'model.sharing': ['all', 'attention', 'ffn', 'none']},
             'fixed': {'train.num_steps': 500, 'train.eval_every': 500, 'train.checkpoint_every': 500}}
