"""What a corpus of the paper's size costs a host of a pod: its start, the one-time indexing and how it spreads, a
restart, the vocabulary's sample, and memory, on synthetic corpora from 0.1 to 4 GB and one of 10 M documents.

  python bench/corpus_scale.py [--dir=/tmp/corpus_scale] [--copies=1,4,40] [--hosts=1,8,64,128] \\
      [--jsonl_documents=10000000] [--gcs=1,4] [--before=DIR] [--repeats=3]

Corpora (made once under --dir, reused): `wiki-N`, N copies of the shared Wikipedia sample's plain half
(../shared/data/corpora/wikipedia/AA: 100 WikiExtractor files, 103 MB), each file given an article of its own so
that no two files are equal (40 copies: 4,000 files, 4.1 GB); `jsonl`, --jsonl_documents short documents (one or
two sentences of the sample each) in 40 JSON-lines files.

Measured, each start in a fresh process:
- per format, one process indexing the shared sample (MB/s): the rate the one-time work runs at;
- the one-time work (every file indexed once): CPU per file, so the runs a pod of N hosts cuts (corpus_index.cut)
  are summed exactly as they would be spread; and `prepare` itself on this machine's cores;
- host K of N (K = 5, or N-1) starting as train.py does (open the sources, build its pipeline, make its first batch)
  with the index kept, as every restart does: wall and CPU seconds (medians of --repeats processes), bytes the
  process read, its peak memory and the index it holds, and what a batch-making worker is sent; a corpus's first
  start adds the busiest host's share of the indexing;
- with --before=DIR (a checkout of an earlier albert_jax), host 5 of 64 started by that code in the same run;
- the vocabulary's sample (--vocab_sentences, default 50,000) with no index and with one;
- with --gcs, those sizes of the wiki corpus through a local GCS server (tests/gcs_emulator.py): the bytes each
  host's start moves over loopback (the requests and the bucket's answers), against the corpus's size.
Then the paper's corpora extrapolated from these figures, stated as an extrapolation.
"""
import argparse
import json
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = ROOT.parent / 'shared' / 'data' / 'corpora'

# One host's start, as train.py makes it, in a process of its own (run with the code under test on PYTHONPATH).
HOST_START = r'''
import copy, json, os, pickle, resource, sys, time
settings = json.loads(sys.argv[1])
from albert_jax.config import from_file
from albert_jax.data import pipeline
from albert_jax.data.tokenizer import Tokenizer
import numpy as np

def io():
  return {k: int(v) for k, v in (line.split(': ') for line in open('/proc/self/io').read().splitlines())}

config = from_file(os.path.join(settings['root'], 'configs', 'tiny.py'))
config.data.source, config.data.vocab = settings['source'], settings['vocab']
config.data.eval_fraction, config.data.max_seq_length, config.data.max_predictions_per_seq = 0.01, 512, 20
if settings.get('index_dir') and 'index_dir' in config.data:
  config.data.index_dir = settings['index_dir']
tokenizer = Tokenizer(settings['vocab'])
host, hosts = settings['host'], settings['hosts']
rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before, start, cpu = io(), time.perf_counter(), time.process_time()
opened = pipeline.open_sources(config.data)
open_s = time.perf_counter() - start
data = pipeline.Pipeline(config.data, tokenizer, 8 * hosts, 'train', host, hosts, opened=opened)
data.next_batch()
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
after = io()
sent = [copy.copy(stream) for stream in data.streams]  # what pipeline.Workers sends each worker
for stream in sent:
  stream.stats, stream.workers, stream._chunk = None, None, None
held = 0
for source in opened:
  if hasattr(source, 'locations'):  # an earlier albert_jax: every document's place, in every process
    held += source.file_numbers.nbytes + source.locations.nbytes
  elif hasattr(source, 'index'):
    held += source.index.nbytes()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({'wall_s': wall, 'cpu_s': cpu, 'open_s': open_s, 'process_cpu_s': usage.ru_utime + usage.ru_stime,
                  'read_bytes': after['rchar'] - before['rchar'],
                  'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  'rss_before_mb': rss_before / 1024, 'index_held_bytes': held,
                  'worker_copy_bytes': len(pickle.dumps(sent))}))
'''


