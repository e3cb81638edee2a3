"""The input pipeline against the original's definitions (a direct transcription in original_reference.py),
determinism, exact resume, per-host shards, TFDS sources through tfds.testing.mock_data, and bad input."""
import collections
import json
import random
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

import original_reference as original
from albert_jax.data import instances as instances_lib
from albert_jax.data import masking, pipeline, sources, tokenizer, vocab
from albert_jax.errors import ConfigError
from conftest import ROOT


def documents_of(config, tok, limit=400):
  """Tokenized documents of the built-in corpus, as the pipeline makes them."""
  source = sources.open_source(sources.Spec('builtin', '', 1.0), config.data.tfds_data_dir)
  stream = pipeline._Stream(source, 0, 0, min(limit, len(source)), config.data, config.data.sentence_task, tok,
                           None)
  return stream._documents(0, min(limit, len(source)))


# --- tokenizer --------------------------------------------------------------------------------------------------

def test_builtin_vocabulary_has_the_albert_control_ids(builtin_tokenizer):
  sp = builtin_tokenizer.sp
  assert [sp.id_to_piece(i) for i in range(5)] == ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]']
  assert builtin_tokenizer.vocab_size == 4000
  # The original's start-piece rule: '▁x' and punctuation start words, plain lowercase continuations do not.
  ids = {p: sp.piece_to_id(p) for p in ('▁the', '.', 's')}
  assert builtin_tokenizer.word_start[ids['▁the']] and builtin_tokenizer.word_start[ids['.']]
  assert not builtin_tokenizer.word_start[ids['s']]


def test_vocabulary_that_does_not_fit_is_refused(builtin_tokenizer, tmp_path):
  with pytest.raises(tokenizer.VocabError, match='has 4000 pieces but model.vocab_size is 30000'):
    tokenizer.Tokenizer(builtin_tokenizer.path, vocab_size=30000)
  with pytest.raises(tokenizer.VocabError, match='does not exist.*python -m albert_jax.data.vocab'):
    tokenizer.Tokenizer(tmp_path / 'missing.model')
  plain = tmp_path / 'plain'  # a SentencePiece model without the ALBERT control symbols
  spm.SentencePieceTrainer.train(sentence_iterator=iter(['hello world, this is text.'] * 200 + ['abc def'] * 50),
                                 model_prefix=str(plain), vocab_size=23, minloglevel=2)
  with pytest.raises(tokenizer.VocabError, match='lacks the ALBERT control symbols'):
    tokenizer.Tokenizer(str(plain) + '.model')


def test_preprocessing_is_the_originals():
  assert tokenizer.preprocess_text('  Café  NAÏVE\tÉté ') == 'cafe naive ete'


def test_word_starts_follow_the_originals_rule(builtin_tokenizer):
  sp = builtin_tokenizer.sp
  expected = [original.is_start_piece_sp(sp.id_to_piece(i)) for i in range(sp.get_piece_size())]
  np.testing.assert_array_equal(builtin_tokenizer.word_start, expected)
  # What its punctuation list lacks (' < = >) makes a piece a word start: it is "outside a-z and the list".
  for piece, starts in (("',", True), ('==', True), ('=', True), (',', True), ('ing', False), ('s.', False)):
    assert original.is_start_piece_sp(piece) is starts, piece
  on_corpus = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
               if builtin_tokenizer.word_start[i] and not sp.id_to_piece(i).startswith(('▁', '<'))]
  assert any(set(p) & set("'<=>") for p in on_corpus)  # the vocabulary has such pieces: the rule is exercised


def test_digit_comma_pieces_are_split_as_the_original(tiny_config, builtin_tokenizer):
  sp = builtin_tokenizer.sp
  assert '1,' in sp.encode('x 1, y', out_type=str)  # plain SentencePiece keeps the piece whole
  pieces = builtin_tokenizer.decode_pieces(builtin_tokenizer.encode(['x 1, y'])[0])
  assert '1,' not in pieces and pieces[pieces.index('▁1') + 1] == ','
  source = sources.open_source(sources.Spec('builtin', '', 1.0), tiny_config.data.tfds_data_dir)
  texts = ['in 1990, the year', 'values 1,000,000, and 3.0, then', 'a1, b22,c', 'x 7, y 42,', 'no digits, here']
  texts += [sentence for document in source.read(0, 300) for sentence in document]
  ours = builtin_tokenizer.encode(texts)
  changed = 0
  for text, ids in zip(texts, ours):
    processed = tokenizer.preprocess_text(text)
    assert ids.tolist() == original.encode_ids(sp, processed), text
    changed += ids.tolist() != sp.encode(processed)
  assert changed >= 5


