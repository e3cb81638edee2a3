"""BLiMP: which sentence of each linguistic minimal pair does a masked LM prefer? Scored by pseudo-log-likelihood.

  python -m albert_jax.blimp --checkpoint=WORKDIR_OR_DIR --data=../shared/data/blimp [--method=pll_word]
      [--step=N] [--pairs_per_paradigm=100] [--random_init] [--baseline=OTHER.json] [--output=blimp.json]

BLiMP (Warstadt et al., TACL 2020) holds 1,000 pairs per paradigm of an acceptable and an unacceptable sentence
that differ minimally; a model passes a pair when it scores the acceptable one higher. A masked LM's score of a
sentence is its pseudo-log-likelihood (Salazar et al., ACL 2020): mask each piece in turn and sum the
log-probabilities of the true pieces. `pll_word` (Kauf and Ivanova, ACL 2023, "PLL-word-l2r") also masks the rest
of the target's word to its right, so a word split into many pieces is not predicted from its own other pieces,
which plain PLL rewards. Every masked copy of every sentence is one batch row; rows are grouped by length.

Accuracy is reported per paradigm, per phenomenon (`linguistics_term`: the mean of its paradigms) and overall (the
mean of the paradigms), beside the published 5-gram, LSTM, Transformer-XL and GPT-2 figures of the same paradigms
(`published_results.jsonl` in the data folder). With --baseline (another run's JSON) the difference is given with
its paired standard error over the pairs both scored. The checkpoint is anything `from_pretrained` reads; its
vocabulary is the run's (data.vocab), an HF directory's spiece.model, or --vocab.
"""
import dataclasses
import json
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from albert_jax import paths, stats
from albert_jax.config import run_cli
from albert_jax.data import tokenizer as tokenizer_lib
from albert_jax.errors import ConfigError

FIELDS = ('sentence_good', 'sentence_bad', 'UID', 'linguistics_term')
PUBLISHED = 'published_results.jsonl'
PUBLISHED_MODELS = {'ngram': '5-gram', 'lstm': 'LSTM', 'txl': 'TXL', 'gpt2': 'GPT-2'}
METHODS = ('pll', 'pll_word')


class BlimpError(ConfigError):
  """BLiMP data that cannot be scored as given; the message names the file and line and the fix."""


@dataclasses.dataclass(frozen=True)
class Pair:
  paradigm: str
  phenomenon: str
  good: str
  bad: str
  index: int  # the line's place in its paradigm's file, so that two runs' pairs can be matched


def paradigm_files(folder) -> list:
  folder = paths.path(folder)
  files = sorted((f for f in folder.glob('*.jsonl') if f.name != PUBLISHED), key=lambda f: f.name)
  if not files:
    raise BlimpError(f'{folder} holds no BLiMP paradigm files (UID.jsonl): point --data at the folder of the '
                     f'.jsonl files as distributed (github.com/alexwarstadt/blimp, data/).')
  return files


