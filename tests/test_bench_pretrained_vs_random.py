"""bench/pretrained_vs_random.py, what pretraining buys on real tasks: its statistics against independent ones
(the analytic paired standard error for the bootstrap, F1 counted; McNemar's test is in test_stats.py), and a
small run end to end on slices of the real SST-2 files: both inits fine-tuned, seed 0 shared by the grid and the
seeds, the same shape for random weights, a finished run never run again. And bench/finetune_peer.py, HF's
AlbertForSequenceClassification on the same checkpoint and batches, end to end on the same slices. And
bench/linear_probe.py: its logistic regression against Newton's method, its features against unpadded inputs."""
import json
import math
import re

import jax
import numpy as np
import pytest
import scipy.stats

from albert_jax import interop, train
from conftest import ROOT, import_bench
from test_train import small

GLUE = ROOT.parent / 'shared' / 'data' / 'glue'


@pytest.fixture(scope='module')
def bench():
  return import_bench('pretrained_vs_random')


@pytest.fixture(scope='module')
def pretrained_and_glue(tiny_config, builtin_tokenizer, tmp_path_factory):
  """A tiny pretraining workdir (4 steps on the built-in corpus) and a GLUE folder with the first 96 training and
  40 dev examples of the real SST-2 files."""
  if not (GLUE / 'SST-2').is_dir():
    pytest.skip(f'the shared GLUE files are not at {GLUE}')
  root = tmp_path_factory.mktemp('bench_downstream')
  train.train_and_evaluate(small(tiny_config, num_steps=4, eval_every=4, checkpoint_every=4), root / 'pretrained',
                           devices=jax.devices()[:1])
  for split, rows in (('train', 97), ('dev', 41)):  # the header and the first rows
    lines = (GLUE / 'SST-2' / f'{split}.tsv').read_text().splitlines()[:rows]
    (root / 'glue' / 'SST-2').mkdir(parents=True, exist_ok=True)
    (root / 'glue' / 'SST-2' / f'{split}.tsv').write_text('\n'.join(lines) + '\n')
  return root / 'pretrained', root / 'glue'


def test_the_paired_bootstrap_agrees_with_the_analytic_paired_standard_error(bench):
  rng = np.random.default_rng(1)
  gold = rng.choice(['0', '1'], 872)
  flip = lambda share: np.where(rng.random(872) < share, np.where(gold == '1', '0', '1'), gold)
  pretrained, random = flip(0.15), flip(0.25)
  out = bench.paired('accuracy', [pretrained], [random], gold)
  d = (pretrained == gold).astype(float) - (random == gold)
  assert out['difference'] == pytest.approx(d.mean())
  assert out['se'] == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)), rel=0.05)
  assert out['interval'][0] < out['difference'] < out['interval'][1] and out['z'] > 3
  # F1 of the positive class '1', counted here: 2 TP / (2 TP + FP + FN).
  tp, fp = np.sum((pretrained == '1') & (gold == '1')), np.sum((pretrained == '1') & (gold == '0'))
  fn = np.sum((pretrained == '0') & (gold == '1'))
  assert bench.metric('f1', pretrained, gold) == pytest.approx(2 * tp / (2 * tp + fp + fn))


