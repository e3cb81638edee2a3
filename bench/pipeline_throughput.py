"""Input pipeline throughput on one core: raw text -> masked batches, at max_seq_length 512 (or --seq_len).

  python bench/pipeline_throughput.py [--instances=8000] [--chunks=3] [--vocab_size=5000] [--workers=N]
  python bench/pipeline_throughput.py --source='wikiextractor:../shared/data/corpora/wikipedia/*/wiki_*@7,gutenberg:../shared/data/corpora/books/*.txt@3' \
      --vocab=/tmp/albert_wiki_books/vocab-30k.model --seq_len=128

With --source (any data.source) and --vocab, the real corpus instead of the built-in one, and first the time and
memory it takes to open it (its kept index read, or made where files have none: data/corpus_index.py).
The timed window holds at least --instances instances and --chunks new chunks of every source (a chunk is made
whole, then served), and counts the instances made in it.

Ours: the full Pipeline (TFDS read of the built-in corpus, sentence segmentation, SentencePiece, SOP instances,
n-gram masking, padding into batches), pinned to one CPU core; with --workers, N background processes make the
chunks (data.workers) and nothing is pinned. The peer, measured in the same run on the same
tokenized documents: the original create_pretraining_data.py algorithm (tests/original_reference.py, a direct
transcription, per token in Python), plus the same reading and tokenizing cost. Target: >= 1000 instances/s.
"""
import argparse
import os
import pathlib
import random
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tests'))

import original_reference  # noqa: E402
from albert_jax.config import defaults  # noqa: E402
from albert_jax.data import pipeline, vocab  # noqa: E402
from albert_jax.data.tokenizer import Tokenizer  # noqa: E402


def long_documents_file(config, directory: pathlib.Path) -> str:
  """The built-in corpus regrouped into documents of ~10 consecutive modules, so that nearly every instance fills
  all 512 positions (the built-in documents alone average ~330 tokens per instance)."""
  from albert_jax.data import sources
  source = sources.open_source(sources.Spec('builtin', '', 1.0), config.data.tfds_data_dir)
  documents = list(source.read(0, len(source)))
  path = directory / 'long_documents.txt'
  with open(path, 'w') as f:
    for start in range(0, len(documents), 10):
      f.write('\n'.join(s for d in documents[start:start + 10] for s in d) + '\n\n')
  return str(path)


