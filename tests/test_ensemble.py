"""albert_jax/ensemble.py: the members' outputs combined as the paper's ensembles are, checked against sums done by
hand; the best members chosen by dev score; a member over other features refused in one line."""
import io
import json
import statistics

import numpy as np
import pytest

from albert_jax import ensemble, finetune
from conftest import load_config


def task_of(name, **task):
  config = load_config(f'configs/finetune/{name}.py')
  config.task.update(task)
  return finetune.make_task(config)


def test_classification_averages_probabilities_not_logits_or_votes():
  """Three members, two examples. First: A (4, 0), B and C (0, 1): averaged probabilities pick class 0 (0.982 +
  0.269 + 0.269 = 1.520 of 3, against 1.480), a majority vote class 1. Second: A (6, 0), B and C (0, 2.5): averaged
  logits pick class 0 (2.0 against 1.67), averaged probabilities class 1 (1.149 against 1.851)."""
  task = task_of('sst2')
  members = [{'logits': np.array([[4.0, 0.0], [6.0, 0.0]])}, {'logits': np.array([[0.0, 1.0], [0.0, 2.5]])},
             {'logits': np.array([[0.0, 1.0], [0.0, 2.5]])}]
  combined = ensemble.combine(task, members)
  sigmoid = lambda d: 1 / (1 + np.exp(-d))
  by_hand = np.array([[sigmoid(4) + 2 * sigmoid(-1), 2 * sigmoid(1) + sigmoid(-4)],
                      [sigmoid(6) + 2 * sigmoid(-2.5), 2 * sigmoid(2.5) + sigmoid(-6)]]) / 3
  np.testing.assert_allclose(np.exp(combined['logits']), by_hand, rtol=1e-12)
  assert task.predictions(combined).tolist() == [0, 1]  # averaged logits would say [0, 0]
  assert np.mean([m['logits'] for m in members], axis=0).argmax(-1).tolist() == [0, 0]
  votes = np.array([m['logits'].argmax(-1) for m in members])
  assert (votes.mean(0) > 0.5).astype(int).tolist() == [1, 1]


def test_race_squad_and_regression_average_their_scores():
  logits = [np.array([[1.0, 2.0, 0.0, 0.5]]), np.array([[3.0, 0.0, 0.0, 0.0]])]
  np.testing.assert_allclose(ensemble.combine(task_of('race'), [{'logits': x} for x in logits])['logits'],
                             [[2.0, 1.0, 0.0, 0.25]])
  np.testing.assert_allclose(ensemble.combine(task_of('stsb'), [{'logits': np.array([[1.5]])},
                                                                 {'logits': np.array([[4.0]])}])['logits'], [[2.75]])
  v1 = task_of('squad_v1')
  members = [{'start_logits': np.array([[0.0, 2.0]]), 'end_logits': np.array([[1.0, 1.0]])},
             {'start_logits': np.array([[4.0, 0.0]]), 'end_logits': np.array([[3.0, -1.0]])}]
  combined = ensemble.combine(v1, members)
  np.testing.assert_allclose(combined['start_logits'], [[2.0, 1.0]])
  np.testing.assert_allclose(combined['end_logits'], [[2.0, 0.0]])


def test_squad_v2_pools_the_members_proposals():
  """Member A proposes spans (1, 2) score -1 and (3, 3) score -4; B proposes (1, 2) -3 and (5, 6) -2. Pooled: (1, 2)
  (-1 + -3) / 2 = -2; (3, 3) (-4 + B's lowest -3) / 2 = -3.5; (5, 6) (A's lowest -4 + -2) / 2 = -3. No-answer
  scores averaged."""
  v2 = task_of('squad_v2', start_n_top=2, end_n_top=1)
  a = {'start_top_log_probs': np.array([[-0.5, -2.0]]), 'start_top_index': np.array([[1, 3]]),
       'end_top_log_probs': np.array([[-0.5, -2.0]]), 'end_top_index': np.array([[2, 3]]),
       'cls_logits': np.array([0.5])}
  b = {'start_top_log_probs': np.array([[-1.0, -1.5]]), 'start_top_index': np.array([[1, 5]]),
       'end_top_log_probs': np.array([[-2.0, -0.5]]), 'end_top_index': np.array([[2, 6]]),
       'cls_logits': np.array([-1.5])}
  combined = ensemble.combine(v2, [a, b])
  assert sorted(combined['candidates'][0]) == sorted([(-2.0, 1, 2), (-3.5, 3, 3), (-3.0, 5, 6)])
  np.testing.assert_allclose(combined['cls_logits'], [-0.5])
  assert v2.candidates(combined, 0) == combined['candidates'][0]