def test_vocab_cli_trains_from_a_text_source(tmp_path, capsys):
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text('\n\n'.join(f'Sentence number {i} talks about apples and pears.\nAnother line {i * 7}.'
                                for i in range(300)))
  out = subprocess.run([sys.executable, '-m', 'albert_jax.data.vocab', f'--input=lines:{corpus}',
                        '--vocab_size=60', f'--output={tmp_path / "v"}'], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
  assert out.returncode == 0, out.stderr
  assert tokenizer.Tokenizer(tmp_path / 'v.model', vocab_size=60).vocab_size == 60
  # Progress while the sentences are read (here after every one of the 600), then a line as SentencePiece starts.
  lines = out.stdout.splitlines()
  done = [line for line in lines if line.startswith('vocab: 600 sentences read in ')]
  assert len(done) == 1 and done[0].endswith(' s; SentencePiece is training on them (minutes for millions)'), lines
  assert lines[-1].startswith(f'wrote {tmp_path / "v.model"}: 60 pieces in ')
  path = vocab.train_on_source(f'lines:{corpus}', 60, tmp_path / 'w', progress_every_s=0)
  printed = capsys.readouterr().out.splitlines()
  assert [line.split(' (')[0] for line in printed[:-1]] == [f'vocab: {n:,} sentences read' for n in range(1, 601)]
  assert tokenizer.Tokenizer(path).vocab_size == 60




def test_vocab_samples_every_source_by_weight_over_its_whole_length(tmp_path):
  """A 3:1 mixture limited to 4,000 sentences gives 3,000 and 1,000 of them, drawn from all over each source (the
  old sampler took the first 4,000 sentences: the first source's opening documents alone)."""
  for name in ('alpha', 'beta'):
    (tmp_path / f'{name}.txt').write_text('\n\n'.join(f'{name} document {d} line one.\n{name} document {d} line two.'
                                                      for d in range(4000)))
  counts = {}
  spec = f'lines:{tmp_path}/alpha.txt@3,lines:{tmp_path}/beta.txt@1'
  sampled = list(vocab.sentences(spec, limit=4000, counts=counts))
  assert len(sampled) == 4000 and sum(s.startswith('alpha') for s in sampled) == 3000
  assert counts == {f'lines:{tmp_path}/alpha.txt': 3000, f'lines:{tmp_path}/beta.txt': 1000}
  for name in ('alpha', 'beta'):
    documents = [int(s.split()[2]) for s in sampled if s.startswith(name)]
    assert np.histogram(documents, bins=4, range=(0, 4000))[0].min() > 0, name  # every quarter of the source
  everything = list(vocab.sentences(spec))  # no limit: all of both
  assert len(everything) == 16000 and len(set(everything)) == 16000


# --- instances and masking against the original ----------------------------------------------------------------

def test_truncation_matches_the_original_loop():
  rng = np.random.default_rng(0)
  fronts = []
  for len_a, len_b, limit in [(300, 250, 509), (10, 600, 509), (255, 255, 509), (2, 900, 125), (40, 41, 60)]:
    expected_a, expected_b = list(range(len_a)), list(range(len_b))
    original.truncate_seq_pair(expected_a, expected_b, limit, random.Random(0))
    a0, a1, b0, b1 = instances_lib.truncate_pair(len_a, len_b, limit, rng)
    assert (a1 - a0, b1 - b0) == (len(expected_a), len(expected_b))
    fronts.append((a0 + b0) / max(1, len_a + len_b - (a1 - a0) - (b1 - b0)))
  assert 0.3 < np.mean(fronts[:2] + fronts[3:]) < 0.7  # front or back with probability 1/2


@pytest.mark.parametrize('task', ['sop', 'nsp'])
def test_instances_follow_the_original(task, tiny_config, builtin_tokenizer):
  documents = documents_of(tiny_config, builtin_tokenizer)
  ours, theirs = [], []
  lists = [[s.tolist() for s in d] for d in documents]
  for seed in range(8):  # one seed's statistics swing by ~5% on this small corpus; pooled they agree to ~1%
    rng, py_rng = np.random.default_rng(seed), random.Random(seed)
    for i in range(len(documents)):
      ours += instances_lib.from_document(documents, i, 128, 0.1, task, rng)
      theirs += original.create_instances_from_document(lists, i, 128, 0.1, task == 'nsp', py_rng)
  assert abs(len(ours) / len(theirs) - 1) < 0.04
  our_labels, their_labels = np.mean([x.label for x in ours]), np.mean([t[2] for t in theirs])
  assert abs(our_labels - their_labels) < 0.025
  assert abs(np.mean([len(x.tokens) for x in ours]) / np.mean([len(t[0]) for t in theirs]) - 1) < 0.03
  for x in ours:
    assert len(x.tokens) <= 128 and x.tokens[0] == tokenizer.CLS and x.tokens[-1] == tokenizer.SEP
    sep = np.flatnonzero(x.tokens == tokenizer.SEP)
    assert len(sep) == 2 and sep[0] >= 2 and sep[1] - sep[0] >= 2  # both segments non-empty
    assert np.all(x.segment_ids[:sep[0] + 1] == 0) and np.all(x.segment_ids[sep[0] + 1:] == 1)



@pytest.mark.parametrize('probe', ['swap', 'random'])
def test_probes_are_balanced_pairs_of_consecutive_segments(probe, tiny_config, builtin_tokenizer):
  documents = documents_of(tiny_config, builtin_tokenizer, limit=150)
  rng = np.random.default_rng(0)
  made = 0
  for i, document in enumerate(documents):
    pairs = instances_lib.from_document(documents, i, 128, 0.0, probe, rng)
    if len(document) == 1:
      assert not pairs  # nothing to order
    made += len(pairs)
    flat = np.concatenate(document).tolist()
    inside = lambda part: any(flat[j:j + len(part)] == part for j in range(len(flat) - len(part) + 1))
    for positive, negative in zip(pairs[::2], pairs[1::2]):
      assert (positive.label, negative.label) == (0, 1)
      # [CLS] A [SEP] B [SEP], segment 0 up to the first [SEP]
      a, b = (positive.tokens[1:-1][positive.segment_ids[1:-1] == k] for k in (0, 1))
      a = a[:-1]
      na, nb = (negative.tokens[1:-1][negative.segment_ids[1:-1] == k] for k in (0, 1))
      na = na[:-1]
      if len(positive.tokens) < 128:  # not truncated: A then B, as they stand in the document
        assert inside(np.concatenate([a, b]).tolist())
      if probe == 'swap':
        np.testing.assert_array_equal(np.concatenate([nb, na]), np.concatenate([a, b]))  # B A: the same tokens
      else:
        np.testing.assert_array_equal(na, a)  # the same A, then a segment of another document
        assert len(nb) < 8 or not inside(nb.tolist())
  assert made > 100 and made % 2 == 0

def test_short_targets_are_drawn_once_per_document_at_short_seq_prob(tiny_config, builtin_tokenizer):
  documents = documents_of(tiny_config, builtin_tokenizer)
  short = [instances_lib.from_document(documents, i, 512, 0.1, 'sop', np.random.default_rng(seed))[0].short
           for seed in range(10) for i in range(len(documents))]
  assert abs(np.mean(short) - 0.1) < 3 * np.sqrt(0.09 / len(short))


def test_sentence_task_none_makes_single_segments(tiny_config, builtin_tokenizer):
  documents = documents_of(tiny_config, builtin_tokenizer, limit=50)
  made = [x for i in range(len(documents))
          for x in instances_lib.from_document(documents, i, 128, 0.1, 'none', np.random.default_rng(i))]
  assert all(x.label == 0 and np.sum(x.tokens == tokenizer.SEP) == 1 and not x.segment_ids.any() for x in made)


@pytest.mark.parametrize('seq_len', [128, 512])
def test_masking_statistics_match_the_original(seq_len, tiny_config, builtin_tokenizer):
  documents = documents_of(tiny_config, builtin_tokenizer)
  lists = [[s.tolist() for s in d] for d in documents]
  py_rng, np_rng, rng = random.Random(1), np.random.RandomState(1), np.random.default_rng(1)
  made = [t[0] for i in range(len(lists)) for _ in range(3)
          for t in original.create_instances_from_document(lists, i, seq_len, 0.1, False, py_rng)]
  is_start = lambda token: bool(builtin_tokenizer.word_start[token])
  p = masking.ngram_probabilities(3)
  assert np.allclose(p, [6 / 11, 3 / 11, 2 / 11])
  ours = {'count': [], 'spans': [], 'mask': 0, 'kept': 0}
  theirs = {'count': [], 'spans': [], 'mask': 0, 'kept': 0}
  for tokens in made:
    array = np.asarray(tokens, np.int32)
    m = masking.mask(array, builtin_tokenizer.word_start, rng, 0.15, 20, p, 2000)
    budget = min(20, max(1, round(len(tokens) * 0.15)))
    assert len(m.positions) <= budget and np.all(np.diff(m.positions) > 0)
    assert np.array_equal(m.labels, array[m.positions])
    assert not np.isin(m.positions, np.flatnonzero((array == 2) | (array == 3))).any()
    unchanged = np.ones(len(array), bool)
    unchanged[m.positions] = False
    assert np.array_equal(m.tokens[unchanged], array[unchanged])
    out, positions, labels, spans = original.create_masked_lm_predictions(tokens, 0.15, 20, 2000, is_start,
                                                                         py_rng, np_rng)
    for record, shown, true, n, span in ((ours, m.tokens[m.positions], m.labels, len(m.positions), m.span_words),
                                         (theirs, np.asarray(out)[positions], np.asarray(labels), len(positions),
                                          spans)):
      record['count'].append(n)
      record['spans'] += span
      record['mask'] += int(np.sum(shown == tokenizer.MASK))
      record['kept'] += int(np.sum((shown == true) & (shown != tokenizer.MASK)))
  assert abs(np.mean(ours['count']) / np.mean(theirs['count']) - 1) < 0.02
  for record in (ours, theirs):
    record['dist'] = np.bincount(record['spans'], minlength=4)[1:] / len(record['spans'])
    total = sum(record['count'])
    record['split'] = (record['mask'] / total, record['kept'] / total)
  np.testing.assert_allclose(ours['dist'], theirs['dist'], atol=0.025)
  np.testing.assert_allclose(ours['split'], (0.8, 0.1), atol=0.015)
  np.testing.assert_allclose(theirs['split'], (0.8, 0.1), atol=0.015)
  if seq_len == 512:  # the cap binds: a sequence of 134+ tokens wants 20+ predictions (512: 77), gets 20
    capped = [n for n, tokens in zip(ours['count'], made) if round(len(tokens) * 0.15) >= 20]
    assert len(capped) > 100 and max(capped) == 20 and np.mean(capped) > 19


# --- the pipeline ------------------------------------------------------------------------------------------------

def batches(config, tok, n, **kwargs):
  p = pipeline.Pipeline(config.data, tok, batch_size=8, **kwargs)
  return p, [p.next_batch() for _ in range(n)]


def test_batches_have_the_original_feature_names_and_fixed_shapes(tiny_config, builtin_tokenizer):
  _, [batch] = batches(tiny_config, builtin_tokenizer, 1)
  assert list(batch) == list(pipeline.FEATURES)
  seq, predictions = tiny_config.data.max_seq_length, tiny_config.data.max_predictions_per_seq
  assert batch['input_ids'].shape == (8, seq) and batch['masked_lm_positions'].shape == (8, predictions)
  assert all(v.dtype == (np.float32 if k == 'masked_lm_weights' else np.int32) for k, v in batch.items())
  lengths = batch['input_mask'].sum(1)
  assert np.all(batch['input_ids'][np.arange(seq) >= lengths[:, None]] == 0)
  assert np.all(batch['masked_lm_positions'][batch['masked_lm_weights'] == 0] == 0)


def test_same_seed_same_batches_other_seed_other_batches(tiny_config, builtin_tokenizer):
  _, a = batches(tiny_config, builtin_tokenizer, 3)
  _, b = batches(tiny_config, builtin_tokenizer, 3)
  for x, y in zip(a, b):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  other = tiny_config.copy_and_resolve_references()
  other.data.seed = 7
  _, c = batches(other, builtin_tokenizer, 1)
  assert not np.array_equal(a[0]['input_ids'], c[0]['input_ids'])


def test_restored_state_resumes_at_exactly_the_same_batch(tiny_config, builtin_tokenizer):
  config = tiny_config.copy_and_resolve_references()
  config.data.chunk_documents = 2  # the held-out documents: several chunks and epochs within the test
  config.data.eval_fraction = 0.02  # about 37 documents, fewer instances than the 60 batches of 8 read below
  full, reference = batches(config, builtin_tokenizer, 60, split='eval')
  first, _ = batches(config, builtin_tokenizer, 25, split='eval')
  state = json.loads(json.dumps(first.state()))  # it must survive being stored as JSON
  resumed = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, split='eval')
  resumed.restore(state)
  for step in range(25, 60):
    batch = resumed.next_batch()
    for k in batch:
      np.testing.assert_array_equal(batch[k], reference[step][k], err_msg=f'step {step} {k}')
  assert full.state()['shards'][0][0][0] >= 1, 'the test should cross an epoch boundary'
  with pytest.raises(ValueError, match='shard_count=2, this run has 1'):
    pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, split='eval').restore({**state, 'shard_count': 2})


