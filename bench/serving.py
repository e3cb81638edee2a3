"""The main process serving batches with a GPU host's chunks in flight, under each garbage-collector setting.

  python bench/serving.py [--source=... --vocab=...] [--in_flight=30] [--batch=512] [--seconds=8] [--rounds=3]

A host with many data.workers holds about `in_flight` chunks made by them (workers + 1 for each source) while it
serves batches from the current one, and unpickles each new chunk as it arrives. Timed here in one process: batches
of `batch` made from held chunks (a new one unpickled whenever a chunk's worth has been served, the oldest let go),
with Python's collector as train.py leaves it (`gc.freeze()` after setting up), as Python leaves it, and disabled
(the bound), in alternating rounds. Printed per setting: the median batches/s, its ratio to the bound, and the share
of the time spent in full (generation 2) collections and the longest of them. Defaults to the built-in corpus (its
vocabulary is trained and cached on first use); --source and --vocab take any data.source, such as the shared
Wikipedia and books.
"""
import argparse
import gc
import pickle
import statistics
import time

from albert_jax.config import defaults
from albert_jax.data import pipeline, sources, vocab
from albert_jax.data.tokenizer import Tokenizer

SETTINGS = ('frozen', 'python', 'disabled')


def serve(blob: bytes, in_flight: int, batch: int, seconds: float, max_seq_length: int, max_predictions: int):
  """(batches/s, seconds in full collections, the longest) over `seconds` of serving from `in_flight` chunks."""
  held = [pickle.loads(blob) for _ in range(in_flight)]
  size = len(held[0].items)
  pauses, started = [], {}

  def timed(phase, info):
    if info['generation'] == 2:
      if phase == 'start':
        started['at'] = time.perf_counter()
      else:
        pauses.append(time.perf_counter() - started['at'])

  gc.callbacks.append(timed)
  try:
    start, batches, served = time.perf_counter(), 0, 0
    while time.perf_counter() - start < seconds:
      pipeline.collate([held[0].items[(served + k) % size] for k in range(batch)], max_seq_length, max_predictions)
      served += batch
      if served >= size:  # a chunk's worth served: the next arrives from a worker, this one is let go
        served -= size
        held.pop(0)
        held.append(pickle.loads(blob))
      batches += 1
    elapsed = time.perf_counter() - start
  finally:
    gc.callbacks.remove(timed)
  return batches / elapsed, sum(pauses), max(pauses, default=0.0), elapsed


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument('--source', help='a data.source to read instead of the built-in corpus (needs --vocab)')
  parser.add_argument('--vocab', help='the SentencePiece model for --source')
  parser.add_argument('--tfds_data_dir', default=None)
  parser.add_argument('--in_flight', type=int, default=30, help='chunks held (a GPU host with 14 workers and two '
                      'sources holds 30)')
  parser.add_argument('--batch', type=int, default=512)
  parser.add_argument('--seq_len', type=int, default=128)
  parser.add_argument('--seconds', type=float, default=8.0, help='of serving per setting and round')
  parser.add_argument('--rounds', type=int, default=3)
  args = parser.parse_args(argv)
  config = defaults()
  config.data.tfds_data_dir = args.tfds_data_dir
  config.data.source, config.data.vocab = args.source or 'builtin', args.vocab or 'builtin'
  config.data.max_seq_length = args.seq_len
  config.model.vocab_size = Tokenizer(args.vocab).vocab_size if args.source else 5000  # the built-in's size
  tokenizer = vocab.load_tokenizer(config.data.vocab, config.model.vocab_size, config.data.tfds_data_dir)
  source = sources.open_source(sources.parse_specs(config.data.source)[0], config.data.tfds_data_dir)
  stream = pipeline._Stream(source, 0, 0, len(source), config.data, 'sop', tokenizer, None)
  chunk = stream.make_chunk(0, 0)
  blob, size = pickle.dumps(chunk), len(chunk.items)
  print(f'{source.name}: a chunk of {size:,} instances ({len(blob) / size:,.0f} bytes each pickled); '
        f'{args.in_flight} in flight, batches of {args.batch}')
  results = {setting: [] for setting in SETTINGS}
  for round_ in range(args.rounds):
    for setting in SETTINGS[round_ % 3:] + SETTINGS[:round_ % 3]:  # rotated: no setting always first
      gc.unfreeze()
      gc.enable()
      gc.collect()
      if setting == 'frozen':
        gc.freeze()
      elif setting == 'disabled':
        gc.disable()
      results[setting].append(serve(blob, args.in_flight, args.batch, args.seconds, args.seq_len,
                                    config.data.max_predictions_per_seq))
  gc.unfreeze()
  gc.enable()
  bound = statistics.median(r[0] for r in results['disabled'])
  summary = {}
  for setting in SETTINGS:
    rate = statistics.median(r[0] for r in results[setting])
    share = sum(r[1] for r in results[setting]) / sum(r[3] for r in results[setting])
    longest = max(r[2] for r in results[setting])
    summary[setting] = {'batches_per_second': rate, 'of_bound': rate / bound, 'gc_share': share,
                        'longest_gc_ms': longest * 1e3}
    print(f'{setting:>8}: {rate:7.1f} batches/s ({rate * args.batch:,.0f} instances/s), {rate / bound:.2f}x the '
          f'bound; full collections {share:.1%} of the time, the longest {longest * 1e3:.0f} ms')
  return summary


if __name__ == '__main__':
  main()
