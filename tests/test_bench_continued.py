"""bench/continued_pretraining.py end to end on a tiny checkpoint and a Wikipedia slice it never saw: both runs made
by the train CLI with the same held-out documents and schedule, the catch-up step found as the curves say, BLiMP's
difference paired pair by pair, and a finished bench read back rather than run again."""
import json

import jax
import numpy as np
import pytest

from albert_jax import train
from conftest import import_bench
from test_journeys import SHARED_DATA, wikipedia_documents
from test_train import read_scalars, small

pytestmark = pytest.mark.skipif(not (SHARED_DATA / 'blimp').is_dir(), reason=f'needs BLiMP at {SHARED_DATA}')


def test_continued_against_scratch_on_a_new_domain(tiny_config, builtin_tokenizer, tmp_path):
  source = tmp_path / 'source'
  train.train_and_evaluate(small(tiny_config, num_steps=6, eval_every=6, checkpoint_every=6), source,
                           devices=jax.devices()[:1])
  domain = tmp_path / 'domain'
  domain.mkdir()
  for i, article in enumerate(wikipedia_documents(40)):
    (domain / f'{i % 4}.txt').open('a').write(article.replace('. ', '.\n') + '\n\n')
  blimp = tmp_path / 'blimp'
  blimp.mkdir()
  for name in ('anaphor_gender_agreement.jsonl', 'causative.jsonl'):
    (blimp / name).write_text((SHARED_DATA / 'blimp' / name).read_text())
  bench = import_bench('continued_pretraining')
  argv = [f'--init={source}', f'--workdir={tmp_path / "bench"}', '--config=configs/tiny.py',
          f'--source=text:{domain}/*.txt', '--steps=4', '--eval_every=2', f'--blimp={blimp}', '--blimp_pairs=6',
          f'--plot={tmp_path / "curves.png"}', '--', '--config.data.max_seq_length=64',
          '--config.model.max_position_embeddings=64', '--config.train.batch_size=8',
          '--config.train.eval_batches=1', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}']
  report = bench.main(argv)

  arms = {arm: tmp_path / 'bench' / arm for arm in ('continued', 'scratch')}
  scalars = {arm: read_scalars(workdir) for arm, workdir in arms.items()}
  for arm, series in scalars.items():  # the curves are the runs' own held-out figures, at steps 0, 2 and 4
    assert [tuple(p) for p in report['curves'][arm]] == [(s, pytest.approx(v)) for s, v in sorted(
        series['eval_mlm_accuracy'].items())]
    assert sorted(series['eval_mlm_accuracy']) == [0, 2, 4]
  results = {arm: json.loads((workdir / 'result.json').read_text()) for arm, workdir in arms.items()}
  assert results['continued']['eval_mlm_count'] == results['scratch']['eval_mlm_count'] > 0  # the same held-out set
  continued_config = json.loads((arms['continued'] / 'config.json').read_text())
  assert continued_config['init'] == str(source) and continued_config['data']['eval_fraction'] == 0.1
  assert json.loads((arms['scratch'] / 'config.json').read_text())['init'] in (None, 'none', '')
  start = scalars['continued']['eval_mlm_accuracy'][0]
  assert start > 0  # the checkpoint predicts some pieces of the new domain; random weights almost none
  caught = [s for s, v in sorted(scalars['scratch']['eval_mlm_accuracy'].items()) if v >= start]
  assert report['scratch_reaches_the_continued_start_at'] == (caught[0] if caught else None)
  assert (tmp_path / 'curves.png').read_bytes()[:4] == b'\x89PNG'

  # What it kept of the checkpoint's own data: the same held-out documents (the built-in corpus, the source's
  # held-out share), before as the source's own last evaluation recorded them, after as albert_jax.evaluate found.
  own = report['on_the_checkpoints_data']
  recorded = read_scalars(source)
  assert own['before']['eval_mlm_accuracy'] == pytest.approx(recorded['eval_mlm_accuracy'][6])
  assert own['before']['eval_mlm_count'] == own['after']['eval_mlm_count'] == recorded['eval_mlm_count'][6]
  evaluated = json.loads((arms['continued'] / 'eval-sop.json').read_text())
  assert evaluated['step'] == 4 and own['after']['eval_mlm_accuracy'] == evaluated['eval_mlm_accuracy']

  # BLiMP: the continued run against the checkpoint it began from, pair by pair (6 of each of two paradigms).
  before, after = (json.loads((tmp_path / 'bench' / f'blimp-{name}.json').read_text()) for name in ('before',
                                                                                                   'continued'))
  outcome = lambda result: np.array([b == '1' for u in sorted(result['correct']) for b in result['correct'][u]])
  d = outcome(after).astype(float) - outcome(before)
  kept = report['blimp']['continued_minus_before']['overall']
  assert kept['pairs'] == len(d) == 12
  assert kept['difference'] == pytest.approx(d.mean())
  assert kept['paired_se'] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)))

  # Run again: everything is read back, nothing trained or scored anew.
  stamps = {p: p.stat().st_mtime for p in (tmp_path / 'bench').glob('*.json') if p.name != 'report.json'}
  assert bench.main(argv)['curves'] == report['curves']
  assert {p: p.stat().st_mtime for p in stamps} == stamps