def test_worker_processes_make_the_same_batches_and_resume_exactly(tiny_config, builtin_tokenizer, tmp_path):
  """Two sources mixed by weight, chunk and epoch boundaries crossed: background workers serve the batches the
  main process makes itself, count the same skipped input, and resume from a state at exactly the next batch."""
  lines = tmp_path / 'corpus.txt'
  docs = [' '.join(f'Sentence {d}.{i} of document {d} says {"x" * (d % 7)} things.' for i in range(3 + d % 4))
          for d in range(40)]
  lines.write_text('\n\n'.join(doc.replace('. ', '.\n') for doc in docs) + '\n\n\n\xff broken bytes\n')
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'builtin@2,lines:{lines}@1'
  config.data.chunk_documents = 8
  config.data.eval_fraction = 0.05
  reference_pipeline, reference = batches(config, builtin_tokenizer, 60, split='eval')
  served = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, split='eval', workers=2)
  try:
    got = [served.next_batch() for _ in range(30)]
    state = json.loads(json.dumps(served.state()))
    got += [served.next_batch() for _ in range(30)]
    assert served.skipped() == reference_pipeline.skipped() and served.skipped()[f'lines:{lines}']
  finally:
    served.close()
  for step, (batch, expected) in enumerate(zip(got, reference)):
    for k in batch:
      np.testing.assert_array_equal(batch[k], expected[k], err_msg=f'step {step} {k}')
  assert min(epoch for epoch, _, _ in reference_pipeline.state()['shards'][0]) >= 1, 'cross an epoch boundary'
  resumed = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, split='eval', workers=1)
  try:
    resumed.restore(state)
    for step in range(30, 60):
      batch = resumed.next_batch()
      for k in batch:
        np.testing.assert_array_equal(batch[k], reference[step][k], err_msg=f'resumed step {step} {k}')
  finally:
    resumed.close()


