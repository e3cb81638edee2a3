"""Paper Table 3: the seven configurations side by side, BERT base, large and xlarge against ALBERT base, large,
xlarge and xxlarge, the same data, batch and steps; the report's speedup column is each run's training steps/s
(the median of its logged windows, compilation left out) over BERT-xlarge's, measured on the device the sweep runs
on, beside the paper's.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table3_configs.py --workdir=gs://BUCKET/table3 --target=tpu
The speedup alone, briefly, on any device (the same batch and length for all, as the paper's):
python -m launch.sweep --sweep=configs/sweeps/table3_configs.py --workdir=/tmp/table3 --config.train.num_steps=30 \
    --config.train.batch_size=8 --config.data.max_seq_length=128
"""
CONFIG = 'configs/base.py'
SWEEP = {'config': ['configs/bert_base.py', 'configs/bert_large.py', 'configs/bert_xlarge.py', 'configs/base.py',
                    'configs/large.py', 'configs/xlarge.py', 'configs/xxlarge.py']}
SPEEDUP_OF = 'config=bert_xlarge'
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 3: parameters, the downstream average (SQuAD1.1 and 2.0, MNLI, SST-2, RACE) and the speedup in
# training throughput relative to BERT-xlarge.
PAPER = {'config=bert_base': {'params': '108M', 'Avg': 82.3, 'speedup': '17.7x'},
         'config=bert_large': {'params': '334M', 'Avg': 85.2, 'speedup': '3.8x'},
         'config=bert_xlarge': {'params': '1270M', 'Avg': 76.6, 'speedup': '1.0'},
         'config=base': {'params': '12M', 'Avg': 80.1, 'speedup': '21.1x'},
         'config=large': {'params': '18M', 'Avg': 82.4, 'speedup': '6.5x'},
         'config=xlarge': {'params': '60M', 'Avg': 85.5, 'speedup': '2.4x'},
         'config=xxlarge': {'params': '235M', 'Avg': 88.7, 'speedup': '1.2x'}}
