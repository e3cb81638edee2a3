"""TensorFlow is optional: the quickstart's pretraining and a fine-tuning run complete in processes where
`import tensorflow` fails as on a machine without it, and write their TensorBoard files (read back with
TensorBoard's own reader), checkpoints and result.json; what only TensorFlow can read stops with the way out.

The processes get a sitecustomize that hides the installed TensorFlow from the import system (find_spec finds
nothing, import raises ModuleNotFoundError), so every library's own "is TensorFlow installed?" test says no: TFDS
and etils decide as they would on such a machine."""
import json
import os
import subprocess
import sys

import pytest

from albert_jax.data import builtin_corpus
from conftest import ROOT
from test_train import read_scalars

HIDE_TENSORFLOW = '''
import importlib.machinery
import sys


class _WithoutTensorFlow(importlib.machinery.PathFinder):
  @classmethod
  def find_spec(cls, name, path=None, target=None):
    if name == 'tensorflow' or name.startswith('tensorflow.'):
      return None
    return super().find_spec(name, path, target)


sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = _WithoutTensorFlow
'''


class TfrecordCorpus(builtin_corpus.AlbertBuiltinCorpus):
  """The built-in corpus under another name, to be prepared in TFDS's default format, TFRecord."""


@pytest.fixture(scope='module')
def without_tensorflow(tmp_path_factory):
  """run(args) -> CompletedProcess of `python -m args` from the repository, with TensorFlow hidden."""
  site = tmp_path_factory.mktemp('without_tensorflow')
  (site / 'sitecustomize.py').write_text(HIDE_TENSORFLOW)
  env = {**os.environ, 'PYTHONPATH': str(site)}

  def run(args, timeout=600):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)

  check = run(['-c', 'import importlib.util, tensorflow_datasets\n'
                     'assert importlib.util.find_spec("tensorflow") is None\n'
                     'import tensorflow'])
  assert 'ModuleNotFoundError' in check.stderr, check.stderr[-2000:]
  return run


def test_quickstart_pretraining_and_fine_tuning_run_without_tensorflow(without_tensorflow, tmp_path):
  data, pretrained, finetuned = tmp_path / 'tensorflow_datasets', tmp_path / 'pretrained', tmp_path / 'finetuned'
  # The quickstart's command, shortened: the built-in corpus is prepared and its vocabulary trained here too.
  out = without_tensorflow(['-m', 'albert_jax.train', '--config=configs/tiny.py', f'--workdir={pretrained}',
                            f'--config.data.tfds_data_dir={data}', '--config.train.num_steps=12',
                            '--config.train.warmup_steps=2', '--config.train.log_every=4',
                            '--config.train.eval_every=6', '--config.train.checkpoint_every=6',
                            '--config.train.eval_batches=1', '--config.train.batch_size=16'])
  assert out.returncode == 0, out.stderr[-3000:]
  assert 'Built-in corpus ready: 1855 documents' in out.stdout
  assert not out.stderr.strip(), out.stderr[-3000:]  # no warning, no libtpu noise
  scalars = read_scalars(pretrained)
  assert sorted(scalars['loss']) == [4, 8, 12] and sorted(scalars['eval_mlm_accuracy']) == [0, 6, 12]
  assert sorted(p.name for p in (pretrained / 'checkpoints').iterdir() if p.name.isdigit()) == ['12', '6']
  assert json.loads((pretrained / 'result.json').read_text())['step'] == 12

  out = without_tensorflow(['-m', 'albert_jax.finetune', '--config=configs/finetune/builtin.py',
                            f'--config.init={pretrained}', f'--workdir={finetuned}',
                            f'--config.data.tfds_data_dir={data}', '--config.train.num_steps=8', '--config.train.warmup_steps=2',
                            '--config.train.checkpoint_every=4', '--config.train.log_every=4'])
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads((finetuned / 'result.json').read_text())
  assert result['best_step'] in (4, 8) and 0 <= result['eval_accuracy'] <= 1 and result['eval_accuracy_count'] > 0
  assert sorted(read_scalars(finetuned)['eval_accuracy']) == [4, 8]
  assert (finetuned / 'best' / 'albert_jax.json').exists()


def test_what_only_tensorflow_reads_names_the_extra_and_the_alternative(without_tensorflow, tmp_path,
                                                                        builtin_tokenizer):
  """A TFDS dataset stored as TFRecord (TFDS's default; prepared here with TensorFlow) and the original TF
  checkpoint format: one line each, exit status 2."""
  TfrecordCorpus(data_dir=str(tmp_path), file_format='tfrecord').download_and_prepare()
  out = without_tensorflow(['-m', 'albert_jax.data.inspect', '--config=configs/tiny.py',
                            '--config.data.source=tfds:tfrecord_corpus', f'--config.data.tfds_data_dir={tmp_path}',
                            f'--config.data.vocab={builtin_tokenizer.path}', '--num=1'])
  assert out.returncode == 2, out.stderr[-3000:]
  line = out.stderr.strip().splitlines()[-1]
  assert line.startswith('error: data.source tfds:tfrecord_corpus: ') and 'is stored as TFRecord' in line
  assert "pip install -e '.[tf]'" in line and 'tfds convert_format --dataset_version_dir=' in line

  out = without_tensorflow(['-m', 'albert_jax.convert', f'--input={tmp_path}/none', f'--output={tmp_path}/tf',
                            '--to=tf'])
  assert out.returncode == 2, out.stderr[-3000:]
  assert "--to=tf: the original TF checkpoint format needs TensorFlow, which is not installed: pip install -e " \
         "'.[tf]'" in out.stderr.strip().splitlines()[-1]
