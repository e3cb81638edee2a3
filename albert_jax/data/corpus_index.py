"""Where each document of a file source lies: found once per corpus and kept, so that a start reads only what it
serves.

A file source numbers its documents over its files in name order (sources.FileSource). Finding them means reading
every file through its format (formats.py's index()): a minute a few gigabytes on one core, hours for the paper's
160 GB. That is done once and kept in an index folder, which every later start reads instead: each host of a pod,
each restart, each run and tool on the same files.

  <folder>/part-<hash>.json        an entry per file: its name below the glob's fixed folder, size, version,
                                   documents, first row in the part's locations, and what indexing it skipped
                                   (counts of the part's reasons, each written once)
  <folder>/part-<hash>.locations   each document's location (two little-endian int64s), row after row

The folder is below `data.index_dir` if set (a subfolder per corpus folder), else `.albert_index` beside a corpus
in a bucket (where a pod's hosts all see it), else ~/.cache/albert_jax/corpus_index for a corpus on local disk;
then a subfolder per format (and field) and formats.INDEX_VERSION. A start lists the files and reads the entries
(about 70 bytes a file); the locations of a chunk's documents are read with the chunk. A process holds a few
numbers per file, never any per document.

A file whose size or version (paths.FileInfo) differs from its entry has none: such files and new ones are indexed
by the processes that open the source, together. The files are cut into one run per process by bytes, in name
order (the same cut on every process, whatever it finds kept); each process indexes the files of its run that lack
an entry, writes them as a part, then waits until every file has one. While it works it rewrites a progress file
beside its part, and if it fails it writes its error there, so that the others report it and stop with it, or
notice when it stops moving.
"""
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import threading
import time

import numpy as np

from albert_jax import paths
from albert_jax.data import formats
from albert_jax.errors import ConfigError

BESIDE_CORPUS = '.albert_index'  # the index folder beside a corpus in a bucket; file sources never read it
PROGRESS_EVERY_S = 30.0  # how often a process that indexes rewrites its progress file, and a waiting one reports
POLL_S = 2.0  # how often a waiting process lists the index folder (one request)
STALLED_AFTER_S = 600.0  # a process whose progress file has not changed for this long is taken as gone
_ROW = np.dtype('<i8')


class CorpusIndexError(ConfigError):
  """An index that cannot be made or kept; the message names the folder, the process and the fix."""


def folder(label: str, pattern: str, index_dir=None) -> paths.Path:
  """The index folder of a file source of format `label` (with its field, if any) whose glob is `pattern`."""
  fixed = paths.fixed_folder(pattern)
  if index_dir:
    root = paths.path(index_dir) / _corpus_name(fixed)
  elif paths.is_url(fixed):
    root = paths.path(fixed) / BESIDE_CORPUS
  else:
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    root = paths.path(os.path.join(cache, 'albert_jax', 'corpus_index', _corpus_name(fixed)))
  return root / f'{re.sub(r"[^A-Za-z0-9_-]+", "-", label).strip("-")}-v{formats.INDEX_VERSION}'


def holds(name: str, index_dir=None) -> bool:
  """Whether the file `name` is part of a kept index (beside a corpus, or below `index_dir`): a glob such as
  jsonl:gs://b/corpus/** must not read it as text."""
  inside = index_dir and name.startswith(str(paths.path(index_dir)).rstrip('/') + '/')
  return bool(inside) or f'/{BESIDE_CORPUS}/' in name


def _corpus_name(fixed: str) -> str:
  """A folder name for a corpus folder: its last part, readable, and a hash of the whole."""
  tail = re.sub(r'[^A-Za-z0-9._-]+', '_', fixed.rstrip('/').rsplit('/', 1)[-1])[:40] or 'root'
  return f'{tail}-{hashlib.sha1(fixed.encode()).hexdigest()[:10]}'


