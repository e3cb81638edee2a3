"""SQuAD scoring as the official v1.1 and v2.0 evaluation scripts compute it.

  python -m albert_jax.downstream.squad_eval DATA.json PREDICTIONS.json [--na_prob_file=NA.json]

prints the official script's keys as JSON: for v1.1 data {exact_match, f1}; for v2.0 {exact, f1, total,
HasAns_exact, HasAns_f1, HasAns_total, NoAns_exact, NoAns_f1, NoAns_total}, with a no-answer probability file also
best_exact, best_exact_thresh, best_f1, best_f1_thresh. Scores are percentages, as the scripts print them. The
files may be local or in a bucket (gs://).

Answers are normalised as the scripts do (lowercase, punctuation and the articles a/an/the removed, whitespace
collapsed); each prediction scores its best over the gold answers. v2.0: a question without gold answers scores 1
only for an empty prediction, and its gold answers are taken as [''].
"""
import collections
import json
import re
import string
import sys

from albert_jax import paths

_ARTICLES = re.compile(r'\b(a|an|the)\b', re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
  text = ''.join(c for c in text.lower() if c not in _PUNCTUATION)
  return ' '.join(_ARTICLES.sub(' ', text).split())


def exact(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, v2: bool = True) -> float:
  predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if v2 and (not predicted or not wanted):  # v2.0: both empty (no answer) is right; one empty is wrong
    return float(predicted == wanted)
  common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
  if not common:
    return 0.0
  precision, recall = common / len(predicted), common / len(wanted)
  return 2 * precision * recall / (precision + recall)


def questions(dataset: list) -> dict:
  """{question id: gold answer texts} of a SQuAD file's `data`; v2.0's unanswerable ones get []."""
  return {qa['id']: [a['text'] for a in qa['answers']]
          for article in dataset for paragraph in article['paragraphs'] for qa in paragraph['qas']}


def evaluate_v1(dataset: list, predictions: dict) -> dict:
  """The v1.1 script: questions without a prediction count as wrong (it prints a message for each)."""
  gold = questions(dataset)
  em = sum(max(exact(predictions[q], g) for g in answers) for q, answers in gold.items() if q in predictions)
  f = sum(max(f1(predictions[q], g, v2=False) for g in answers) for q, answers in gold.items() if q in predictions)
  return {'exact_match': 100.0 * em / len(gold), 'f1': 100.0 * f / len(gold)}


def raw_scores(gold: dict, predictions: dict) -> tuple:
  """Per question (v2.0 rules): exact and F1 against the gold answers, [''] for an unanswerable question."""
  exact_scores, f1_scores = {}, {}
  for qid, answers in gold.items():
    if qid not in predictions:
      continue  # the v2.0 script skips (and reports) questions without a prediction
    answers = [a for a in answers if normalize_answer(a)] or ['']
    exact_scores[qid] = max(exact(predictions[qid], a) for a in answers)
    f1_scores[qid] = max(f1(predictions[qid], a) for a in answers)
  return exact_scores, f1_scores


def apply_threshold(scores: dict, na_probs: dict, has_answer: dict, threshold: float) -> dict:
  """A question whose no-answer probability is above `threshold` is answered with nothing."""
  return {qid: (float(not has_answer[qid]) if na_probs[qid] > threshold else s) for qid, s in scores.items()}


def _mean(scores: dict, qids) -> dict:
  qids = list(qids)
  return {'exact': 100.0 * sum(scores[0][q] for q in qids) / len(qids),
          'f1': 100.0 * sum(scores[1][q] for q in qids) / len(qids), 'total': len(qids)}


def best_threshold(predictions: dict, scores: dict, na_probs: dict, has_answer: dict) -> tuple:
  """(best score in %, its threshold): questions sorted by no-answer probability, each prefix answered."""
  score = current = sum(not h for h in has_answer.values())  # every question answered with nothing
  threshold = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      current += scores[qid]
    elif predictions[qid]:
      current -= 1
    if current > score:
      score, threshold = current, na_probs[qid]
  return 100.0 * score / len(scores), threshold


def evaluate_v2(dataset: list, predictions: dict, na_probs: dict | None = None, na_prob_thresh: float = 1.0) -> dict:
  gold = questions(dataset)
  has_answer = {qid: bool(answers) for qid, answers in gold.items()}
  exact_raw, f1_raw = raw_scores(gold, predictions)
  probs = na_probs if na_probs is not None else {q: 0.0 for q in gold}
  thresholded = (apply_threshold(exact_raw, probs, has_answer, na_prob_thresh),
                 apply_threshold(f1_raw, probs, has_answer, na_prob_thresh))
  out = _mean(thresholded, thresholded[0])
  for name, wanted in (('HasAns', True), ('NoAns', False)):
    qids = [q for q in thresholded[0] if has_answer[q] == wanted]
    if qids:
      out.update({f'{name}_{k}': v for k, v in _mean(thresholded, qids).items()})
  if na_probs is not None:
    out['best_exact'], out['best_exact_thresh'] = best_threshold(predictions, exact_raw, probs, has_answer)
    out['best_f1'], out['best_f1_thresh'] = best_threshold(predictions, f1_raw, probs, has_answer)
  return out


def is_v2(data: dict) -> bool:
  return str(data.get('version', '')).startswith('v2') or any(
      'is_impossible' in qa for article in data['data'] for p in article['paragraphs'] for qa in p['qas'])


def _read_json(path: str, what: str):
  try:
    return json.loads(paths.path(path).read_text(encoding='utf-8'))
  except (OSError, ValueError) as e:  # missing, unreadable, not UTF-8, not JSON
    _fail(f'{what} {path} cannot be read ({e}).')


def _fail(message: str) -> None:
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


USAGE = ('usage: python -m albert_jax.downstream.squad_eval DATA.json PREDICTIONS.json [--na_prob_file=NA.json] '
         '[--na_prob_thresh=1.0]')


def main(argv: list) -> None:
  if {'-h', '--help'} & set(argv[1:]):
    print(f'{USAGE}\n\nScores SQuAD predictions as the official v1.1 / v2.0 scripts do; prints the metrics as JSON.')
    return
  args = [a for a in argv[1:] if not a.startswith('--')]
  options = dict(a[2:].split('=', 1) for a in argv[1:] if a.startswith('--') and '=' in a)
  if len(args) != 2 or set(options) - {'na_prob_file', 'na_prob_thresh'}:
    _fail(USAGE)
  try:
    paths.check_reachable(*args, options.get('na_prob_file'))
  except paths.PathError as e:
    _fail(str(e))
  data, predictions = _read_json(args[0], 'the SQuAD data file'), _read_json(args[1], 'the predictions file')
  if not isinstance(data, dict) or 'data' not in data:
    _fail(f'{args[0]} is not a SQuAD data file (no "data" list).')
  if not is_v2(data):
    print(json.dumps(evaluate_v1(data['data'], predictions)))
    return
  na_probs = _read_json(options['na_prob_file'], 'the no-answer probability file') if 'na_prob_file' in options \
      else None
  print(json.dumps(evaluate_v2(data['data'], predictions, na_probs, float(options.get('na_prob_thresh', 1.0)))))


if __name__ == '__main__':
  main(sys.argv)
