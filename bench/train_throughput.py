"""Training throughput on this machine: albert_jax's train step against HF transformers' AlbertForPreTraining.

  python bench/train_throughput.py [--config=configs/base.py] [--batch=8] [--seq_len=128] [--steps=6]

Both train the config's model shape (default ALBERT-base: V 30000, E 128, H 768, 12 layers, 12 heads, FFN 3072) in
float32 without dropout on the same random batch (the config's masked positions per sequence, SOP labels), with
their steps interleaved in this process: ours is train.py's step (its metrics included) with the config's optimizer
(LAMB, the original's), HF torch.optim.AdamW (its usual recipe), both clipping the gradient norm as configured. Batch and sequence length are the flags' (for ALBERT-base) or the config's (any other config).
Reports the median step, tokens/s, the ratio, and each framework's MFU against its own measured float32 matmul rate.
The last line is `ratio: N.NNx HF tokens/s ...`. Needs the [hf] extra.
"""
import argparse
import os

import jax

from albert_jax import metrics, sharding
from albert_jax import step as step_lib
from albert_jax.config import from_file, validate
from albert_jax.summary import training_flops_per_sequence
from shared import hf_mlm_labels, random_batch, time_interleaved, torch_matmul_flops, train_py_step


def ours(config, batch):
  """train.py's step (step.build, compiled as train.py compiles it) on one device."""
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  program = step_lib.build(config, validate(config).for_platform(jax.devices()[0].platform), mesh)
  return train_py_step(program, batch, mesh)[0]


def huggingface(config, batch):
  import torch
  import transformers
  torch.set_num_threads(os.cpu_count())
  m = config.model
  hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(
      vocab_size=m.vocab_size, embedding_size=m.embedding_size, hidden_size=m.hidden_size,
      num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size,
      max_position_embeddings=m.max_position_embeddings, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
      classifier_dropout_prob=0.0))
  hf.train()
  optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.01)
  labels = hf_mlm_labels(batch)
  inputs = {'input_ids': torch.tensor(batch['input_ids'], dtype=torch.long),
            'token_type_ids': torch.tensor(batch['segment_ids'], dtype=torch.long),
            'attention_mask': torch.tensor(batch['input_mask'], dtype=torch.long),
            'labels': torch.tensor(labels), 'sentence_order_label': torch.tensor(batch['sentence_order_labels'],
                                                                                dtype=torch.long)}

  def step():
    optimizer.zero_grad(set_to_none=True)
    hf(**inputs).loss.backward()
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
  parser.add_argument('--scan_unroll', type=int, help="model.scan_unroll; default: the config's, or num_layers for "
                      'a config made for pods (unrolled is the fastest setting on a CPU; 1 is the TPU default)')
  args = parser.parse_args()
  config = from_file(args.config)
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)  # as HF's below
  for_pods = config.train.batch_size > 64
  batch_size = args.batch or (8 if for_pods else config.train.batch_size)
  seq_len = args.seq_len or (128 if for_pods else config.data.max_seq_length)
  config.model.scan_unroll = args.scan_unroll or (config.model.num_layers if for_pods else config.model.scan_unroll)
  config.model.max_position_embeddings = max(config.model.max_position_embeddings, seq_len)
  model_config = validate(config)
  predictions = config.data.max_predictions_per_seq
  batch = random_batch(batch_size, seq_len, predictions, model_config.vocab_size)
  tokens = batch_size * seq_len
  seconds, load = time_interleaved({'ours': ours(config, batch), 'hf': huggingface(config, batch)}, args.steps)
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
  print(f'  ratio: {hf_step / ours_step:.2f}x HF tokens/s; matmul rate XLA/torch {peak / torch_peak:.2f}; load '
        f'average {load["before"]:.2f} before, {load["after"]:.2f} after')


if __name__ == '__main__':
  main()
