"""Continued pretraining (config.init; albert_jax/pretrained.py): a run starts from any checkpoint from_pretrained
reads, exactly where the checkpoint is (its step-0 held-out figures are the checkpoint's own), refuses what
contradicts the checkpoint, resumes from its own checkpoints, and writes a run like any other."""
import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from albert_jax import checkpoint, interop, pretrained, train
from albert_jax.data import vocab as vocab_lib
from albert_jax.errors import ConfigError
from conftest import ROOT
from launch import sweep
from test_sweep import SHRINK
from test_train import losses, read_scalars, run_cli, small


# The formats whose writers need an extra (HF's class, TensorFlow): the main suite's environment has both.
CI_HAS_EVERY_FORMAT = ({'hf masked LM'} if importlib.util.find_spec('transformers') else set()) | (
    {'original tf'} if importlib.util.find_spec('tensorflow') else set())


@pytest.fixture(scope='module')
def source(tiny_config, builtin_tokenizer, tmp_path_factory):
  """A tiny pretraining run (6 steps, held-out figures and a checkpoint every 3) and its best step."""
  workdir = tmp_path_factory.mktemp('source')
  train.train_and_evaluate(small(tiny_config), workdir, devices=jax.devices()[:1])
  with checkpoint.manager(workdir, 3, read_only=True) as mngr:
    return workdir, mngr.best_step()


def continued(tiny_config, init, **overrides):
  config = small(tiny_config, num_steps=1, warmup_steps=0, eval_every=1, checkpoint_every=1)
  config.init = str(init)
  for key, value in overrides.items():
    section, name = key.split('.')
    config[section][name] = value
  return config


def held_out_at_start(workdir) -> dict:
  return {tag: series[0] for tag, series in read_scalars(workdir).items() if tag.startswith('eval_') and 0 in series}


@pytest.fixture(scope='module')
def exports(source, builtin_tokenizer, tmp_path_factory):
  """The source's best checkpoint in every format config.init takes (HF's AlbertForMaskedLM has neither a pooler
  nor an SOP head; the original TF format carries no vocabulary)."""
  workdir, _ = source
  folder = tmp_path_factory.mktemp('exports')
  config, params, _ = interop.read(workdir)
  cfg = interop.ModelConfig.from_config(config.model)
  interop.save(folder / 'ours', params, config)
  interop.save_hf(folder / 'hf', params, cfg, tokenizer=builtin_tokenizer)
  try:  # HF's own class writes its masked-LM folder (the [hf] extra), TensorFlow the original format (the [tf] one)
    import transformers
    transformers.AlbertForMaskedLM.from_pretrained(folder / 'hf').save_pretrained(folder / 'hf_mlm')
    shutil.copy(folder / 'hf' / 'spiece.model', folder / 'hf_mlm' / 'spiece.model')
  except ImportError:
    pass
  try:
    interop.save_tf(folder / 'tf', params, cfg)
  except interop.CheckpointError:  # no TensorFlow here
    pass
  return folder


def test_every_kind_of_checkpoint_starts_the_run_where_it_is(source, exports, tiny_config, tmp_path, capsys):
  """Step 0 of a continued run evaluates the checkpoint: the source run's own held-out figures at that step, on the
  same held-out batches (a fresh SOP head aside, where the checkpoint has none)."""
  workdir, best = source
  recorded = read_scalars(workdir)
  kinds = [('workdir', workdir, None, best), ('workdir at step 3', workdir, 3, 3), ('ours', exports / 'ours', None, best),
           ('hf', exports / 'hf', None, best), ('hf masked LM', exports / 'hf_mlm', None, best),
           ('original tf', exports / 'tf', None, best)]
  assert CI_HAS_EVERY_FORMAT <= {name for name, init, _, _ in kinds if init.exists()}
  for name, init, init_step, step in [kind for kind in kinds if kind[1].exists()]:
    config = continued(tiny_config, init)
    config.init_step = init_step
    result = train.train_and_evaluate(config, tmp_path / name, devices=jax.devices()[:1])
    start = held_out_at_start(tmp_path / name)
    compared = [k for k in start if 'mlm' in k or name != 'hf masked LM']
    assert len(compared) >= (2 if name == 'hf masked LM' else 6), (name, sorted(start))
    for key in compared:
      assert start[key] == pytest.approx(recorded[key][step], abs=1e-6), (name, key)
    assert result['eval_mlm_accuracy'] > 0
    out = capsys.readouterr().out
    assert 'starting from ' in out, name
    # HF's masked-LM class has no pooler and no SOP head: those are new, and the console says so.
    assert ('(it has no pooler and no sop_head: new, from random weights)' in out) == (name == 'hf masked LM'), out
    # The run records the model it trained and its vocabulary: what finetune, blimp and convert read.
    saved = json.loads((tmp_path / name / 'config.json').read_text())
    assert saved['init'] == str(init) and saved['model']['hidden_size'] == 64
    assert saved['data']['vocab'] == 'builtin'


