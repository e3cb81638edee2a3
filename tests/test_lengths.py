"""Fine-tuning batches padded to a few fixed lengths: the lengths chosen against an exhaustive search, the training
batches a function of the step (the same rows as padding to the maximum, or grouped by length), and fine-tuning
and evaluation with them equal to padding every batch to max_seq_length."""
import itertools
import json

import jax
import numpy as np
import pytest

from albert_jax import finetune
from albert_jax.downstream import lengths
from test_finetune import builtin_config
from test_squad import squad_file
from test_train import read_scalars


def padded_total(row_lengths, fixed):
  return sum(lengths.fitting(int(n), fixed) for n in row_lengths)


@pytest.mark.parametrize('seed', range(6))
def test_the_chosen_lengths_leave_the_least_padding_of_any_choice(seed):
  rng = np.random.default_rng(seed)
  max_length = int(rng.choice([40, 64, 70]))
  row_lengths = np.minimum(rng.geometric(1 / rng.integers(5, 30), 300) + 3, max_length)
  for count in (1, 2, 3):
    fixed = lengths.choose(row_lengths, count, max_length)
    assert len(fixed) <= count and all(f % lengths.MULTIPLE == 0 or f == max_length for f in fixed)
    assert fixed[-1] >= row_lengths.max() and fixed[-1] <= max_length
    # Exhaustively: every set of `count` candidates whose largest holds the longest row.
    candidates = sorted({min(c, max_length) for c in range(8, max_length + 8, 8)})
    best = min(padded_total(row_lengths, chosen) for chosen in itertools.combinations(candidates, count)
               if chosen[-1] >= row_lengths.max())
    assert padded_total(row_lengths, fixed) == best
  assert lengths.choose(row_lengths, 0, max_length) == (max_length,)


def test_training_batches_are_the_seeded_permutations_end_to_end_or_grouped_by_length():
  rng = np.random.default_rng(0)
  row_lengths = rng.integers(4, 64, 200)
  batches = lambda group, host=0, hosts=1: lengths.TrainingBatches(row_lengths, 32, 3, group, 4, 64, 60, host, hosts)
  plain = batches(False)
  # Without grouping: epochs of permutations of every row laid end to end, as padding to the maximum always was.
  end_to_end = np.concatenate([np.random.default_rng([3, e]).permutation(200) for e in range(10)])
  for step in range(60):
    rows, length = plain(step)
    np.testing.assert_array_equal(rows, end_to_end[step * 32:(step + 1) * 32])
    assert length == lengths.fitting(row_lengths[rows].max(), plain.fixed)
  # The fixed lengths lower the padding of what the steps pad: each batch's longest row (and the longest of all).
  longest = [row_lengths.max()] + [row_lengths[end_to_end[s * 32:(s + 1) * 32]].max() for s in range(60)]
  assert plain.fixed == lengths.choose(np.array(longest), 4, 64)
  grouped = batches(True)
  epoch = [grouped(step)[0] for step in range(6)]  # 200 // 32 batches an epoch
  assert len(np.unique(np.concatenate(epoch))) == 6 * 32  # each row at most once an epoch
  # Grouping pads far less than batches of the permutation's order.
  padded = lambda run: sum(run(s)[1] for s in range(60))
  assert padded(grouped) < 0.8 * padded(plain)
  # A function of the step alone (resuming needs no data state), the same for every host, each taking its slice.
  again = batches(True)
  for step in (17, 3, 40):
    rows, length = again(step)
    np.testing.assert_array_equal(rows, grouped(step)[0])
    hosts = [batches(True, host, 4)(step) for host in range(4)]
    np.testing.assert_array_equal(np.concatenate([r for r, _ in hosts]), rows)
    assert {n for _, n in hosts} == {length}


def test_outputs_of_one_value_per_position_are_padded_back_out_of_any_argmax():
  outputs = {'start_logits': np.array([[0.1, -3.0]], np.float32), 'logits': np.ones((1, 2), np.float32),
             'top_index': np.array([[1, 0]], np.int32)}
  out = lengths.pad_outputs(outputs, 2, 5)
  assert out['start_logits'].shape == (1, 5) and out['start_logits'][0].argmax() == 0
  assert np.all(out['start_logits'][0, 2:] < -1e30)
  assert out['top_index'].shape == (1, 2)  # integers are indices, not per-position values
  batch = {'input_ids': np.zeros((2, 4, 64)), 'label_ids': np.zeros(2), 'p_mask': np.zeros((2, 64))}
  assert {k: v.shape for k, v in lengths.cut(batch, 24, 64).items()} == {
      'input_ids': (2, 4, 24), 'label_ids': (2,), 'p_mask': (2, 24)}


def run(config, workdir):
  result = finetune.finetune_and_evaluate(config, workdir, jax.devices()[:1])
  return result, read_scalars(workdir), (workdir / 'predictions' / 'dev.tsv').read_text()


def test_fine_tuning_on_fixed_lengths_equals_padding_to_the_maximum(tiny_config, builtin_tokenizer, tmp_path):
  """Without dropout (whose masks are drawn per position), the built-in task's losses step by step, the dev
  scores and every dev prediction are those of padding every batch to max_seq_length."""
  def config(buckets):
    c = builtin_config(tiny_config, num_steps=8, checkpoint_every=4)
    c.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    c.task.update(classifier_dropout=0.0, length_buckets=buckets)
    return c
  padded, padded_scalars, padded_dev = run(config(0), tmp_path / 'max')
  fixed, fixed_scalars, fixed_dev = run(config(4), tmp_path / 'fixed')
  steps = range(1, 9)
  np.testing.assert_allclose([fixed_scalars['loss'][s] for s in steps], [padded_scalars['loss'][s] for s in steps],
                             rtol=2e-5)
  assert fixed_dev == padded_dev
  assert fixed['eval_accuracy'] == padded['eval_accuracy'] and fixed['best_step'] == padded['best_step']
  # (Grouped by length, fine-tuning runs in the peer bench's test, tests/test_bench_pretrained_vs_random.py.)


def test_squad_spans_on_fixed_lengths_equal_padding_to_the_maximum(tiny_config, builtin_tokenizer, tmp_path):
  """SQuAD's outputs are per position: padded back, its predictions are those of padding to the maximum."""
  results = {}
  for buckets in (0, 4):
    c = builtin_config(tiny_config, num_steps=2, warmup_steps=1, checkpoint_every=2, eval_batch_size=8)
    c.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    c.data.vocab = builtin_tokenizer.path
    c.task.update(name='squad_v1', data=str(tmp_path / 'data'), max_seq_length=64, length_buckets=buckets,
                  doc_stride=16, max_query_length=8, n_best_size=5, max_answer_length=10, classifier_dropout=0.0)
    for split in ('train', 'dev'):
      squad_file(tmp_path / 'data' / f'{split}-v1.1.json', version='1.1')
    result = finetune.finetune_and_evaluate(c, tmp_path / str(buckets), jax.devices()[:1])
    predictions = json.loads((tmp_path / str(buckets) / 'predictions' / 'dev_predictions.json').read_text())
    results[buckets] = (result['eval_f1'], predictions)
  assert results[4] == results[0]