def test_the_bench_fine_tunes_both_inits_and_compares_them_on_the_same_dev_examples(bench, pretrained_and_glue,
                                                                                    tmp_path):
  pretrained, glue_folder = pretrained_and_glue
  argv = [f'--init={pretrained}', f'--glue={glue_folder}', f'--workdir={tmp_path / "bench"}', '--tasks=sst2',
          '--learning_rates=1e-3', '--sst2_steps=8', '--seeds=2', '--train_examples=']
  out = bench.main(argv)
  runs = sorted(p.relative_to(tmp_path / 'bench') for p in (tmp_path / 'bench').glob('sst2/*/*'))
  assert [str(r) for r in runs] == ['sst2/pretrained/lr=0.001,steps=8,seed=0', 'sst2/pretrained/lr=0.001,steps=8,seed=1',
                                    'sst2/random/lr=0.001,steps=8,seed=0', 'sst2/random/lr=0.001,steps=8,seed=1']
  logs = {init: (tmp_path / 'bench' / 'sst2' / init / 'lr=0.001,steps=8,seed=1' / 'finetune.log').read_text()
          for init in ('pretrained', 'random')}
  assert f'starting from {pretrained}' in logs['pretrained'] and 'random weights' in logs['random']
  counts = {init: re.search(r'([\d,]+) parameters', log).group(1) for init, log in logs.items()}
  assert counts['pretrained'] == counts['random']  # random weights of the checkpoint's shape
  assert 'train 96, dev 40 examples' in logs['random']
  # The paired difference is the difference of the two inits' seed means, each a run's own dev accuracy.
  for init in ('pretrained', 'random'):
    results = [json.loads((tmp_path / 'bench' / 'sst2' / init / f'lr=0.001,steps=8,seed={s}' / 'result.json')
                          .read_text())['eval_accuracy'] for s in (0, 1)]
    assert out[f'sst2/{init}/accuracy']['scores'] == pytest.approx(results)
  assert out['sst2/paired/accuracy']['difference'] == pytest.approx(
      out['sst2/pretrained/accuracy']['mean'] - out['sst2/random/accuracy']['mean'])
  report = (tmp_path / 'bench' / 'report.md').read_text()
  assert 'Pretrained minus random, accuracy' in report
  # The majority floor: the most frequent training label, counted here from the files, scored on dev.
  labels = {split: [line.split('\t')[1] for line in (glue_folder / 'SST-2' / f'{split}.tsv').read_text()
                    .splitlines()[1:]] for split in ('train', 'dev')}
  label = max(set(labels['train']), key=labels['train'].count)
  assert out['sst2/majority'] == {'label': label, 'accuracy': pytest.approx(labels['dev'].count(label) / 40)}
  assert f"Always the majority training label ('{label}'): accuracy {labels['dev'].count(label) / 40:.4f}." in report
  # Dev examples split by their rarest piece's count in training: 'never' counts those with a piece no training
  # sentence has, computed here as a set difference; the four buckets hold all 40.
  buckets = dict(re.findall(r'\| (never|1-4|5-19|20\+) \| (\d+) \|', report))
  tokenizer = bench.Bench(bench.argparse.Namespace(init=pretrained, workdir=tmp_path)).tokenizer
  read = lambda split: [line.split('\t')[0] for line in (glue_folder / 'SST-2' / f'{split}.tsv').read_text()
                        .splitlines()[1:]]
  seen = {p for ids in tokenizer.encode(read('train')) for p in ids}
  assert int(buckets['never']) == sum(bool(set(ids) - seen) for ids in tokenizer.encode(read('dev')))
  assert sum(map(int, buckets.values())) == 40
  # Run again: every run is finished, none is repeated, the same figures come out.
  before = {p: p.stat().st_mtime for p in (tmp_path / 'bench').glob('sst2/*/*/result.json')}
  assert bench.main(argv)['sst2/paired/accuracy'] == out['sst2/paired/accuracy']
  assert {p: p.stat().st_mtime for p in (tmp_path / 'bench').glob('sst2/*/*/result.json')} == before
  # Settings an earlier grid chose skip the grid: with them, a new learning rate adds no run.
  settled = bench.main([*argv[:4], '--learning_rates=1e-4', '--sst2_settings=pretrained:1e-3:8,random:0.001:8',
                        *argv[5:]])
  assert settled['sst2/paired/accuracy'] == out['sst2/paired/accuracy'] and 'sst2/random/grid' not in settled
  assert sorted(p.relative_to(tmp_path / 'bench') for p in (tmp_path / 'bench').glob('sst2/*/*')) == runs
  with pytest.raises(SystemExit) as refused:
    bench.main([*argv, '--sst2_settings=pretrained:1e-3'])
  assert refused.value.code == 2


def test_the_peer_fine_tunes_hf_on_the_same_checkpoint_and_batches(pretrained_and_glue, tmp_path, capsys):
  pretrained, glue_folder = pretrained_and_glue
  out = import_bench('finetune_peer').main([f'--init={pretrained}', f'--glue={glue_folder}', '--steps=20',
                                            '--learning_rate=1e-3', '--seeds=2', '--group_by_length', '--compare_grouping',
                                            f'--workdir={tmp_path}'])
  row = out['rows'][0]
  # Ours is the fine-tuning run a user gets: its accuracy is that of its predictions against the dev file's labels.
  gold = [line.split('\t')[1] for line in (glue_folder / 'SST-2' / 'dev.tsv').read_text().splitlines()[1:]]
  # Ours grouped by length (task.group_by_length), and HF on the same batches.
  ours = (tmp_path / 'sst2,lr=0.001,steps=20,buckets=4,grouped,seed=0' / 'predictions' / 'dev.tsv').read_text(
      ).splitlines()[1:]
  assert row['ours']['accuracy'] == pytest.approx(np.mean([p.split('\t')[1] == g for p, g in zip(ours, gold)]))
  for arm in ('hf_max', 'hf_longest'):
    assert row['ours']['best_step'] in {5, 10, 15, 20} and row[arm]['best_step'] in {5, 10, 15, 20}
    assert 0 <= row[arm]['accuracy'] <= 1 and 0 < row[f'{arm}_mcnemar_p'] <= 1 and row[arm]['examples_per_sec'] > 0
  # The work of each arm: HF padded to the maximum computes 64 positions an example; padded to each batch's longest
  # it computes fewer, and ours, padded to the fixed length that holds the longest, between the two.
  positions = {side: row[side]['positions_per_example'] for side in ('ours', 'hf_max', 'hf_longest')}
  assert positions['hf_max'] == 64 and positions['hf_longest'] <= positions['ours'] < 64
  printed = capsys.readouterr().out
  assert '| seed | arm | dev accuracy (step) | McNemar p vs ours | examples/s | padded positions per example' in printed
  # Over seeds: each arm's mean and sample sd of its rows' accuracies.
  ours_seeds = [r['ours']['accuracy'] for r in out['rows']]
  assert f'ours: dev accuracy {np.mean(ours_seeds):.4f} ± {np.std(ours_seeds, ddof=1):.4f}' in printed
  # Paired by seed: the mean of each seed's difference, with a standard error over seeds and examples.
  for arm in ('hf_max', 'hf_longest'):
    difference = np.mean([r['ours']['accuracy'] - r[arm]['accuracy'] for r in out['rows']])
    assert f'ours minus {arm}, paired by seed: dev accuracy {difference:+.4f}, SE ' in printed
  # --compare_grouping: ours in random batches, seed by seed, and grouped minus random as the runs' own results say.
  accuracy = lambda grouped, seed: json.loads((tmp_path / f'sst2,lr=0.001,steps=20,buckets=4{grouped},seed={seed}' /
                                               'result.json').read_text())['eval_accuracy']
  difference = np.mean([accuracy(',grouped', seed) - accuracy('', seed) for seed in (0, 1)])
  assert out['grouped_minus_random']['difference'] == pytest.approx(difference, abs=1e-9)
  assert f'ours grouped by length minus ours in random batches, paired by seed: dev accuracy {difference:+.4f}' in printed


