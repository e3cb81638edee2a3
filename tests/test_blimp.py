"""BLiMP scoring against transformers' AlbertForMaskedLM on the same exported checkpoint and real BLiMP pairs; the
exported tokenizer against ours; the summaries against figures computed by hand; bad input."""
import json
import math
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import linen as nn

from albert_jax import blimp, interop
from albert_jax.model import Albert, ModelConfig, init_params
from conftest import ROOT

BLIMP = ROOT.parent / 'shared' / 'data' / 'blimp'
PARADIGMS = ('anaphor_gender_agreement', 'determiner_noun_agreement_1', 'adjunct_island', 'causative')
pytestmark = pytest.mark.skipif(not BLIMP.is_dir(), reason='needs ../shared/data/blimp')


@pytest.fixture(scope='module')
def blimp_slice(tmp_path_factory):
  """The first 12 pairs of four paradigms of three phenomena, byte for byte, with the published figures."""
  folder = tmp_path_factory.mktemp('blimp')
  for uid in PARADIGMS:
    lines = (BLIMP / f'{uid}.jsonl').read_text().splitlines(keepends=True)[:12]
    (folder / f'{uid}.jsonl').write_text(''.join(lines))
  (folder / blimp.PUBLISHED).write_bytes((BLIMP / blimp.PUBLISHED).read_bytes())
  return folder


@pytest.fixture(scope='module')
def exported(tiny_config, builtin_tokenizer, tmp_path_factory):
  """Random weights of the tiny model (LayerNorms and biases moved off 1 and 0), exported to HF with the built-in
  vocabulary as convert --to=hf writes them."""
  cfg = ModelConfig.from_config(tiny_config.model)
  params = jax.tree.map(np.asarray, nn.unbox(init_params(Albert(cfg), jax.random.key(3))))
  rng = np.random.RandomState(0)
  params = jax.tree.map(lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(np.float32), params)
  directory = tmp_path_factory.mktemp('hf')
  interop.save_hf(directory, params, cfg, tokenizer=builtin_tokenizer)
  return directory


def hf_pll(model, tokenizer, sentence: str, word_start=None) -> float:
  """Pseudo-log-likelihood through transformers: each piece masked in turn (with word_start, also the rest of its
  word to the right), the log-softmax of its logits at the true piece, summed in float64."""
  import torch
  ids = tokenizer(sentence, return_tensors='pt')['input_ids'][0]
  rows, targets = [], []
  for i in range(1, len(ids) - 1):
    row = ids.clone()
    row[i] = tokenizer.mask_token_id
    j = i + 1
    while word_start is not None and j < len(ids) - 1 and not word_start[int(ids[j])]:
      row[j] = tokenizer.mask_token_id
      j += 1
    rows.append(row)
    targets.append(i)
  with torch.no_grad():
    logits = model(input_ids=torch.stack(rows)).logits.double()
  logp = torch.log_softmax(logits, dim=-1)
  return float(sum(logp[r, t, ids[t]] for r, t in enumerate(targets)))


def test_pll_equals_transformers_on_real_pairs_and_the_tokenizer_is_ours(exported, blimp_slice, builtin_tokenizer):
  import transformers
  hf_tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
  hf_model = transformers.AlbertForMaskedLM.from_pretrained(exported).eval()
  pairs = blimp.read_pairs(blimp_slice, per_paradigm=3)
  sentences = [s for p in pairs for s in (p.good, p.bad)]
  # The exported tokenizer gives our ids, [CLS] and [SEP] around them.
  for sentence, ours in zip(sentences, builtin_tokenizer.encode(sentences)):
    assert hf_tokenizer(sentence)['input_ids'] == [2, *ours.tolist(), 3], sentence
  model, params, tokenizer, source = blimp.load_checkpoint(str(exported), None, False)
  assert tokenizer.path.endswith('spiece.model')  # found in the directory, as HF's releases carry it
  for method, word_start in (('pll', None), ('pll_word', builtin_tokenizer.word_start)):
    ours = blimp.Scorer(model, params, tokenizer, method, batch_size=16).score(sentences)
    theirs = [hf_pll(hf_model, hf_tokenizer, s, word_start) for s in sentences]
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  # The two methods differ where a word has several pieces, and only there.
  split = [s for s, ids in zip(sentences, builtin_tokenizer.encode(sentences))
           if not builtin_tokenizer.word_start[ids[1:]].all()]
  assert split, 'no sentence of the slice has a word of several pieces'
  whole = [s for s in sentences if s not in split]
  pll, word = (blimp.Scorer(model, params, tokenizer, m, 16).score(split + whole) for m in blimp.METHODS)
  assert np.all(pll[:len(split)] != word[:len(split)]) and np.allclose(pll[len(split):], word[len(split):])
  fill = transformers.pipeline('fill-mask', model=str(exported))
  assert len(fill('The river flows into the [MASK].')) == 5


