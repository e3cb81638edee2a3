"""Training throughput on this machine: albert_jax's train step against HF transformers' AlbertForPreTraining.

  python bench/train_throughput.py [--config=configs/base.py] [--batch=8] [--seq_len=128] [--steps=6]

Both train the config's model shape (default ALBERT-base: V 30000, E 128, H 768, 12 layers, 12 heads, FFN 3072) in
float32 on the same random batch (the config's masked positions per sequence, SOP labels), with their steps
interleaved in this process: ours with the config's optimizer (LAMB, the original's), HF with torch.optim.AdamW (its
usual recipe). Batch and sequence length are the flags' (for ALBERT-base) or the config's (any other config).
Reports the median step, tokens/s, the ratio, and each framework's MFU against its own measured float32 matmul rate.
The last line is `ratio: N.NNx HF tokens/s ...`. Needs the [hf] extra.
"""
import argparse
import os
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from albert_jax import metrics, optim
from albert_jax.step import losses
from albert_jax.config import from_file, validate
from albert_jax.model import Albert, init_params
from albert_jax.summary import training_flops_per_sequence


def make_batch(batch: int, seq_len: int, predictions: int, vocab: int) -> dict:
  rng = np.random.default_rng(0)
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len - 1), predictions, replace=False)
                                for _ in range(batch)]), axis=1).astype(np.int32)
  segment_ids = np.zeros((batch, seq_len), np.int32)
  segment_ids[:, seq_len // 2:] = 1
  return {'input_ids': rng.integers(5, vocab, (batch, seq_len)).astype(np.int32), 'segment_ids': segment_ids,
          'input_mask': np.ones((batch, seq_len), np.int32), 'masked_lm_positions': positions,
          'masked_lm_ids': rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
          'masked_lm_weights': np.ones((batch, predictions), np.float32),
          'sentence_order_labels': rng.integers(0, 2, batch).astype(np.int32)}


def time_interleaved(steps_by_name: dict, repeats: int, block: int = 1) -> dict:
  """Median seconds per step of each, alternating in short blocks so that a machine whose speed drifts (a shared
  VM) slows both alike. The first step of each block is not timed: the other runtime's threads may still be
  spinning from its last step. The next `block` steps are timed together."""
  for step in steps_by_name.values():  # compile and warm up
    step()
  times = {name: [] for name in steps_by_name}
  for _ in range(repeats):
    for name, step in steps_by_name.items():
      step()
      start = time.perf_counter()
      for _ in range(block):
        step()
      times[name].append((time.perf_counter() - start) / block)
  return {name: statistics.median(t) for name, t in times.items()}


def ours(config, batch):
  model = Albert(validate(config))
  boxed = init_params(model, jax.random.key(0))
  params = nn.unbox(boxed)
  tx = optim.make(config.train, params, boxed)

  def train_step(params, opt_state, batch):
    grad_fn = jax.grad(lambda p: losses(model, p, batch, jax.random.key(0), 'sop', True)[0])
    updates, opt_state = tx.update(grad_fn(params), opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  train_step = jax.jit(train_step, donate_argnums=(0, 1))
  state = [params, tx.init(params)]
  device_batch = {k: jnp.asarray(v) for k, v in batch.items()}

  def step():
    state[0], state[1] = train_step(state[0], state[1], device_batch)
    jax.block_until_ready(state[0])

  return step


def huggingface(config, batch):
  import torch
  import transformers
  torch.set_num_threads(os.cpu_count())
  m = config.model
  hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(
      vocab_size=m.vocab_size, embedding_size=m.embedding_size, hidden_size=m.hidden_size,
      num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size,
      max_position_embeddings=m.max_position_embeddings, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0))
  hf.train()
  optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.01)
  labels = np.full(batch['input_ids'].shape, -100, np.int64)
  np.put_along_axis(labels, batch['masked_lm_positions'], batch['masked_lm_ids'], axis=1)
  inputs = {'input_ids': torch.tensor(batch['input_ids'], dtype=torch.long),
            'token_type_ids': torch.tensor(batch['segment_ids'], dtype=torch.long),
            'attention_mask': torch.tensor(batch['input_mask'], dtype=torch.long),
            'labels': torch.tensor(labels), 'sentence_order_label': torch.tensor(batch['sentence_order_labels'],
                                                                                dtype=torch.long)}

  def step():
    optimizer.zero_grad(set_to_none=True)
    hf(**inputs).loss.backward()
    optimizer.step()

  return step


