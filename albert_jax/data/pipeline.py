"""Deterministic, resumable batches of masked sentence-pair instances, the same global batches on any host count.

The stream is defined on `shards` data shards, fixed when a run begins (data.shards) and kept in its workdir: each
source's documents are split into a training range and a held-out tail (`data.eval_fraction`), and each range into
`shards` contiguous pieces. Shard s walks its piece in chunks of `data.chunk_documents` documents, in a new seeded
chunk order every epoch; a chunk's instances are made and shuffled with a generator seeded by (seed, source, epoch,
chunk), and each instance is masked with a generator seeded by its position in the chunk; the shard's rows of each
step (train.batch_size / shards) draw their sources with a generator seeded by (seed, shard, step). The global batch
is the shards' rows in shard order, so it is a function of (seed, shards, step) alone. A pod of H hosts, H dividing
`shards`, gives host h the contiguous block of shards h*shards/H .. (h+1)*shards/H - 1: its rows of the global batch,
whatever H is. The state needed to resume at a step is a few integers per shard and source (`state()` /
`restore()`), and a state saved on one host count restores on any other that divides `shards`.

A run from before data shards had one per host, defined exactly so: its per-host state is read as shards.

Each epoch re-draws target lengths, pairs, swaps and masks: the original's dupe_factor, without a limit.
"""
import collections
import copy
import dataclasses
import os
from typing import Optional

import numpy as np

from albert_jax.data import instances as instances_lib
from albert_jax.data import masking, sources
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.config import validate_data
from albert_jax.errors import ConfigError

FEATURES = ('input_ids', 'input_mask', 'segment_ids', 'masked_lm_positions', 'masked_lm_ids', 'masked_lm_weights',
            'sentence_order_labels')


@dataclasses.dataclass
class Stats:
  """Measured while batches are made (for `inspect --stats`)."""
  span_words: list = dataclasses.field(default_factory=list)
  instances: int = 0
  short: int = 0  # instances cut from documents with a short target length
  labels: int = 0
  documents: int = 0
  short_documents: int = 0  # the original draws short_seq_prob once per document and pass
  sentence_words: list = dataclasses.field(default_factory=list)  # of every sentence read, as the source split it
  text_bytes: int = 0  # UTF-8 bytes of the sentences read
  documents_read: int = 0
  instances_made: int = 0  # by the chunks read, served or not


class PackedItems:
  """A chunk's (instance, masked) pairs, in the order they are served, held as a dozen flat arrays; item k is
  rebuilt on demand from views. Held as objects (five small arrays and a list per instance), the chunks in flight
  with many workers were millions of objects, and Python's cyclic garbage collector, which walks them all, paused
  the main process (and so the accelerator) for up to a second at a time; packed, they also pickle 20x faster."""

  def __init__(self, pairs: list):
    self.label = np.array([instance.label for instance, _ in pairs], np.int32)
    self.short = np.array([instance.short for instance, _ in pairs], bool)
    self.token_offsets = _offsets([len(instance.tokens) for instance, _ in pairs])
    self.tokens = _concatenate([instance.tokens for instance, _ in pairs])
    self.segment_ids = _concatenate([instance.segment_ids for instance, _ in pairs])
    self.masked_tokens = _concatenate([masked.tokens for _, masked in pairs])
    self.prediction_offsets = _offsets([len(masked.positions) for _, masked in pairs])
    self.positions = _concatenate([masked.positions for _, masked in pairs])
    self.labels = _concatenate([masked.labels for _, masked in pairs])
    self.span_offsets = _offsets([len(masked.span_words) for _, masked in pairs])
    self.span_words = _concatenate([np.asarray(masked.span_words, np.int32) for _, masked in pairs])

  def __len__(self) -> int:
    return len(self.label)

  def __getitem__(self, k: int) -> tuple:
    tokens = slice(self.token_offsets[k], self.token_offsets[k + 1])
    predictions = slice(self.prediction_offsets[k], self.prediction_offsets[k + 1])
    spans = slice(self.span_offsets[k], self.span_offsets[k + 1])
    instance = instances_lib.Instance(self.tokens[tokens], self.segment_ids[tokens], int(self.label[k]),
                                      bool(self.short[k]))
    masked = masking.Masked(self.masked_tokens[tokens], self.positions[predictions], self.labels[predictions],
                            self.span_words[spans].tolist())
    return instance, masked


