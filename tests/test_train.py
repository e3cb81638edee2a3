"""The training entry point on fake devices: sharded trajectories equal the single-device one, resume after
SIGKILL and SIGTERM reproduces an uninterrupted run, restore onto another mesh, and bad setups fail early."""
import gc
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from albert_jax import fit, goodput, metrics, train
from albert_jax.data import pipeline
from albert_jax.data.tokenizer import VocabError
from albert_jax.errors import ConfigError
from conftest import ROOT, xla_flags


def small(config, **train_overrides):
  """The tiny config shrunk further: every test here compiles and runs it several times."""
  config = fit.with_settings(config, 'none', 1)  # the fit search's choice on CPUs; overrides below may differ
  config.data.max_seq_length = 64
  config.model.max_position_embeddings = 64
  config.train.update({**dict(batch_size=8, num_steps=6, warmup_steps=2, log_every=1, eval_every=3, eval_batches=1,
                              checkpoint_every=3, fill_mask_text='', fill_mask_word=''), **train_overrides})
  return config


def read_scalars(workdir) -> dict:
  """{tag: {step: value}} from the TensorBoard event files, read by TensorBoard's own EventAccumulator; a later
  file's value for a step wins (a resumed run writes a new file)."""
  out = {}
  for path in sorted(glob.glob(f'{workdir}/tensorboard/events.*'), key=os.path.getmtime):
    events = EventAccumulator(path, size_guidance={'scalars': 0})
    events.Reload()
    for tag in events.Tags()['scalars']:
      out.setdefault(tag, {}).update({e.step: e.value for e in events.Scalars(tag)})
  return out


def losses(workdir, steps):
  series = read_scalars(workdir)['loss']
  return np.array([series[s] for s in steps])


FROZEN = {}  # the garbage collector's frozen objects as single_device_run saw them, during its collections and after


@pytest.fixture(scope='module')
def single_device_run(tiny_config, builtin_tokenizer, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('single')
  seen = []
  record = lambda phase, info: seen.append(gc.get_freeze_count())
  gc.callbacks.append(record)
  try:
    result = train.train_and_evaluate(small(tiny_config), workdir, devices=jax.devices()[:1])
  finally:
    gc.callbacks.remove(record)
  FROZEN.update(during=max(seen, default=0), after=gc.get_freeze_count())
  return workdir, result


def test_the_loop_runs_with_its_setup_frozen_and_gives_it_back(single_device_run):
  """Python's full collections skip what the run set up (gc.freeze before the loop: they paused it, and a GPU with
  it, for up to a second), and a process that trains again frees it afterwards (unfrozen at the end)."""
  assert FROZEN['during'] > 10_000 and FROZEN['after'] == 0


def test_loss_falls_and_metrics_reach_tensorboard(single_device_run):
  workdir, result = single_device_run
  scalars = read_scalars(workdir)
  for tag in ('loss', 'mlm_accuracy', 'sop_accuracy', 'learning_rate', 'grad_norm', 'trust_ratio_mean',
              'eval_mlm_accuracy', 'eval_sop_loss', 'eval_swap_accuracy', 'eval_swap_count', 'eval_random_accuracy',
              'eval_sop_majority', 'host_max_rss_gib'):
    assert tag in scalars, tag
  stored = json.loads((workdir / 'result.json').read_text())
  assert isinstance(stored['eval_swap_count'], int) and stored['eval_swap_majority'] == 0.5
  assert stored['eval_swap_accuracy'] == result['eval_swap_accuracy']
  assert scalars['learning_rate'][1] == 0.0  # warmup starts at 0, as the original
  assert set(scalars['loss']) == set(range(1, 7))
  assert {'steps_per_sec', 'examples_per_sec', 'tokens_per_sec', 'mfu'} <= set(scalars)
  assert 0 <= result['eval_mlm_accuracy'] <= 1
  assert sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit()) == [3, 6]
  # Goodput: the attempt's time by cause partitions its wall time (from the process's start to its last record).
  assert 0 < scalars['goodput/productive_share'][6] < 1 and scalars['goodput/restarts'][6] == 0
  [attempt] = json.loads((workdir / 'goodput.json').read_text())['attempts']
  assert (attempt['first_step'], attempt['last_step'], sorted(attempt['saves'])) == (0, 6, ['3', '6'])
  spent = attempt['seconds']
  assert sum(spent.values()) == pytest.approx(attempt['last_seen'] - attempt['start'], abs=0.5), spent
  assert min(spent['steps'], spent['compile'], spent['evaluate'], spent['startup']) > 0, spent


