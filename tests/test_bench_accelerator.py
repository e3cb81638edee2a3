"""bench/accelerator.py, the paper's speed table: its smoke run (tiny shapes on the CPU, HF included) in a process
where TensorFlow cannot be imported, with its figures checked against each other; and the parts that only a GPU
run reaches, on the CPU: the batch search, and the attention check with JAX's XLA reference for cuDNN's kernel."""
import itertools
import json
import os
import subprocess
import sys
import tarfile
from unittest import mock

import jax
import pytest

from albert_jax.config import validate
from albert_jax.summary import training_flops_per_sequence
from conftest import ROOT, import_bench
from test_without_tensorflow import HIDE_TENSORFLOW


@pytest.fixture(scope='module')
def bench():
  """The bench as a module (importing it sets JAX's GPU memory share in the environment; undone here)."""
  with mock.patch.dict(os.environ):
    return import_bench('accelerator')


@pytest.fixture(scope='module')
def smoke(tmp_path_factory):
  """(stdout, accelerator.json, accelerator.md) of the smoke run on the CPU (on a GPU machine too), asked for cuDNN
  as well as XLA attention: the cuDNN rows must be reported as not measured, not crash the run. One length (the
  speedup column's): the lease's smoke below runs two."""
  site, out = tmp_path_factory.mktemp('without_tensorflow'), tmp_path_factory.mktemp('bench')
  (site / 'sitecustomize.py').write_text(HIDE_TENSORFLOW)
  run = subprocess.run([sys.executable, 'bench/accelerator.py', '--smoke', '--attention=xla,cudnn', '--seq_lens=32',
                        '--rounds=1', '--steps=1', f'--out={out}'], capture_output=True, text=True, timeout=600,
                       cwd=ROOT,
                       env={**os.environ, 'PYTHONPATH': str(site), 'JAX_PLATFORMS': 'cpu', 'CUDA_VISIBLE_DEVICES': ''})
  assert run.returncode == 0, run.stderr[-3000:]
  return run.stdout, json.loads((out / 'accelerator.json').read_text()), (out / 'accelerator.md').read_text()


def test_smoke_run_measures_every_row_and_its_figures_agree(smoke, bench):
  stdout, result, text = smoke
  assert result['platform'] == 'cpu' and result['smoke'] and result['bf16_peak'] is None
  assert {'jax', 'jaxlib', 'torch', 'transformers'} <= set(result['versions'])
  configs, seq_lens = ('tiny_albert', 'tiny_albert_deep', 'tiny_bert'), (32,)
  rows = {(r['config'], r['seq_len'], r['attention']): r for r in result['rows']}
  assert len(rows) == len(result['rows']) == 6
  assert set(rows) == set(itertools.product(configs, seq_lens, ('xla', 'cudnn')))
  matmul = result['matmul']
  assert matmul['jax'] > 0 and matmul['torch'] > 0
  for (config, seq_len, attention), r in rows.items():
    if attention == 'cudnn':  # float32 on a CPU: cuDNN's kernel computes in bfloat16 only
      assert 'skipped' in r and "attention 'cudnn'" in r['skipped'] and 'ours' not in r
      continue
    assert 'skipped' not in r and r['batch'] == 4 and r['hf']['mode'] == 'eager'
    # HF's heads compute MLM logits at all positions: more work than the model FLOPs both are counted with.
    assert r['hf_flops_per_step_with_all_logits'] > r['flops_per_step'] > 0
    for side, rate in (('ours', matmul['jax']), ('hf', matmul['torch'])):
      f = r[side]
      assert f['step_s'] > 0
      assert f['tokens_per_s'] == pytest.approx(4 * seq_len / f['step_s'])
      assert f['examples_per_s'] == pytest.approx(4 / f['step_s'])
      assert f['mfu_peak'] is None and f['peak_memory_bytes'] is None  # no bf16 peak, no device memory on a CPU
      assert 0 < f['mfu_matmul'] < 1.5
      assert f['mfu_matmul'] == pytest.approx(r['flops_per_step'] / f['step_s'] / rate)
    assert r['ratio'] == pytest.approx(r['hf']['step_s'] / r['ours']['step_s'], rel=1e-12)
    shape = validate(bench.smoke_suite().configs[config])  # the model FLOPs of 4 sequences, 10 masked positions
    assert r['flops_per_step'] == training_flops_per_sequence(shape, seq_len, 10) * 4

  speedup = result['speedup']
  assert speedup['reference'] == 'tiny_bert' and speedup['seq_len'] == 32
  assert set(speedup['configs']) == set(configs)
  reference = rows['tiny_bert', 32, 'xla']
  assert speedup['configs']['tiny_bert']['ours'] == {'xla': 1.0} and speedup['configs']['tiny_bert']['hf'] == 1.0
  for config, entry in speedup['configs'].items():
    r = rows[config, 32, 'xla']
    assert entry['ours']['xla'] == pytest.approx(r['ours']['examples_per_s'] / reference['ours']['examples_per_s'])
    assert entry['hf'] == pytest.approx(r['hf']['examples_per_s'] / reference['hf']['examples_per_s'])
    assert entry['paper'] is None  # the paper's figures belong to the full-size configs

  judged = [t for t in result['targets'] if t['met'] is not None]
  assert len(judged) == 2  # tokens/s over HF's: tiny_albert_deep at 32, tiny_albert at 32
  assert all(t['threshold'] == 1.3 and t['met'] == (t['value'] >= 1.3) for t in judged)
  unjudged = [t for t in result['targets'] if t['met'] is None]
  assert len(unjudged) == 1 and 'MFU' in unjudged[0]['target'] and 'bf16 peak' in unjudged[0]['note']
  assert result['check_attention'] == 'skipped: no GPU'

  lines = text.splitlines()
  assert bench.HEADER in lines and bench.SPEEDUP_HEADER in lines
  for (config, seq_len, attention), r in rows.items():
    row = [line for line in lines if line.startswith(f'| {config} | {seq_len} | {attention} |')]
    assert len(row) == 1 and ('not measured' in row[0] if 'skipped' in r else f'**{r["ratio"]:.2f}x**' in row[0])
  assert '- skipped: no GPU' in lines
  assert text in stdout  # the tables are printed as well
  assert [line for line in stdout.splitlines() if line.startswith('[')] == \
      ['[1/3] tiny_albert', '[2/3] tiny_albert_deep', '[3/3] tiny_bert']