def test_a_checkpoints_shape_is_read_without_its_weights_as_a_whole_read_gives_it(source, exports, tmp_path):
  """interop.read_config: what interop.read returns but the parameters, for every format; where the format keeps
  its shape apart (all but an HF directory with E = H, whose tensors tell whether it maps E to H), the weights may
  be unreadable."""
  workdir, best = source
  kinds = [(workdir, None, best), (workdir, 3, 3), (exports / 'ours', None, None), (exports / 'hf', None, None),
           (exports / 'hf_mlm', None, None), (exports / 'tf', None, None)]
  # And an HF directory with E < H, its weights then truncated.
  cfg = interop.ModelConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_layers=2, num_heads=2,
                            intermediate_size=64, max_position_embeddings=32)
  params, _ = interop.complete(interop.heads.make_model(cfg, None), {})
  interop.save_hf(tmp_path / 'hf_factorized', params, cfg)
  kinds.append((tmp_path / 'hf_factorized', None, None))
  for init, step, chosen in [kind for kind in kinds if kind[0].exists()]:
    config, _, line = interop.read(init, step)
    assert interop.read_config(init, step) == (config, line, chosen), init
  (tmp_path / 'hf_factorized' / 'model.safetensors').write_bytes(b'')
  with pytest.raises(interop.CheckpointError, match='truncated or corrupt'):
    interop.read(tmp_path / 'hf_factorized')
  only, _, _ = interop.read_config(tmp_path / 'hf_factorized')
  assert (only.model.embedding_size, only.model.hidden_size, only.model.num_layers) == (16, 32, 2)