def test_a_chunk_arrives_as_a_few_objects_whatever_its_size(tiny_config, builtin_tokenizer, monkeypatch):
  """What a worker sends: every (instance, masked) pair of the chunk comes back equal to the one made, yet the
  unpickled chunk adds a few dozen objects for Python's garbage collector to walk, not several per instance (with
  a GPU's workers in flight those were millions, and the collector's pauses idled the device, 2026-11-27)."""
  import gc
  import pickle
  source = sources.open_source(sources.Spec('builtin', '', 1.0), tiny_config.data.tfds_data_dir)
  stream = pipeline._Stream(source, 0, 0, len(source), tiny_config.data, 'sop', builtin_tokenizer, None)
  made = []
  real_packing = pipeline.PackedItems
  monkeypatch.setattr(pipeline, 'PackedItems', lambda pairs: made.append(pairs) or real_packing(pairs))
  chunk = stream.make_chunk(0, 0)
  monkeypatch.undo()  # pickle finds the class by its name
  pairs = made[0]
  assert len(chunk.items) == len(pairs) >= 500
  for k, (instance, masked) in enumerate(pairs):
    got_instance, got_masked = chunk.items[k]
    for name in ('tokens', 'segment_ids'):
      np.testing.assert_array_equal(getattr(got_instance, name), getattr(instance, name))
    assert (got_instance.label, got_instance.short) == (instance.label, instance.short)
    for name in ('tokens', 'positions', 'labels'):
      np.testing.assert_array_equal(getattr(got_masked, name), getattr(masked, name))
    assert got_masked.span_words == list(masked.span_words)
  blob = pickle.dumps(chunk)
  gc.collect()
  before = len(gc.get_objects())
  received = pickle.loads(blob)
  assert len(gc.get_objects()) - before < 50
  assert len(received.items) == len(pairs)