def fake_member(folder, score, logits, digest='d', task='sst2'):
  """A finished fine-tuning workdir as finetune.py leaves one: its config, result and dev outputs."""
  (folder / 'predictions').mkdir(parents=True)
  (folder / 'config.json').write_text(json.dumps({'task': {'name': task, 'data': 'x', 'max_seq_length': 8}}))
  (folder / 'result.json').write_text(json.dumps({'score': score}))
  buffer = io.BytesIO()
  np.savez(buffer, logits=np.array(logits), features_digest=np.array(digest))
  (folder / 'predictions' / 'outputs-dev.npz').write_bytes(buffer.getvalue())


def test_members_are_chosen_by_dev_score_and_mismatches_refused_in_one_line(tmp_path, capsys):
  for i, score in enumerate((0.7, 0.9, 0.8)):
    fake_member(tmp_path / f'seed{i}', score, [[0.0, 1.0]])
  fake_member(tmp_path / 'other', 0.5, [[0.0]], task='race')
  assert sorted(ensemble.members(f'{tmp_path}/seed*')) == [str(tmp_path / f'seed{i}') for i in range(3)]
  assert ensemble.main([f'--members={tmp_path}/seed*,{tmp_path}/other', '--workdir', str(tmp_path / 'e')]) == 2
  assert 'the members are not of one task and data' in capsys.readouterr().err
  assert ensemble.main([f'--members={tmp_path}/seed*', '--top_k=4', '--workdir', str(tmp_path / 'e')]) == 2
  assert '--top_k 4: choose 1 to 3' in capsys.readouterr().err
  assert ensemble.main(['--members=/nowhere/x*', '--workdir', str(tmp_path / 'e')]) == 2
  assert 'names no finished fine-tuning run' in capsys.readouterr().err
  with pytest.raises(Exception):  # the fake members have no task data to score on: only the choice is checked here
    ensemble.ensemble(ensemble.members(f'{tmp_path}/seed*'), 2, str(tmp_path / 'e'))
  ranked = sorted((ensemble.read_member(m) for m in ensemble.members(f'{tmp_path}/seed*')),
                  key=lambda r: -r['result']['score'])
  assert [r['workdir'].rsplit('/', 1)[1] for r in ranked[:2]] == ['seed1', 'seed2']


def test_a_builtin_ensemble_of_two_seeds_scores_its_averaged_probabilities(tiny_config, builtin_tokenizer,
                                                                             tmp_path, capsys):
  """Two fine-tuning runs of the built-in task (random weights, two seeds, a few steps) combined: the ensemble's
  dev predictions are the argmax of their averaged probabilities computed here from their kept outputs, and its
  accuracy is that of those predictions against the dev labels."""
  import jax
  from test_finetune import builtin_config
  runs = []
  for seed in (0, 1):
    config = builtin_config(tiny_config, num_steps=4, checkpoint_every=2, seed=seed)
    runs.append((finetune.finetune_and_evaluate(config, tmp_path / f'seed{seed}', jax.devices()[:1]),
                 tmp_path / f'seed{seed}'))
  assert ensemble.main([f'--members={tmp_path}/seed*', '--top_k=2', f'--workdir={tmp_path}/ensemble']) == 0
  best = sorted(runs, key=lambda r: -r[0]['score'])[:2]
  outputs = [np.load(folder / 'predictions' / 'outputs-dev.npz')['logits'] for _, folder in best]
  probabilities = np.mean([np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(
      -1, keepdims=True) for x in outputs], axis=0)
  predicted = (tmp_path / 'ensemble' / 'predictions' / 'dev.tsv').read_text().splitlines()[1:]
  task = finetune.make_task(builtin_config(tiny_config))
  assert [line.split('\t')[1] for line in predicted] == [task.labels[i] for i in probabilities.argmax(-1)]
  result = json.loads((tmp_path / 'ensemble' / 'result.json').read_text())
  gold = np.array([task.labels.index(e.label) for e in task.splits()['dev'][0]])
  assert result['eval_accuracy'] == pytest.approx(np.mean(probabilities.argmax(-1) == gold))
  assert result['best_member_score'] == best[0][0]['score']
  # The gain over the best member, paired on the same examples (statistics' stdev: n - 1 in the denominator).
  gain = [int(e == g) - int(b == g) for e, b, g in zip(probabilities.argmax(-1), outputs[0].argmax(-1), gold)]
  assert result['eval_accuracy_gain'] == pytest.approx(sum(gain) / len(gain))
  assert result['eval_accuracy_gain_se'] == pytest.approx(statistics.stdev(gain) / len(gain) ** 0.5)
  out = capsys.readouterr().out
  assert f'ensemble of the best 2 (eval_accuracy, dev): {result["score"]:.4f}, the best member' in out
  assert f'(paired standard error {result["eval_accuracy_gain_se"]:.4f})' in out
