"""How much of a GLUE task a frozen encoder already holds: logistic regression on the frozen features of a
pretraining checkpoint and of random weights of its shape, beside one on the pieces alone, scored on dev.

  python bench/linear_probe.py --init=/tmp/albert_wiki_books/run --glue=../shared/data/glue [--task=sst2] \
      [--train_examples=0] [--random_seeds=3]

Features of an example: the pooled [CLS] output and the mean of the last hidden states over its real tokens
(2H numbers), standardized over the training examples, from the same tokenization and sequence length as
bench/pretrained_vs_random.py. The lexical baseline reads only which pieces occur (a binary bag of pieces). Each
probe is L2-regularized logistic regression fitted with L-BFGS; its regularization is the best of a grid on the
last tenth of the training examples, then it is refitted on all of them. Random weights are drawn as fine-tuning
draws them (`--random_seeds` draws). A fine-tuned model shows what training the whole network adds to its init's
readout; a pretrained probe above the random ones shows what pretraining put in the features.
"""
import argparse
import json
import pathlib
import sys

import jax
import numpy as np
from flax import linen as nn
from scipy import optimize, sparse

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))

from albert_jax import finetune, model as model_lib, pretrained  # noqa: E402
from shared import glue_task_config  # noqa: E402

PENALTIES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
BATCH = 256


def encoder_features(model, params, features: dict) -> np.ndarray:
  """[examples, 2H]: the pooled output and the real tokens' mean last hidden state."""
  @jax.jit
  def embed(ids, segments, mask):
    out = model.apply({'params': params}, ids, segments, mask, masked_lm_positions=np.zeros((len(ids), 1), np.int32))
    real = mask[..., None].astype(np.float32)
    mean = (out.sequence_output * real).sum(1) / real.sum(1)
    return jax.numpy.concatenate([out.pooled_output, mean], axis=-1)
  rows = []
  for start in range(0, len(features['input_ids']), BATCH):
    chunk = {k: v[start:start + BATCH] for k, v in features.items()}
    pad = BATCH - len(chunk['input_ids'])  # one compiled shape: the last chunk padded with copies of a row
    take = lambda x: np.concatenate([x, np.repeat(x[-1:], pad, 0)]) if pad else x
    out = embed(take(chunk['input_ids']), take(chunk['segment_ids']), take(chunk['input_mask']))
    rows.append(np.asarray(out)[:BATCH - pad])
  return np.concatenate(rows).astype(np.float64)


def bag_of_pieces(features: dict, vocab_size: int) -> sparse.csr_matrix:
  ids, mask = features['input_ids'], features['input_mask'].astype(bool)
  rows = np.repeat(np.arange(len(ids)), mask.sum(1))
  matrix = sparse.csr_matrix((np.ones(len(rows)), (rows, ids[mask])), shape=(len(ids), vocab_size))
  matrix.data[:] = 1.0  # presence, not counts
  return matrix


def fit(x, y: np.ndarray, penalty: float) -> np.ndarray:
  """Weights (bias last) of L2-regularized logistic regression; x dense or sparse."""
  n = x.shape[0]

  def loss(w):
    z = x @ w[:-1] + w[-1]
    p = 1 / (1 + np.exp(-z))
    value = np.mean(np.logaddexp(0, z) - y * z) + penalty / 2 * w[:-1] @ w[:-1]
    grad = np.append(x.T @ (p - y) / n + penalty * w[:-1], np.mean(p - y))
    return value, grad
  return optimize.minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method='L-BFGS-B',
                           options={'maxiter': 500}).x


def accuracy(w, x, y) -> float:
  return float(np.mean(((x @ w[:-1] + w[-1]) > 0) == y))


def probe(train_x, train_y, dev_x, dev_y) -> dict:
  """The penalty chosen on the last tenth of train, refitted on all of it; dev accuracy."""
  cut = len(train_y) * 9 // 10
  chosen = max(PENALTIES, key=lambda c: accuracy(fit(train_x[:cut], train_y[:cut], c), train_x[cut:], train_y[cut:]))
  return {'penalty': chosen, 'accuracy': accuracy(fit(train_x, train_y, chosen), dev_x, dev_y)}


def standardize(train, dev):
  mean, std = train.mean(0), train.std(0) + 1e-6
  return (train - mean) / std, (dev - mean) / std


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog='python bench/linear_probe.py', description=__doc__.split('\n')[0])
  parser.add_argument('--init', required=True, help='the pretraining workdir (its best checkpoint)')
  parser.add_argument('--glue', required=True, help='the GLUE folder holding the task\'s train and dev TSV')
  parser.add_argument('--task', default='sst2', choices=['sst2', 'mrpc'])
  parser.add_argument('--train_examples', type=int, default=0, help='a seeded subset of train (0: all)')
  parser.add_argument('--random_seeds', type=int, default=3)
  args = parser.parse_args(argv)

  config = glue_task_config(args.task, args.glue)
  task = finetune.make_task(config)
  splits = task.splits()
  train_examples = finetune.train_subset(splits['train'][0], args.train_examples, 0, args.task)
  config.init = args.init
  start = pretrained.load(config)
  params, cfg = start.params, start.model
  tokenizer = pretrained.tokenizer(config, start)
  train = task.features(train_examples, tokenizer, 'train')
  dev = task.features(splits['dev'][0], tokenizer, 'dev')
  train_y, dev_y = train['label_ids'].astype(float), dev['label_ids'].astype(float)
  print(f'{args.task}: {len(train_y):,} training and {len(dev_y):,} dev examples; majority rate on dev '
        f'{max(dev_y.mean(), 1 - dev_y.mean()):.4f}', flush=True)
  model = model_lib.Albert(cfg)

  results = {'lexical': probe(bag_of_pieces(train, cfg.vocab_size), train_y, bag_of_pieces(dev, cfg.vocab_size),
                              dev_y)}
  print(f'bag of pieces: dev accuracy {results["lexical"]["accuracy"]:.4f}', flush=True)
  tr, dv = standardize(encoder_features(model, params, train), encoder_features(model, params, dev))
  results['pretrained'] = probe(tr, train_y, dv, dev_y)
  print(f'frozen pretrained encoder: dev accuracy {results["pretrained"]["accuracy"]:.4f}', flush=True)
  results['random'] = []
  for seed in range(args.random_seeds):
    weights = nn.meta.unbox(model_lib.init_params(model, jax.random.key(seed)))
    tr, dv = standardize(encoder_features(model, weights, train), encoder_features(model, weights, dev))
    results['random'].append(probe(tr, train_y, dv, dev_y))
    print(f'frozen random encoder, seed {seed}: dev accuracy {results["random"][-1]["accuracy"]:.4f}', flush=True)
  print(json.dumps(results))
  return results


if __name__ == '__main__':
  main()