class Index:
  """The entries of a source's files, in name order: how many documents each holds, and where their locations
  are kept. `locations(file, first, stop)` reads the locations of the file's documents first..stop-1."""

  def __init__(self, index_folder: paths.Path, entries: list):
    self.folder = index_folder
    self.documents = np.array([entry[2] for entry in entries], np.int64)
    self.starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(self.documents)])  # each file's first document
    self.parts = sorted({entry[0] for entry in entries})
    number = {part: i for i, part in enumerate(self.parts)}
    self.part_of = np.array([number[entry[0]] for entry in entries], np.int32)
    self.rows = np.array([entry[1] for entry in entries], np.int64)
    self.skipped = collections.Counter()
    for entry in entries:
      self.skipped.update(entry[3])

  def __len__(self) -> int:
    return int(self.starts[-1])

  def nbytes(self) -> int:
    """What the index holds in memory (the file names aside)."""
    return self.documents.nbytes + self.starts.nbytes + self.part_of.nbytes + self.rows.nbytes

  def locations(self, file: int, first: int, stop: int) -> np.ndarray:
    return _rows(self.folder, self.parts[self.part_of[file]], int(self.rows[file]) + first, stop - first)


def _rows(index_folder: paths.Path, part: str, first: int, count: int) -> np.ndarray:
  """Rows first..first+count-1 of a part's locations, in one read."""
  raw = paths.read_range(index_folder / f'{part}.locations', first * 2 * _ROW.itemsize, count * 2 * _ROW.itemsize)
  return np.frombuffer(raw, _ROW).reshape(-1, 2)


def unindexed(index_folder: paths.Path, files: list, pattern: str) -> list:
  """The files (paths.FileInfo) that have no current entry in the index."""
  fixed = paths.fixed_folder(pattern)
  entries = _Kept(index_folder).read()
  return [info for info in files if _key(info, fixed) not in entries]


def kept_locations(index_folder: paths.Path, files: list, pattern: str):
  """A function of a file's number (in `files`) that reads its documents' locations from the index, or gives
  None where the file has no entry: for reading a few files without indexing the rest (a vocabulary's sample)."""
  fixed = paths.fixed_folder(pattern)
  entries = _Kept(index_folder).read()
  found = {number: entries.get(_key(info, fixed)) for number, info in enumerate(files)}

  def locations(number: int):
    entry = found.get(number)
    if entry is None:
      return None
    part, row, documents, _ = entry
    return _rows(index_folder, part, row, documents)

  return locations


def open_index(name: str, format_, files: list, pattern: str, index_folder: paths.Path, process_index: int = 0,
               process_count: int = 1) -> Index:
  """The index of source `name` (a glob `pattern` in `format_`) over `files` (paths.FileInfo, in name order),
  from `index_folder`; files without a kept entry are indexed first, by the `process_count` processes opening it
  together (this one is `process_index`)."""
  fixed = paths.fixed_folder(pattern)
  keys = [_key(info, fixed) for info in files]
  kept = _Kept(index_folder)
  entries = kept.read()
  missing = [key not in entries for key in keys]
  if any(missing):
    label = f'[process {process_index}/{process_count}] ' if process_count > 1 else ''
    size = sum(info.size for info, lacks in zip(files, missing) if lacks)
    if process_index == 0:
      print(f'{name}: {sum(missing):,} of {len(files):,} files ({size / 1e6:,.0f} MB) have no index entry (new, '
            f'changed, or never indexed): indexing them once into {index_folder}'
            + (f', shared by {process_count} processes' if process_count > 1 else ''), flush=True)
    numbers = cut(files, process_count)
    runs = [[keys[i] for i in run] for run in numbers]
    run_names = [_run_name(number, run) for number, run in enumerate(runs)]
    mine = [i for i in numbers[process_index] if missing[i]]
    if mine:
      _build(name, format_, [files[i] for i in mine], [keys[i] for i in mine], index_folder,
             run_names[process_index], label)
    entries = kept.wait(runs, run_names, name, process_index)
  return Index(index_folder, [entries[key] for key in keys])


def _key(info: paths.FileInfo, fixed: str) -> tuple:
  """What an entry is kept under: the file's name below the glob's fixed folder, its size and its version."""
  return info.name[len(fixed):].lstrip('/'), info.size, info.version


