"""A direct transcription of the original create_pretraining_data.py logic (albert-original.md sections 1.3-1.5),
per token and per candidate as the original writes it, with Python's `random.Random` and a numpy RandomState
for the n-gram draws. The tests compare albert_jax.data's statistics against it; bench/ uses it as the peer.
Operates on token ids; `is_start(id)` is the start-piece predicate; 2 = [CLS], 3 = [SEP], 4 = [MASK].
"""
import numpy as np

CLS, SEP, MASK = 2, 3, 4


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_num_tokens:
      break
    trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    assert len(trunc_tokens) >= 1
    if rng.random() < 0.5:
      del trunc_tokens[0]
    else:
      trunc_tokens.pop()


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob,
                                   random_next_sentence, rng):
  """Returns (tokens, segment_ids, is_random_next, short) tuples."""
  document = all_documents[document_index]
  max_num_tokens = max_seq_length - 3
  target_seq_length = max_num_tokens
  short = False
  if rng.random() < short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)
    short = True
  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    segment = document[i]
    current_chunk.append(segment)
    current_length += len(segment)
    if i == len(document) - 1 or current_length >= target_seq_length:
      if current_chunk:
        a_end = 1
        if len(current_chunk) >= 2:
          a_end = rng.randint(1, len(current_chunk) - 1)
        tokens_a = []
        for j in range(a_end):
          tokens_a.extend(current_chunk[j])
        tokens_b = []
        if len(current_chunk) == 1 or (random_next_sentence and rng.random() < 0.5):
          is_random_next = True
          target_b_length = target_seq_length - len(tokens_a)
          for _ in range(10):
            random_document_index = rng.randint(0, len(all_documents) - 1)
            if random_document_index != document_index:
              break
          random_document = all_documents[random_document_index]
          random_start = rng.randint(0, len(random_document) - 1)
          for j in range(random_start, len(random_document)):
            tokens_b.extend(random_document[j])
            if len(tokens_b) >= target_b_length:
              break
          num_unused_segments = len(current_chunk) - a_end
          i -= num_unused_segments
        elif not random_next_sentence and rng.random() < 0.5:
          is_random_next = True
          for j in range(a_end, len(current_chunk)):
            tokens_b.extend(current_chunk[j])
          tokens_a, tokens_b = tokens_b, tokens_a
        else:
          is_random_next = False
          for j in range(a_end, len(current_chunk)):
            tokens_b.extend(current_chunk[j])
        truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        tokens = [CLS] + tokens_a + [SEP] + tokens_b + [SEP]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        instances.append((tokens, segment_ids, is_random_next, short))
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_size, is_start, rng,
                                 np_rng, ngram=3):
  """Returns (output_tokens, positions, labels, span_words); the original's no-op "covered" pre-check omitted."""
  cand_indexes = []
  for i, token in enumerate(tokens):
    if token in (CLS, SEP):
      continue
    if len(cand_indexes) >= 1 and not is_start(token):
      cand_indexes[-1].append(i)
    else:
      cand_indexes.append([i])
  output_tokens = list(tokens)
  num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
  ngrams = np.arange(1, ngram + 1, dtype=np.int64)
  pvals = 1. / np.arange(1, ngram + 1)
  pvals /= pvals.sum(keepdims=True)
  ngram_indexes = []
  for idx in range(len(cand_indexes)):
    ngram_index = []
    for n in ngrams:
      ngram_index.append(cand_indexes[idx:idx + n])
    ngram_indexes.append(ngram_index)
  rng.shuffle(ngram_indexes)
  masked_lms = []
  covered_indexes = set()
  span_words = []
  for cand_index_set in ngram_indexes:
    if len(masked_lms) >= num_to_predict:
      break
    if not cand_index_set:
      continue
    n = np_rng.choice(ngrams[:len(cand_index_set)],
                      p=pvals[:len(cand_index_set)] / pvals[:len(cand_index_set)].sum(keepdims=True))
    index_set = sum(cand_index_set[n - 1], [])
    words = len(cand_index_set[n - 1])
    n -= 1
    while len(masked_lms) + len(index_set) > num_to_predict:
      if n == 0:
        break
      index_set = sum(cand_index_set[n - 1], [])
      words = len(cand_index_set[n - 1])
      n -= 1
    if len(masked_lms) + len(index_set) > num_to_predict:
      continue
    if any(index in covered_indexes for index in index_set):
      continue
    span_words.append(words)
    for index in index_set:
      covered_indexes.add(index)
      if rng.random() < 0.8:
        masked_token = MASK
      elif rng.random() < 0.5:
        masked_token = tokens[index]
      else:
        masked_token = rng.randint(0, vocab_size - 1)
      output_tokens[index] = masked_token
      masked_lms.append((index, tokens[index]))
  masked_lms.sort()
  return output_tokens, [p for p, _ in masked_lms], [label for _, label in masked_lms], span_words


# --- tokenization.py and create_pretraining_data.py's SentencePiece helpers, on pieces (strings) -----------------

# _is_start_piece_sp's list: its `special_pieces` string holds '"' twice and no ', <, = or >; the '€' and '£' it adds
# are bytes objects, which no str piece equals.
SPECIAL_PIECES = set('!"#$%&\"()*+,-./:;?@[\\]^_`{|}~')
ENGLISH_CHARS = set('abcdefghijklmnopqrstuvwxyz')


def is_start_piece_sp(piece):
  return (piece.startswith('▁') or piece.startswith('<') or piece in SPECIAL_PIECES
          or not all(c.lower() in ENGLISH_CHARS | SPECIAL_PIECES for c in piece))


def encode_ids(sp, text):
  """tokenization.encode_ids as it runs on Python 3: the pieces of encode_pieces, then PieceToId. A piece ending in
  digit + ',' is re-encoded from its bytes with b'▁' removed; the test meant to strip the '▁' the re-encoding adds
  compares a str with bytes, so it never strips it."""
  underline = '▁'.encode('utf-8')
  pieces = []
  for piece in sp.EncodeAsPieces(text):
    if len(piece) > 1 and piece[-1] == ',' and piece[-2].isdigit():
      again = sp.EncodeAsPieces(piece[:-1].encode('utf-8').replace(underline, b''))
      if piece[0] != underline and again[0][0] == underline:  # str vs bytes: never true on Python 3
        again[0] = again[0][1:]
      pieces.extend(again + [piece[-1]])
    else:
      pieces.append(piece)
  return [sp.PieceToId(p) for p in pieces]