def test_a_run_killed_midway_keeps_the_configs_it_measured(tmp_path):
  """A lent GPU's minutes are few and a command over its limit is killed: the files are written after every config,
  so a run killed while measuring the second still has the first's rows, judged as far as they go."""
  run = subprocess.Popen([sys.executable, 'bench/accelerator.py', '--smoke', '--configs=tiny_albert,tiny_bert',
                          '--seq_lens=16', '--rounds=1', '--steps=1', '--torch_compile=off', f'--out={tmp_path}'],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'CUDA_VISIBLE_DEVICES': ''})
  try:
    for line in run.stdout:
      if line.startswith('[2/2]'):
        run.kill()
        break
  finally:
    run.kill()
    run.wait(timeout=60)
  assert run.returncode == -9  # killed, not finished
  result = json.loads((tmp_path / 'accelerator.json').read_text())
  assert [(r['config'], r['seq_len'], r['attention']) for r in result['rows']] == [('tiny_albert', 16, 'xla')]
  assert result['rows'][0]['ratio'] > 0 and result['speedup'] is None  # its reference, tiny_bert, never ran
  assert result['check_attention'] == 'not run: the run stopped after 1 of 2 configs'
  text = (tmp_path / 'accelerator.md').read_text()
  assert '| tiny_albert | 16 | xla |' in text and 'speedup column: not measured (needs tiny_bert at 16)' in text


def test_batch_search_finds_the_largest_that_fits_to_within_an_eighth(bench):
  for limit in (1, 3, 8, 37, 1000):
    tried = []
    found = bench.largest_batch(lambda n: tried.append(n) or n <= limit, start=8)
    assert limit - limit // 8 <= found <= limit, (limit, tried)
    assert len(tried) == len(set(tried)) <= 12
  assert bench.largest_batch(lambda n: False, start=8) is None


@pytest.fixture
def cudnn_as_xla(monkeypatch, bench):
  """cuDNN's attention replaced by JAX's XLA reference for the same call (it honours the row lengths as cuDNN does),
  times `scale`: 1 is a correct kernel, anything else a wrong one."""
  real, scale = jax.nn.dot_product_attention, {'value': 1.0}

  def reference(*args, implementation=None, **kwargs):
    assert implementation == 'cudnn'
    return real(*args, implementation='xla', **kwargs) * scale['value']

  monkeypatch.setattr(jax.nn, 'dot_product_attention', reference)
  monkeypatch.setattr(bench.model_lib, 'cudnn_attention_compiles', lambda head_dim, dtype: True)
  return scale