def cut(files: list, count: int) -> list:
  """`files` (paths.FileInfo) cut into `count` runs of about equal bytes, in name order: each run, a list of file
  numbers. A process's run depends on the listing alone, so every process computes every run alike."""
  weights = np.array([max(info.size, 1) for info in files], np.float64)
  middle = np.cumsum(weights) - weights / 2  # a file goes to the run its middle byte falls in
  owner = np.minimum((middle * count / weights.sum()).astype(np.int64), count - 1)
  return [np.flatnonzero(owner == b).tolist() for b in range(count)]


def _run_name(number: int, keys: list) -> str:
  """The name of the progress and error files of run `number`, of the files of `keys`: a hash of the keys."""
  return f'run-{number}-{hashlib.sha1(json.dumps(keys).encode()).hexdigest()[:16]}'


def _build(name: str, format_, files: list, keys: list, index_folder: paths.Path, run_name: str, label: str) -> None:
  """Indexes `files` and writes them as one part; the progress file says how far it got, the error file why it
  stopped."""
  try:
    index_folder.mkdir(parents=True, exist_ok=True)
    error = index_folder / f'{run_name}.error'
    if error.exists():  # from an earlier attempt at the same files
      error.unlink()
  except Exception as e:  # pylint: disable=broad-except  (permission denied, a read-only bucket: the client's words)
    raise CorpusIndexError(
        f'{name}: cannot write its index to {index_folder} ({type(e).__name__}: {" ".join(str(e).split())[:200]}): '
        f'set data.index_dir (or --index_dir) to a folder this machine can write, on a pod one every host sees '
        f'(gs://YOUR_BUCKET/corpus_index).') from None
  progress = _Progress(index_folder / f'{run_name}.progress', files, label + name)
  try:
    entries, locations, row = [], [], 0
    for info, key in zip(files, keys):
      skipped = collections.Counter()
      if info.size == 0:
        skipped['empty files'] += 1
        found = np.zeros((0, 2), np.int64)
      else:
        found = np.asarray(format_.index(paths.path(info.name), skipped), np.int64).reshape(-1, 2)
      entries.append([*key, len(found), row, skipped])
      locations.append(found)
      row += len(found)
      progress.advance(info)
    # What indexing skipped, by reason: each reason written once a part, an entry holding [reason, count] pairs.
    reasons = sorted({reason for *_, skipped in entries for reason in skipped})
    number = {reason: i for i, reason in enumerate(reasons)}
    for entry in entries:
      entry[-1] = [[number[reason], count] for reason, count in sorted(entry[-1].items())]
    text = json.dumps({'reasons': reasons, 'files': entries}, separators=(',', ':'))
    part = 'part-' + hashlib.sha1(text.encode()).hexdigest()[:16]
    paths.write_whole(index_folder / f'{part}.locations', np.concatenate(locations).astype(_ROW).tobytes())
    paths.write_whole(index_folder / f'{part}.json', text.encode())  # last: then the part is whole
  except BaseException as e:
    if isinstance(e, Exception):  # the others stop with this message instead of waiting for this process
      try:
        (index_folder / f'{run_name}.error').write_text(str(e))
      except Exception:  # pylint: disable=broad-except
        pass
    raise
  finally:
    progress.close()


class _Progress:
  """A process's indexing progress: a line on its console every PROGRESS_EVERY_S, and the same figures rewritten
  into a file beside its part (by a thread, so that one long file does not make it look stopped)."""

  def __init__(self, file: paths.Path, files: list, label: str):
    self.file, self.label = file, label
    self.files, self.bytes = len(files), sum(info.size for info in files)
    self.files_done = self.bytes_done = 0
    self.start = time.perf_counter()
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._beat, daemon=True)
    self.thread.start()

  def state(self) -> dict:
    return {'files_done': self.files_done, 'files': self.files, 'bytes_done': self.bytes_done,
            'bytes': self.bytes, 'time': time.time()}

  def advance(self, info: paths.FileInfo) -> None:
    self.files_done += 1
    self.bytes_done += info.size

  def _beat(self) -> None:
    while True:
      try:
        self.file.write_text(json.dumps(self.state()))
      except Exception:  # pylint: disable=broad-except  (a report that fails to be written stops nothing)
        pass
      if self.stopped.wait(PROGRESS_EVERY_S):
        return
      elapsed = time.perf_counter() - self.start
      rate = self.bytes_done / max(elapsed, 1e-9)
      eta = (self.bytes - self.bytes_done) / rate if rate else float('nan')
      print(f'{self.label}: indexed {self.files_done:,}/{self.files:,} files, {self.bytes_done / 1e6:,.0f} of '
            f'{self.bytes / 1e6:,.0f} MB ({rate / 1e6:,.1f} MB/s, ETA {eta:,.0f} s)', flush=True)

  def close(self) -> None:
    self.stopped.set()
    self.thread.join()
    try:
      self.file.unlink()
    except Exception:  # pylint: disable=broad-except
      pass


