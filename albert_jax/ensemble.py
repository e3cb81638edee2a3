"""Combine fine-tuned runs of one task into an ensemble, as the paper builds its leaderboard entries (Section 4.11,
Tables 13 and 14: per task, the best fine-tuned checkpoints by dev score, their predictions averaged).

  python -m albert_jax.ensemble --members='/tmp/sst2/seed*' --top_k=5 --workdir=/tmp/sst2/ensemble

Each member is a `python -m albert_jax.finetune` workdir of the same task, data and features (its best checkpoint's
raw outputs on every split are in predictions/outputs-SPLIT.npz). The `top_k` best by dev score are combined:
classification, the averaged class probabilities (STS-B, the averaged values); RACE, the averaged choice scores;
SQuAD 1.1, the averaged start and end logits; SQuAD 2.0, whose model proposes its own top spans, each span's
score averaged over the members (a member that did not propose it gives its lowest proposal's) and the averaged
no-answer score. The ensemble is scored on dev as the members are, its leaderboard files (test sets too) are
written under WORKDIR/predictions, and WORKDIR/result.json and the console give each member's dev score beside
the ensemble's. Members and workdir may be local or in a bucket.
"""
import argparse
import io
import json
import sys

import ml_collections
import numpy as np

from albert_jax import finetune, paths, pretrained, stats
from albert_jax.downstream import race, squad
from albert_jax.errors import ConfigError


def members(spec: str) -> list:
  """The fine-tuning workdirs `spec` names: comma-separated, each a folder or a glob of folders."""
  found = []
  for part in spec.split(','):
    if any(c in part for c in '*?['):  # the folders whose result.json the glob reaches (one listing in a bucket)
      found += [info.name.rsplit('/', 1)[0] for info in paths.listing(part.rstrip('/') + '/result.json')]
    elif (paths.path(part) / 'result.json').exists():
      found.append(part)
  if not found:
    raise ConfigError(f'--members {spec!r} names no finished fine-tuning run (a workdir with a result.json).')
  return found


def read_member(workdir: str) -> dict:
  folder = paths.path(workdir)
  return {'workdir': workdir, 'config': json.loads((folder / 'config.json').read_text()),
          'result': json.loads((folder / 'result.json').read_text())}


def load_outputs(workdir: str, split: str) -> tuple:
  """(a member's outputs on `split`, the digest of the features they are over)."""
  file = paths.path(workdir) / 'predictions' / f'outputs-{split}.npz'
  if not file.exists():
    raise ConfigError(f'{workdir} holds no {file.name}: fine-tuned before outputs were kept; run its fine-tuning '
                      f'again (the same command resumes and rescores its best checkpoint) to add it.')
  with np.load(io.BytesIO(file.read_bytes())) as saved:
    outputs = {k: saved[k] for k in saved.files if k != 'features_digest'}
    return outputs, str(saved['features_digest'])


def softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def combine(task, outputs: list) -> dict:
  """The members' outputs on one split made one: see the module's docstring for each task family."""
  if isinstance(task, squad.SquadTask):
    if task.version == 'v1.1':
      return {k: np.mean([o[k] for o in outputs], axis=0) for k in ('start_logits', 'end_logits')}
    return pooled_spans(task, outputs)
  if isinstance(task, race.RaceTask) or task.labels is None:  # RACE's choice scores; STS-B's regression values
    return {'logits': np.mean([o['logits'] for o in outputs], axis=0)}
  return {'logits': np.log(np.mean([softmax(o['logits'].astype(np.float64)) for o in outputs], axis=0))}


def pooled_spans(task, outputs: list) -> dict:
  """SQuAD 2.0: every span any member proposed for a feature, scored by the mean over the members of its score
  there (a member that did not propose it counts its lowest proposal's score), and the mean no-answer score."""
  candidates = []
  for i in range(len(outputs[0]['cls_logits'])):
    proposed = [{(int(s), int(e)): float(score) for score, s, e in task.candidates(o, i)} for o in outputs]
    spans = sorted(set().union(*proposed))
    candidates.append([(float(np.mean([p.get(span, min(p.values())) for p in proposed])), *span) for span in spans])
  return {'candidates': candidates, 'cls_logits': np.mean([o['cls_logits'] for o in outputs], axis=0)}