def test_a_start_that_stops_before_its_loop_is_on_the_goodput_record(single_device_run, tiny_config, tmp_path):
  """A start that stops before restoring (here on a corpus left empty) is an attempt of the run: on record at once,
  with no first step, its time a restart's; the finished attempt before it lost no steps to it."""
  workdir = tmp_path / 'run'
  shutil.copytree(single_device_run[0], workdir)
  (tmp_path / 'empty.txt').write_text('')
  config = small(tiny_config)
  config.data.source = f'lines:{tmp_path}/empty.txt'
  with pytest.raises(ConfigError, match='empty'):
    train.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
  finished, failed = json.loads((workdir / 'goodput.json').read_text())['attempts']
  assert (failed['first_step'], failed['last_step'], failed['saves']) == (None, 0, {})
  assert failed['start'] > finished['last_seen'] and failed['seconds']['steps'] == 0
  totals = goodput.account([finished, failed])
  assert totals['attempts'] == 2 and totals['recomputed_steps'] == 0 and totals['recomputed'] == 0
  assert totals['steps'] == pytest.approx(finished['seconds']['steps'])
  assert totals['restart_startup'] == pytest.approx(failed['seconds']['startup'])


# Every axis at once (the batch over data and fsdp, the parameters over fsdp and model), then two "slices" of 4
# devices; pure data parallelism is the data axis of either.
@pytest.mark.parametrize('mesh', [dict(data=2, fsdp=2, model=2), dict(dcn_data=2, data=2, fsdp=2)])
def test_sharded_trajectory_equals_single_device(mesh, single_device_run, tiny_config, tmp_path, capsys):
  config = small(tiny_config)
  config.mesh.update({'data': 1, 'fsdp': 1, 'model': 1, 'dcn_data': 1, **mesh})
  blimp_folder = blimp_slice(tmp_path) if mesh == dict(data=2, fsdp=2, model=2) else None
  if blimp_folder:  # BLiMP's pairs scored with each held-out evaluation, on parameters sharded over fsdp
    config.train.update(blimp=str(blimp_folder), blimp_pairs=4)
  result = train.train_and_evaluate(config, tmp_path / 'run')
  np.testing.assert_allclose(losses(tmp_path / 'run', range(1, 7)), losses(single_device_run[0], range(1, 7)),
                             rtol=2e-5)
  if blimp_folder:
    check_blimp_figures(tmp_path / 'run', blimp_folder, result, capsys.readouterr().out)


def blimp_slice(tmp_path):
  """4 pairs of each of 3 paradigms of the shared BLiMP files (8 lines each, as distributed), or None without them."""
  shared = ROOT.parent / 'shared' / 'data' / 'blimp'
  if not shared.is_dir():
    return None
  folder = tmp_path / 'blimp'
  folder.mkdir()
  for uid in ('anaphor_number_agreement', 'determiner_noun_agreement_2', 'wh_island'):
    (folder / f'{uid}.jsonl').write_text(''.join((shared / f'{uid}.jsonl').read_text().splitlines(True)[:8]))
  return folder


def check_blimp_figures(workdir, folder, result, out):
  """train.blimp: the figure on the console, in TensorBoard and result.json is the one python -m albert_jax.blimp
  gives for the same checkpoint and pairs."""
  from albert_jax import blimp
  assert re.search(r'step 3 held-out: .*  blimp [\d.]+ \(n 12 pairs\)', out)
  assert re.search(r'BLiMP [\d.]+ -> [\d.]+ \(chance 0.5, n 12 pairs\)', out)
  scalars = read_scalars(workdir)
  assert set(scalars['eval_blimp_accuracy']) == {0, 3, 6}
  scored = blimp.run(str(workdir), str(folder), per_paradigm=4, step=6, say=lambda line: None)
  assert result['eval_blimp_accuracy'] == pytest.approx(scored['overall'], abs=1e-9) and scored['pairs'] == 12
  assert scalars['eval_blimp_accuracy'][6] == pytest.approx(scored['overall'], abs=1e-6)
  assert json.loads((workdir / 'result.json').read_text())['eval_blimp_count'] == 12