def run_json(argv, env=None, cwd=ROOT) -> dict:
  out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
  if out.returncode:
    raise RuntimeError(f'{argv[:4]} failed:\n{out.stderr[-3000:]}')
  return json.loads(out.stdout.strip().splitlines()[-1])


def host_start(source: str, vocab: str, host: int, hosts: int, index_dir: str, code=ROOT, env=None,
               repeats: int = 1) -> dict:
  """Host `host` of `hosts` starting, `repeats` times in fresh processes (every one after the first a restart):
  the median of each figure, and the wall seconds' least and most under 'wall_range'."""
  settings = {'root': str(ROOT), 'source': source, 'vocab': vocab, 'host': host, 'hosts': hosts,
              'index_dir': index_dir}
  # Run in the code's folder: `python -c` puts it first on the path, ahead of an installed albert_jax.
  runs = [run_json([sys.executable, '-c', HOST_START, json.dumps(settings)],
                   {'PYTHONPATH': str(code), 'JAX_PLATFORMS': 'cpu', **(env or {})}, cwd=code)
          for _ in range(repeats)]
  found = {key: float(np.median([run[key] for run in runs])) for key in runs[0]}
  found['wall_range'] = (min(run['wall_s'] for run in runs), max(run['wall_s'] for run in runs))
  return found


# ---- Corpora -------------------------------------------------------------------------------------------------------
def own_article(copy: int, name: str) -> bytes:
  """An article no other file has: a <doc> naming its copy and file, with passages of more than 8 words."""
  return (f'<doc id="copy{copy}-{name}" url="https://example.org/{copy}/{name}" title="Copy {copy} of {name}">\n'
          f'Copy {copy} of {name}\n\nThis article marks copy {copy} of the file {name}, so that no two files of '
          f'the synthetic corpus hold the same bytes.\nIt is read like every other article of the corpus, as '
          f'WikiExtractor writes them.\n</doc>\n').encode()


def make_wiki(directory: pathlib.Path, copies: int) -> str:
  """`copies` copies of the sample's plain Wikipedia files under directory/wiki-N/copy_CCC/AA/; the glob."""
  folder = directory / f'wiki-{copies}'
  if not (folder / 'done').exists():
    shutil.rmtree(folder, ignore_errors=True)
    originals = sorted((SAMPLE / 'wikipedia' / 'AA').iterdir())
    for copy in range(copies):
      (folder / f'copy_{copy:03d}' / 'AA').mkdir(parents=True)
      for original in originals:
        (folder / f'copy_{copy:03d}' / 'AA' / original.name).write_bytes(
            original.read_bytes() + own_article(copy, original.name))
    (folder / 'done').write_text('')
  return f'wikiextractor:{folder}/copy_*/AA/wiki_*'