def torch_matmul_flops(size: int = 2048, repeats: int = 5) -> float:
  """The peer's float32 matmul rate (torch's CPU GEMM), measured like metrics.measured_matmul_flops."""
  import torch
  x = torch.ones(size, size)
  torch.mm(x, x)
  start = time.perf_counter()
  for _ in range(repeats):
    torch.mm(x, x)
  return 2 * size ** 3 * repeats / (time.perf_counter() - start)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/base.py', help='any config file; its model is measured')
  parser.add_argument('--batch', type=int, help="default: the config's batch, or 8 for a config made for pods "
                      '(batch above 64)')
  parser.add_argument('--seq_len', type=int, help="default: the config's max_seq_length, or 128 for a config made "
                      'for pods')
  parser.add_argument('--steps', type=int, default=6, help='timed steps of each')
  parser.add_argument('--scan_unroll', type=int, help="model.scan_unroll; default: the config's, or num_layers for "
                      'a config made for pods (unrolled is the fastest setting on a CPU; 1 is the TPU default)')
  args = parser.parse_args()
  config = from_file(args.config)
  for_pods = config.train.batch_size > 64
  batch_size = args.batch or (8 if for_pods else config.train.batch_size)
  seq_len = args.seq_len or (128 if for_pods else config.data.max_seq_length)
  config.model.scan_unroll = args.scan_unroll or (config.model.num_layers if for_pods else config.model.scan_unroll)
  config.model.max_position_embeddings = max(config.model.max_position_embeddings, seq_len)
  model_config = validate(config)
  predictions = config.data.max_predictions_per_seq
  batch = make_batch(batch_size, seq_len, predictions, model_config.vocab_size)
  tokens = batch_size * seq_len
  seconds = time_interleaved({'ours': ours(config, batch), 'hf': huggingface(config, batch)}, args.steps)
  ours_step, hf_step = seconds['ours'], seconds['hf']
  peak, torch_peak = metrics.measured_matmul_flops(size=2048), torch_matmul_flops()
  flops = training_flops_per_sequence(model_config, seq_len, predictions) * batch_size
  # HF computes MLM logits at every position, not only at the masked ones: count its extra work too.
  hf_flops = training_flops_per_sequence(model_config, seq_len, seq_len) * batch_size
  print(f'{args.config}: V {model_config.vocab_size}, E {model_config.embedding_size}, H {model_config.hidden_size}, '
        f'{model_config.num_layers} layers, fp32, batch {batch_size} x {seq_len}, model.scan_unroll='
        f'{model_config.scan_unroll}, {jax.devices()[0].device_kind}')
  print(f'  albert_jax ({config.train.optimizer}):{"":<8}{ours_step:7.3f} s/step  {tokens / ours_step:8.0f} tokens/s  '
        f'MFU {flops / ours_step / peak:.1%} of the measured {peak / 1e9:.0f} GFLOP/s fp32 matmul')
  print(f'  HF AlbertForPreTraining:  {hf_step:7.3f} s/step  {tokens / hf_step:8.0f} tokens/s  '
        f'MFU {hf_flops / hf_step / torch_peak:.1%} of the measured {torch_peak / 1e9:.0f} GFLOP/s torch fp32 matmul')
  print(f'  ratio: {hf_step / ours_step:.2f}x HF tokens/s; matmul rate XLA/torch {peak / torch_peak:.2f}')


if __name__ == '__main__':
  main()