def test_microbatches_train_as_the_whole_batch(single_device_run, tiny_config, tmp_path):
  """train.grad_accum_steps: batch 8 over 2 devices in 4 microbatches follows the single-device run of the
  whole batch, and its metrics mean the same (MLM accuracy and gradient norm, step by step)."""
  config = small(tiny_config, grad_accum_steps=4)
  config.mesh.data = 2
  train.train_and_evaluate(config, tmp_path, devices=jax.devices()[:2])
  ours, whole = read_scalars(tmp_path), read_scalars(single_device_run[0])
  for tag in ('loss', 'mlm_accuracy', 'grad_norm'):
    np.testing.assert_allclose([ours[tag][s] for s in range(1, 7)], [whole[tag][s] for s in range(1, 7)],
                               rtol=2e-5, err_msg=tag)


def test_batches_made_by_worker_processes_train_identically(single_device_run, tiny_config, tmp_path):
  config = small(tiny_config)
  config.data.workers = 2
  train.train_and_evaluate(config, tmp_path, devices=jax.devices()[:1])
  np.testing.assert_array_equal(losses(tmp_path, range(1, 7)), losses(single_device_run[0], range(1, 7)))


def test_restore_onto_a_different_mesh_and_skip_a_damaged_checkpoint(single_device_run, tiny_config, tmp_path,
                                                                    capsys):
  config = small(tiny_config)
  config.mesh.update(data=8)
  train.train_and_evaluate(config, tmp_path)
  for f in (tmp_path / 'checkpoints' / '6' / 'state').rglob('*'):  # damage the newest checkpoint
    if f.is_file():
      f.write_bytes(b'garbage')
  config.mesh.update(data=2, fsdp=4)
  train.train_and_evaluate(config, tmp_path)  # skips step 6, resumes step 3 on another mesh, redoes 4..6
  out = capsys.readouterr().out
  aside, = (tmp_path / 'checkpoints').glob('6.damaged-*')  # kept, not deleted
  assert f'checkpoint 6 is damaged (a file is corrupt): moved to {aside}; resuming from step 3\n' in out
  assert 'resumed from step 3' in out
  np.testing.assert_allclose(losses(tmp_path, range(1, 7)), losses(single_device_run[0], range(1, 7)),
                             rtol=2e-5)


def test_bad_setups_fail_before_compiling(tiny_config, tmp_path):
  config = small(tiny_config, batch_size=6)
  with pytest.raises(ConfigError, match='batch_size 6 is not divisible by the data-parallel size 8'):
    train.train_and_evaluate(config, tmp_path / 'a')
  config = small(tiny_config)
  config.data.vocab = str(tmp_path / 'missing.model')
  with pytest.raises(VocabError, match='does not exist'):
    train.train_and_evaluate(config, tmp_path / 'b')
  (tmp_path / 'c').mkdir()
  other = small(tiny_config)
  other.model.hidden_size = 128
  (tmp_path / 'c' / 'config.json').write_text(other.to_json_best_effort())
  with pytest.raises(ConfigError, match='holds a run of a different model .*hidden_size: 128 there, 64 now'):
    train.train_and_evaluate(small(tiny_config), tmp_path / 'c')


def test_non_finite_loss_stops_and_saves_nothing_from_that_step(tiny_config, tmp_path):
  config = small(tiny_config)
  config.model.initializer_range = 1e30
  with pytest.raises(FloatingPointError, match='non-finite loss or gradient at step 1'):
    train.train_and_evaluate(config, tmp_path)
  assert not [p for p in (tmp_path / 'checkpoints').iterdir() if p.name.isdigit()]


# --- interrupted runs, as separate processes ------------------------------------------------------------------------

def run_cli(tiny_config, workdir, *extra, devices=2):
  args = [sys.executable, '-m', 'albert_jax.train', '--config=configs/tiny.py', f'--workdir={workdir}',
          f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}', '--config.data.max_seq_length=64',
          '--config.model.max_position_embeddings=64', '--config.train.batch_size=8', '--config.train.log_every=1',
          '--config.train.warmup_steps=5',
          '--config.train.eval_every=1000', '--config.train.eval_batches=1', '--config.train.checkpoint_every=10',
          "--config.train.fill_mask_text=", "--config.train.fill_mask_word=", *extra]
  env = {**os.environ, 'XLA_FLAGS': xla_flags(devices)}
  return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope='module')
