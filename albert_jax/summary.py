"""Parameter counts per part and training FLOPs of a config.

  python -m albert_jax.summary --config=configs/base.py [--config.model.sharing=none] [--format=json]

Counts come from the model's own (abstract) parameter tree, so they are exactly what training allocates.
"""
import json

import flax.linen as nn
import jax
import numpy as np
from absl import flags
from ml_collections import config_flags

from albert_jax.config import run_cli, validate
from albert_jax.model import Albert, ModelConfig, abstract_params


def count_params(model_config: ModelConfig) -> dict:
  """Parameter counts by part. 'backbone' (embeddings + projection + encoder + pooler) is what the paper
  reports for the shared models and what a fine-tuner downloads; 'total' adds the MLM and SOP heads."""
  params = nn.unbox(abstract_params(Albert(model_config)))
  size = lambda tree: int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))
  parts = {
      'embeddings': size(params['embeddings']),
      'projection': size(params['encoder'].get('embedding_projection', {})),
      'encoder': size(params['encoder']['block']),
      'pooler': size(params['pooler']),
      'mlm_head': size(params['mlm_head']),
      'sop_head': size(params['sop_head']),
  }
  parts['backbone'] = parts['embeddings'] + parts['projection'] + parts['encoder'] + parts['pooler']
  parts['total'] = parts['backbone'] + parts['mlm_head'] + parts['sop_head']
  return parts


def training_flops_per_sequence(model_config: ModelConfig, seq_len: int, predictions: int) -> float:
  """Matmul FLOPs of one training step (forward + backward = 3x forward) for one sequence.

  Every layer runs the full block whatever is shared: sharing saves parameters, not compute.
  The MLM head runs only at the `predictions` masked positions, as in the original.
  """
  c = model_config
  h, s = c.hidden_size, seq_len
  forward = 0.0
  if c.embedding_size != h:
    forward += 2 * s * c.embedding_size * h
  per_block = 2 * s * (4 * h * h + 2 * h * c.intermediate_size) + 4 * s * s * h  # projections + QK^T and AV
  forward += c.num_blocks * per_block
  forward += 2 * h * h + 2 * h * 2  # pooler and SOP head on [CLS]
  forward += predictions * 2 * (h * c.embedding_size + c.embedding_size * c.vocab_size)
  return 3 * forward


def summarize(config) -> dict:
  model_config = validate(config)
  seq_len, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq
  per_sequence = training_flops_per_sequence(model_config, seq_len, predictions)
  return {
      **{f'{k}_params': v for k, v in count_params(model_config).items()},
      'seq_len': seq_len,
      'train_flops_per_token': per_sequence / seq_len,
      'train_flops_per_step': per_sequence * config.train.batch_size,
      'train_flops_total': per_sequence * config.train.batch_size * config.train.num_steps,
  }


def _millions(n: int) -> str:
  return f'{n / 1e6:,.2f}M'


def main(argv):
  del argv
  s = summarize(_CONFIG.value)
  if _FORMAT.value == 'json':
    print(json.dumps(s, sort_keys=True))
    return
  m = _CONFIG.value.model
  print(f'ALBERT  V={m.vocab_size} E={m.embedding_size} H={m.hidden_size} L={m.num_layers} '
        f'heads={m.num_heads} FFN={m.intermediate_size} sharing={m.sharing} '
        f'groups={m.num_groups}x{m.inner_group_num}')
  rows = [('embeddings (V x E + positions + types + LN)', 'embeddings'),
          ('projection (E -> H)', 'projection'), ('encoder (shared block(s))', 'encoder'),
          ('pooler', 'pooler'), ('MLM head', 'mlm_head'), ('SOP head', 'sop_head'),
          ('backbone (embeddings + encoder + pooler)', 'backbone'), ('total', 'total')]
  for label, key in rows:
    print(f'  {label:<44} {s[key + "_params"]:>14,d}  {_millions(s[key + "_params"]):>10}')
  print(f'  training FLOPs per token at seq {s["seq_len"]}: {s["train_flops_per_token"]:.4g}; '
        f'per step: {s["train_flops_per_step"]:.4g}; whole run: {s["train_flops_total"]:.4g}')


if __name__ == '__main__':
  # Flags are defined only when run as a program: other modules import this one's functions.
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Path to a config file in configs/.', lock_config=True)
  _FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'json'], 'Output format.')
  flags.mark_flags_as_required(['config'])
  run_cli(main)
