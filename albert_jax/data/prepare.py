"""Index a corpus once, ahead of training: where each document of each file source lies (data/corpus_index.py).

  python -m albert_jax.data.prepare --input='wikiextractor:gs://BUCKET/wiki/*/wiki_*,gutenberg:gs://BUCKET/books/*.txt'
  python -m albert_jax.data.prepare --input='jsonl:/data/c4/*.jsonl.zst' [--index_dir=DIR] [--processes=16]

Takes data.source's specs (--input) and data.index_dir (--index_dir), and indexes every file that has no index
entry yet, in --processes processes on this machine (each a run of the files, cut by bytes). Training does the
same on its first start if no one did, spread over the pod's hosts; preparing ahead moves that work off the pod
(a CPU machine near the bucket is cheaper than idle TPUs) and finds a damaged file before a pod is rented. Files
already indexed are not read again, so a second run, or one after files were added, costs only what is new.
"""
import concurrent.futures
import multiprocessing
import os
import resource
import time

from absl import flags

from albert_jax import paths
from albert_jax.data import corpus_index, sources


def prepare(spec: sources.Spec, index_dir=None, processes: int = 1, data_dir=None) -> dict:
  """Indexes what the source of `spec` lacks, in `processes` processes; what it found, as a dict."""
  source = sources.open_source(spec, data_dir, index_dir)
  if not isinstance(source, sources.FileSource):  # TFDS reads examples by number already
    return {'source': source.name, 'documents': len(source), 'indexed_files': 0}
  start, cpu_start = time.perf_counter(), time.process_time()
  children_start = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
  lacking = corpus_index.unindexed(source.index_folder, source.files, source.pattern)
  processes = max(1, min(processes, len(lacking)))
  if processes > 1:
    # Each process indexes its run and waits for the others' (what the hosts of a pod do); this one then reads.
    with concurrent.futures.ProcessPoolExecutor(processes, multiprocessing.get_context('spawn')) as pool:
      for done in [pool.submit(_index_run, spec, index_dir, data_dir, number, processes)
                   for number in range(processes)]:
        done.result()
  documents = len(source)
  children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - children_start
  return {'source': source.name, 'files': len(source.files), 'bytes': sum(info.size for info in source.files),
          'documents': documents, 'indexed_files': len(lacking),
          'indexed_bytes': sum(info.size for info in lacking), 'wall_s': time.perf_counter() - start,
          'cpu_s': time.process_time() - cpu_start + children, 'processes': processes,
          'index_folder': str(source.index_folder), 'skipped': source.skipped.report()}


def _index_run(spec: sources.Spec, index_dir, data_dir, number: int, count: int) -> None:
  len(sources.open_source(spec, data_dir, index_dir, number, count))


def main(argv):
  del argv
  paths.check_reachable(_INPUT.value, _INDEX_DIR.value)
  for spec in sources.parse_specs(_INPUT.value):
    found = prepare(spec, _INDEX_DIR.value, _PROCESSES.value, _TFDS_DATA_DIR.value)
    if 'files' not in found:
      print(f'{found["source"]}: {found["documents"]:,} documents, read by number: nothing to index')
      continue
    work = (f'indexed {found["indexed_files"]:,} files ({found["indexed_bytes"] / 1e6:,.0f} MB) in '
            f'{found["wall_s"]:,.1f} s, {found["cpu_s"]:,.1f} CPU s over {found["processes"]} process(es)'
            if found['indexed_files'] else 'every file was indexed already')
    print(f'{found["source"]}: {found["files"]:,} files, {found["bytes"] / 1e6:,.0f} MB, {found["documents"]:,} '
          f'documents; {work}; index in {found["index_folder"]}; skipped while indexing: {found["skipped"]}',
          flush=True)


if __name__ == '__main__':
  # Imported here: the indexing processes (spawned) import this module, and config imports JAX (seconds each).
  from albert_jax.config import run_cli
  _INPUT = flags.DEFINE_string('input', None, 'Sources, as data.source (wikiextractor:GLOB, jsonl:GLOB, ...; '
                               'comma-separated).')
  _INDEX_DIR = flags.DEFINE_string('index_dir', None, 'Where the indexes are kept, as data.index_dir: by default '
                                   'beside a corpus in a bucket, in ~/.cache/albert_jax for a local one.')
  _PROCESSES = flags.DEFINE_integer('processes', os.cpu_count() or 1, 'Processes indexing files at once.')
  _TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'TFDS data directory, for tfds: sources.')
  flags.mark_flags_as_required(['input'])
  run_cli(main)