def test_a_continued_run_is_a_run_like_any_other(source, tiny_config, builtin_tokenizer, tmp_path):
  """Fine-tuning's init reads it (its vocabulary comes along), and its HF export carries the vocabulary."""
  workdir, _ = source
  train.train_and_evaluate(continued(tiny_config, workdir), tmp_path / 'run', devices=jax.devices()[:1])
  finetune_config = tiny_config.copy_and_resolve_references()
  finetune_config.init = str(tmp_path / 'run')
  start = pretrained.load(finetune_config)
  assert start.vocab == builtin_tokenizer.path and 'step 1' in start.description
  out = subprocess.run([sys.executable, '-m', 'albert_jax.convert', f'--input={tmp_path / "run"}',
                        f'--output={tmp_path / "hf"}', '--to=hf'], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert (tmp_path / 'hf' / 'spiece.model').read_bytes() == builtin_tokenizer.sp.serialized_model_proto()


def test_what_contradicts_the_checkpoint_is_refused_naming_both(source, exports, tiny_config, tfds_dir, tmp_path):
  workdir, _ = source
  cases = [
      ({'model.hidden_size': 32}, 'model.hidden_size is 32 in the config, 64 in the checkpoint'),
      ({'model.vocab_size': 3000}, 'model.vocab_size is 3000 in the config, 4000 in the checkpoint')]
  for overrides, message in cases:
    with pytest.raises(ConfigError, match=message):
      train.train_and_evaluate(continued(tiny_config, workdir, **overrides), tmp_path / 'x', devices=jax.devices()[:1])
  # A vocabulary of the checkpoint's size, other pieces (trained on a sample of the same corpus).
  other = vocab_lib.train_on_source('builtin', 4000, str(tmp_path / 'other'), tfds_dir, limit=8000,
                                    progress_every_s=1e9)
  with pytest.raises(ConfigError, match=rf'config.data.vocab {re.escape(other)} is not the vocabulary '
                                        rf'{re.escape(str(workdir))} was trained with \(.*vocab-4000.model\): '
                                        r'their pieces differ'):
    train.train_and_evaluate(continued(tiny_config, workdir, **{'data.vocab': other}), tmp_path / 'x',
                             devices=jax.devices()[:1])
  # An original TF checkpoint carries no vocabulary: data.vocab must name it.
  if (exports / 'tf').exists():
    with pytest.raises(ConfigError, match=rf'no vocabulary came with config.init {exports / "tf"}: set '
                                          r'--config.data.vocab'):
      train.train_and_evaluate(continued(tiny_config, exports / 'tf', **{'data.vocab': None}), tmp_path / 'x',
                               devices=jax.devices()[:1])
  assert not (tmp_path / 'x' / 'checkpoints').exists()  # refused before anything was trained
  # On the command line: one line, exit status 2.
  refused = run_cli(tiny_config, tmp_path / 'cli', f'--config.init={workdir}', '--config.model.num_heads=4',
                    '--config.train.num_steps=6')
  out, err = refused.communicate(timeout=300)
  assert refused.returncode == 2 and err.count('\n') == 1, err
  assert 'model.num_heads is 4 in the config, 2 in the checkpoint' in err


def test_a_continued_run_killed_resumes_exactly_from_its_own_checkpoints(source, tiny_config, tmp_path):
  """Killed, it resumes from its own checkpoints bit for bit, and does not read config.init's weights again: the
  resume succeeds with them damaged."""
  workdir, _ = source
  copy = shutil.copytree(workdir, tmp_path / 'init')
  init = f'--config.init={copy}'
  unbroken = run_cli(tiny_config, tmp_path / 'unbroken', init, '--config.train.num_steps=20')
  out, err = unbroken.communicate(timeout=600)
  assert unbroken.returncode == 0, err[-3000:]
  process = run_cli(tiny_config, tmp_path / 'killed', init, '--config.train.num_steps=20')
  deadline = time.time() + 300
  while not (tmp_path / 'killed' / 'checkpoints' / '10').exists():
    assert process.poll() is None and time.time() < deadline, 'the run ended before it could be killed'
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.communicate(timeout=120)
  arrays = [f for f in (copy / 'checkpoints').rglob('*') if f.is_file() and '/d/' in str(f)]
  assert arrays  # tensorstore's chunks of every saved array
  for f in arrays:
    f.write_bytes(b'')
  with pytest.raises(interop.CheckpointError, match=r'checkpoint \d+ of .*init cannot be restored \(a file is '
                                                   r'truncated in '):  # the weights are unreadable now
    interop.read(copy)
  convert = subprocess.run([sys.executable, '-m', 'albert_jax.convert', f'--input={copy}', f'--output={tmp_path / "x"}',
                            '--to=hf'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert convert.returncode == 2 and convert.stderr.count('\n') == 1, convert.stderr[-3000:]
  resumed = run_cli(tiny_config, tmp_path / 'killed', init, '--config.train.num_steps=20')
  out, err = resumed.communicate(timeout=600)
  assert resumed.returncode == 0, err[-3000:]
  assert (f'resumed from step 10 in {tmp_path / "killed"} (its own checkpoints come first: config.init {copy} gave '
          f'the shape, its weights are not read)') in out
  np.testing.assert_array_equal(losses(tmp_path / 'killed', range(1, 21)), losses(tmp_path / 'unbroken', range(1, 21)))


def test_a_sweep_over_the_learning_rate_of_a_continued_run(source, tiny_config, tmp_path):
  workdir, best = source
  root = tmp_path / 'sweep'
  sweep.main(['--config=configs/tiny.py', '--sweep=train.learning_rate=0.001,0.01', f'--workdir={root}',
              f'--config.init={workdir}', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
              *SHRINK, '--config.train.num_steps=2', '--config.train.eval_every=2'])
  expected = read_scalars(workdir)['eval_mlm_accuracy'][best]
  for rate in ('0.001', '0.01'):
    run = root / f'learning_rate={rate}'
    assert json.loads((run / 'result.json').read_text())['step'] == 2
    assert held_out_at_start(run)['eval_mlm_accuracy'] == pytest.approx(expected, abs=1e-6)
  assert (root / 'report.md').exists()
