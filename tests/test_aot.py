"""The ahead-of-time fit check: compiles the real training step for TPU topologies with libtpu's compile-only
devices (no TPU here) and reads the compiler's memory figures."""
import dataclasses
import json
import math
import os
import subprocess
import sys
import warnings

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from albert_jax import accelerators, aot, fit, tpu_environment
from albert_jax import step as step_lib
from albert_jax.errors import ConfigError
from albert_jax.summary import count_params
from conftest import ROOT


@pytest.mark.parametrize('name, grid, devices', [
    # libtpu's chip-grid names and device counts of Cloud TPU accelerator types (environment.md, Cloud TPU docs)
    ('v3-8', 'v3:2x2', 8), ('v3-32', 'v3:4x4', 32), ('v3-64', 'v3:4x8', 64), ('v3-128', 'v3:8x8', 128),
    ('v3-256', 'v3:8x16', 256), ('v3-512', 'v3:16x16', 512), ('v3-1024', 'v3:16x32', 1024),
    ('v4-8', 'v4:2x2x1', 4), ('v4-16', 'v4:2x2x2', 8), ('v4-128', 'v4:4x4x4', 64), ('v4-4096', 'v4:8x16x16', 2048),
    ('v5p-8', 'v5p:2x2x1', 4), ('v5e-4', 'v5e:2x2', 4), ('v5litepod-256', 'v5e:16x16', 256),
    ('v6e-8', 'v6e:2x4', 8), ('v6e-256', 'v6e:16x16', 256), ('v5p-128', 'v5p:4x4x4', 64),
    ('2xv5e-256', 'v5e:16x16', 512),
    # TPU7x: the name counts TensorCores, 2 per chip, each a JAX device (tpu7x-8: 4 chips, 2x2x1, 8 devices)
    ('tpu7x-8', 'tpu7x:2x2x1', 8), ('tpu7x-16', 'tpu7x:2x2x2', 16), ('tpu7x-128', 'tpu7x:4x4x4', 128),
    ('2xtpu7x-16', 'tpu7x:2x2x2', 32),
])
def test_accelerator_types_map_to_chip_grids(name, grid, devices):
  topo = aot.topology(name)
  assert (topo.chip_grid, topo.devices) == (grid, devices)


@pytest.mark.parametrize('name, smaller', [
    # Cloud TPU's slice shapes: v5e and v6e from one chip, then 2x2 (no 2-chip slice); v4 and v5p from 2x2x1 (-8)
    ('v5e-4', 'v5e-1'), ('v6e-8', 'v6e-4'), ('v5e-256', 'v5e-128'), ('v5p-16', 'v5p-8'), ('v4-8', None),
    ('v3-8', None), ('v5e-1', None), ('v6e-1', None), ('tpu7x-16', 'tpu7x-8'), ('tpu7x-8', None)])
def test_slices_get_smaller_as_cloud_tpu_sells_them(name, smaller):
  assert accelerators.tpu_slice(name).smaller() == (accelerators.tpu_slice(smaller) if smaller else None)


@pytest.mark.parametrize('name', ['v2-8', 'v3-32', 'v4-16', 'v5e-8', 'v5p-8', 'v6e-4', 'v5e-1', '2xv5e-16',
                                  'tpu7x-8', '2xtpu7x-16'])
def test_libtpu_agrees_on_devices_and_every_kind_has_a_peak(name):
  """libtpu's compile-only devices: as many as the table says, of a kind the table knows (v5p's is 'TPU v5',
  which once matched no peak and crashed the check), spread over the slices."""
  topo = aot.topology(name)
  devices = topo.compile_only_devices()
  generation = topo.slice.generation
  assert len(devices) == topo.devices and devices[0].device_kind in generation.device_kinds
  assert accelerators.bf16_peak(devices[0].device_kind) == generation.bf16_peak
  assert len({getattr(d, 'slice_index', 0) for d in devices}) == topo.num_slices


@pytest.mark.parametrize('name', ['v3-12', 'v3-7', 'v9-8', 'tpu-v3', 'v3', 'v5p-96', '2xv3-64', 'tpu7x-12',
                                  'tpu8-8'])
def test_bad_topology_names_say_what_is_expected(name):
  with pytest.raises(ConfigError, match='power of two|expected GENERATION-SIZE|cannot be joined'):
    aot.topology(name)