def test_worker_count_follows_the_accelerators():
  import os
  import types
  device = lambda platform: types.SimpleNamespace(platform=platform)
  assert pipeline.worker_count(-1, [device('cpu')] * 8) == 0  # the cores compute the steps
  assert pipeline.worker_count(-1, [device('gpu')]) == 1
  assert pipeline.worker_count(-1, [device('tpu')] * 64) == max((os.cpu_count() or 1) - 1, 1)
  assert pipeline.worker_count(3, [device('cpu')]) == 3


def test_hosts_read_disjoint_documents_and_eval_is_held_out(tiny_config, builtin_tokenizer, monkeypatch):
  read = collections.defaultdict(set)
  original_read = sources.TfdsSource.read

  def recording_read(self, start, stop):
    read[recording_read.owner].update(range(start, stop))
    return original_read(self, start, stop)

  monkeypatch.setattr(sources.TfdsSource, 'read', recording_read)
  config = tiny_config.copy_and_resolve_references()
  config.data.chunk_documents = 32
  assigned = {}
  for owner, split, host in [('train0', 'train', 0), ('train1', 'train', 1), ('eval0', 'eval', 0),
                             ('eval1', 'eval', 1)]:
    recording_read.owner = owner
    p = pipeline.Pipeline(config.data, builtin_tokenizer, split=split, host=host, host_count=2, batch_size=16)
    for _ in range(40):
      p.next_batch()
    assigned[owner] = {d for start, stop in p.streams[0].chunks for d in range(start, stop)}
    assert read[owner] and read[owner] <= assigned[owner]
  size = len(p.sources[0])
  assert not read['train0'] & read['train1'] and not read['eval0'] & read['eval1']
  assert not (read['train0'] | read['train1']) & (read['eval0'] | read['eval1'])
  assert sum(map(len, assigned.values())) == size and set().union(*assigned.values()) == set(range(size))
  assert len(read['eval0'] | read['eval1']) == round(size * config.data.eval_fraction)


def two_source_config(tiny_config, tmp_path):
  """The built-in corpus and a file of numbered documents, mixed 2:1, in chunks small enough that a few steps cross
  chunk boundaries."""
  lines = tmp_path / 'numbered.txt'
  docs = [' '.join(f'Sentence {d}.{i} of document {d} says {"x" * (d % 7)} things.' for i in range(3 + d % 4))
          for d in range(120)]
  lines.write_text('\n\n'.join(doc.replace('. ', '.\n') for doc in docs) + '\n')
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'builtin@2,lines:{lines}@1'
  config.data.chunk_documents = 4
  return config


def global_batches(config, tokenizer, hosts: int, steps: int, shards: int = 8, batch_size: int = 16, opened=None,
                   state=None, workers=0) -> list:
  """The global batches of `steps` steps as `hosts` hosts make them (each its pipeline, their rows joined in host
  order, as sharding.global_batch assembles them), from `state` if given; and the hosts' pipelines."""
  hosts_data = [pipeline.Pipeline(config.data, tokenizer, batch_size, 'train', h, hosts, opened=opened,
                                  shards=shards, workers=workers) for h in range(hosts)]
  try:
    for p in hosts_data:
      if state is not None:
        p.restore(json.loads(json.dumps(state)))
    made = []
    for _ in range(steps):
      parts = [p.next_batch() for p in hosts_data]
      made.append({k: np.concatenate([part[k] for part in parts]) for k in parts[0]})
  finally:
    for p in hosts_data:
      p.close()
  return made, hosts_data


