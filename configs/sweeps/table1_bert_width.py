"""Paper Table 1 and Figure 1: a wider BERT is worse. BERT-large (H 1024, 334M parameters) against BERT-xlarge (H 2048,
1270M), the same data and steps; the report gives held-out MLM accuracy beside the paper's RACE column, and
curves.png draws Figure 1 (training loss and held-out MLM accuracy by step).

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table1_bert_width.py --workdir=gs://BUCKET/table1 --target=tpu
python -m launch.sweep --sweep=configs/sweeps/table1_bert_width.py --miniature --workdir=/tmp/albert_sweeps/table1
"""
CONFIG = 'configs/bert_large.py'
SWEEP = {'config': ['configs/bert_large.py', 'configs/bert_xlarge.py']}
FINETUNE = ['configs/finetune/race.py']
# Paper Table 1: hidden size, parameters, RACE accuracy (%).
PAPER = {'config=bert_large': {'H': 1024, 'params': '334M', 'RACE': 73.9},
         'config=bert_xlarge': {'H': 2048, 'params': '1270M', 'RACE': 54.3}}
CURVES = ['loss', 'eval_mlm_accuracy']
# On a 2-core CPU: the real-English recipe as a BERT (E = H, nothing shared, dropout 0.1) of H 128 against H 256,
# the heads and FFN widening with H as BERT's do.
MINIATURE = {'config': 'configs/wiki_books_cpu_hour.py', 'mode': 'zip',
             'sweep': {'model.hidden_size': [128, 256], 'model.embedding_size': [128, 256],
                       'model.intermediate_size': [512, 1024], 'model.num_heads': [2, 4]},
             'fixed': {'model.sharing': 'none', 'model.dropout_rate': 0.1, 'model.attention_dropout_rate': 0.1,
                       'train.num_steps': 1000, 'train.warmup_steps': 100, 'train.eval_every': 250,
                       'train.checkpoint_every': 500}}