def accuracy_gain(combined: dict, best: dict, gold: np.ndarray, prefix: str) -> dict:
  """The ensemble's accuracy less its best member's on the same examples, with the standard error of that paired
  difference: whether the gain is more than which examples the dev set happens to hold."""
  gain = ((combined['logits'].argmax(-1) == gold).astype(np.float64) - (best['logits'].argmax(-1) == gold))
  mean, se = stats.mean_and_se(gain)
  return {f'{prefix}accuracy_gain': mean, f'{prefix}accuracy_gain_se': se or 0.0}


def ensemble(member_dirs: list, top_k: int, workdir: str) -> dict:
  runs = [read_member(m) for m in member_dirs]
  tasks = {(r['config']['task']['name'], r['config']['task']['data'], r['config']['task']['max_seq_length'])
           for r in runs}
  if len(tasks) > 1:
    raise ConfigError(f'the members are not of one task and data: {sorted(tasks)}; ensemble each task on its own.')
  if not 1 <= top_k <= len(runs):
    raise ConfigError(f'--top_k {top_k}: choose 1 to {len(runs)} (the finished members found).')
  ranked = sorted(runs, key=lambda r: -r['result']['score'])
  chosen = ranked[:top_k]
  config = ml_collections.ConfigDict(chosen[0]['config'])
  task = finetune.make_task(config)
  tokenizer = pretrained.tokenizer(config, pretrained.load(config, read_weights=False))
  out_dir = paths.make_folder(workdir)
  result = {'metric': task.metric, 'members': [{'workdir': r['workdir'], 'score': r['result']['score'],
                                                'chosen': r in chosen} for r in ranked]}
  for split, (examples, leaderboard_file) in task.splits().items():
    if split == 'train':
      continue
    features = task.features(examples, tokenizer, split)
    loaded = [load_outputs(r['workdir'], split) for r in chosen]
    if {digest for _, digest in loaded} != {finetune.features_digest(features)}:
      raise ConfigError(f'the members\' {split} outputs are not over the same features (another vocabulary or '
                        f'task setting): ensemble members fine-tuned from one vocabulary with one config.')
    combined = combine(task, [o for o, _ in loaded])
    if split.startswith('dev'):
      prefix = finetune.split_prefix(split)
      result.update(task.score(combined, examples, features, split, prefix))
      if 'logits' in combined and features['label_ids'].dtype.kind == 'i':  # a choice per example
        result.update(accuracy_gain(combined, loaded[0][0], features['label_ids'], prefix))
    (out_dir / 'predictions').mkdir(parents=True, exist_ok=True)
    for name, text in task.prediction_files(combined, examples, split, leaderboard_file).items():
      (out_dir / 'predictions' / name).write_text(text)
  result['score'] = result[task.metric] / task.scale
  result['best_member_score'] = chosen[0]['result']['score']
  (out_dir / 'result.json').write_text(json.dumps(result, indent=2) + '\n')
  return result


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m albert_jax.ensemble', description=__doc__.split('\n')[0])
  parser.add_argument('--members', required=True, help='fine-tuning workdirs: comma-separated, globs allowed')
  parser.add_argument('--top_k', '--top-k', type=int, default=5, help='how many of the best by dev score to combine')
  parser.add_argument('--workdir', required=True, help='where the ensemble\'s result.json and predictions go')
  args = parser.parse_args(argv)
  try:
    result = ensemble(members(args.members), args.top_k, args.workdir)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  for member in result['members']:
    print(f'{"*" if member["chosen"] else " "} {member["score"]:.4f}  {member["workdir"]}')
  chosen = sum(m['chosen'] for m in result['members'])
  print(f'ensemble of the best {chosen} ({result["metric"]}, dev): {result["score"]:.4f}, the best member '
        f'{result["best_member_score"]:.4f} ({result["score"] - result["best_member_score"]:+.4f}); '
        f'{args.workdir}/result.json, predictions in {args.workdir}/predictions')
  for key in sorted(k for k in result if k.endswith('accuracy_gain')):
    print(f'{key[:-len("_gain")]}: the ensemble {result[key]:+.4f} over the best member on the same examples '
          f'(paired standard error {result[key + "_se"]:.4f})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
