"""The peer on the same checkpoint: albert_jax's fine-tuning against HF transformers' AlbertForSequenceClassification
on a GLUE task, from one pretraining checkpoint, with the same examples, batches and settings.

  python bench/finetune_peer.py --init=/tmp/albert_wiki_books/run --glue=../shared/data/glue \
      [--task=sst2] [--learning_rate=3e-4] [--steps=1000] [--seeds=1] [--length_buckets=4] [--group_by_length] \
      [--compare_grouping] [--workdir=/tmp/finetune_peer]

Ours is `albert_jax.finetune` as a user runs it (in this process), its batches padded to `--length_buckets` fixed
lengths (0: all to the task's max_seq_length), grouped by length with `--group_by_length`. HF starts from the same
checkpoint exported as `convert --to=hf` writes it (its classifier initialised by HF), and is fed the same features
(our tokenizer and feature code) in the same batches (lengths.TrainingBatches), batch 32, in two arms: every batch
padded to max_seq_length (as the original pads), and each batch padded to its longest row (what HF's
DataCollatorWithPadding does, HF's usual way). Both: linear warmup over the first 10% of the
steps and linear decay to 0, weight decay 0.01 (not on LayerNorm and biases), gradient clipping at 1, the model's
dropout and the classifier's 0.1, dev scored at the same four checkpoints and the best one kept. The optimizers
differ where each side's users have them: ours is the original's AdamW (no bias correction), HF's is
torch.optim.AdamW (with it). Throughput is examples/s of training steps, timed alike: the median over windows of 10
steps of the loop's wall time, batch making included (ours from its TensorBoard rates, where the window after a dev
evaluation is an outlier the median drops; HF's loop timed the same way without its dev evaluations), all of this
machine's threads for both. Per unit of work: the padded positions per example each arm computes, and the ratio of
positions/s. Prints each arm's best dev accuracy, McNemar's exact test between ours and each HF arm on the same dev
examples, and examples/s. Needs the [hf] extra.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))

from albert_jax import cpu_allocator, finetune, interop, paths, pretrained, stats  # noqa: E402
from albert_jax.downstream import lengths  # noqa: E402
from shared import GLUE_TASKS, glue_task_config, tensorboard_scalars  # noqa: E402

WINDOW = 10  # steps per throughput window
BATCH = 32


def peer_config(args, seed: int, group_by_length: bool = None):
  config = glue_task_config(args.task, args.glue)
  config.init = args.init
  config.train.update(learning_rate=args.learning_rate, num_steps=args.steps, warmup_steps=args.steps // 10,
                      checkpoint_every=args.steps // 4, log_every=WINDOW, seed=seed, batch_size=BATCH,
                      eval_batch_size=BATCH)
  grouped = args.group_by_length if group_by_length is None else group_by_length
  config.task.update(length_buckets=args.length_buckets, group_by_length=grouped)
  return config


def run_name(args, seed: int, grouped: bool) -> str:
  return (f'{args.task},lr={args.learning_rate:g},steps={args.steps},buckets={args.length_buckets}'
          f'{",grouped" if grouped else ""},seed={seed}')


def training_batches(config, features: dict) -> lengths.TrainingBatches:
  """The rows of each step's batch and the fixed length ours pads it to, as finetune.py makes them."""
  return lengths.TrainingBatches(lengths.row_lengths(features['train']), BATCH, config.train.seed,
                                 config.task.group_by_length, config.task.length_buckets,
                                 config.task.max_seq_length, config.train.num_steps)


def run_ours(config, workdir: paths.Path) -> dict:
  if not (workdir / 'result.json').exists():
    finetune.finetune_and_evaluate(config, str(workdir))
  result = json.loads((workdir / 'result.json').read_text())
  lines = (workdir / 'predictions' / 'dev.tsv').read_text().splitlines()[1:]
  rates = [value for _, _, value in tensorboard_scalars(workdir)[1].get('examples_per_sec', [])]
  return {'accuracy': result['eval_accuracy'], 'best_step': result['best_step'],
          'predicted': np.array([int(line.split('\t')[1]) for line in lines]),
          'examples_per_sec': float(np.median(rates))}