def test_attention_check_passes_a_correct_kernel_and_fails_a_wrong_one(bench, cudnn_as_xla):
  suite = bench.smoke_suite()
  mesh = bench.sharding.make_mesh(suite.configs['tiny_albert'].mesh, jax.devices()[:1])
  check = lambda: bench.check_attention(suite, ['tiny_albert', 'tiny_bert'], mesh, seq_lens=(32,))
  good = check()
  assert [(c['config'], c['seq_len']) for c in good] == [('tiny_albert', 32)]  # one config per head size
  good = good[0]
  model = bench.model_lib.Albert(validate(suite.configs['tiny_albert']))
  assert good['pass'] and len(good['gradients']) == len(jax.tree.leaves(bench.model_lib.abstract_params(model)))
  # Well within: what differs is the order of bfloat16 operations.
  assert max(x['of_allowed'] for x in (good['mlm_logits'], good['sop_logits'], *good['gradients'].values())) < 0.5

  cudnn_as_xla['value'] = 1.1  # attention outputs 10% too large: the attention's gradients are off by as much
  bad = check()[0]
  assert not bad['pass'] and "['attention']" in bad['worst_gradient']
  assert bad['gradients'][bad['worst_gradient']]['of_allowed'] > 1


def test_batch_named_per_config_and_length(bench):
  spec = bench.batch_spec('8, base:16, base@128:32')
  assert [bench.batch_for(spec, name, seq) for name, seq in (('base', 128), ('base', 512), ('xxlarge', 512))] == \
      [32, 16, 8]
  assert bench.batch_for(bench.batch_spec('base@512:4'), 'xxlarge', 512) is None  # not named: searched for
  with pytest.raises(Exception, match="'base:x': want N, CONFIG:N or CONFIG@SEQ:N"):
    bench.batch_spec('base:x')


@pytest.mark.parametrize('lease', ['speed', 'tuning', 'table3'])
def test_gpu_lease_smoke_writes_what_comes_back(lease, tmp_path):
  """bench/gpu_lease.sh, the one command a lent GPU runs, at tiny shapes on the CPU: it exits 0, and what it leaves
  under $OUT is what the device tool brings back (at most 8 files, no deeper than two folders)."""
  run = subprocess.run(['bash', 'bench/gpu_lease.sh', lease, '--smoke'], capture_output=True, text=True, cwd=ROOT,
                       timeout=600, env={**os.environ, 'OUT': str(tmp_path), 'PYTHON': sys.executable})
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  files = sorted(str(f.relative_to(tmp_path)) for f in tmp_path.rglob('*') if f.is_file())
  assert len(files) <= 8 and all(f.count('/') <= 2 for f in files), files
  assert f'gpu_lease: {lease} finished with status 0' in (tmp_path / 'lease.log').read_text()
  assert 'jax 0.' in (tmp_path / 'environment.txt').read_text()
  if lease == 'tuning':
    # (The third variant, Triton's GEMMs off, is a GPU's flag: the smoke leaves it out.)
    assert set(files) == {'environment.txt', 'lease.log', 'hlo.tgz', 'baseline/accelerator.json',
                          'rolled/accelerator.json'}
    results = {v: json.loads((tmp_path / v / 'accelerator.json').read_text()) for v in ('baseline', 'rolled')}
    assert results['rolled']['rows'][0]['scan_unroll'] == 1 and results['rolled']['scan_unroll'] == 1
    assert 'xla_dump_to' in results['baseline']['xla_flags']
    return
  if lease == 'table3':
    assert set(files) == {'environment.txt', 'lease.log', 'resume.json', 'resume_logs.tgz', 'table3/accelerator.json',
                          'table3/accelerator.md'}
    resume = json.loads((tmp_path / 'resume.json').read_text())
    assert all(resume['checks'].values()), resume['checks']
    assert 20 <= resume['stopped_at'] == resume['resumed_from'] < 60 and resume['loss']['compared'] == 60
    with tarfile.open(tmp_path / 'resume_logs.tgz') as archive:
      assert sorted(archive.getnames()) == ['./continued.log', './resumed.log', './stopped.log', './unbroken.log']
    # The speedup column: each config's sequences/s over the reference's (tiny_bert, measured first), both sides.
    result = json.loads((tmp_path / 'table3' / 'accelerator.json').read_text())
    rate = {r['config']: (r['ours']['examples_per_s'], r['hf']['examples_per_s']) for r in result['rows']}
    assert [r['config'] for r in result['rows']] == ['tiny_bert', 'tiny_albert_deep', 'tiny_albert']
    for name, entry in result['speedup']['configs'].items():
      assert entry['ours']['xla'] == pytest.approx(rate[name][0] / rate['tiny_bert'][0])
      assert entry['hf'] == pytest.approx(rate[name][1] / rate['tiny_bert'][1])
    return
  result = json.loads((tmp_path / 'accelerator.json').read_text())
  rows = {(r['config'], r['seq_len']): r for r in result['rows']}
  # The batches the lease names: tiny_albert_deep@32:4, and 2 for what it does not name.
  assert {k: r['batch'] for k, r in rows.items()} == {('tiny_albert_deep', 32): 4, ('tiny_albert_deep', 16): 2}
  for r in rows.values():  # --smoke profiles every row; on a CPU the host's XLA work is summed
    profile = r['profile']
    assert profile['events'] == 'host' and profile['steps'] == 3 and profile['top']
    assert profile['busy_s_per_step'] == pytest.approx(profile['busy_of_step'] * profile['step_s'])
    assert not any(t['name'].startswith('$') for t in profile['top'])  # Python frames left out
  traces = [f for f in files if f.startswith('profile_')]
  assert len(traces) == 2 and all(f.endswith('.json.gz') for f in traces)