def test_masked_copies_of_a_word_of_several_pieces():
  word_start = np.array([True, True, True, True, True, True, False, False, True, True])
  # pieces 5 6 7 (one word), 8, 9: PLL masks one at a time; PLL-word also the rest of its word, to the right.
  assert [c[3] for c in blimp.masked_copies([[5, 6, 7, 8]], word_start, 'pll')] == [[1], [2], [3], [4]]
  assert [c[3] for c in blimp.masked_copies([[5, 6, 7, 8]], word_start, 'pll_word')] == [[1, 2, 3], [2, 3], [3],
                                                                                         [4]]
  assert [c[:3] for c in blimp.masked_copies([[9], [5, 6]], word_start, 'pll')] == [(0, 1, 9), (1, 1, 5), (1, 2, 6)]


def test_accuracies_published_figures_and_paired_error_by_hand(blimp_slice):
  pairs = blimp.read_pairs(blimp_slice)
  assert len(pairs) == 48 and {p.paradigm for p in pairs} == set(PARADIGMS)
  every_other = [i % 2 == 0 for i in range(48)]  # 6 of each paradigm's 12
  ours = blimp.accuracies(pairs, [c and p.paradigm != 'causative' for p, c in zip(pairs, every_other)])
  assert ours['paradigms'] == {'adjunct_island': 0.5, 'anaphor_gender_agreement': 0.5, 'causative': 0.0,
                               'determiner_noun_agreement_1': 0.5}
  assert ours['phenomena']['argument_structure'] == 0.0 and ours['overall'] == pytest.approx(1.5 / 4)
  # The published figures, averaged over the same four paradigms (from the file, line by line).
  rows = [json.loads(line) for line in (BLIMP / blimp.PUBLISHED).read_text().splitlines()]
  gpt2 = {r['UID']: r['gpt2'] for r in rows if r['UID'] in PARADIGMS}
  published = blimp.published_on(blimp.read_published(blimp_slice), {p.paradigm: p.phenomenon for p in pairs})
  assert published['gpt2']['overall'] == pytest.approx(sum(gpt2.values()) / 4)
  assert published['ngram']['paradigms']['causative'] == next(r['ngram'] for r in rows if r['UID'] == 'causative')
  # Paired: ours against a baseline that gets every pair of the first two paradigms' files right.
  def result(correct):
    by = {}
    for p, c in zip(pairs, correct):
      by.setdefault(p.paradigm, []).append((p.index, c))
    return {'indices': {u: [i for i, _ in r] for u, r in by.items()},
            'correct': {u: ''.join('1' if c else '0' for _, c in r) for u, r in by.items()},
            'paradigms_of': {t: sorted({p.paradigm for p in pairs if p.phenomenon == t})
                             for t in {p.phenomenon for p in pairs}}}
  a = [c and p.paradigm != 'causative' for p, c in zip(pairs, every_other)]
  b = [p.paradigm in PARADIGMS[:2] for p in pairs]
  d = np.array(a, float) - np.array(b, float)
  diff = blimp.paired_difference(result(a), result(b))
  assert diff['overall']['difference'] == pytest.approx(d.mean())
  assert diff['overall']['paired_se'] == pytest.approx(d.std(ddof=1) / math.sqrt(48))
  assert diff['overall']['pairs'] == 48