def make_jsonl(directory: pathlib.Path, documents: int, files: int = 40) -> str:
  """`documents` short JSON-lines documents (one or two sentences of the sample each, numbered) in `files` files."""
  folder = directory / f'jsonl-{documents}'
  if not (folder / 'done').exists():
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    text = (SAMPLE / 'wikipedia' / 'AA' / 'wiki_00').read_text()
    sentences = [s for s in re.split(r'(?<=[.!?])\s+', re.sub(r'<[^>]+>', ' ', text)) if 40 < len(s) < 200]
    rng = random.Random(0)
    per_file = -(-documents // files)
    for f in range(files):
      with open(folder / f'part_{f:03d}.jsonl', 'w') as out:
        for d in range(f * per_file, min((f + 1) * per_file, documents)):
          body = ' '.join(rng.sample(sentences, rng.choice((1, 2))))
          out.write(json.dumps({'id': d, 'text': f'Document {d}. {body}'}) + '\n')
    (folder / 'done').write_text('')
  return f'jsonl:{folder}/part_*.jsonl'


# ---- Measurements -------------------------------------------------------------------------------------------------
INDEX_FILES = r'''
import json, sys, time
from albert_jax import paths
from albert_jax.data import sources
source = sources.open_source(sources.Spec.parse(sys.argv[1]), None)
times = []
for info in source.files:
  start = time.process_time()
  source.format.index(paths.path(info.name), source.skipped)
  times.append(time.process_time() - start)
print(json.dumps({'sizes': [info.size for info in source.files], 'cpu_s': times}))
'''


def one_time_work(spec: str) -> dict:
  """CPU seconds to index each file of `spec`, in one process."""
  return run_json([sys.executable, '-c', INDEX_FILES, spec])


def spread(per_file: dict, hosts: int) -> tuple:
  """(the busiest host's CPU s, the mean) when `hosts` processes index the files in the runs corpus_index cuts."""
  from albert_jax import paths
  from albert_jax.data import corpus_index
  infos = [paths.FileInfo(str(i), size, '') for i, size in enumerate(per_file['sizes'])]
  runs = corpus_index.cut(infos, hosts)
  loads = [sum(per_file['cpu_s'][i] for i in run) for run in runs]
  return max(loads), float(np.mean(loads))


def prepare(spec: str, index_dir: str, processes: int) -> dict:
  start = time.perf_counter()
  out = subprocess.run([sys.executable, '-m', 'albert_jax.data.prepare', f'--input={spec}', f'--index_dir={index_dir}',
                        f'--processes={processes}'], capture_output=True, text=True, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(out.stderr)
  cpu = re.search(r'([\d,.]+) CPU s', out.stdout)
  return {'wall_s': time.perf_counter() - start, 'cpu_s': float(cpu.group(1).replace(',', '')) if cpu else 0.0}


VOCAB = r'''
import json, sys, time
from albert_jax.data import vocab
spec, limit, size, output, index_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
start, cpu = time.perf_counter(), time.process_time()
sampled = sum(1 for _ in vocab.sentences(spec, limit=limit, index_dir=index_dir or None))
sample_s, sample_cpu = time.perf_counter() - start, time.process_time() - cpu
vocab.train_on_source(spec, size, output, limit=limit, index_dir=index_dir or None, progress_every_s=1e9)
print(json.dumps({'sentences': sampled, 'sample_s': sample_s, 'sample_cpu_s': sample_cpu,
                  'total_s': time.perf_counter() - start}))
'''


def vocabulary(spec: str, limit: int, size: int, output: str, index_dir: str) -> dict:
  return run_json([sys.executable, '-c', VOCAB, spec, str(limit), str(size), output, index_dir])


def loopback_received() -> int:
  with open('/proc/net/dev') as f:
    for line in f:
      if line.strip().startswith('lo:'):
        return int(line.split(':', 1)[1].split()[0])
  return 0


def format_rates() -> list:
  """Indexing rate of one process on each format of the shared sample, MB of the files as stored per second."""
  rows = []
  for label, spec in (('WikiExtractor, plain', f'wikiextractor:{SAMPLE}/wikipedia/AA/wiki_*'),
                      ('WikiExtractor, .bz2', f'wikiextractor:{SAMPLE}/wikipedia/AB/wiki_*.bz2'),
                      ('Gutenberg books', f'gutenberg:{SAMPLE}/books/*.txt')):
    found = one_time_work(spec)
    megabytes = sum(found['sizes']) / 1e6
    rows.append((label, megabytes, sum(found['cpu_s']), megabytes / sum(found['cpu_s'])))
  return rows


def show(title: str, header: list, rows: list) -> None:
  print(f'\n{title}\n| ' + ' | '.join(header) + ' |\n|' + '---|' * len(header))
  for row in rows:
    print('| ' + ' | '.join(row) + ' |')


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--dir', default='/tmp/corpus_scale')
  parser.add_argument('--copies', default='1,4,40', help='sizes of the wiki corpus, in copies of 103 MB')
  parser.add_argument('--hosts', default='1,8,64,128')
  parser.add_argument('--jsonl_documents', type=int, default=10_000_000)
  parser.add_argument('--vocab_sentences', type=int, default=50_000)
  parser.add_argument('--vocab_size', type=int, default=8000)
  parser.add_argument('--gcs', default='', help='copies of the wiki corpus (e.g. 1,4) also read through a local GCS '
                      'server')
  parser.add_argument('--repeats', type=int, default=3, help='processes started for each host start measured')
  parser.add_argument('--before', help='a checkout of an earlier albert_jax: host 5 of 64 started by it too')
  args = parser.parse_args()
  directory = pathlib.Path(args.dir)
  directory.mkdir(parents=True, exist_ok=True)
  copies = [int(c) for c in args.copies.split(',')]
  host_counts = [int(h) for h in args.hosts.split(',')]
  results = {'copies': copies, 'hosts': host_counts}

  print('formats: one process indexing the shared sample', flush=True)
  rates = format_rates()
  results['format_rates'] = rates
  show('Indexing rate of one process (the one-time work)', ['format', 'MB stored', 'CPU s', 'MB/s'],
       [[label, f'{mb:,.0f}', f'{cpu:.1f}', f'{rate:.1f}'] for label, mb, cpu, rate in rates])

  corpora = [(f'{c} x 103 MB', make_wiki(directory, c)) for c in copies]
  corpora.append((f'{args.jsonl_documents / 1e6:g} M JSONL documents', make_jsonl(directory, args.jsonl_documents)))
  print('corpora ready: ' + ', '.join(spec for _, spec in corpora), flush=True)

  # The vocabulary with no index, then the index made (prepare, this machine's cores), then the vocabulary again;
  # the starts tokenize with the first vocabulary.
  shutil.rmtree(directory / 'index', ignore_errors=True)
  vocab_rows, vocab_model, prepared = [], None, {}
  for label, spec in corpora:
    index_dir = str(directory / 'index' / label.split()[0])
    for with_index in (False, True) if spec.startswith('wikiextractor') else (True,):
      if with_index:
        prepared[label] = prepare(spec, index_dir, os.cpu_count() or 1)
        print(f'prepare {label}: {prepared[label]}', flush=True)
      if not spec.startswith('wikiextractor'):
        continue
      model = str(directory / f'vocab-{label.split()[0]}')
      found = vocabulary(spec, args.vocab_sentences, args.vocab_size, model, index_dir if with_index else
                         str(directory / 'no_index'))
      vocab_rows.append((label, with_index, found))
      vocab_model = vocab_model or model + '.model'
      print(f'vocab {label} index={with_index}: {found}', flush=True)
  results['vocab'], results['prepare'] = vocab_rows, prepared

  work_rows, start_rows, before_rows = [], [], []
  for label, spec in corpora:
    index_dir = str(directory / 'index' / label.split()[0])
    per_file = one_time_work(spec)
    size_mb = sum(per_file['sizes']) / 1e6
    total = sum(per_file['cpu_s'])
    made = prepared[label]
    work_rows.append([label, f'{size_mb:,.0f}', f'{len(per_file["sizes"]):,}', f'{total:.1f}',
                      f'{made["wall_s"]:.1f} / {made["cpu_s"]:.1f}'] +
                     [f'{spread(per_file, h)[0]:.2f}' for h in host_counts])
    print(f'one-time work {label}: {total:.1f} CPU s', flush=True)
    for hosts in host_counts:
      host = min(5, hosts - 1)
      found = host_start(spec, vocab_model, host, hosts, index_dir, repeats=args.repeats)
      start_rows.append((label, hosts, host, found, spread(per_file, hosts)[0]))
      print(f'start {label} host {host}/{hosts}: {found}', flush=True)
    if args.before and 64 in host_counts:
      before = host_start(spec, vocab_model, 5, 64, index_dir, code=pathlib.Path(args.before))
      before_rows.append((label, before))
      print(f'before {label}: {before}', flush=True)
  results.update(one_time=work_rows, starts=start_rows, before=before_rows)

  if args.gcs:
    results['gcs'] = gcs_starts(directory, [int(c) for c in args.gcs.split(',')], vocab_model, host_counts,
                                args.repeats, args.before)

  show('The one-time work: every file indexed once (CPU s per file summed over the runs each host takes)',
       ['corpus', 'MB', 'files', 'CPU s, one process', f'prepare, {os.cpu_count()} processes: wall s / CPU s'] +
       [f'busiest of {h} hosts, CPU s' for h in host_counts],
       work_rows)
  show(f'Host K of N starting with the index kept (a restart, a resumed or second run), to its first batch: '
       f'medians of {args.repeats} processes; a corpus\'s first start adds the busiest host\'s indexing',
       ['corpus', 'hosts', 'host', 'wall s (opening; least-most)', 'CPU s (whole process)', 'MB read',
        'peak MB (before start)', 'index held', 'a worker is sent', 'first start of a new corpus, s'],
       [[label, str(hosts), str(host), f'{a["wall_s"]:.2f} ({a["open_s"]:.2f}; {a["wall_range"][0]:.2f}-'
         f'{a["wall_range"][1]:.2f})', f'{a["cpu_s"]:.2f} ({a["process_cpu_s"]:.2f})',
         f'{a["read_bytes"] / 1e6:,.1f}', f'{a["peak_mb"]:,.0f} ({a["rss_before_mb"]:,.0f})',
         f'{a["index_held_bytes"] / 1e3:,.1f} kB', f'{a["worker_copy_bytes"] / 1e3:,.1f} kB',
         f'{busiest + a["wall_s"]:.2f}'] for label, hosts, host, a, busiest in start_rows])
  if before_rows:
    now = {label: a for label, hosts, host, a, _ in start_rows if hosts == 64}
    show(f'Host 5 of 64, before (the code at {args.before}) and now',
         ['corpus', 'before: wall s', 'CPU s (whole process)', 'MB read', 'peak MB', 'index held',
          'a worker is sent', 'now: wall s', 'CPU s (whole process)', 'MB read', 'peak MB', 'index held',
          'a worker is sent'],
         [[label] + [x for r in (b, now[label]) for x in (
             f'{r["wall_s"]:.2f}', f'{r["cpu_s"]:.2f} ({r["process_cpu_s"]:.2f})', f'{r["read_bytes"] / 1e6:,.1f}',
             f'{r["peak_mb"]:,.0f}', f'{r["index_held_bytes"] / 1e6:,.3f} MB',
             f'{r["worker_copy_bytes"] / 1e6:,.2f} MB')] for label, b in before_rows])
  show(f'The vocabulary: {args.vocab_sentences:,} sentences sampled, then {args.vocab_size:,} pieces trained',
       ['corpus', 'index kept', 'sample s (CPU s)', 'total s'],
       [[label, 'yes' if with_index else 'no', f'{v["sample_s"]:.1f} ({v["sample_cpu_s"]:.1f})', f'{v["total_s"]:.1f}']
        for label, with_index, v in vocab_rows])
  if args.gcs:
    show('Through a local GCS server: the corpus in a bucket, its index beside it; a start\'s bytes over loopback '
         '(its requests and the answers)',
         ['corpus', 'hosts', 'host', 'wall s (opening)', 'CPU s', 'MB over loopback', 'corpus MB'],
         [[c, h, str(k), f'{r["wall_s"]:.2f} ({r["open_s"]:.2f})', f'{r["cpu_s"]:.2f}',
           f'{r["loopback_bytes"] / 1e6:,.2f}', f'{r["corpus_mb"]:,.0f}'] for c, h, k, r in results['gcs']])
  extrapolate(results, rates)
  (directory / 'results.json').write_text(json.dumps(results, indent=1, default=str))


def gcs_starts(directory: pathlib.Path, copies: list, vocab_model: str, host_counts: list, repeats: int,
               before=None) -> list:
  """The wiki corpora of `copies` uploaded to a local GCS server, prepared there (each index beside its corpus),
  and host starts read from there, with the bytes each moves over loopback; the code before at the first size."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  server = subprocess.Popen([sys.executable, str(ROOT / 'tests' / 'gcs_emulator.py'), str(port), 'corpus'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  url = f'http://127.0.0.1:{port}'
  env = {'STORAGE_EMULATOR_HOST': url, 'CLOUD_STORAGE_EMULATOR_ENDPOINT': url, 'FSSPEC_GCS_TOKEN': 'anon',
         'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false', 'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test'}
  rows = []
  try:
    time.sleep(3)
    os.environ.update(env)
    from albert_jax import paths
    for count in copies:
      local = make_wiki(directory, count).split(':', 1)[1]
      base = paths.fixed_folder(local)
      infos = paths.listing(local)
      for info in infos:
        paths.path(f'gs://corpus/wiki-{count}/' + info.name[len(base) + 1:]).write_bytes(
            pathlib.Path(info.name).read_bytes())
      remote = f'wikiextractor:gs://corpus/wiki-{count}/copy_*/AA/wiki_*'
      prepare(remote, '', 2)  # beside the corpus, in the bucket
      corpus_mb = sum(i.size for i in infos) / 1e6
      arms = [(hosts, min(5, hosts - 1), ROOT, repeats) for hosts in host_counts]
      if before and count == copies[0]:
        arms.append(('64, before', 5, pathlib.Path(before), 1))
      for hosts, host, code, times in arms:
        received = loopback_received()
        found = host_start(remote, vocab_model, host, 64 if hosts == '64, before' else hosts, '', code=code, env=env,
                           repeats=times)
        found.update(loopback_bytes=(loopback_received() - received) / times, corpus_mb=corpus_mb,
                     files=len(infos))
        rows.append((f'{count} x 103 MB', str(hosts), host, found))
        print(f'gcs start {count} x 103 MB host {host}/{hosts}: {found}', flush=True)
    return rows
  finally:
    server.terminate()


def extrapolate(results: dict, rates: list) -> None:
  """The paper's corpora from the figures above: stated as an extrapolation, not a measurement. A host's start is
  opening the sources (listing the files, reading their index entries: fitted as a line in the number of files,
  on local disk and, where measured, through the GCS server) and then its first chunk (whose cost does not grow
  with the corpus once a host's share fills a chunk: taken from the largest corpus measured)."""
  starts = [(int(label.split()[0]) * 100, a) for label, hosts, host, a, _ in results['starts']
            if hosts == 64 and 'x 103 MB' in label]
  if len(starts) < 2:
    return
  open_fit = np.polyfit([n for n, _ in starts], [a['open_s'] for _, a in starts], 1)  # seconds = a * files + b
  largest = starts[-1][1]
  first_batch = largest['wall_s'] - largest['open_s']
  rate = {label: r for label, _, _, r in rates}
  # The paper's 16 GB as Wikipedia's dump through WikiExtractor --compress (12 GB of text in 1 MB files, stored as
  # .bz2 at the sample's ratio) and books as Gutenberg files of 300 kB (4 GB); 160 GB ten times that.
  rows = []
  for corpus, scale in (('16 GB', 1), ('160 GB', 10)):
    wiki_text_mb, books_mb = 12_000 * scale, 4_000 * scale
    wiki_stored_mb = wiki_text_mb * 29 / 103  # the sample's .bz2 half: 29 MB for 103 MB of text
    files = wiki_text_mb / 1.03 + books_mb / 0.3
    work_cpu = wiki_stored_mb / rate['WikiExtractor, .bz2'] + books_mb / rate['Gutenberg books']
    start = np.polyval(open_fit, files) + first_batch
    for pod, hosts in (('v3-64', 8), ('v3-512', 64), ('v3-1024', 128)):
      rows.append([corpus, pod, str(hosts), f'{files:,.0f}', f'{work_cpu / 60:,.0f} min',
                   f'{work_cpu / hosts / 60:,.1f} min', f'{start:.1f}'])
  # Through the GCS server, opening took about a second at every size measured (the client's first connection);
  # how a bucket's listing grows past a few hundred files it does not tell, so no line is fitted to it.
  show(f'Extrapolated, not measured: the paper\'s corpora (wiki as WikiExtractor .bz2 files, books as Gutenberg '
       f'files), one core a host as here; a start is opening the sources (on local disk {open_fit[0] * 1e3:.3f} ms '
       f'a file + {open_fit[1]:.2f} s, fitted to host 5 of 64 above) and the first chunk ({first_batch:.2f} s); '
       f'from a bucket add its listing, one request a thousand files',
       ['corpus', 'pod', 'hosts', 'files', 'one-time work, one core', 'per host (once)', 'host start, s'], rows)


if __name__ == '__main__':
  main()