@pytest.mark.parametrize('name', ['v3-8', 'v3-32'])
def test_tiny_config_fits_and_memory_adds_up(name, tiny_config):
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 64
  topo = aot.topology(name)
  result = aot.check(config, topo)
  assert result.fits
  # Pure data parallelism: every device holds all fp32 parameters and LAMB's two slots per parameter.
  params = count_params(aot.validate(config))['total'] * 4
  assert result.params == params
  assert 2 * params <= result.opt_state < 2.01 * params  # m and v, plus a few scalars and per-layer trust ratios
  per_device = 64 // topo.devices
  seq, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq
  # Three int32 features per token, three per prediction, one sentence label: all 4 bytes each.
  assert result.batch == per_device * (3 * seq + 3 * predictions + 1) * 4
  assert 0 < result.peak < topo.hbm_bytes


@pytest.mark.parametrize('per_shard', [64, 48, 8192, 720, 97])
def test_fewest_microbatches_is_the_fewest_that_fit_and_compiles_at_most_two_that_fit(tiny_config, per_shard):
  """A device that holds 1 GiB of parameters, state and gradients plus 16 MiB of temporaries per row of a microbatch
  (memory falls as the count grows): every limit's answer is the smallest divisor of the shard's batch that fits,
  found by trying every count; the search's compiles that fit (a TPU's slow ones) are one where the counts double
  (powers of two), at most two otherwise; what fits nowhere is None."""
  needs = lambda k: 2 ** 30 + 16 * 2 ** 20 * (per_shard // k)
  divisors = [k for k in range(1, per_shard + 1) if per_shard % k == 0]
  for limit in sorted({needs(k) for k in divisors} | {needs(k) - 1 for k in divisors}):
    tries = []
    def try_config(config):
      k = config.train.grad_accum_steps
      return fit.Check(batch_size=per_shard, per_shard=per_shard, microbatches=k, remat=config.model.remat,
                       fits=needs(k) <= limit, params=0, opt_state=0, batch=0, temporaries=None, peak=None)
    found = fit.fewest_microbatches(try_config, tiny_config, 'none', per_shard, 2, tries)
    expected = next((k for k in divisors if k >= 2 and needs(k) <= limit), None)
    assert (found and found.microbatches) == expected, (limit, [t.microbatches for t in tries])
    assert sum(t.fits for t in tries) <= (1 if per_shard & (per_shard - 1) == 0 else 2)
    assert len(tries) == len({t.microbatches for t in tries})  # no count compiled twice


def test_oversized_config_does_not_fit_and_the_fewest_microbatches_or_a_policy_are_suggested(tiny_config):
  """Where the user set model.remat and train.grad_accum_steps, a suggestion; where they are 'auto', what training
  will choose, which is the suggestion's first, and a setting given that does not fit stops training with it."""
  # 8k sequences of 64 per core of a v2-8, the smallest HBM (8 GiB) and so the cheapest compiles that reach it.
  config = fit.with_settings(tiny_config, 'none', 1, 8 * 8192)
  topo = aot.topology('v2-8')
  out = aot.report(config, topo, mfu=0.4)
  assert not out['first'].fits
  assert out['first'].required > 8 * 2 ** 30  # as the compiler reported it
  assert 'does NOT fit' in out['text']
  best = out['best']  # the fewest microbatches that fit with the configured policy (none), at the configured batch
  assert best.fits and best.remat == 'none' and best.batch_size == config.train.batch_size and best.microbatches > 1
  assert best.peak <= topo.hbm_bytes
  assert f'in {best.microbatches} microbatches of {8192 // best.microbatches}), remat none: fits' in out['text']
  # Fewest: the next smaller count (a divisor of the core's 8,192 rows) does not fit; one is the configured step.
  fewer = max(k for k in range(1, best.microbatches) if 8192 % k == 0)
  assert fewer == 1 or not aot.check(fit.with_settings(config, 'none', fewer), topo).fits
  policy = next(t for t in out['tries'] if t.fits and t.microbatches == 1)  # a policy alone, offered beside it
  assert policy.remat != 'none' and policy.peak <= topo.hbm_bytes
  assert (f'suggestion: --config.train.grad_accum_steps={best.microbatches} (or --config.model.remat={policy.remat})'
          in out['text'])
  # The same search chooses for training (the compiles above, not again: each setting's check looked up).
  done = {(t.remat, t.microbatches, t.batch_size): t for t in [out['first'], *out['tries']]}
  looked_up = lambda c: done[(c.model.remat, c.train.grad_accum_steps, c.train.batch_size)]
  devices = topo.compile_only_devices()
  auto = tiny_config.copy_and_resolve_references()
  auto.train.batch_size = 8 * 8192
  chosen, found, line = fit.choose(auto, devices, try_config=looked_up)
  assert (chosen.model.remat, chosen.train.grad_accum_steps) == ('none', best.microbatches) and found is best
  assert line.startswith(f'auto: model.remat none and train.grad_accum_steps {best.microbatches} (with 1 '
                         f'microbatch and remat none it needs {fit.gib(out["first"].required)} of temporaries')
  with pytest.raises(ConfigError, match=(
      rf'^the training step does not fit in device memory: batch 65536 \(8192 per data shard\), remat none: does '
      rf'NOT fit, .* Set --config.train.grad_accum_steps={best.microbatches} \(or set model.remat and '
      rf'train.grad_accum_steps to auto\)\.$')):
    fit.choose(config, devices, try_config=looked_up)


def test_flops_and_step_time_estimate(tiny_config, tmp_path):
  """Also: the compile-only compile stays out of a persistent compilation cache (libtpu's compile-only client
  cannot load an executable from it, and JAX warns on every hit), and the cache serves CPU compiles after it."""
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 64
  before = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update('jax_compilation_cache_dir', str(tmp_path))  # this test's own cache, every compile kept
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
  compilation_cache.reset_cache()
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('error')
      out = aot.report(config, aot.topology('v3-8'), mfu=0.5)
    assert not list(tmp_path.glob('jit_train_step*'))
    jax.jit(lambda x: x * 3 + 1)(jax.numpy.ones(5)).block_until_ready()
    assert list(tmp_path.glob('jit__lambda*'))
  finally:
    jax.config.update('jax_compilation_cache_dir', before[0])
    jax.config.update('jax_persistent_cache_min_compile_time_secs', before[1])
    compilation_cache.reset_cache()
  # 61.5 TFLOP/s per v3 core (half of a 123 TFLOP/s chip) x 8 cores at 50%
  assert math.isclose(out['step_seconds'], out['flops_per_step'] / (8 * 61.5e12 * 0.5))
  assert 'fits, peak' in out['text']
  row = aot.markdown_row('tiny', aot.topology('v3-8'), out)  # the run's hours beside the step time
  assert row.startswith('| tiny | v3-8 | 8 | ') and row.endswith(
      f'| {out["step_seconds"]:.2f} | {out["step_seconds"] * config.train.num_steps / 3600:.1f} |')
  assert aot.markdown_header(0.5).count('|') == 2 * row.count('|')  # header and separator: as many columns


def test_smallest_slice_is_where_halving_stops_fitting(tiny_config):
  """80k sequences of the tiny model fit a v5e-8 as configured (10,240 per chip, about 14 GiB of 16). Halving, full
  remat still fits 20,480 per chip, and no weaker policy does (save_dots_no_batch needs about 18 GiB); one chip
  cannot hold all 81,920 even so, so v5e-4 with full remat is the smallest. The batch is chosen so that only two
  compiles fit (1-2 minutes each here); those that do not fit fail in seconds."""
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 81920
  topo = aot.topology('v5e-8')
  out = aot.report(config, topo, mfu=0.4, smallest=True)
  assert out['first'].fits and out['first'].remat == 'none'
  smallest, found, seconds = out['smallest']
  assert smallest.name == 'v5e-4' and found.fits and found.peak <= smallest.hbm_bytes and found.per_shard == 20480
  assert 'smallest v5e slice that fits batch 81920: v5e-4' in out['text']
  assert found.remat == 'full'  # every weaker policy was tried there and failed; the next weaker one again:
  weaker = aot.REMAT_BY_MEMORY[aot.REMAT_BY_MEMORY.index(found.remat) - 1]
  assert not aot.check(fit.with_settings(config, weaker, 1, 81920), smallest).fits
  assert math.isclose(seconds, out['step_seconds'] * 2)  # half the chips
  row = aot.markdown_row('tiny', topo, out, smallest=True)
  assert row.endswith(f'| v5e-4: remat={found.remat}, {aot.gib(found.peak)}, '
                      f'{seconds * config.train.num_steps / 3600:.1f} h |')
  assert aot.markdown_header(0.4, smallest=True).count('|') == 2 * row.count('|')


def test_training_stops_before_reading_data_when_the_step_does_not_fit(tiny_config, tmp_path, monkeypatch):
  from albert_jax import train

  def out_of_memory(*args):
    raise step_lib.OutOfMemory('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO '
                               'temporaries (36.85G) exceeds available HBM (15.48G).')

  monkeypatch.setattr(step_lib, 'compile_train_step', out_of_memory)
  monkeypatch.setattr(train.pipeline_lib.Pipeline, 'next_batch', lambda self: pytest.fail('read data'))
  with pytest.raises(ConfigError, match=r'^the training step does not fit in device memory: batch 64 \(64 per data '
                                        r'shard\), remat none: does NOT fit, needs 36.85 GiB .* Set a smaller '
                                        r'train.batch_size, or parameters sharded over mesh.fsdp'):
    train.train_and_evaluate(tiny_config, tmp_path, devices=jax.devices()[:1])


def test_training_takes_the_fewest_microbatches_that_fit_says_so_and_remembers_them(tiny_config, tmp_path,
                                                                                  monkeypatch, capsys):
  """'auto' on devices where the whole batch does not fit (here: a device that says so of one microbatch, as a
  TPU's compiler would): training compiles the next settings of the fit check's search, trains with the first that
  fits, says so in one line, and a restart tries that one first: one compile."""
  from albert_jax import train
  compiled = []
  real_check = fit.check

  def small_device(config, devices, where=''):
    compiled.append((config.model.remat, config.train.grad_accum_steps))
    found = real_check(config, devices, where)
    if config.train.grad_accum_steps == 1:  # the whole batch: over this device's memory
      return fit.Check(**{**{f.name: getattr(found, f.name) for f in dataclasses.fields(found)}, 'fits': False,
                          'required': 20 * 2 ** 30, 'compiled': None, 'program': None})
    return found

  monkeypatch.setattr(fit, 'check', small_device)
  config = tiny_config.copy_and_resolve_references()
  config.train.update(num_steps=4, warmup_steps=1, log_every=2, eval_every=4, checkpoint_every=2, eval_batches=1)
  train.train_and_evaluate(config, tmp_path, devices=jax.devices()[:1])
  said = capsys.readouterr().out
  assert compiled == [('none', 1), ('none', 2)]
  assert ('auto: model.remat none and train.grad_accum_steps 2 (with 1 microbatch and remat none it needs 20.00 GiB '
          'of temporaries, more than a device holds;') in said
  assert json.loads((tmp_path / 'fit.json').read_text()).popitem()[1] == {'remat': 'none', 'microbatches': 2}
  assert json.loads((tmp_path / 'config.json').read_text())['train']['grad_accum_steps'] == 'auto'  # as given
  compiled.clear()
  config.train.num_steps = 6
  train.train_and_evaluate(config, tmp_path, devices=jax.devices()[:1])
  assert compiled == [('none', 2)] and 'train.grad_accum_steps 2, as at the run\'s last start' in capsys.readouterr().out


def test_nothing_from_libtpu_reaches_the_console_where_there_is_no_tpu():
  """With libtpu installed (the tpu extra) and no TPU, a bare JAX start prints libtpu's errors; our CLIs print
  nothing on stderr, the fit check's compile for a TPU topology included."""
  env = {k: v for k, v in os.environ.items() if not k.startswith('TPU_')}  # not what importing albert_jax set here
  run = lambda *args: subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                                     cwd=ROOT, env=env)
  bare = run('-c', 'import jax; jax.devices()')
  assert 'TPU_WORKER_HOSTNAMES' in bare.stderr  # what a user of plain JAX sees here
  for args in (['albert_jax.summary', '--config=configs/tiny.py'],
               ['albert_jax.aot', '--config=configs/tiny.py', '--topology=v5e-4']):
    out = run('-m', *args)
    assert out.returncode == 0 and out.stderr == '', out.stderr
    assert out.stdout.strip()
  assert 'fits' in out.stdout