def assert_same_batches(got: list, expected: list, what: str) -> None:
  assert len(got) == len(expected)
  for step, (batch, reference) in enumerate(zip(got, expected)):
    for k in reference:
      np.testing.assert_array_equal(batch[k], reference[k], err_msg=f'{what}: step {step} {k}')


def test_the_global_batch_is_the_same_on_1_2_4_and_8_hosts_and_a_state_resumes_on_any_of_them(
    tiny_config, builtin_tokenizer, tmp_path):
  """A mix of two sources on 8 data shards: every global batch, bit for bit, whichever host count of 1, 2, 4 or 8
  makes it (8 shards' streams on one host with background workers too); a state saved by 2 hosts, as a checkpoint
  holds it, continues the same batches on 1, 4 and 8 hosts; an old per-host state is refused where the host count
  no longer matches its shards."""
  config = two_source_config(tiny_config, tmp_path)
  opened = pipeline.open_sources(config.data)
  reference, _ = global_batches(config, builtin_tokenizer, 1, 12, opened=opened)
  assert len({row.tobytes() for batch in reference for row in batch['input_ids']}) == 12 * 16  # no row repeated
  for hosts in (2, 4, 8):
    assert_same_batches(global_batches(config, builtin_tokenizer, hosts, 12, opened=opened)[0], reference,
                        f'{hosts} hosts')
  with_workers, one_host = global_batches(config, builtin_tokenizer, 1, 12, workers=2)
  assert_same_batches(with_workers, reference, '1 host with workers')
  assert max(stream.position for stream in one_host[0].streams) >= 2, 'the test should cross chunk boundaries'
  # Saved by 2 hosts after step 5, as train.py gathers it into a checkpoint, then continued on other host counts.
  _, two = global_batches(config, builtin_tokenizer, 2, 5, opened=opened)
  saved = pipeline.run_state([p.state() for p in two])
  assert saved['shard_count'] == 8 and saved['host_count'] == 2 and len(saved['shards']) == 8
  for hosts in (1, 4, 8, 2):
    assert_same_batches(global_batches(config, builtin_tokenizer, hosts, 7, opened=opened, state=saved)[0],
                        reference[5:], f'resumed on {hosts} hosts')
  with pytest.raises(ConfigError, match='shard_count=8, this run has 4'):
    global_batches(config, builtin_tokenizer, 2, 1, shards=4, opened=opened, state=saved)


def test_held_out_sets_hold_the_same_instances_on_any_host_count(tiny_config, builtin_tokenizer, tmp_path):
  """Every set's real rows over all hosts (padding rows left out) are the same instances on 1, 2 and 4 hosts,
  including the shards that have no held-out documents of the small source."""
  config = two_source_config(tiny_config, tmp_path)
  config.data.eval_fraction = 0.03  # the file's 4 held-out documents: 4 of the 8 shards have none of them
  opened = pipeline.open_sources(config.data)

  def rows(hosts):
    sets = [pipeline.held_out_sets(config.data, builtin_tokenizer, 16, 2, h, hosts, opened, shards=8)
            for h in range(hosts)]
    found = {}
    for name in sets[0]:
      found[name] = collections.Counter(
          (batch['input_ids'][r].tobytes(), batch['masked_lm_ids'][r].tobytes(), int(batch['sentence_order_labels'][r]))
          for host_sets in sets for batch in host_sets[name] for r in range(len(batch['input_ids']))
          if batch['sentence_order_labels'][r] >= 0)
    return found

  one = rows(1)
  assert set(one) == {'sop/builtin', 'sop/lines', 'swap', 'random'} and all(one.values())
  assert sum(one['sop/lines'].values()) < sum(one['sop/builtin'].values())
  for hosts in (2, 4):
    assert rows(hosts) == one, f'{hosts} hosts'


def test_auto_shards_let_a_run_move_to_8_times_its_first_slice_and_cpus_keep_one_per_host():
  assert pipeline.auto_shards(4096, 32, 'tpu') == 256  # a v4-256: v4-8 to v4-2048
  assert pipeline.auto_shards(4096, 1, 'tpu') == 8 and pipeline.auto_shards(4096, 64, 'gpu') == 512
  assert pipeline.auto_shards(96, 8, 'tpu') == 32  # the largest power of two dividing the batch bounds it
  assert pipeline.auto_shards(96, 3, 'tpu') == 3  # 3 hosts divide no power of two: one shard each
  assert pipeline.auto_shards(4096, 4, 'cpu') == 4


