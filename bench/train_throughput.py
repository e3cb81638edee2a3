"""Training throughput on this machine: albert_jax's train step against HF transformers' AlbertForPreTraining,
stock and at equal work.

  python bench/train_throughput.py [--config=configs/base.py] [--batch=8] [--seq_len=128] [--steps=6]
  python bench/train_throughput.py --config=configs/wiki_books_cpu_hour.py --task=sst2 [--seq_len=64] [--steps=12]

All arms train the config's model shape (default ALBERT-base: V 30000, E 128, H 768, 12 layers, 12 heads, FFN 3072)
in float32 without dropout on the same random batch (the config's masked positions per sequence, SOP labels), their
steps alternated in this process (bench/shared.py): ours is train.py's step (its metrics included) with the
config's optimizer (LAMB, the original's); HF's, with torch.optim.AdamW (its usual recipe) and the same gradient
clipping, stock (its MLM head computes the vocabulary's logits at every position, as an HF user's model does) and
with the head at the masked positions alone (the work ours does). Batch and sequence length are the flags' (for
ALBERT-base) or the config's (any other config). Prints, for each arm: the median step, tokens/s, FLOPs per token,
MFU against its framework's measured float32 matmul rate, and ours against it in tokens/s and at equal work (FLOP/s
against FLOP/s). The last line is `ratio: ...`. With `--task`, the fine-tuning step finetune.py compiles for that
GLUE task (its batch, AdamW and classifier dropout; the config's model; every row `--seq_len` long, default the
fine-tuning benches' length) against HF's AlbertForSequenceClassification on the same batch with torch.optim.AdamW
and the same clipping: the same work (HF maps E to H even where they are equal; ours, as the original, does not),
so one ratio. Needs the [hf] extra.
"""
import argparse
import os

import jax

from albert_jax import cpu_allocator, metrics
from albert_jax.config import from_file, validate
from albert_jax.summary import training_flops_per_sequence
from shared import (GLUE_TASKS, fine_tuning, hf_arm, program_on_one_device, random_batch, time_interleaved,
                    torch_matmul_flops, train_py_step)


def ours(config, shape, batch, task=None):
  """train.py's step (step.build, compiled as train.py compiles it) on one device; with `task`, finetune.py's."""
  program, mesh = program_on_one_device(config, shape, task)
  return train_py_step(program, batch, mesh)[0]