def test_libtpu_is_left_alone_on_a_tpu_vm_and_user_settings_are_kept(monkeypatch):
  for name in ('TPU_HOST_BOUNDS', 'TPU_WORKER_HOSTNAMES'):
    monkeypatch.delenv(name, raising=False)
  assert tpu_environment.quiet_libtpu_without_tpu(4) == {} and 'TPU_HOST_BOUNDS' not in os.environ
  assert tpu_environment.quiet_libtpu_without_tpu(-1) == {}  # unknown: touch nothing
  monkeypatch.setenv('TPU_WORKER_HOSTNAMES', 'worker-0,worker-1')
  assert tpu_environment.quiet_libtpu_without_tpu(0) == {'TPU_HOST_BOUNDS': '1,1,1'}
  assert os.environ['TPU_WORKER_HOSTNAMES'] == 'worker-0,worker-1'


def test_two_slices_put_the_data_axis_across_them_and_only_gradients_cross(tiny_config):
  """2 x v5e-16: libtpu's compile-only devices of two slices. The data axis runs slice after slice (JAX's hybrid
  mesh: ICI within a slice, DCN across), the step compiles, and what the compiled program sends between slices is
  the fp32 gradients: at least their bytes (each must be summed over both slices) and under 10% more (the small
  arrays sent whole by every device, their tile padding, the tied embedding's two gradient terms); activations
  would be far more."""
  from albert_jax import sharding
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 64
  config.model.update(vocab_size=512, embedding_size=128, hidden_size=512, intermediate_size=2048, num_heads=4)
  topo = aot.topology('2xv5e-16')
  devices = topo.compile_only_devices()
  mesh = sharding.make_mesh(aot.on_slices(config, topo).mesh, devices)
  assert dict(mesh.shape) == {'data': 32, 'fsdp': 1, 'model': 1}
  assert [d.slice_index for d in mesh.devices[:, 0, 0]] == [0] * 16 + [1] * 16
  out = aot.report(config, topo, mfu=0.4, devices=devices)
  assert out['first'].fits and out['first'].per_shard == 2
  gradients = 4 * count_params(aot.validate(config))['total']
  assert gradients <= out['dcn_bytes_per_step'] < 1.1 * gradients
  assert 'between slices (mesh.dcn_data=2, remat none): the compiled step sends' in out['text']
  with pytest.raises(ConfigError, match='smallest single slice: give one slice'):
    aot.report(config, topo, mfu=0.4, devices=devices, smallest=True)
  config.mesh.dcn_data = 4
  with pytest.raises(ConfigError, match='does not match 2xv5e-16'):
    aot.report(config, topo, mfu=0.4, devices=devices)