class _Kept:
  """The entries kept in an index folder, read part by part as parts appear."""

  def __init__(self, index_folder: paths.Path):
    self.folder = index_folder
    self.entries, self.read_parts = {}, set()

  def _listing(self) -> dict:
    """name -> version of each file in the folder (one request in a bucket)."""
    if not self.folder.exists():
      return {}
    return {os.path.basename(info.name): info.version for info in paths.listing(str(self.folder / '*'))}

  def read(self, listing: dict = None) -> dict:
    """(name, size, version) -> (part, first row, documents, skipped) of every entry kept so far."""
    listing = self._listing() if listing is None else listing
    new = sorted(n[:-len('.json')] for n in listing if n.startswith('part-') and n.endswith('.json')
                 and n[:-len('.json')] not in self.read_parts)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:  # in a bucket each is a request: at once
      texts = list(pool.map(lambda part: (self.folder / f'{part}.json').read_text(), new))
    for part, text in zip(new, texts):
      self.read_parts.add(part)
      try:
        kept = json.loads(text)
        entries = {(name, size, version): (part, row, documents, {kept['reasons'][i]: n for i, n in skipped})
                   for name, size, version, documents, row, skipped in kept['files']}
      except (ValueError, KeyError, TypeError, IndexError):
        print(f'{self.folder / part}.json is damaged and is left out (its files are indexed again); delete it.',
              flush=True)
        continue
      self.entries.update(entries)
    return self.entries

  def wait(self, runs: list, run_names: list, name: str, process_index: int) -> dict:
    """The entries, once every file of every run has one; stops with another process's error, or when one has
    not moved for STALLED_AFTER_S."""
    start = last_report = time.monotonic()
    moved = {}  # run name -> (its progress file's version, when this process saw it change)
    while True:
      listing = self._listing()
      entries = self.read(listing)
      pending = [b for b, run in enumerate(runs) if any(key not in entries for key in run)]
      if not pending:
        return entries
      now = time.monotonic()
      for b in pending:
        run_name = run_names[b]
        if f'{run_name}.error' in listing:
          try:
            message = (self.folder / f'{run_name}.error').read_text()
          except FileNotFoundError:  # an earlier attempt's, removed as the process began again
            message = None
          if message is not None:
            raise CorpusIndexError(f'{name}: process {b} could not index its files: {message}')
        version = listing.get(f'{run_name}.progress')
        if run_name not in moved or moved[run_name][0] != version:
          moved[run_name] = (version, now)
        elif now - moved[run_name][1] > STALLED_AFTER_S:
          what = ('has written no progress' if version is None else
                  f'has not moved for {STALLED_AFTER_S / 60:.0f} minutes')
          raise CorpusIndexError(
              f'{name}: process {b} of {len(runs)} {what} in {self.folder}, and its files are not indexed. If the '
              f'processes do not share that folder (a local disk on each host), set data.index_dir to one they all '
              f'see (gs://YOUR_BUCKET/corpus_index); else restart them all (what was indexed is kept).')
      if process_index == 0 and now - last_report >= PROGRESS_EVERY_S:
        last_report = now
        print(f'{name}: waiting for {len(pending)} of {len(runs)} processes to index their files '
              f'({now - start:,.0f} s)', flush=True)
      time.sleep(POLL_S)