def test_the_stream_of_a_run_from_before_data_shards_is_kept_exactly(tiny_config, builtin_tokenizer, tmp_path):
  """The pipeline that wrote the per-host checkpoints of runs from before data shards (git history: the commit
  before them) and today's on one shard per host make the same batches and held-out sets, host by host, and an
  old per-host state restores into today's at the same batch; a checkpoint's old record ({'hosts': [...]}) too."""
  old_source = subprocess.run(['git', 'show', f'{PER_HOST_COMMIT}:albert_jax/data/pipeline.py'], cwd=ROOT,
                              capture_output=True, text=True)
  if old_source.returncode:
    pytest.skip(f'this clone lacks the git history of {PER_HOST_COMMIT}')
  (tmp_path / 'per_host_pipeline.py').write_text(old_source.stdout)
  sys.path.insert(0, str(tmp_path))
  try:
    import per_host_pipeline as old
  finally:
    sys.path.remove(str(tmp_path))
  config = two_source_config(tiny_config, tmp_path)
  opened = pipeline.open_sources(config.data)
  for split in ('train', 'eval'):
    old_hosts = [old.Pipeline(config.data, builtin_tokenizer, 16, split, h, 2, opened=opened) for h in range(2)]
    new_hosts = [pipeline.Pipeline(config.data, builtin_tokenizer, 16, split, h, 2, opened=opened) for h in range(2)]
    for h in range(2):
      assert_same_batches([new_hosts[h].next_batch() for _ in range(10)],
                          [old_hosts[h].next_batch() for _ in range(10)], f'{split} host {h}')
    record = {'hosts': [p.state() for p in old_hosts]}  # as train.py checkpointed it then
    expected = [[p.next_batch() for _ in range(4)] for p in old_hosts]
    for h in range(2):
      resumed = pipeline.Pipeline(config.data, builtin_tokenizer, 16, split, h, 2, opened=opened)
      resumed.restore(json.loads(json.dumps(record)))
      assert_same_batches([resumed.next_batch() for _ in range(4)], expected[h], f'{split} host {h} resumed')
      alone = pipeline.Pipeline(config.data, builtin_tokenizer, 16, split, h, 2, opened=opened)
      alone.restore(json.loads(json.dumps(record['hosts'][h])))  # one host's old state
      assert alone.step == 10
    # ... and on one host serving both old hosts' shards: their batches side by side.
    both = pipeline.Pipeline(config.data, builtin_tokenizer, 16, split, 0, 1, opened=opened, shards=2)
    both.restore(json.loads(json.dumps(record)))
    assert_same_batches([both.next_batch() for _ in range(4)],
                        [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*expected)], f'{split} moved')
  for h in range(2):
    made_old = old.held_out_sets(config.data, builtin_tokenizer, 16, 3, h, 2, opened)
    made_new = pipeline.held_out_sets(config.data, builtin_tokenizer, 16, 3, h, 2, opened)
    for name in made_old:
      assert_same_batches(made_new[name], made_old[name], f'held-out {name} host {h}')


PER_HOST_COMMIT = '3cc5f78'  # the last commit whose pipeline had one stream per host


def test_mixture_weights_set_the_share_of_each_source(tiny_config, builtin_tokenizer, tmp_path):
  corpus = tmp_path / 'z.txt'  # documents of a token the built-in corpus never produces in bulk
  corpus.write_text('\n\n'.join('zzz zzz zzz zzz.\nqqq qqq qqq.\nzzz qqq zzz.' for _ in range(200)))
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'builtin@3,lines:{corpus}@1'
  p = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=64)
  z = builtin_tokenizer.encode(['zzz'])[0][-1]
  def from_text_files(batch):
    return (batch['input_ids'] == z).any(1) | (batch['masked_lm_ids'] == z).any(1)
  share = np.mean([np.mean(from_text_files(p.next_batch())) for _ in range(10)])
  assert 0.15 < share < 0.35  # 1 in 4 instances come from the text files


def test_tfds_sources_through_mock_data(tiny_config, builtin_tokenizer):
  import tensorflow_datasets as tfds
  config = tiny_config.copy_and_resolve_references()
  config.data.eval_fraction = 0.2
  for name in ('wikipedia/20230601.en', 'wiki40b/en', 'pg19', 'c4/en'):
    config.data.source = f'tfds:{name}'
    with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
      p = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)
      batch = p.next_batch()
    assert batch['input_mask'].sum() > 0 and len(p.sources[0]) == 10, name


def test_wiki40b_markers_become_paragraph_breaks():
  text = '\n_START_ARTICLE_\nAlan Turing\n_START_PARAGRAPH_\nHe was born in 1912. He died in 1954._NEWLINE_Later.'
  source = sources.TfdsSource.__new__(sources.TfdsSource)
  source.text_key, source.wiki40b, source.sliceable, source.skipped = 'text', True, False, sources.SkipCounter()
  source._texts = lambda split: iter([text.encode()])
  assert list(source.read(0, 1)) == [['Alan Turing', 'He was born in 1912.', 'He died in 1954.', 'Later.']]


# --- bad input -----------------------------------------------------------------------------------------------------