def _offsets(lengths: list) -> np.ndarray:
  return np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths, dtype=np.int64)])


def _concatenate(arrays: list) -> np.ndarray:
  return np.concatenate(arrays).astype(np.int32) if arrays else np.zeros((0,), np.int32)


@dataclasses.dataclass
class Chunk:
  """The masked instances one chunk of documents makes: a function of (stream, epoch, position) alone, so that
  any process can make it."""
  start: int  # the chunk's first document
  items: PackedItems  # (instance, masked) pairs, in the order they are served
  documents: int  # documents that made instances, and those of them with a short target (for Stats)
  short_documents: int


class _Stream:
  """One source's endless instance stream over one shard's document range. `index` is the source's place in
  data.source (its seeds' part); `slot` the stream's place among the host's streams (the workers' key)."""

  def __init__(self, source, index: int, first: int, stop: int, data, sentence_task: str, tokenizer: Tokenizer,
               stats: Optional[Stats], slot: int = 0):
    self.source, self.index, self.data, self.tokenizer, self.stats = source, index, data, tokenizer, stats
    self.slot = slot
    self.sentence_task = sentence_task
    size = data.chunk_documents
    self.chunks = [(s, min(s + size, stop)) for s in range(first, stop, size)]
    self.max_sentence = data.max_seq_length - 3
    self.ngram_p = masking.ngram_probabilities(data.ngram)
    self.epoch, self.position, self.offset = 0, 0, 0
    self.workers = None  # a Workers pool making the coming chunks in the background, if any
    self._chunk = None  # (epoch, position, Chunk)
    self._empty_chunks_in_a_row = 0

  def _seed(self, *parts):
    return np.random.default_rng([self.data.seed, self.index, *parts])

  def _documents(self, start: int, stop: int) -> list:
    raw = list(self.source.read(start, stop))
    flat = [s for doc in raw for s in doc]
    if self.stats is not None:
      self.stats.sentence_words.extend(len(s.split()) for s in flat)
      self.stats.text_bytes += sum(len(s.encode()) for s in flat)
      self.stats.documents_read += len(raw)
    encoded = iter(self.tokenizer.encode(flat)) if flat else iter(())
    documents, skipped = [], self.source.skipped
    for doc in raw:
      sentences = []
      for ids in (next(encoded) for _ in doc):
        if len(ids) == 0:
          skipped['sentences without tokens'] += 1
        elif len(ids) > self.max_sentence:  # an enormous line: split, never dropped or truncated
          skipped['over-long sentences split'] += 1
          sentences.extend(ids[i:i + self.max_sentence] for i in range(0, len(ids), self.max_sentence))
        else:
          sentences.append(ids)
      if not sentences:
        skipped['empty documents'] += 1
      else:
        if len(sentences) == 1:
          skipped['one-sentence documents (kept: random-document pairs)'] += 1
        documents.append(sentences)
    return documents

  def make_chunk(self, epoch: int, position: int) -> Chunk:
    """The chunk served at `position` of `epoch`: its documents read and tokenized, made into instances, shuffled
    and masked, each with generators seeded by where it is."""
    order = self._seed(epoch, 0).permutation(len(self.chunks))
    start, stop = self.chunks[order[position]]
    documents = self._documents(start, stop)
    rng = self._seed(epoch, 1, start)
    made, used, short = [], 0, 0
    for i in rng.permutation(len(documents)):
      from_document = instances_lib.from_document(documents, int(i), self.data.max_seq_length,
                                                  self.data.short_seq_prob, self.sentence_task, rng)
      made.extend(from_document)
      if from_document:
        used, short = used + 1, short + from_document[0].short
    rng.shuffle(made)
    items = [(instance, masking.mask(instance.tokens, self.tokenizer.word_start, self._seed(epoch, 2, start, offset),
                                     self.data.masked_lm_prob, self.data.max_predictions_per_seq, self.ngram_p,
                                     self.tokenizer.vocab_size))
             for offset, instance in enumerate(made)]
    return Chunk(start, PackedItems(items), used, short)

  def upcoming(self, count: int) -> list:
    """The (epoch, position) of the `count` chunks after the current one."""
    out, epoch, position = [], self.epoch, self.position
    for _ in range(count):
      epoch, position = (epoch, position + 1) if position + 1 < len(self.chunks) else (epoch + 1, 0)
      out.append((epoch, position))
    return out

  def next(self) -> tuple:
    while True:
      if self._chunk is None or self._chunk[:2] != (self.epoch, self.position):
        chunk = (self.workers.chunk(self) if self.workers is not None else
                 self.make_chunk(self.epoch, self.position))
        self._chunk = (self.epoch, self.position, chunk)
        if self.stats is not None:
          self.stats.documents += chunk.documents
          self.stats.short_documents += chunk.short_documents
          self.stats.instances_made += len(chunk.items)
      items = self._chunk[2].items
      if self.offset < len(items):
        break
      self._empty_chunks_in_a_row = self._empty_chunks_in_a_row + 1 if not items else 0
      if self._empty_chunks_in_a_row > len(self.chunks):
        raise sources.SourceError(f'data.source {self.source.name} yields no usable document (skipped: '
                                  f'{self.source.skipped.report()}).')
      self.offset, self.position = 0, self.position + 1
      if self.position == len(self.chunks):
        self.epoch, self.position = self.epoch + 1, 0
    instance, masked = items[self.offset]
    self.offset += 1
    if self.stats is not None:
      self.stats.span_words.extend(masked.span_words)
      self.stats.instances += 1
      self.stats.short += instance.short
      self.stats.labels += instance.label
    return instance, masked


