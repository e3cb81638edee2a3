"""Every command-line tool reports input a user can fix by its message alone, on stderr, with exit status 2: no
traceback to read through, and a status scripts can tell from a crash (1) or a kill."""
import subprocess
import sys

import pytest

from conftest import ROOT

CASES = {
    'train: a config value that cannot work': (
        ['albert_jax.train', '--config=configs/tiny.py', '--workdir={tmp}/run', '--config.train.warmup_steps=5000'],
        'warmup_steps (5000) must be below num_steps'),
    'train: a mistyped override': (
        ['albert_jax.train', '--config=configs/tiny.py', '--workdir={tmp}/run', '--config.model.hiden_size=3'],
        'names no config field: \'hiden_size\' Did you mean "hidden_size"'),
    'train: a config file that does not exist': (
        ['albert_jax.train', '--config=configs/tinny.py', '--workdir={tmp}/run'], 'configs/tinny.py'),
    'train: a value of the wrong type': (
        ['albert_jax.train', '--config=configs/tiny.py', '--workdir={tmp}/run', '--config.train.num_steps=many'],
        "invalid literal for int() with base 10: 'many'"),
    'train: cuDNN attention on a CPU': (
        ['albert_jax.train', '--config=configs/tiny.py', '--workdir={tmp}/run', '--config.model.attention=cudnn',
         '--config.model.dtype=bfloat16'], "attention 'cudnn' needs an NVIDIA GPU, and these devices are cpu"),
    'train: a workdir that cannot be made': (  # /proc takes no new folders, not even root's
        ['albert_jax.train', '--config=configs/tiny.py', '--workdir=/proc/albert_jax_run'],
        '--workdir /proc/albert_jax_run cannot be made (No such file or directory): name a folder this user can '
        'write'),
    'evaluate: a workdir without a checkpoint': (
        ['albert_jax.evaluate', '--config=configs/tiny.py', '--workdir={tmp}', '--config.data.tfds_data_dir={tfds}'],
        'holds no checkpoint to evaluate'),
    'aot: an unknown topology': (
        ['albert_jax.aot', '--config=configs/base.py', '--topology=v9-7'], "unknown TPU accelerator type 'v9-7'"),
    'summary: a shape that cannot work': (
        ['albert_jax.summary', '--config=configs/base.py', '--config.model.num_heads=5'],
        'hidden_size 768 is not divisible by num_heads 5'),
    'convert: a missing checkpoint': (
        ['albert_jax.convert', '--input={tmp}/nothing', '--output={tmp}/out', '--to=hf'], 'no checkpoint found'),
    'vocab: a source that matches nothing': (
        ['albert_jax.data.vocab', '--input=text:{tmp}/*.txt', '--output={tmp}/v'], 'no file matches'),
    'inspect: a host that is not on the pod': (
        ['albert_jax.data.inspect', '--config=configs/tiny.py', '--host=70', '--host_count=64'],
        '--host=70 --host_count=64: a pod of N hosts has hosts 0 to N-1'),
    'train: an init whose config.json lacks a field of the shape': (
        ['albert_jax.train', '--config=configs/base.py', '--workdir={tmp}/run', '--config.init={tmp}/hf'],
        '{tmp}/hf/config.json lacks embedding_size: not a whole ALBERT config'),
    'inspect: a malformed source': (
        ['albert_jax.data.inspect', '--config=configs/tiny.py', '--config.data.source=wiki:en'],
        "'wiki:en' is not a source"),
    'finetune: a sequence longer than the model takes': (
        ['albert_jax.finetune', '--config=configs/finetune/builtin.py', '--workdir={tmp}/ft',
         '--config.task.max_seq_length=128'], "at most the model's max_position_embeddings 64"),
    'finetune: an init that is no checkpoint': (
        ['albert_jax.finetune', '--config=configs/finetune/rte.py', '--workdir={tmp}/ft', '--config.init={tmp}/none'],
        'no checkpoint found'),
    'finetune: cuDNN attention in float32': (
        ['albert_jax.finetune', '--config=configs/finetune/builtin.py', '--workdir={tmp}/ft',
         '--config.model.attention=cudnn'], 'computes in bfloat16 or float16: set model.dtype=bfloat16'),
    'finetune: a workdir that cannot be made, before the init is read': (
        ['albert_jax.finetune', '--config=configs/finetune/rte.py', '--workdir=/proc/albert_jax_ft',
         '--config.init={tmp}/none'], '--workdir /proc/albert_jax_ft cannot be made'),
    'squad_eval: a data file that does not exist': (
        ['albert_jax.downstream.squad_eval', '{tmp}/dev-v2.0.json', '{tmp}/predictions.json'],
        'the SQuAD data file {tmp}/dev-v2.0.json cannot be read'),
    'sweep: a sweep file that does not exist': (
        ['launch.sweep', '--sweep={tmp}/missing.py', '--workdir={tmp}/s'], 'no such sweep file'),
}


@pytest.mark.parametrize('case', list(CASES))
def test_bad_input_prints_the_message_alone_and_exits_2(case, tmp_path, tfds_dir):
  argv, message = CASES[case]
  # An HF folder as a hand-edited one might be: model_type albert, its weights, but no embedding_size.
  (tmp_path / 'hf').mkdir()
  (tmp_path / 'hf' / 'config.json').write_text('{"model_type": "albert", "vocab_size": 30000, "hidden_size": 768, '
                                               '"num_hidden_layers": 12, "num_attention_heads": 12, '
                                               '"intermediate_size": 3072}')
  (tmp_path / 'hf' / 'model.safetensors').write_bytes(b'')
  argv = [a.format(tmp=tmp_path, tfds=tfds_dir) for a in argv]
  message = message.format(tmp=tmp_path)
  out = subprocess.run([sys.executable, '-m', *argv], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert out.returncode == 2, out.stderr[-3000:]
  assert message in out.stderr, out.stderr[-3000:]
  assert 'Traceback' not in out.stderr and 'Traceback' not in out.stdout
  assert out.stderr.rstrip().splitlines()[-1].startswith(('error: ', 'python -m launch.sweep: error: '))