def read_pairs(folder, per_paradigm: Optional[int] = None) -> list:
  """Every pair of every paradigm file in `folder`, or `per_paradigm` of each, evenly spaced through the file (a
  stratified subset: each paradigm's templates vary along the file)."""
  pairs = []
  for f in paradigm_files(folder):
    rows = []
    for number, line in enumerate(f.read_text().splitlines(), 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise BlimpError(f'{f}:{number}: not JSON ({e.msg}); a BLiMP file holds one JSON object a line.') from None
      missing = [k for k in FIELDS if not isinstance(row, dict) or not isinstance(row.get(k), str)]
      if missing:
        raise BlimpError(f'{f}:{number}: lacks {", ".join(missing)}; each BLiMP line has sentence_good, '
                         f'sentence_bad, UID and linguistics_term (is this a BLiMP file?).')
      rows.append(Pair(row['UID'], row['linguistics_term'], row['sentence_good'], row['sentence_bad'], len(rows)))
    if per_paradigm and len(rows) > per_paradigm:
      rows = [rows[i] for i in np.linspace(0, len(rows) - 1, per_paradigm).round().astype(int)]
    pairs += rows
  return pairs


def read_published(folder) -> dict:
  """{paradigm: {model: accuracy}} as the BLiMP paper reports them, or {} where the folder has no such file."""
  f = paths.path(folder) / PUBLISHED
  if not f.exists():
    return {}
  rows = (json.loads(line) for line in f.read_text().splitlines() if line.strip())
  return {r['UID']: {m: float(r[m]) for m in PUBLISHED_MODELS if m in r} for r in rows if r.get('UID') != 'overall'}


# ---- Scoring.

def masked_copies(ids: list, word_start: np.ndarray, method: str) -> list:
  """(sentence, position, true piece, masked positions) of every copy that `method` scores, positions counted in
  [CLS] pieces [SEP]."""
  copies = []
  for s, pieces in enumerate(ids):
    for i, piece in enumerate(pieces):
      masked = [i + 1]
      if method == 'pll_word':  # the rest of this word, to the right: not predicted from itself
        j = i + 1
        while j < len(pieces) and not word_start[pieces[j]]:
          masked.append(j + 1)
          j += 1
      copies.append((s, i + 1, int(piece), masked))
  return copies


class Scorer:
  """Pseudo-log-likelihoods of sentences under one masked LM: `model.apply` of an albert_jax.model.Albert."""

  def __init__(self, model, params, tokenizer: tokenizer_lib.Tokenizer, method: str = 'pll', batch_size: int = 256):
    if method not in METHODS:
      raise BlimpError(f'method {method!r} is not one of {", ".join(METHODS)}.')
    self.params, self.tokenizer, self.method, self.batch_size = params, tokenizer, method, batch_size
    self.max_length = model.config.max_position_embeddings

    @jax.jit
    def log_probs(params, ids, attention_mask, positions, targets):
      out = model.apply({'params': params}, input_ids=ids, attention_mask=attention_mask,
                        masked_lm_positions=positions[:, None])
      logp = jax.nn.log_softmax(out.mlm_logits[:, 0].astype(jnp.float32), axis=-1)
      return jnp.take_along_axis(logp, targets[:, None], axis=1)[:, 0]
    self._log_probs = log_probs

  def pieces(self, sentences: list) -> list:
    return self.tokenizer.encode(sentences)

  def fits(self, pieces) -> bool:
    return len(pieces) + 2 <= self.max_length

  def score(self, sentences: list, progress=None) -> np.ndarray:
    """Each sentence's pseudo-log-likelihood (float64); every sentence must fit the model's positions."""
    ids = self.pieces(sentences)
    too_long = next((s for s, p in zip(sentences, ids) if not self.fits(p)), None)
    if too_long is not None:
      raise BlimpError(f'{too_long!r} is longer than the model\'s {self.max_length} positions.')
    return self.score_pieces(ids, progress)

  def score_pieces(self, ids: list, progress=None) -> np.ndarray:
    """score() of sentences already tokenized, each fitting the model's positions."""
    copies = masked_copies(ids, self.tokenizer.word_start, self.method)
    totals = np.zeros(len(ids), np.float64)
    by_length = {}
    for copy in copies:  # lengths padded to a multiple of 8: a handful of compiled shapes
      by_length.setdefault(-(-(len(ids[copy[0]]) + 2) // 8) * 8, []).append(copy)
    done = 0
    for length in sorted(by_length):
      group = by_length[length]
      for start in range(0, len(group), self.batch_size):
        rows = group[start:start + self.batch_size]
        n = self.batch_size  # every batch full (the last padded with copies of a row): one shape per length
        batch_ids = np.zeros((n, min(length, self.max_length)), np.int32)
        mask = np.zeros_like(batch_ids)
        positions, targets = np.zeros(n, np.int32), np.zeros(n, np.int32)
        for r in range(n):
          s, position, target, masked = rows[min(r, len(rows) - 1)]
          row = np.concatenate([[tokenizer_lib.CLS], ids[s], [tokenizer_lib.SEP]])
          row[masked] = tokenizer_lib.MASK
          batch_ids[r, :len(row)], mask[r, :len(row)] = row, 1
          positions[r], targets[r] = position, target
        logp = np.asarray(self._log_probs(self.params, batch_ids, mask, positions, targets), np.float64)
        np.add.at(totals, [c[0] for c in rows], logp[:len(rows)])
        done += len(rows)
        if progress:
          progress(done, len(copies))
    return totals


def score_pairs(scorer: Scorer, pairs: list, progress=None) -> dict:
  """{'pairs': the pairs scored, 'correct': a bool each, 'good', 'bad': their PLLs, 'skipped': pairs with a sentence
  longer than the model's positions}."""
  good_ids, bad_ids = scorer.pieces([p.good for p in pairs]), scorer.pieces([p.bad for p in pairs])
  fits = [scorer.fits(g) and scorer.fits(b) for g, b in zip(good_ids, bad_ids)]
  keep = lambda items, kept=True: [item for item, f in zip(items, fits) if f == kept]
  scored, skipped = keep(pairs), keep(pairs, kept=False)
  plls = scorer.score_pieces(keep(good_ids) + keep(bad_ids), progress)
  good, bad = plls[:len(scored)], plls[len(scored):]
  return {'pairs': scored, 'skipped': skipped, 'good': good, 'bad': bad, 'correct': good > bad}


def accuracies(pairs: list, correct) -> dict:
  """Per paradigm, per phenomenon (the mean of its paradigms) and overall (the mean of the paradigms), as the
  BLiMP paper averages."""
  by_paradigm, phenomenon_of = {}, {}
  for p, c in zip(pairs, correct):
    by_paradigm.setdefault(p.paradigm, []).append(bool(c))
    phenomenon_of[p.paradigm] = p.phenomenon
  paradigms = {u: float(np.mean(c)) for u, c in sorted(by_paradigm.items())}
  return summarize(paradigms, phenomenon_of)


def summarize(paradigms: dict, phenomenon_of: dict) -> dict:
  phenomena = {}
  for u, acc in paradigms.items():
    phenomena.setdefault(phenomenon_of[u], []).append(acc)
  return {'overall': float(np.mean(list(paradigms.values()))) if paradigms else float('nan'),
          'phenomena': {t: float(np.mean(a)) for t, a in sorted(phenomena.items())}, 'paradigms': paradigms}


def published_on(published: dict, phenomenon_of: dict) -> dict:
  """The published models' figures averaged over the same paradigms as ours: {model: summarize(...)}."""
  shared = [u for u in phenomenon_of if u in published]
  return {m: summarize({u: published[u][m] for u in shared if m in published[u]}, phenomenon_of)
          for m in PUBLISHED_MODELS}


def paired_difference(ours: dict, baseline: dict) -> dict:
  """Accuracy difference (ours - baseline) over the pairs both scored, overall and per phenomenon, each with its
  paired standard error: the standard deviation of the per-pair differences over the square root of their
  number."""
  def key_map(result):
    return {(u, i): bool(c) for u, bits in result['correct'].items()
            for i, c in zip(result['indices'][u], (b == '1' for b in bits))}
  a, b = key_map(ours), key_map(baseline)
  shared = sorted(set(a) & set(b))
  if not shared:
    raise BlimpError('the baseline scored none of the pairs scored here: score the same BLiMP files.')
  term = {u: t for t, us in ours['paradigms_of'].items() for u in us}

  def diff(keys):
    mean, se = stats.mean_and_se([a[k] - b[k] for k in keys])
    return {'difference': mean, 'paired_se': float('nan') if se is None else se, 'pairs': len(keys)}
  phenomena = {}
  for k in shared:
    phenomena.setdefault(term[k[0]], []).append(k)
  return {'overall': diff(shared), 'phenomena': {t: diff(ks) for t, ks in sorted(phenomena.items())}}


class HeldOut:
  """What train.py scores with each held-out evaluation where config.train.blimp names a BLiMP folder: PLL
  accuracy on train.blimp_pairs pairs of each paradigm, the mean over paradigms as in the full score."""

  def __init__(self, config, tokenizer: tokenizer_lib.Tokenizer):
    self.pairs = read_pairs(config.train.blimp, config.train.blimp_pairs)  # bad files stop the run before it starts
    self.tokenizer, self.scorer = tokenizer, None

  def __call__(self, model, params) -> dict:
    if self.scorer is None:
      self.scorer = Scorer(model, params, self.tokenizer)
    self.scorer.params = params
    scored = score_pairs(self.scorer, self.pairs)
    return {'eval_blimp_accuracy': accuracies(scored['pairs'], scored['correct'])['overall'],
            'eval_blimp_count': len(scored['pairs'])}


# ---- The command.

def load_checkpoint(path: str, vocab: Optional[str], random_init: bool, step: Optional[int] = None, seed: int = 0):
  """(model, params, tokenizer, a line saying what was loaded) for any checkpoint from_pretrained reads (of a
  pretraining workdir: its best, or checkpoint `step`)."""
  from albert_jax import interop
  from albert_jax.model import Albert, ModelConfig, init_params
  import flax.linen as nn
  config, params, source = interop.read(path, step)
  if config.get('head'):
    raise BlimpError(f'{path} is a fine-tuned {config.head.architecture} without the MLM head BLiMP scores with: '
                     f'give the pretrained checkpoint it started from.')
  model = Albert(ModelConfig.from_config(config.model))
  if random_init:  # the same shape, the initialisation training starts from
    params = jax.tree.map(np.asarray, nn.unbox(init_params(model, jax.random.key(seed))))
    source = f'random weights (seed {seed}) of the shape of {source}'
  tokenizer = interop.tokenizer_of(path, config, vocab)
  if tokenizer is None:
    raise BlimpError(f'{path} names no vocabulary: give --vocab=FILE.model, the SentencePiece model it was '
                     f'trained with.')
  return model, params, tokenizer, source


def run(checkpoint: str, data: str, method: str = 'pll', per_paradigm: Optional[int] = None,
        random_init: bool = False, vocab: Optional[str] = None, batch_size: int = 256, step: Optional[int] = None,
        say=print) -> dict:
  """Scores the checkpoint on the BLiMP files in `data`; returns the result that main prints and writes."""
  pairs = read_pairs(data, per_paradigm)
  model, params, tokenizer, source = load_checkpoint(checkpoint, vocab, random_init, step)
  say(f'BLiMP: {len(pairs)} pairs of {len({p.paradigm for p in pairs})} paradigms, {method}, {source}')
  scorer = Scorer(model, params, tokenizer, method, batch_size)
  start, last = time.time(), [0.0]

  def progress(done, total):
    now = time.time() - start
    if now - last[0] >= 10 or done == total:
      last[0] = now
      pairs_done = len(pairs) * done / total
      say(f'  {done}/{total} masked copies, {pairs_done / now:.1f} pairs/s, ETA {now * (total - done) / done:.0f} s')
  scored = score_pairs(scorer, pairs, progress)
  seconds = time.time() - start
  phenomenon_of = {p.paradigm: p.phenomenon for p in pairs}
  result = {'checkpoint': source, 'method': method, 'pairs': len(scored['pairs']), 'skipped': len(scored['skipped']),
            'seconds': seconds, 'pairs_per_second': len(scored['pairs']) / seconds,
            **accuracies(scored['pairs'], scored['correct']),
            'published': published_on(read_published(data), phenomenon_of)}
  by_paradigm = {}
  for p, c, g, b in zip(scored['pairs'], scored['correct'], scored['good'], scored['bad']):
    by_paradigm.setdefault(p.paradigm, []).append((p.index, c, g, b))
  result['paradigms_of'] = {}
  for u, t in sorted(phenomenon_of.items()):
    result['paradigms_of'].setdefault(t, []).append(u)
  result['indices'] = {u: [r[0] for r in rows] for u, rows in by_paradigm.items()}
  result['correct'] = {u: ''.join('1' if r[1] else '0' for r in rows) for u, rows in by_paradigm.items()}
  result['pll'] = {u: [[round(r[2], 5), round(r[3], 5)] for r in rows] for u, rows in by_paradigm.items()}
  if scored['skipped']:
    say(f'skipped {len(scored["skipped"])} pairs with a sentence longer than the model\'s '
        f'{model.config.max_position_embeddings} positions')
  return result


def table(result: dict, baseline: Optional[dict] = None) -> str:
  """Per paradigm, per phenomenon and overall: ours, the published models on the same paradigms, and the
  difference from the baseline with its paired standard error."""
  published = result['published']
  models = [m for m in PUBLISHED_MODELS if published.get(m, {}).get('paradigms')]
  difference = paired_difference(result, baseline) if baseline else None
  head = (['paradigm, phenomenon', 'pairs', 'ours'] + [PUBLISHED_MODELS[m] for m in models] +
          (['- baseline (paired SE)'] if baseline else []))
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  counts = {u: len(i) for u, i in result['indices'].items()}

  def row(name, pairs, ours, theirs, diff=None):
    cells = [name, str(pairs), f'{ours:.3f}'] + [f'{t:.3f}' if t is not None else '' for t in theirs]
    if baseline:
      cells.append(f'{diff["difference"]:+.3f} ({diff["paired_se"]:.3f})' if diff else '')
    lines.append('| ' + ' | '.join(cells) + ' |')
  for u, acc in result['paradigms'].items():
    row(u, counts[u], acc, [published[m]['paradigms'].get(u) for m in models])
  for t, acc in result['phenomena'].items():
    row(f'**{t}**', sum(counts[u] for u in result['paradigms_of'][t]), acc,
        [published[m]['phenomena'].get(t) for m in models], difference and difference['phenomena'].get(t))
  row('**overall**', result['pairs'], result['overall'], [published[m]['overall'] for m in models],
      difference and difference['overall'])
  return '\n'.join(lines)


def main(argv):
  del argv
  baseline = json.loads(paths.path(_BASELINE.value).read_text()) if _BASELINE.value else None
  result = run(_CHECKPOINT.value, _DATA.value, _METHOD.value, _PAIRS.value, _RANDOM.value, _VOCAB.value,
               _BATCH.value, _STEP.value)
  print(table(result, baseline))
  print(f'{result["pairs"]} pairs in {result["seconds"]:.0f} s ({result["pairs_per_second"]:.1f} pairs/s); '
        f'overall {result["overall"]:.4f}')
  if _OUTPUT.value:
    paths.path(_OUTPUT.value).write_text(json.dumps(result, indent=1) + '\n')
    print(f'wrote {_OUTPUT.value}')


if __name__ == '__main__':
  _CHECKPOINT = flags.DEFINE_string('checkpoint', None, 'A pretraining workdir, a checkpoint of ours, an HF '
                                    'AlbertForPreTraining or AlbertForMaskedLM directory, an original TF ALBERT.')
  _DATA = flags.DEFINE_string('data', None, 'The folder of BLiMP UID.jsonl files (and published_results.jsonl).')
  _METHOD = flags.DEFINE_enum('method', 'pll', METHODS, 'pll: mask one piece at a time; pll_word: also the rest of '
                              'its word to the right (Kauf and Ivanova, 2023).')
  _PAIRS = flags.DEFINE_integer('pairs_per_paradigm', None, 'Score this many pairs of each paradigm, evenly spaced '
                                'through its file (default: all).')
  _STEP = flags.DEFINE_integer('step', None, 'Of a pretraining workdir: this checkpoint (default: the best by '
                               'held-out MLM accuracy).')
  _RANDOM = flags.DEFINE_bool('random_init', False, 'Score random weights of the checkpoint\'s shape instead.')
  _VOCAB = flags.DEFINE_string('vocab', None, 'The SentencePiece model (default: the run\'s data.vocab, or the '
                               'directory\'s spiece.model).')
  _BATCH = flags.DEFINE_integer('batch_size', 256, 'Masked copies per batch.')
  _BASELINE = flags.DEFINE_string('baseline', None, 'Another run\'s JSON: the difference and its paired standard '
                                  'error, over the pairs both scored.')
  _OUTPUT = flags.DEFINE_string('output', None, 'Write the result here as JSON.')
  flags.mark_flags_as_required(['checkpoint', 'data'])
  run_cli(main)
