"""Paper Table 9: the same training time, not the same steps. BERT-large for 400k steps (34 hours) against
ALBERT-xxlarge for 125k (32 hours) on the same TPUs: here each run's step rate is measured first on the device
the sweep runs on and its steps set to fill TRAIN_HOURS; the report gives each run's steps and hours.

COMMAND: python -m launch.sweep --sweep=configs/sweeps/table9_equal_time.py --workdir=gs://BUCKET/table9 --target=tpu
Briefly, anywhere (6 minutes each):
python -m launch.sweep --sweep=configs/sweeps/table9_equal_time.py --workdir=/tmp/table9 --train_hours=0.1 \\
    --config.data.max_seq_length=128 --config.train.batch_size=8
"""
CONFIG = 'configs/xxlarge.py'
SWEEP = {'config': ['configs/bert_large.py', 'configs/xxlarge.py']}
TRAIN_HOURS = 33
FINETUNE = ['configs/finetune/squad_v1.py', 'configs/finetune/squad_v2.py', 'configs/finetune/mnli.py',
            'configs/finetune/sst2.py', 'configs/finetune/race.py']
# Paper Table 9: steps, hours and the downstream average.
PAPER = {'config=bert_large': {'steps': '400k', 'hours': 34, 'Avg': 87.2},
         'config=xxlarge': {'steps': '125k', 'hours': 32, 'Avg': 88.7}}