def index(config) -> list:
  """Opens every source of the config, printing the time, the documents, the text's size on disk and the memory it
  took: the peak resident size before and after, and what the index holds in memory."""
  import resource
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  start = time.perf_counter()
  opened = pipeline.open_sources(config.data)
  seconds = time.perf_counter() - start
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  for source in opened:
    files = getattr(source, 'files', [])
    megabytes = sum(info.size for info in files) / 1e6
    arrays = source.index.nbytes() / 1e6 if files else 0.0
    print(f'  {source.name}: {len(source):,} documents in {len(files)} files ({megabytes:.0f} MB on disk), index '
          f'{arrays:.2f} MB; skipped: {source.skipped.report()}')
  print(f'index: {seconds:.1f} s for all sources; peak resident memory {before:.0f} MB -> {peak:.0f} MB')
  return opened


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--instances', type=int, default=8000)
  parser.add_argument('--vocab_size', type=int, default=5000)  # the built-in corpus holds at most ~6,000 pieces
  parser.add_argument('--tfds_data_dir', default=None)
  parser.add_argument('--documents', choices=['builtin', 'long'], default='long',
                      help='builtin: the corpus as is; long: regrouped so instances fill 512 positions')
  parser.add_argument('--workers', type=int, default=0, help='background processes making chunks (data.workers)')
  parser.add_argument('--source', help='a data.source to read instead of the built-in corpus (needs --vocab)')
  parser.add_argument('--vocab', help='the SentencePiece model for --source')
  parser.add_argument('--seq_len', type=int, default=512)
  parser.add_argument('--chunks', type=int, default=3, help='new chunks of every source the timed window must hold')
  args = parser.parse_args()
  if not args.workers:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

  config = defaults()
  config.model.vocab_size = args.vocab_size
  config.data.tfds_data_dir = args.tfds_data_dir
  config.data.source, config.data.vocab = 'builtin', 'builtin'
  config.data.max_seq_length = config.model.max_position_embeddings = args.seq_len
  opened = None
  if args.source:
    config.data.source, config.data.vocab = args.source, args.vocab
    config.model.vocab_size = Tokenizer(args.vocab).vocab_size
    opened = index(config)
  # Trains and caches the vocabulary on first use (not timed).
  tokenizer = vocab.load_tokenizer(config.data.vocab, config.model.vocab_size, config.data.tfds_data_dir)
  if args.documents == 'long' and not args.source:
    import tempfile
    config.data.source = 'lines:' + long_documents_file(config, pathlib.Path(tempfile.mkdtemp()))

  encode_seconds = [0.0]
  encode = tokenizer.encode

  def timed_encode(texts):
    start = time.perf_counter()
    out = encode(texts)
    encode_seconds[0] += time.perf_counter() - start
    return out

  if not args.workers:  # in the workers, SentencePiece's share is not this process's to time
    tokenizer.encode = timed_encode
  batch_size = 64
  data = pipeline.Pipeline(config.data, tokenizer, batch_size, workers=args.workers, opened=opened)
  # A stream makes a whole chunk (data.chunk_documents documents: thousands of instances of long articles) at once,
  # then serves it: the window must hold several chunks of every stream, or it times serving alone.
  made = [0]
  if not args.workers:
    for stream in data.streams:
      def counted(epoch, position, make=stream.make_chunk):
        chunk = make(epoch, position)
        made[0] += len(chunk.items)
        return chunk
      stream.make_chunk = counted
  for _ in range(1 + 8 * args.workers):
    data.next_batch()  # warm-up: the first reads, and the workers' start and their first chunks
  chunk_of = lambda stream: (stream.epoch, stream.position)
  first = [chunk_of(stream) for stream in data.streams]
  switches = [0] * len(data.streams)
  encode_seconds[0], made[0], served, tokens = 0.0, 0, 0, 0
  start = time.perf_counter()
  while served < args.instances or min(switches) < args.chunks:
    tokens += int(data.next_batch()['input_mask'].sum())
    served += batch_size
    for i, stream in enumerate(data.streams):
      if chunk_of(stream) != first[i]:
        switches[i], first[i] = switches[i] + 1, chunk_of(stream)
  ours = time.perf_counter() - start
  encode_share = encode_seconds[0] / ours
  # Instances made in the window (the chunks it paid for) where they can be counted; with workers, those served.
  made = made[0] if not args.workers else served

  # The peer: the original's instance and masking code on the same tokenized documents.
  stream = data.streams[0]
  read_start = time.perf_counter()
  documents = stream._documents(*stream.chunks[0])
  documents += stream._documents(*stream.chunks[1]) if len(stream.chunks) > 1 else []
  read_seconds = time.perf_counter() - read_start
  lists = [[s.tolist() for s in d] for d in documents]
  py_rng, np_rng = random.Random(0), np.random.RandomState(0)
  is_start = lambda token: bool(tokenizer.word_start[token])
  start = time.perf_counter()
  peer_made = 0
  while peer_made < args.instances:
    for i in range(len(lists)):
      for tokens_, _, _, _ in original_reference.create_instances_from_document(lists, i, args.seq_len, 0.1, False,
                                                                                 py_rng):
        original_reference.create_masked_lm_predictions(tokens_, 0.15, 20, tokenizer.vocab_size, is_start, py_rng,
                                                        np_rng)
        peer_made += 1
  peer_seconds = time.perf_counter() - start
  instances_per_read = sum(1 for i in range(len(lists)) for _ in original_reference.create_instances_from_document(
      lists, i, args.seq_len, 0.1, False, random.Random(1)))
  peer = peer_seconds / peer_made + read_seconds / max(1, instances_per_read)

  data.close()
  where = f'{args.workers} worker processes on {os.cpu_count()} cores' if args.workers else 'one core'
  what = args.source if args.source else f'{args.documents} documents of the built-in corpus'
  print(f'{where}, max_seq_length {args.seq_len}, {what}, vocab {tokenizer.vocab_size}')
  share = '' if args.workers else f'; SentencePiece {100 * encode_share:.0f}% of the time'
  print(f'  albert_jax pipeline: {made / ours:8.0f} instances/s  ({tokens / served * made / ours / 1e3:.0f}k tokens/s, '
        f'{tokens / served:.0f} tokens per instance{share}; {ours:.0f} s, {min(switches)}+ new chunks of each source)')
  print(f'  original algorithm:  {1 / peer:8.0f} instances/s  (same reading and tokenizing)')
  print(f'  ratio: {(made / ours) * peer:.2f}x; target >= 1000 instances/s: '
        f'{"met" if made / ours >= 1000 else "NOT met"}')


if __name__ == '__main__':
  main()