def test_tpu7x_fits_its_step_with_a_new_libtpu_and_refuses_an_old_one_in_one_line(tiny_config):
  """libtpu 0.0.42.1 (jax 0.10.2's) segfaults compiling xxlarge's accumulated step for tpu7x-8; from 0.0.50 the
  fit check runs (CI's newest-stack venv), before it the check stops with the fix instead of crashing."""
  from importlib import metadata
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 64
  topo = aot.topology('tpu7x-8')
  old = tuple(int(x) for x in metadata.version('libtpu').split('.')) < (0, 0, 50)
  if old:
    with pytest.raises(ConfigError, match=r"tpu7x: libtpu .* crashes compiling steps for it; install libtpu 0.0.50 "
                                          r"or newer"):
      aot.check(config, topo)
    return
  out = aot.report(config, topo, mfu=0.4)
  assert out['first'].fits and out['first'].per_shard == 8  # 64 over 4 chips' 8 devices
  assert out['text'].startswith('tpu7x-8 (tpu7x:2x2x1, 8 x TPU7x, 96.00 GiB HBM each)')
  # 2,307 TFLOP/s a chip, 8 devices: the step time at 40% is the FLOPs over 8 x 1,153.5e12 x 0.4.
  assert math.isclose(out['step_seconds'], out['flops_per_step'] / (8 * 1153.5e12 * 0.4))


def test_a_list_of_slices_says_which_a_run_begun_on_the_first_can_move_to(tiny_config):
  """The host counts of the others must divide the data shards a run begun on the first gets (pipeline.auto_shards:
  8 times its hosts), or data.shards as set."""
  config = tiny_config.copy_and_resolve_references()
  config.train.batch_size = 4096
  assert aot.moves(config, [aot.topology(t) for t in ('v4-256', 'v4-128', 'v4-64')]) == (
      'data: a run begun on v4-256 has 256 data shards (data.shards auto); it continues on v4-128 (16 hosts), '
      'v4-64 (8 hosts)')
  assert aot.moves(config, [aot.topology(t) for t in ('v4-64', 'v4-512', 'v4-1024')]) == (
      'data: a run begun on v4-64 has 64 data shards (data.shards auto); it continues on v4-512 (64 hosts); not on '
      'v4-1024 (128 hosts) (its hosts do not divide 64)')