class Workers:
  """Background processes that make each stream's coming chunks while the main process serves the current one:
  chunks are functions of (stream, epoch, position), so batches, their order and the resume state are exactly
  those of the main process making them itself. Workers are started with 'spawn' (forking a process that runs
  JAX is unsafe) and ignore SIGINT and SIGTERM, which the main process handles (a preempted run saves first)."""

  def __init__(self, streams: list, count: int, shards: int = 1):
    import concurrent.futures
    import multiprocessing
    import pickle
    copies = [copy.copy(stream) for stream in streams]
    for stream in copies:
      stream.stats, stream.workers, stream._chunk = None, None, None
    self.pool = concurrent.futures.ProcessPoolExecutor(count, multiprocessing.get_context('spawn'),
                                                       initializer=_start_worker, initargs=(pickle.dumps(copies),))
    # Chunks of each stream in flight: a host serving several shards uses each shard's chunks that many times more
    # slowly (each gives its share of the rows), and one ahead of each keeps the workers busy.
    self.ahead = max(1, (count + 1) // shards)
    self.pending = {}  # (stream slot, epoch, position) -> future

  def start(self, streams: list) -> None:
    """Every stream's current chunk begun at once: a host with many shards needs one of each for its first batch."""
    for stream in streams:
      key = (stream.slot, stream.epoch, stream.position)
      if key not in self.pending:
        self.pending[key] = self.pool.submit(_chunk_in_worker, *key)

  def chunk(self, stream: '_Stream') -> Chunk:
    """Stream's current chunk; the ones after it are started."""
    key = (stream.slot, stream.epoch, stream.position)
    future = self.pending.pop(key, None) or self.pool.submit(_chunk_in_worker, *key)
    wanted = {(stream.slot, *later) for later in stream.upcoming(self.ahead)}
    for stale in [k for k in self.pending if k[0] == stream.slot and k not in wanted]:  # after a restore
      self.pending.pop(stale).cancel()
    for later in sorted(wanted - set(self.pending)):
      self.pending[later] = self.pool.submit(_chunk_in_worker, *later)
    chunk, skipped = future.result()
    stream.source.skipped.update(skipped)  # what the worker's copy of the source counted
    return chunk

  def close(self) -> None:
    self.pool.shutdown(wait=True, cancel_futures=True)


_WORKER_STREAMS = []


def _start_worker(pickled_streams: bytes) -> None:
  import pickle
  import signal
  import threading
  import time
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  parent = os.getppid()

  def exit_with_parent():  # a main process killed outright (SIGKILL, out of memory) cannot stop its workers
    while os.getppid() == parent:
      time.sleep(1)
    os._exit(0)

  threading.Thread(target=exit_with_parent, daemon=True).start()
  _WORKER_STREAMS.extend(pickle.loads(pickled_streams))


def _chunk_in_worker(slot: int, epoch: int, position: int) -> tuple:
  """(the chunk, what reading it skipped): the main process adds the counts to its own source's."""
  stream = _WORKER_STREAMS[slot]
  before = collections.Counter(stream.source.skipped)
  chunk = stream.make_chunk(epoch, position)
  return chunk, collections.Counter(stream.source.skipped) - before


def document_ranges(size: int, eval_fraction: float, split: str, shard: int, shards: int, name: str) -> tuple:
  """Shard `shard` of `shards`'s [first, stop) documents of `split` ('train' or 'eval') of a source with `size`
  documents. A held-out piece may be empty (a shard with no held-out documents evaluates nothing)."""
  held_out = max(1, int(round(size * eval_fraction)))
  if size - held_out < shards:
    raise sources.SourceError(
        f'data.source {name} has {size} documents: too few to hold out {held_out} for evaluation and give each of '
        f'{shards} data shards at least one to train on (add documents, lower data.eval_fraction, or start the run '
        f'with fewer data.shards).')
  first, stop = (0, size - held_out) if split == 'train' else (size - held_out, size)
  span = stop - first
  return first + shard * span // shards, first + (shard + 1) * span // shards


SHARDS_PER_HOST = 8  # data.shards 'auto' on accelerators: the run can move to a slice up to this many times larger


def auto_shards(batch_size: int, host_count: int, platform: str) -> int:
  """data.shards 'auto' for a run that begins on `host_count` hosts of `platform` devices. On accelerators,
  SHARDS_PER_HOST times the host count rounded up to a power of two, at most the largest power of two that divides
  the batch: the run moves to any slice from one host to that many (a v4-256's 32 hosts give 256 shards: v4-8 to
  v4-2048); a host's start makes one chunk per shard it serves. On CPUs (a laptop, tests), one per host: the
  stream of runs from before data shards, and the least start-up. Where the host count does not divide that, one
  per host."""
  if platform == 'cpu':
    return host_count
  power = 1 << max(host_count - 1, 0).bit_length()
  shards = min(SHARDS_PER_HOST * power, batch_size & -batch_size)
  return shards if shards % host_count == 0 else host_count


def check_shards(shards: int, host_count: int, batch_size: int) -> None:
  """A stream of `shards` data shards on `host_count` hosts, `batch_size` rows a step over all of them; a
  ConfigError names what does not divide, and what would."""
  if batch_size % shards:
    raise ConfigError(f'train.batch_size {batch_size} is not divisible by the {shards} data shards (data.shards): '
                      f'each shard gives every batch the same number of rows. Use a multiple of {shards} (or, for a '
                      f'new run, another data.shards).')
  if shards % host_count:
    working = [str(n) for n in range(1, shards + 1) if shards % n == 0]
    raise ConfigError(f'{host_count} hosts cannot share the {shards} data shards of this run\'s stream evenly: it '
                      f'runs on {", ".join(working)} hosts (the divisors of {shards}). Use a slice of one of these '
                      f'host counts (or, for a new run, a data.shards that {host_count} divides).')


class Pipeline:
  """Batches for one host: `next_batch()` returns a dict of numpy arrays with FEATURES, [host batch, ...]: the rows
  of the global batch of `batch_size` that this host's shards give.

  `shards`: the data shards the stream is defined on (module docstring; default one per host, the stream of a run
  from before data.shards); the host serves its block of them. `sentence_task` overrides data.sentence_task: the
  held-out probes 'swap' and 'random' (instances.py). With `workers`, that many background processes make the
  coming chunks (the same batches, sooner); close() stops them. `opened`: the sources, already opened by
  open_sources (pipelines of one run share them).
  """

  def __init__(self, data, tokenizer: Tokenizer, batch_size: int, split: str = 'train', host: int = 0,
               host_count: int = 1, collect_stats: bool = False, sentence_task: Optional[str] = None,
               workers: int = 0, opened: Optional[list] = None, shards: Optional[int] = None):
    validate_data(data)
    shards = shards or host_count
    check_shards(shards, host_count, batch_size)
    self.data, self.tokenizer, self.split = data, tokenizer, split
    self.host, self.host_count, self.shard_count = host, host_count, shards
    self.shards = range(host * shards // host_count, (host + 1) * shards // host_count)  # this host's
    self.rows, self.batch_size = batch_size // shards, batch_size // host_count  # a shard's rows, the host's
    self.stats = Stats() if collect_stats else None
    specs = sources.parse_specs(data.source)
    self.sources = opened or open_sources(data)
    weights = np.array([spec.weight for spec in specs])
    self.weights = weights / weights.sum()
    self.streams = []  # shard by shard, each shard's sources in data.source's order
    for shard in self.shards:
      for i, source in enumerate(self.sources):
        first, stop = document_ranges(len(source), data.eval_fraction, split, shard, shards, source.name)
        self.streams.append(_Stream(source, i, first, stop, data, sentence_task or data.sentence_task, tokenizer,
                                    self.stats, slot=len(self.streams)))
    self.step = 0
    self.workers = Workers(self.streams, workers, len(self.shards)) if workers else None
    self.workers_started = False
    for stream in self.streams:
      stream.workers = self.workers

  def of_shard(self, k: int) -> list:
    """The streams of this host's k-th shard, one per source."""
    return self.streams[k * len(self.sources):(k + 1) * len(self.sources)]

  def close(self) -> None:
    if self.workers is not None:
      self.workers.close()

  def skipped(self) -> dict:
    return {source.name: dict(source.skipped) for source in self.sources}

  def _start_workers(self) -> None:
    if self.workers is not None and not self.workers_started:  # after a restore, which moves the streams
      self.workers.start([stream for stream in self.streams if stream.chunks])
      self.workers_started = True

  def next_batch(self) -> dict:
    self._start_workers()
    items = []
    for k, shard in enumerate(self.shards):
      streams = self.of_shard(k)
      picks = np.random.default_rng([self.data.seed, shard, self.step, 3]).choice(len(streams), size=self.rows,
                                                                                   p=self.weights)
      items.extend(streams[p].next() for p in picks)
    batch = collate(items, self.data.max_seq_length, self.data.max_predictions_per_seq)
    self.step += 1
    return batch

  def __iter__(self):
    while True:
      yield self.next_batch()

  def one_pass(self, max_batches: int, stream: Optional[int] = None) -> list:
    """Batches holding each instance of the first epoch of every source (or of source `stream` alone) once, shard
    by shard: a held-out set evaluated whole, at most max_batches batches' worth of them per source and at least
    one batch; the last one is padded with rows of label -1 (collate). Over all hosts the instances are those of
    every shard, whatever the host count."""
    self._start_workers()
    items = []
    for k in range(len(self.shards)):
      for i, source_stream in enumerate(self.of_shard(k)):
        if (stream is not None and i != stream) or not source_stream.chunks:  # a shard with no held-out documents
          continue
        mine = []
        while len(mine) < max_batches * self.rows:
          item = source_stream.next()
          if source_stream.epoch > 0:  # that was the first instance of the second pass
            break
          mine.append(item)
        items.extend(mine)
    return [collate(items[i:i + self.batch_size], self.data.max_seq_length, self.data.max_predictions_per_seq,
                    rows=self.batch_size) for i in range(0, max(len(items), 1), self.batch_size)]

  def state(self) -> dict:
    """This host's small JSON-able state: restored to resume at exactly this batch (run_state joins the hosts')."""
    return {'step': self.step, 'seed': self.data.seed, 'split': self.split, 'shard_count': self.shard_count,
            'first_shard': self.shards.start,
            'shards': [[[s.epoch, s.position, s.offset] for s in self.of_shard(k)] for k in range(len(self.shards))]}

  def restore(self, state: dict) -> None:
    """Resumes at the batch `state` was saved before: a whole run's (a checkpoint's, from any host count), or a
    host's holding this host's shards. Settings that would change the stream are refused (ConfigError)."""
    saved = by_shard(state)
    mine = {'seed': self.data.seed, 'split': self.split, 'shard_count': self.shard_count}
    for key, value in mine.items():
      if saved[key] != value:
        raise ConfigError(f'the checkpoint\'s data state was saved with {key}={saved[key]!r}, this run has '
                          f'{value!r}: a run resumes with the data settings and data shards it started with (or use '
                          f'a new --workdir).')
    missing = [shard for shard in self.shards if shard not in saved['shards']]
    if missing:
      raise ConfigError(f'the data state holds shards {sorted(saved["shards"])}, not this host\'s {missing}: restore '
                        f'a whole run\'s state (its checkpoint\'s).')
    for shard in self.shards:
      if len(saved['shards'][shard]) != len(self.sources):
        raise ConfigError(f'the checkpoint\'s data state has {len(saved["shards"][shard])} sources, data.source now '
                          f'has {len(self.sources)}: resume with the sources the run started with (or use a new '
                          f'--workdir).')
    self.step = saved['step']
    for k, shard in enumerate(self.shards):
      for stream, (epoch, position, offset) in zip(self.of_shard(k), saved['shards'][shard]):
        stream.epoch, stream.position, stream.offset = epoch, position, offset


def run_state(host_states: list) -> dict:
  """The whole run's data state, as its checkpoint keeps it, from every host's state() in host order: every shard's
  position, and the host count it was saved on."""
  first = host_states[0]
  return {'step': first['step'], 'seed': first['seed'], 'split': first['split'],
          'shard_count': first['shard_count'], 'host_count': len(host_states),
          'shards': [streams for state in host_states for streams in state['shards']]}


def by_shard(state: dict) -> dict:
  """A saved data state in one form, {step, seed, split, shard_count, shards: {shard: its streams}, host_count}
  (None where it does not say), whichever wrote it: a host's state(), a whole run's (run_state), or a run's from
  before data shards, which had one per host: {'hosts': [each host's]} or one host's {host, host_count, streams}."""
  if 'hosts' in state:
    hosts = state['hosts']
    return {**{k: hosts[0][k] for k in ('step', 'seed', 'split')}, 'shard_count': len(hosts),
            'host_count': len(hosts), 'shards': {h['host']: h['streams'] for h in hosts}}
  if 'streams' in state:
    return {**{k: state[k] for k in ('step', 'seed', 'split')}, 'shard_count': state['host_count'],
            'host_count': state['host_count'], 'shards': {state['host']: state['streams']}}
  first = state.get('first_shard', 0)
  return {**{k: state[k] for k in ('step', 'seed', 'split', 'shard_count')}, 'host_count': state.get('host_count'),
          'shards': {first + k: streams for k, streams in enumerate(state['shards'])}}


def collate(items: list, max_seq_length: int, max_predictions: int, rows: Optional[int] = None) -> dict:
  """Pads instances into fixed-shape arrays under the original's feature names; `rows` pads the batch with empty
  rows whose sentence label is -1 (no MLM weight, no label: evaluation leaves them out)."""
  n = rows or len(items)
  batch = {
      'input_ids': np.zeros((n, max_seq_length), np.int32),
      'input_mask': np.zeros((n, max_seq_length), np.int32),
      'segment_ids': np.zeros((n, max_seq_length), np.int32),
      'masked_lm_positions': np.zeros((n, max_predictions), np.int32),  # padding points at [CLS], weight 0
      'masked_lm_ids': np.zeros((n, max_predictions), np.int32),
      'masked_lm_weights': np.zeros((n, max_predictions), np.float32),
      'sentence_order_labels': np.full((n,), -1, np.int32),
  }
  for row, (instance, masked) in enumerate(items):
    length, predictions = len(masked.tokens), len(masked.positions)
    batch['input_ids'][row, :length] = masked.tokens
    batch['input_mask'][row, :length] = 1
    batch['segment_ids'][row, :length] = instance.segment_ids
    batch['masked_lm_positions'][row, :predictions] = masked.positions
    batch['masked_lm_ids'][row, :predictions] = masked.labels
    batch['masked_lm_weights'][row, :predictions] = 1.0
    batch['sentence_order_labels'][row] = instance.label
  return batch


def worker_count(setting: int, devices) -> int:
  """data.workers for this host's `devices`: -1 is one per accelerator device, at most the cores but one, and
  none on CPU devices (their cores compute the steps)."""
  if setting >= 0:
    return setting
  accelerators = sum(d.platform != 'cpu' for d in devices)
  return min(accelerators, max((os.cpu_count() or 1) - 1, 1)) if accelerators else 0


def open_sources(data, process_index: int = 0, process_count: int = 1) -> list:
  """Every source of data.source, opened once for all the pipelines of a run to share. A file source's index is
  read from data.index_dir, and where files lack one, the `process_count` processes of the run (this is
  `process_index`; on a pod, its hosts) index them together first (corpus_index.py)."""
  opened = [sources.open_source(spec, data.tfds_data_dir, data.get('index_dir'), process_index, process_count)
            for spec in sources.parse_specs(data.source)]
  for source in opened:
    len(source)  # a file source's index, read or made here: a damaged file stops the run now
  return opened


def held_out_sets(data, tokenizer: Tokenizer, batch_size: int, eval_batches: int, host: int = 0,
                  host_count: int = 1, opened=None, shards: Optional[int] = None) -> dict:
  """This host's held-out batches, made once and evaluated whole each time (step.evaluate): instances made as for
  training (the run's sentence task; MLM is measured on these) as 'sop', or with several sources one such set
  per source, 'sop/<label>' (metrics per source); and the probes 'swap' and 'random' over all sources.
  `eval_batches` (of `batch_size` over all hosts) bounds each source's share of each set. Over all hosts the sets
  hold the same instances on any host count that divides `shards` (as Pipeline)."""
  opened = opened or open_sources(data)
  made = lambda task: Pipeline(data, tokenizer, batch_size, 'eval', host, host_count, sentence_task=task,
                               opened=opened, shards=shards)
  own = made(None)
  if len(opened) == 1:
    sets = {'sop': own.one_pass(eval_batches)}
  else:
    labels = source_labels(data)
    sets = {f'sop/{label}': own.one_pass(eval_batches, stream=i) for i, label in enumerate(labels)}
  return {**sets, **{task: made(task).one_pass(eval_batches) for task in ('swap', 'random')}}


def source_labels(data) -> list:
  """Each source's short name (its format, or its TFDS dataset), numbered where two would be the same."""
  labels = [spec.label for spec in sources.parse_specs(data.source)]
  return [f'{label}{labels[:i + 1].count(label)}' if labels.count(label) > 1 else label
          for i, label in enumerate(labels)]