def run_hf(config, params, model_config, features: dict, batches: lengths.TrainingBatches, seed: int,
           pad: str) -> dict:
  """HF's run on our batches, each padded to max_seq_length (`pad` 'max') or to its longest row ('longest')."""
  import torch
  import transformers
  torch.set_num_threads(os.cpu_count())
  torch.manual_seed(seed)
  train = config.train
  with tempfile.TemporaryDirectory() as directory:
    interop.save_hf(directory, params, model_config)  # what `convert --to=hf` writes for a pretraining run
    model = transformers.AlbertForSequenceClassification.from_pretrained(
        directory, num_labels=2, classifier_dropout_prob=config.task.classifier_dropout,
        hidden_dropout_prob=config.model.dropout_rate, attention_probs_dropout_prob=config.model.attention_dropout_rate,
        attn_implementation='sdpa')
  decay = [p for n, p in model.named_parameters() if 'LayerNorm' not in n and not n.endswith('bias')]
  rest = [p for n, p in model.named_parameters() if 'LayerNorm' in n or n.endswith('bias')]
  optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': train.weight_decay},
                                 {'params': rest, 'weight_decay': 0.0}], lr=train.learning_rate,
                                betas=(train.beta1, train.beta2), eps=train.epsilon)
  warmup, steps = train.warmup_steps, train.num_steps
  scheduler = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda s: min((s + 1) / max(warmup, 1), max(0.0, (steps - s) / max(steps - warmup, 1))))
  tensor = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.long)
  inputs = lambda batch: {'input_ids': tensor(batch['input_ids']), 'token_type_ids': tensor(batch['segment_ids']),
                          'attention_mask': tensor(batch['input_mask'])}

  def predict(split: dict) -> np.ndarray:
    model.eval()
    with torch.no_grad():
      out = [model(**inputs({k: v[i:i + BATCH] for k, v in split.items()})).logits.argmax(-1).numpy()
             for i in range(0, len(split['weights']), BATCH)]
    model.train()
    return np.concatenate(out)

  gold, max_length = features['dev']['label_ids'], config.task.max_seq_length
  best, rates, window, positions = None, [], 0.0, 0
  model.train()
  for step in range(steps):
    started = time.perf_counter()
    rows, _ = batches(step)
    length = max_length if pad == 'max' else int(batches.lengths[rows].max())
    batch = lengths.cut({k: v[rows] for k, v in features['train'].items()}, length, max_length)
    positions += BATCH * length
    loss = model(**inputs(batch), labels=tensor(batch['label_ids'])).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), train.clip_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    window += time.perf_counter() - started
    if (step + 1) % WINDOW == 0:
      rates.append(WINDOW * BATCH / window)
      window = 0.0
    if (step + 1) % train.checkpoint_every == 0:
      predicted = predict(features['dev'])
      accuracy = float(np.mean(predicted == gold))
      print(f'  HF step {step + 1}/{steps}: dev accuracy {accuracy:.4f}' +
            (f', {np.median(rates):.0f} ex/s' if rates else ''), flush=True)
      if best is None or accuracy >= best['accuracy']:  # ties to the later checkpoint
        best = {'accuracy': accuracy, 'best_step': step + 1, 'predicted': predicted}
  return {**best, 'examples_per_sec': float(np.median(rates)), 'positions_per_example': positions / steps / BATCH}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog='python bench/finetune_peer.py', description=__doc__.split('\n')[0])
  parser.add_argument('--init', required=True, help='a pretraining workdir (its best checkpoint) or any init')
  parser.add_argument('--glue', required=True, help='the GLUE folder (holding SST-2/ or MRPC/)')
  parser.add_argument('--task', default='sst2', choices=sorted(GLUE_TASKS))
  parser.add_argument('--learning_rate', type=float, default=3e-4)
  parser.add_argument('--steps', type=int, default=1000)
  parser.add_argument('--seeds', type=int, default=1)
  parser.add_argument('--length_buckets', type=int, default=4, help="ours' task.length_buckets (0: pad to the maximum)")
  parser.add_argument('--group_by_length', action='store_true', help="ours' task.group_by_length, and HF's batches")
  parser.add_argument('--compare_grouping', action='store_true',
                      help='also run ours with the other --group_by_length (seed by seed; finished runs are read '
                      'back) and print grouped minus random batches, paired by seed')
  parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'albert_finetune_peer'),
                      help='our runs\' workdirs (a finished one is read back, not run again)')
  args = parser.parse_args(argv)
  root = paths.path(args.workdir)
  # The checkpoint and the features for HF, once: the seed changes only the training settings.
  config = peer_config(args, 0)
  start = pretrained.load(config)
  model_config, params = start.model, start.params
  tokenizer = pretrained.tokenizer(config, start)
  task = finetune.make_task(config)
  features = {split: task.features(examples, tokenizer, split) for split, (examples, _) in task.splits().items()}
  gold, rows = features['dev']['label_ids'], []
  arms = {'hf_max': 'max', 'hf_longest': 'longest'}
  predicted = {side: [] for side in ('ours', *arms)}  # by seed: the paired comparison below
  for seed in range(args.seeds):
    config = peer_config(args, seed)
    print(f'seed {seed}: ours', flush=True)
    ours = run_ours(config, root / run_name(args, seed, args.group_by_length))
    batches = training_batches(config, features)
    ours['positions_per_example'] = float(np.mean([batches(step)[1] for step in range(args.steps)]))
    row = {'seed': seed, 'ours': ours}
    for arm, pad in arms.items():
      print(f'seed {seed}: HF padded to {pad}', flush=True)
      row[arm] = run_hf(config, params, model_config, features, batches, seed, pad)
      row[f'{arm}_mcnemar_p'] = stats.mcnemar(ours['predicted'] == gold, row[arm]['predicted'] == gold)
    for side in ('ours', *arms):
      predicted[side].append(row[side].pop('predicted'))
    rows.append(row)
  print(f'\n{args.task} dev (n {len(gold):,}), {args.steps} steps of {BATCH}, lr {args.learning_rate:g}, from '
        f'{args.init}; ours padded to {args.length_buckets or "no"} fixed lengths'
        f'{", grouped by length" if args.group_by_length else ""}; {os.cpu_count()} threads')
  print('| seed | arm | dev accuracy (step) | McNemar p vs ours | examples/s | padded positions per example | '
        'ours/arm examples/s | ours/arm positions/s (equal work) |')
  print('|---|---|---|---|---|---|---|---|')
  for r in rows:
    o = r['ours']
    for side in ('ours', *arms):
      a = r[side]
      p_value = f'{r[side + "_mcnemar_p"]:.3g}' if side != 'ours' else ''
      ratio = o['examples_per_sec'] / a['examples_per_sec']
      work = ratio * o['positions_per_example'] / a['positions_per_example']
      print(f'| {r["seed"]} | {side} | {a["accuracy"]:.4f} ({a["best_step"]}) | {p_value} | '
            f'{a["examples_per_sec"]:.0f} | {a["positions_per_example"]:.1f} | {ratio:.2f}x | {work:.2f}x |')
  if len(rows) > 1:
    def spread(side: str, key: str, digits: int) -> str:
      values = [r[side][key] for r in rows]
      return f'{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}'
    for side in ('ours', *arms):
      print(f'mean ± sd over {len(rows)} seeds, {side}: dev accuracy {spread(side, "accuracy", 4)}, examples/s '
            f'{spread(side, "examples_per_sec", 0)}')
    right = lambda side, i, sample: np.mean(predicted[side][i][sample] == gold[sample])
    for arm in arms:  # paired by seed: seed i of both sides trained on the same batches in the same order
      p = stats.seeds_and_examples_bootstrap(lambda i, sample: right('ours', i, sample) - right(arm, i, sample),
                                             len(rows), len(gold))
      speed, speed_se = stats.mean_and_se([r['ours']['examples_per_sec'] / r[arm]['examples_per_sec'] for r in rows])
      print(f'ours minus {arm}, paired by seed: dev accuracy {p["difference"]:+.4f}, SE {p["se"]:.4f} over seeds and '
            f'examples (z {p["z"]:+.1f}); examples/s ratio {speed:.2f}x ± {speed_se:.2f} (SE over seeds)')
  if args.compare_grouping:
    other = []
    for seed in range(args.seeds):
      print(f'seed {seed}: ours {"in random batches" if args.group_by_length else "grouped by length"}', flush=True)
      other.append(run_ours(peer_config(args, seed, not args.group_by_length),
                            root / run_name(args, seed, not args.group_by_length)))
    other_predicted = [o['predicted'] for o in other]
    grouped, shuffled = ((predicted['ours'], other_predicted) if args.group_by_length
                         else (other_predicted, predicted['ours']))
    p = stats.seeds_and_examples_bootstrap(
        lambda i, sample: np.mean(grouped[i][sample] == gold[sample]) - np.mean(shuffled[i][sample] == gold[sample]),
        len(rows), len(gold))
    accuracies = ', '.join(f"{o['accuracy']:.4f}" for o in other)
    rates = ', '.join(f"{o['examples_per_sec']:.0f}" for o in other)
    print(f'ours with the other grouping: dev accuracy by seed {accuracies}; examples/s {rates}')
    print(f'ours grouped by length minus ours in random batches, paired by seed: dev accuracy {p["difference"]:+.4f}, '
          f'SE {p["se"]:.4f} over seeds and examples (z {p["z"]:+.1f}), 95% interval '
          f'[{p["interval"][0]:+.4f}, {p["interval"][1]:+.4f}]')
  (root / 'peer.json').write_text(json.dumps(rows, indent=2) + '\n')
  return {'rows': rows, **({'grouped_minus_random': p} if args.compare_grouping else {})}


if __name__ == '__main__':
  cpu_allocator.reuse_freed_memory()  # as the command-line tools, for both sides alike
  main()
