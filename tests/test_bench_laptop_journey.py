"""bench/laptop_journey.py's paired comparison of the word-order task: the gold labels it reads are the dev split
finetune.py scores (402 examples, majority 0.532, as fine-tuning's closing line reports them), and the per-example
predictions it pairs with them are read back from a run's predictions/dev.tsv in order."""
import numpy as np

from conftest import import_bench


def test_the_word_order_gold_is_finetunes_dev_split(tiny_config, tmp_path):
  journey = import_bench('laptop_journey')
  gold = journey.word_order_gold('none', tiny_config.data.tfds_data_dir)
  # finetune.py's line for this task: "eval_accuracy ... (n 402, majority 0.532)" (bench/runs/laptop_journey_*).
  assert len(gold) == 402 and set(gold) == {'0', '1'}
  assert round(max(np.mean(gold == label) for label in ('0', '1')), 4) == 0.5323

  run = tmp_path / 'run'
  (run / 'predictions').mkdir(parents=True)
  (run / 'predictions' / 'dev.tsv').write_text('index\tprediction\n' + ''.join(
      f'dev-{i}\t{label}\n' for i, label in enumerate(gold[::-1])))
  predicted = journey.predicted(run)
  assert list(predicted) == list(gold[::-1])
  # A run that predicts the majority label everywhere scores the majority rate, the control's 0.532.
  (run / 'predictions' / 'dev.tsv').write_text('index\tprediction\n' + ''.join(f'dev-{i}\t0\n' for i in range(402)))
  assert round(float(np.mean(journey.predicted(run) == gold)), 4) == 0.5323