def huggingface(config, shape, batch, masked_only: bool = False, task=None):
  """HF's step on its own initial weights, torch.optim.AdamW, clipped as ours; stock or with the MLM head at the
  masked positions alone (shared.hf_pretraining_loss); with `task`, AlbertForSequenceClassification's."""
  import torch
  torch.set_num_threads(os.cpu_count())
  torch.manual_seed(0)
  hf, loss = hf_arm(shape, batch, task, masked_only)
  hf.train()
  optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.01)

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss().backward()
    torch.nn.utils.clip_grad_norm_(hf.parameters(), config.train.clip_norm)  # as ours clips
    optimizer.step()

  return step


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/base.py', help='any config file; its model is measured')
  parser.add_argument('--batch', type=int, help="default: the config's batch, or 8 for a config made for pods "
                      '(batch above 64)')
  parser.add_argument('--seq_len', type=int, help="default: the config's max_seq_length, or 128 for a config made "
                      'for pods')
  parser.add_argument('--steps', type=int, default=6, help='timed steps of each')
  parser.add_argument('--scan_unroll', type=int, help="model.scan_unroll; default: the config's (0: the platform's, "
                      'every block on a CPU or GPU, the loop kept on a TPU); with --task, the fine-tuning config\'s')
  parser.add_argument('--task', choices=sorted(GLUE_TASKS), help="time this GLUE task's fine-tuning step instead")
  args = parser.parse_args()
  config = from_file(args.config)
  if args.task:
    return fine_tuning_ratio(args, config)
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)  # as HF's below
  for_pods = config.train.batch_size > 64
  batch_size = args.batch or (8 if for_pods else config.train.batch_size)
  seq_len = args.seq_len or (128 if for_pods else config.data.max_seq_length)
  if args.scan_unroll is not None:
    config.model.scan_unroll = args.scan_unroll
  config.model.max_position_embeddings = max(config.model.max_position_embeddings, seq_len)
  model_config = validate(config)
  predictions = config.data.max_predictions_per_seq
  batch = random_batch(batch_size, seq_len, predictions, model_config.vocab_size)
  tokens = batch_size * seq_len
  arms = {'ours': ours(config, model_config, batch), 'hf': huggingface(config, model_config, batch),
          'hf_masked_only': huggingface(config, model_config, batch, masked_only=True)}
  seconds, load = time_interleaved(arms, args.steps)
  peak, torch_peak = metrics.measured_matmul_flops(size=2048), torch_matmul_flops()
  # FLOPs per sequence: ours and HF masked-only compute the MLM output at the masked positions; stock HF at all.
  flops = {'ours': training_flops_per_sequence(model_config, seq_len, predictions),
           'hf': training_flops_per_sequence(model_config, seq_len, seq_len),
           'hf_masked_only': training_flops_per_sequence(model_config, seq_len, predictions)}
  names = {'ours': f'albert_jax ({config.train.optimizer})', 'hf': 'HF AlbertForPreTraining (stock)',
           'hf_masked_only': 'HF, MLM head at the masked'}
  print(f'{args.config}: V {model_config.vocab_size}, E {model_config.embedding_size}, H {model_config.hidden_size}, '
        f'{model_config.num_layers} layers, fp32, batch {batch_size} x {seq_len}, {predictions} masked a row, '
        f'model.scan_unroll={model_config.for_platform(jax.default_backend()).scan_unroll}, '
        f'{jax.devices()[0].device_kind}; median of {args.steps} '
        f'alternated steps each')
  print(f'  {"":<34}{"s/step":>8}{"tokens/s":>10}{"MFLOP/token":>13}{"MFU":>7}{"ours/arm tokens/s":>19}'
        f'{"ours/arm at equal work":>24}')
  out = {}
  for arm, step_seconds in seconds.items():
    rate = flops[arm] * batch_size / step_seconds  # FLOP/s
    own_peak = peak if arm == 'ours' else torch_peak
    out[arm] = {'seconds': step_seconds, 'tokens_per_sec': tokens / step_seconds, 'flops_per_token':
                flops[arm] / seq_len, 'mfu': rate / own_peak,
                'speedup': seconds[arm] / seconds['ours'],
                'speedup_equal_work': flops['ours'] / seconds['ours'] / (flops[arm] / step_seconds)}
    o = out[arm]
    print(f'  {names[arm]:<34}{step_seconds:8.3f}{o["tokens_per_sec"]:10.0f}{o["flops_per_token"] / 1e6:13.1f}'
          f'{o["mfu"]:7.1%}{o["speedup"]:18.2f}x{o["speedup_equal_work"]:23.2f}x')
  print(f'  MFU against each framework\'s measured fp32 matmul: XLA {peak / 1e9:.0f}, torch {torch_peak / 1e9:.0f} '
        f'GFLOP/s; load average {load["before"]:.2f} before, {load["after"]:.2f} after')
  print(f'  ratio: {out["hf"]["speedup"]:.2f}x HF tokens/s stock, {out["hf"]["speedup_equal_work"]:.2f}x at equal '
        f'work; {out["hf_masked_only"]["speedup"]:.2f}x HF with the head at the masked positions')
  return out


def fine_tuning_ratio(args, pretraining_config) -> dict:
  """The fine-tuning step's arms (ours, HF) alternated on one random batch of full rows; prints and returns both."""
  config, task, shape, batch = fine_tuning(args.task, pretraining_config, args.batch, args.seq_len, args.scan_unroll)
  batch_size, seq_len = batch['input_ids'].shape
  seconds, load = time_interleaved({'ours': ours(config, shape, batch, task),
                                    'hf': huggingface(config, shape, batch, task=task)}, args.steps)
  print(f'{args.config}, {args.task} fine-tuning: V {shape.vocab_size}, E {shape.embedding_size}, '
        f'H {shape.hidden_size}, {shape.num_layers} layers, fp32, batch {batch_size} x {seq_len}, '
        f'model.scan_unroll={shape.for_platform(jax.default_backend()).scan_unroll}, '
        f'{jax.devices()[0].device_kind}; median of {args.steps} alternated steps each; load average '
        f'{load["before"]:.2f} before, {load["after"]:.2f} after')
  tokens = batch_size * seq_len
  for arm, name in (('ours', f'albert_jax ({config.train.optimizer})'), ('hf', 'HF AlbertForSequenceClassification')):
    print(f'  {name:<38}{seconds[arm]:8.3f} s/step{tokens / seconds[arm]:10.0f} tokens/s')
  print(f'  ratio: {seconds["hf"] / seconds["ours"]:.2f}x HF tokens/s (the same work, but for HF\'s E -> H product '
        f'where E equals H: {"none here" if shape.embedding_size != shape.hidden_size else "HF does it, ours not"})')
  return {'seconds': seconds, 'speedup': seconds['hf'] / seconds['ours'], 'load': load}


if __name__ == '__main__':
  cpu_allocator.reuse_freed_memory()  # as the command-line tools, for both sides alike
  main()