def test_bad_files_are_skipped_counted_and_nothing_is_silently_truncated(tiny_config, builtin_tokenizer, tmp_path):
  (tmp_path / 'empty.txt').write_text('')
  (tmp_path / 'blank.txt').write_text('\n\n   \n\n')
  (tmp_path / 'bytes.txt').write_bytes(b'Good text here.\nBroken \xff\xfe bytes in this line.\n\nOne sentence doc.\n')
  giant = ' '.join(['apples'] * 5000) + '.'
  (tmp_path / 'giant.txt').write_text(f'{giant}\nA short second sentence.\n\n')
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'lines:{tmp_path}/*.txt'
  config.data.eval_fraction = 0.25
  p = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)
  stream = p.streams[0]
  documents = stream._documents(0, len(p.sources[0]))
  skipped = p.sources[0].skipped
  assert skipped['empty files'] == 1
  assert skipped['documents with undecodable bytes (replaced)'] == 1
  assert skipped['over-long sentences split'] == 1 and skipped['one-sentence documents (kept: random-document pairs)']
  giant_ids = builtin_tokenizer.encode([giant])[0]
  kept = [d for d in documents if sum(map(len, d)) > 1000][0]
  assert np.array_equal(np.concatenate(kept[:-1]), giant_ids)  # split into pieces, every token kept
  assert all(len(s) <= 125 for s in kept)
  p.next_batch()  # and it trains


def test_sources_that_yield_nothing_fail_clearly(tiny_config, builtin_tokenizer, tmp_path):
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'lines:{tmp_path}/nothing*.txt'
  with pytest.raises(sources.SourceError, match='no file matches'):
    pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)
  for i in range(3):
    (tmp_path / f'blank{i}.txt').write_text(f'{"    " * i}\n\n\n')
  (tmp_path / 'punct.txt').write_text('\u200b\n\n\u200b\u200b\n\n\u200b\n')  # text with no pieces at all
  config.data.source = f'lines:{tmp_path}/punct.txt'
  config.data.eval_fraction = 0.3
  p = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)
  with pytest.raises(sources.SourceError, match='yields no usable document'):
    p.next_batch()
  config.data.source = f'lines:{tmp_path}/blank*.txt'
  with pytest.raises(sources.SourceError, match='has 0 documents'):
    pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)
  for bad, message in [('nowhere:x', 'is not a source'), ('builtin@0', 'must be positive'), ('', 'is empty')]:
    config.data.source = bad
    with pytest.raises(sources.SourceError, match=message):
      pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=4)


def test_the_batch_divides_over_the_shards_and_the_shards_over_the_hosts(tiny_config, builtin_tokenizer):
  with pytest.raises(ConfigError, match='batch_size 64 is not divisible by the 3 data shards'):
    pipeline.Pipeline(tiny_config.data, builtin_tokenizer, tiny_config.train.batch_size, host_count=3)
  with pytest.raises(ConfigError, match='3 hosts cannot share the 8 data shards .* it runs on 1, 2, 4, 8 hosts'):
    pipeline.Pipeline(tiny_config.data, builtin_tokenizer, 48, host_count=3, shards=8)


def test_inspect_cli_prints_examples_and_statistics(tiny_config):
  args = [sys.executable, '-m', 'albert_jax.data.inspect', '--config=configs/tiny.py',
          f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}']
  shown = subprocess.run(args + ['--num=2'], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert shown.returncode == 0, shown.stderr
  assert shown.stdout.count('predictions:') == 2 and '[MASK->' in shown.stdout and '[SEP]' in shown.stdout
  stats = subprocess.run(args + ['--stats', '--batches=10'], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert stats.returncode == 0, stats.stderr
  report = json.loads(stats.stdout)
  assert report['instances'] == 320 and abs(report['replacement']['mask'] - 0.8) < 0.05
  assert 0.1 < report['fraction_of_tokens_predicted'] < 0.16


def test_stats_measure_sentence_lengths_and_yield_per_megabyte(tiny_config, builtin_tokenizer, tmp_path):
  """Sentences of 2, 5 and 120 words in every document: a third each under 3 and over 100 words; documents and
  instances per MB against the file's own size."""
  from albert_jax.data import inspect
  sentences = ['Two words.', 'Five words in this one.', ' '.join(['long'] * 119) + ' end.']
  corpus = tmp_path / 'c.txt'
  corpus.write_text('\n\n'.join('\n'.join(sentences) for _ in range(60)) + '\n')
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'lines:{corpus}'
  config.data.chunk_documents = 1000  # one chunk: every training document read once
  config.data.eval_fraction = 0.5
  p = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, collect_stats=True)
  report = inspect.measure(p, 2)
  assert report['sentences'] == {'count': 90, 'median_words': 5.0, 'fraction_over_100_words': pytest.approx(1 / 3),
                                 'fraction_under_3_words': pytest.approx(1 / 3)}
  text_mb = 30 * sum(len(s.encode()) for s in sentences) / 1e6
  assert report['documents_per_mb'] == pytest.approx(30 / text_mb)
  assert report['instances_per_mb'] == pytest.approx(p.stats.instances_made / text_mb) and p.stats.instances_made > 30