def uninterrupted(tiny_config, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('uninterrupted')
  process = run_cli(tiny_config, workdir, '--config.train.num_steps=60')
  out, err = process.communicate(timeout=600)
  assert process.returncode == 0, err[-3000:]
  # What a user reads: the first step warms up (no rates yet), then rates; accuracies beside their majority rates.
  assert 'step 1/60  ' in out and 'warming up' in out.split('step 2/60')[0]
  assert not re.search(r'(?<![\d.])0\.00 steps/s', out)  # a zero rate, not the end of a real '10.00 steps/s'
  assert 'steps/s' in out.split('step 2/60')[1].split('\n')[0]
  held_out = next(line for line in out.splitlines() if line.startswith('step 60 held-out:'))
  assert re.search(r'swap_accuracy [\d.]+ \(majority 0\.500, n \d', held_out), held_out
  assert re.search(r'sop_accuracy [\d.]+ \(majority 0\.\d+, n \d', held_out), held_out
  closing = next(line for line in out.splitlines() if line.startswith('held-out MLM accuracy'))
  assert re.search(r'swap pairs [\d.]+ -> [\d.]+ \(majority 0\.500, n \d', closing), closing
  for pairs in ('random pairs', 'its own sop pairs'):  # one batch of 8: random pairs need not be balanced yet
    assert re.search(pairs + r' [\d.]+ -> [\d.]+ \(majority 0\.\d+, n \d', closing), closing
  return losses(workdir, range(1, 61))


@pytest.mark.parametrize('how', [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_run_resumes_identically(how, uninterrupted, tiny_config, tmp_path):
  process = run_cli(tiny_config, tmp_path, '--config.train.num_steps=60')
  deadline = time.time() + 300
  while not (tmp_path / 'checkpoints' / '20').exists():  # committed checkpoints appear under their step
    assert process.poll() is None and time.time() < deadline, 'the run ended before it could be interrupted'
    time.sleep(0.05)
  process.send_signal(how)
  out, err = process.communicate(timeout=120)
  if how == signal.SIGTERM:  # a checkpoint at the step it stopped, and status 42: start it again to resume
    assert process.returncode == 42, err[-3000:]
    assert 'SIGTERM at step' in out
  else:
    assert process.returncode == -signal.SIGKILL
  resumed = run_cli(tiny_config, tmp_path, '--config.train.num_steps=60')
  out, err = resumed.communicate(timeout=600)
  assert resumed.returncode == 0, err[-3000:]
  assert 'resumed from step' in out
  np.testing.assert_array_equal(losses(tmp_path, range(1, 61)), uninterrupted)


def with_shards(config, shards):
  """`config` (a resolved copy, whose data.shards holds a string) with data.shards a count."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    del config.data['shards']
    config.data.shards = shards
  return config


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def pod_run(tiny_config, workdir, hosts: int, *extra) -> str:
  """`hosts` processes as the hosts of a pod (one CPU device each) training in `workdir`, a folder they all see;
  host 0's output."""
  distributed = ['--distributed', f'--coordinator_address=127.0.0.1:{free_port()}', f'--num_processes={hosts}']
  processes = [run_cli(tiny_config, workdir, *extra, *distributed, f'--process_id={i}', devices=1)
               for i in range(hosts)]
  ran = [(process, *process.communicate(timeout=600)) for process in processes]
  for process, _, err in ran:
    assert process.returncode == 0, err[-3000:]
  return ran[0][1]


def test_a_run_of_2_hosts_continues_on_1_and_on_4_with_the_unbroken_runs_losses(tiny_config, tmp_path, capsys):
  """A run of two hosts on 4 data shards, stopped at its checkpoint of step 6 (its later checkpoint and curves
  removed, as if it had stopped there), continues on one host and on four: the same global batches, so every later
  step's loss is the unbroken run's up to floating-point order, and the held-out figures at the end too, over the
  same held-out instances."""
  run = ['--config.train.num_steps=12', '--config.train.checkpoint_every=6', '--config.data.shards=4']
  unbroken = tmp_path / 'unbroken'
  pod_run(tiny_config, unbroken, 2, *run)
  assert json.loads((unbroken / 'config.json').read_text())['data']['shards'] == 4
  expected, expected_result = losses(unbroken, range(7, 13)), json.loads((unbroken / 'result.json').read_text())
  for hosts in (1, 4):
    moved = tmp_path / f'on_{hosts}'
    shutil.copytree(unbroken, moved)
    shutil.rmtree(moved / 'checkpoints' / '12')
    shutil.rmtree(moved / 'tensorboard')
    (moved / 'result.json').unlink()
    if hosts == 1:  # in this process (its devices, a single host): the command's config, data.shards left out
      config = small(tiny_config, num_steps=12, checkpoint_every=6, warmup_steps=5, eval_every=1000)
      train.train_and_evaluate(config, moved, devices=jax.devices()[:1])
      out = capsys.readouterr().out
    else:
      out = pod_run(tiny_config, moved, hosts, *run[:2])  # the same command: data.shards comes from the workdir
    assert (f'resuming step 6 on {hosts} host(s) (was 2): global batch 8 per step; the data stream continues at '
            f'step 6') in out, out
    np.testing.assert_allclose(losses(moved, range(7, 13)), expected, rtol=1e-5, err_msg=f'{hosts} hosts')
    result = json.loads((moved / 'result.json').read_text())
    assert {k: v for k, v in result.items() if k.endswith('_count')} == {
        k: v for k, v in expected_result.items() if k.endswith('_count')}
    for name in ('eval_mlm_accuracy', 'eval_sop_accuracy', 'eval_swap_accuracy', 'eval_random_accuracy'):
      assert abs(result[name] - expected_result[name]) < 1e-6, (hosts, name)


def test_a_host_count_that_does_not_divide_the_runs_shards_is_refused_in_one_line(tiny_config, tmp_path):
  """A run on 4 data shards: 3 hosts are refused, naming the host counts that work, as is another data.shards."""
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'config.json').write_text(with_shards(small(tiny_config), 4).to_json_best_effort())
  port = free_port()
  processes = [run_cli(tiny_config, workdir, '--distributed', f'--coordinator_address=127.0.0.1:{port}',
                       '--num_processes=3', f'--process_id={i}', '--config.train.batch_size=12', devices=1)
               for i in range(3)]
  for process in processes:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 2, err[-3000:]
    assert err.rstrip().splitlines()[-1] == (
        "error: 3 hosts cannot share the 4 data shards of this run's stream evenly: it runs on 1, 2, 4 hosts (the "
        "divisors of 4). Use a slice of one of these host counts (or, for a new run, a data.shards that 3 divides).")
  with pytest.raises(ConfigError, match='holds a run whose data stream has 4 shards .*, not 8: leave data.shards out'):
    train.train_and_evaluate(with_shards(small(tiny_config), 8), workdir, devices=jax.devices()[:1])


def test_held_out_sets_are_evaluated_whole_and_padding_rows_do_not_count(tiny_config, builtin_tokenizer):
  from albert_jax import sharding
  from albert_jax import step as step_lib
  from albert_jax.config import validate
  config = small(tiny_config, eval_batches=1000)  # no cap: every held-out instance, once
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  program = step_lib.build(config, validate(config), mesh)
  params = program.new_state(jax.random.key(0))['params']
  results = []
  for batch_size in (8, 32):
    config.train.batch_size = batch_size
    sets = pipeline.held_out_sets(config.data, builtin_tokenizer, batch_size, config.train.eval_batches)
    for name in ('swap', 'random'):
      labels = np.concatenate([b['sentence_order_labels'] for b in sets[name]])
      assert np.all(labels[:np.sum(labels >= 0)] >= 0)  # padding rows (-1) only at the end
      assert np.mean(labels[labels >= 0]) == 0.5  # exactly balanced
    results.append(step_lib.evaluate(program, params, sets, mesh, 'sop'))
  by8, by32 = results
  assert by8.keys() == by32.keys() and {'eval_swap_count', 'eval_random_majority', 'eval_mlm_count'} <= set(by8)
  for key in by8:
    np.testing.assert_allclose(by8[key], by32[key], rtol=1e-5, err_msg=key)
  assert by8['eval_swap_majority'] == by8['eval_random_majority'] == 0.5
  assert by8['eval_swap_count'] > 200 and by8['eval_sop_count'] > 100
  # Under sentence_task 'none' the own set's labels say nothing (single segments, all 0): no figure for them, in the
  # metrics or on the console; everything else as before.
  alone = step_lib.evaluate(program, params, sets, mesh, 'none')
  assert set(alone) == {k for k in by32 if not k.startswith('eval_sop_')}
  for key in alone:
    np.testing.assert_allclose(alone[key], by32[key], rtol=1e-6, err_msg=key)
  line = metrics.held_out_line(alone)
  assert 'sop_accuracy' not in line and 'swap_accuracy' in line and 'sop_accuracy' in metrics.held_out_line(by32)