def test_a_stratified_subset_spans_each_file(blimp_slice):
  pairs = blimp.read_pairs(blimp_slice, per_paradigm=4)
  assert [p.index for p in pairs if p.paradigm == 'causative'] == [0, 4, 7, 11]


def test_bad_input_names_the_file_and_line_and_long_sentences_are_skipped_and_counted(blimp_slice, tmp_path,
                                                                                      exported):
  broken = tmp_path / 'broken'
  broken.mkdir()
  good = (blimp_slice / 'causative.jsonl').read_text().splitlines()
  (broken / 'causative.jsonl').write_text('\n'.join(good[:2] + ['{"sentence_good": "A cat."'] + good[2:]) + '\n')
  with pytest.raises(blimp.BlimpError, match=r'causative.jsonl:3: not JSON'):
    blimp.read_pairs(broken)
  (broken / 'causative.jsonl').write_text(good[0] + '\n' + json.dumps({'sentence_good': 'A cat.', 'UID': 'x'}) + '\n')
  with pytest.raises(blimp.BlimpError, match=r'causative.jsonl:2: lacks sentence_bad, linguistics_term'):
    blimp.read_pairs(broken)
  with pytest.raises(blimp.BlimpError, match='holds no BLiMP paradigm files'):
    blimp.read_pairs(tmp_path)
  # A pair whose sentence needs more than the model's 64 positions is skipped, counted and said.
  long = json.loads(good[0])
  long['sentence_good'] = ' '.join(['the cat'] * 40) + '.'
  (broken / 'causative.jsonl').write_text('\n'.join([json.dumps(long)] + good[1:4]) + '\n')
  said = []
  result = blimp.run(str(exported), str(broken), say=said.append)
  assert result['pairs'] == 3 and result['skipped'] == 1 and len(result['correct']['causative']) == 3
  assert "skipped 1 pairs with a sentence longer than the model's 64 positions" in said


def test_cli_prints_the_table_and_writes_json_and_refuses_bad_data_in_one_line(exported, blimp_slice, tmp_path):
  def cli(*args):
    return subprocess.run([sys.executable, '-m', 'albert_jax.blimp', f'--checkpoint={exported}', *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
  out = cli(f'--data={blimp_slice}', '--pairs_per_paradigm=6', f'--output={tmp_path / "a.json"}')
  assert out.returncode == 0, out.stderr
  result = json.loads((tmp_path / 'a.json').read_text())
  assert result['pairs'] == 24 and set(result['phenomena']) == {'anaphor_agreement', 'determiner_noun_agreement',
                                                                'island_effects', 'argument_structure'}
  lines = out.stdout.splitlines()
  assert '| paradigm, phenomenon | pairs | ours | 5-gram | LSTM | TXL | GPT-2 |' in lines
  assert f'| **overall** | 24 | {result["overall"]:.3f} | {result["published"]["ngram"]["overall"]:.3f} |' in \
      out.stdout
  assert re.search(r'24 pairs in \d+ s \([\d.]+ pairs/s\)', out.stdout)
  # Random weights of its shape against it: the difference with its paired standard error in the last column.
  random = blimp.run(str(exported), str(blimp_slice), per_paradigm=6, random_init=True, say=lambda line: None)
  assert random['checkpoint'].startswith('random weights (seed 0) of the shape of ')
  assert random['pll'] != result['pll']  # other weights: other scores
  assert re.search(r'\| \*\*overall\*\* \| 24 \| [\d.]+ \|.* \| [+-][\d.]+ \([\d.]+\) \|$',
                   blimp.table(random, result))
  bad = cli(f'--data={tmp_path}')
  assert bad.returncode == 2 and bad.stderr.strip().count('\n') == 0 and 'holds no BLiMP paradigm files' in bad.stderr