SHARED_DATA = ROOT.parent / 'shared' / 'data'


@pytest.mark.skipif(not (SHARED_DATA / 'corpora').is_dir(), reason=f'the shared data are not at {SHARED_DATA}')
def test_gpu_pretrain_lease_smoke_trains_fine_tunes_both_arms_and_scores_blimp(builtin_tokenizer, tmp_path):
  """bench/gpu_lease.sh pack, then pretrain, at tiny shapes on the CPU: the packed data fit what a call carries,
  and the lease pretrains on the shared Wikipedia and books, fine-tunes its checkpoint and random weights on real
  SST-2, and scores the packed BLiMP paradigms whole, all inside results.tgz; the traced steps in profile.tgz."""
  packed, out = tmp_path / 'lease', tmp_path / 'out'
  env = {**os.environ, 'LEASE_DATA': str(packed), 'OUT': str(out), 'PYTHON': sys.executable,
         'VOCAB': builtin_tokenizer.path}
  run = subprocess.run(['bash', 'bench/gpu_lease.sh', 'pack', '--smoke'], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, env=env)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert sum(f.stat().st_size for f in packed.rglob('*') if f.is_file()) < 64 * 2 ** 20
  paradigms = sorted(f.name[:-len('.bz2')] for f in (packed / 'blimp').glob('*.jsonl.bz2'))
  run = subprocess.run(['bash', 'bench/gpu_lease.sh', 'pretrain', '--smoke'], capture_output=True, text=True,
                       cwd=ROOT, timeout=600, env=env)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert sorted(f.name for f in out.iterdir()) == ['environment.txt', 'lease.log', 'profile.tgz', 'results.tgz']
  with tarfile.open(out / 'profile.tgz') as archive:  # steps 4-5 traced, host 0's file in XProf's layout
    traced = archive.getnames()
  assert any(name.startswith('profiles/plugins/profile/steps_4-5/') and name.endswith('.xplane.pb') for name in traced)
  with tarfile.open(out / 'results.tgz') as archive:
    files = {name.split('albert_jax_lease_runs/')[-1]: archive.extractfile(name).read()
             for name in archive.getnames() if name.endswith('.json')}
  pretrained = json.loads(files['pretrained/result.json'])
  assert pretrained['step'] == 6 and pretrained['eval_blimp_count'] == 2 * (len(paradigms) - 1)
  for arm in ('none', 'pretrained'):
    result = json.loads(files[f'ft_{arm}_sst2_seed0/result.json'])
    assert result['eval_accuracy_count'] == 872  # SST-2's dev set, whole
    assert json.loads(files[f'ft_{arm}_sst2_seed0/config.json'])['init'].endswith(
        'none' if arm == 'none' else 'albert_jax_lease_runs/pretrained')
  blimp = json.loads(files['blimp_pretrained.json'])
  shared_pairs = sum(len((SHARED_DATA / 'blimp' / name).read_text().splitlines())
                     for name in paradigms if name != 'published_results.jsonl')
  assert blimp['pairs'] == shared_pairs