@pytest.fixture(scope='module')
def probe():
  return import_bench('linear_probe')


def test_the_probes_logistic_regression_is_newtons_solution_dense_or_sparse(probe):
  """L-BFGS's fit against an independent solver: Newton's method on the same penalized log loss."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(300, 5)) * [1, 2, 0.5, 1, 3]
  y = (x @ [1.0, -0.5, 2.0, 0.0, 0.3] + rng.normal(size=300) > 0).astype(float)
  penalty = 1e-2
  w = np.zeros(6)
  design = np.hstack([x, np.ones((300, 1))])
  for _ in range(30):  # Newton: the bias unpenalized, as the probe's
    p = 1 / (1 + np.exp(-design @ w))
    grad = design.T @ (p - y) / 300 + penalty * np.append(w[:-1], 0)
    hess = design.T @ (design * (p * (1 - p))[:, None]) / 300 + penalty * np.diag([1.0] * 5 + [0.0])
    w -= np.linalg.solve(hess, grad)
  assert probe.fit(x, y, penalty) == pytest.approx(w, abs=1e-4)
  assert probe.fit(scipy.sparse.csr_matrix(x), y, penalty) == pytest.approx(w, abs=1e-4)


def test_the_probe_reads_real_tokens_only_and_scores_every_init_on_real_sst2(probe, pretrained_and_glue, capsys):
  pretrained, glue = pretrained_and_glue
  loaded, params, _ = interop.read(str(pretrained))
  model = probe.model_lib.Albert(probe.model_lib.ModelConfig.from_config(loaded.model))
  # Two sentences padded to 16: their features equal those of each one alone at its own length (no padding).
  ids = np.array([[2, 40, 41, 42, 3] + [0] * 11, [2, 50, 51, 52, 53, 54, 55, 3] + [0] * 8], np.int32)
  mask = (ids > 0).astype(np.int32)
  batch = {'input_ids': ids, 'segment_ids': np.zeros_like(ids), 'input_mask': mask}
  padded = probe.encoder_features(model, params, batch)
  for i, length in enumerate(mask.sum(1)):
    alone = model.apply({'params': params}, ids[i:i + 1, :length], masked_lm_positions=np.zeros((1, 1), np.int32))
    expected = np.concatenate([alone.pooled_output[0], alone.sequence_output[0].mean(0)])
    assert padded[i] == pytest.approx(np.asarray(expected), abs=1e-5)
  bag = probe.bag_of_pieces({'input_ids': np.array([[2, 7, 7, 3, 0]]), 'input_mask': np.array([[1, 1, 1, 1, 0]])}, 10)
  assert bag.toarray().tolist() == [[0, 0, 1, 1, 0, 0, 0, 1, 0, 0]]  # presence: piece 7 twice counts once

  results = probe.main([f'--init={pretrained}', f'--glue={glue}', '--random_seeds=2'])
  assert len(results['random']) == 2  # two draws of random weights
  for result in (results['lexical'], results['pretrained'], *results['random']):
    assert result['penalty'] in probe.PENALTIES
    assert round(result['accuracy'] * 40) == pytest.approx(result['accuracy'] * 40, abs=1e-9)  # of 40 dev examples
  assert 'majority rate on dev' in capsys.readouterr().out
