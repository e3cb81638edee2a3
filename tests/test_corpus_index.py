"""A file source's kept index (data/corpus_index.py): made once per corpus, shared out among the processes that
open it, read at every later start instead of the corpus, never read for a file that changed; what a host reads
at start is its share."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from albert_jax import paths
from albert_jax.data import corpus_index, formats, pipeline, sources, vocab
from conftest import ROOT
from test_formats import assert_resumed_exactly


def write_corpus(folder, files: int, documents: int = 6, start: int = 0) -> list:
  """`files` files in the original's format (a sentence a line, a blank line between documents), each document
  naming its file and number, so that a test can tell where any text came from."""
  folder.mkdir(parents=True, exist_ok=True)
  written = []
  for f in range(start, start + files):
    docs = [[f'File {f} document {d} opens here.', f'File {f} document {d} goes on for a second sentence.',
             f'File {f} document {d} ends with a third.'] for d in range(documents)]
    (folder / f'part_{f:03d}.txt').write_text('\n\n'.join('\n'.join(doc) for doc in docs) + '\n')
    written.extend(docs)
  return written


@pytest.fixture
def counted(monkeypatch):
  """How many times each file was indexed (formats.Lines.index), and by which thread."""
  calls = []
  index = formats.Lines.index

  def counting(self, path, skipped):
    calls.append((os.path.basename(str(path)), threading.current_thread().name))
    return index(self, path, skipped)

  monkeypatch.setattr(formats.Lines, 'index', counting)
  return calls


def open_lines(pattern, index_dir, process_index=0, process_count=1):
  source = sources.open_source(sources.Spec.parse(f'lines:{pattern}'), None, str(index_dir), process_index,
                               process_count)
  len(source)
  return source


def test_a_corpus_is_indexed_once_and_later_starts_read_only_the_index(tmp_path, counted):
  expected = write_corpus(tmp_path / 'corpus', files=5)
  first = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index')
  assert sorted(name for name, _ in counted) == [f'part_{f:03d}.txt' for f in range(5)]
  assert list(first.read(0, len(first))) == expected
  counted.clear()
  again = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index')  # a restart, a second run, a tool
  assert counted == [] and len(again) == 30
  assert list(again.read(7, 19)) == expected[7:19]  # across files, read by number
  # The process holds a few numbers a file, none a document.
  assert again.index.nbytes() == 5 * (8 + 8 + 4 + 8) + 8
  # An index kept inside the corpus's folder is never read as text by a glob that reaches it.
  for _ in range(2):
    inside = open_lines(tmp_path / 'corpus' / '**', tmp_path / 'corpus' / 'index')
    assert [os.path.basename(info.name) for info in inside.files] == [f'part_{f:03d}.txt' for f in range(5)]


def test_processes_share_out_the_indexing_and_agree_on_every_number(tmp_path, counted, monkeypatch):
  """Three processes (threads here: they meet only through the index folder, as hosts do) index a run of the files
  each, by bytes, and every one ends with the index one process makes alone."""
  monkeypatch.setattr(corpus_index, 'POLL_S', 0.05)
  expected = write_corpus(tmp_path / 'corpus', files=1, documents=40)  # a big one: runs are cut by bytes
  expected += write_corpus(tmp_path / 'corpus', files=7, documents=4, start=1)
  opened = [None] * 3

  def process(number):
    opened[number] = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index', number, 3)

  threads = [threading.Thread(target=process, args=(n,), name=f'process-{n}') for n in range(3)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  by_process = {n: sorted(name for name, thread in counted if thread == f'process-{n}') for n in range(3)}
  runs = corpus_index.cut(opened[0].files, 3)
  assert by_process == {n: [f'part_{f:03d}.txt' for f in run] for n, run in enumerate(runs)}
  assert runs[0] == [0] and all(runs)  # the 40-document file is a run of its own
  alone = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'alone')
  for source in opened:
    np.testing.assert_array_equal(source.index.starts, alone.index.starts)
    assert list(source.read(0, len(source))) == expected


def test_a_changed_or_replaced_file_is_indexed_again_never_read_with_its_old_entry(tmp_path, counted):
  write_corpus(tmp_path / 'corpus', files=3)
  open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index')
  counted.clear()
  changed = tmp_path / 'corpus' / 'part_001.txt'
  changed.write_text(changed.read_text() + '\nA document added later.\nIt has two sentences.\n')
  # Replaced by a file of the same size (one letter changed): its status-change time is new.
  same_size = tmp_path / 'corpus' / 'part_002.txt'
  same_size.write_text(same_size.read_text().replace('File 2 document 5 opens', 'File 2 document 5 OPENS'))
  source = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index')
  assert sorted(name for name, _ in counted) == ['part_001.txt', 'part_002.txt']
  assert len(source) == 19
  docs = list(source.read(0, 19))
  assert docs[12] == ['A document added later.', 'It has two sentences.']
  assert docs[-1][0] == 'File 2 document 5 OPENS here.'


def test_a_file_that_fails_on_one_process_stops_every_process_with_its_message(tmp_path, monkeypatch):
  monkeypatch.setattr(corpus_index, 'POLL_S', 0.05)
  write_corpus(tmp_path / 'corpus', files=2)
  import bz2
  (tmp_path / 'corpus' / 'part_001.txt').unlink()
  whole = bz2.compress((tmp_path / 'corpus' / 'part_000.txt').read_bytes())
  (tmp_path / 'corpus' / 'part_001.txt.bz2').write_bytes(whole[:len(whole) // 2])  # cut short
  errors = {}

  def process(number):
    try:
      open_lines(tmp_path / 'corpus' / 'part_*', tmp_path / 'index', number, 2)
    except sources.ConfigError as e:
      errors[number] = str(e)

  threads = [threading.Thread(target=process, args=(n,)) for n in range(2)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert 'part_001.txt.bz2 is damaged or cut short' in errors[1]
  assert errors[0].startswith(f'data.source lines:{tmp_path}/corpus/part_*: process 1 could not index its files: ')
  assert errors[0].endswith(errors[1])


def test_a_process_that_never_comes_is_noticed_with_the_fix(tmp_path, monkeypatch):
  monkeypatch.setattr(corpus_index, 'POLL_S', 0.05)
  monkeypatch.setattr(corpus_index, 'STALLED_AFTER_S', 0.5)
  write_corpus(tmp_path / 'corpus', files=4)
  with pytest.raises(corpus_index.CorpusIndexError, match=r'process 1 of 2 has written no progress in .* set '
                                                          r'data.index_dir to one they all see'):
    open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index', 0, 2)
  # What it indexed is kept: the second process alone finishes the job.
  source = open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index', 1, 2)
  assert len(source) == 24


def test_an_index_folder_that_cannot_be_written_is_one_line_with_the_fix(tmp_path):
  write_corpus(tmp_path / 'corpus', files=1)
  (tmp_path / 'a_file').write_text('not a folder')
  with pytest.raises(corpus_index.CorpusIndexError, match=r'cannot write its index to .*a_file.* set '
                                                          r'data.index_dir \(or --index_dir\) to a folder'):
    open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'a_file')


def test_one_file_shared_by_more_hosts_than_it_has_files(tmp_path, tiny_config, builtin_tokenizer, monkeypatch):
  """One file, four hosts: the numbering is by documents, so each host gets its own documents of it, and the
  index made by four processes (three with nothing to index) is the one a single process makes."""
  monkeypatch.setattr(corpus_index, 'POLL_S', 0.05)
  write_corpus(tmp_path / 'corpus', files=1, documents=48)
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'lines:{tmp_path}/corpus/*.txt'
  config.data.index_dir = str(tmp_path / 'index')
  config.data.chunk_documents = 4
  opened = {}
  threads = [threading.Thread(target=lambda n=n: opened.setdefault(n, pipeline.open_sources(config.data, n, 4)))
             for n in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  seen = []
  for host in range(4):
    data = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, host=host, host_count=4,
                             opened=opened[host])
    stream = data.streams[0]
    documents = {d for start, stop in stream.chunks for d in range(start, stop)}
    assert documents and not documents & set(seen)
    seen.extend(documents)
  assert sorted(seen) == list(range(43))  # 48 less the held-out tail of 10%, rounded: 5
  # Every batch a function of (seed, host, host count, step), whoever made the index (here one process alone, in
  # a folder of its own), and a host resumes exactly on the index the four made.
  alone = config.copy_and_resolve_references()
  alone.data.index_dir = str(tmp_path / 'made_alone')
  made_alone = pipeline.Pipeline(alone.data, builtin_tokenizer, batch_size=8, host=2, host_count=4)
  expected = [made_alone.next_batch() for _ in range(6)]
  assert_resumed_exactly(lambda: pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=8, host=2, host_count=4,
                                                   opened=opened[0]), expected, at=3)


def test_a_host_reads_its_share_of_a_corpus_in_a_bucket(tmp_path, bucket, tiny_config, builtin_tokenizer,
                                                        monkeypatch):
  """Indexed once (prepare, beside the corpus in the bucket), the corpus is read by host 2 of 4 through the GCS
  server: its batches are those of the same corpus on local disk, and it reads no file outside its share."""
  write_corpus(tmp_path / 'corpus', files=12, documents=5)
  for f in range(12):
    name = f'part_{f:03d}.txt'
    paths.path(f'{bucket}/corpus/{name}').write_bytes((tmp_path / 'corpus' / name).read_bytes())
  prepared = subprocess.run([sys.executable, '-m', 'albert_jax.data.prepare', f'--input=lines:{bucket}/corpus/*.txt',
                             '--processes=2'], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert prepared.returncode == 0, prepared.stderr
  assert '12 files' in prepared.stdout and f'index in {bucket}/corpus/.albert_index/lines-v1' in prepared.stdout
  assert paths.path(f'{bucket}/corpus/.albert_index/lines-v1').is_dir()
  config = tiny_config.copy_and_resolve_references()
  config.data.chunk_documents = 3
  config.data.source = f'lines:{bucket}/corpus/**'  # matches every object below, the index's aside
  read = []
  original = formats.Lines.read
  monkeypatch.setattr(formats.Lines, 'read', lambda self, path, locations, skipped: (
      read.append(str(path).rsplit('/', 1)[-1]), original(self, path, locations, skipped))[1])
  monkeypatch.setattr(formats.Lines, 'index', lambda *args: pytest.fail('a prepared corpus was indexed again'))
  remote = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=16, host=2, host_count=4)
  got = [remote.next_batch() for _ in range(4)]
  first, stop = pipeline.document_ranges(60, config.data.eval_fraction, 'train', 2, 4, 'corpus')
  assert (first, stop) == (27, 40)
  assert read and set(read) <= {f'part_{f:03d}.txt' for f in range(first // 5, (stop - 1) // 5 + 1)}
  monkeypatch.undo()
  config.data.source = f'lines:{tmp_path}/corpus/*.txt'
  config.data.index_dir = str(tmp_path / 'index')
  local = pipeline.Pipeline(config.data, builtin_tokenizer, batch_size=16, host=2, host_count=4)
  for step, batch in enumerate(got):
    expected = local.next_batch()
    for key in batch:
      np.testing.assert_array_equal(batch[key], expected[key], err_msg=f'step {step} {key}')
  # Rewritten in the bucket (a new generation): indexed again, never read with the old entry.
  data = (tmp_path / 'corpus' / 'part_000.txt').read_bytes()
  paths.path(f'{bucket}/corpus/part_000.txt').write_bytes(data.replace(b'File 0 document 0', b'FILE 0 DOCUMENT 0'))
  source = sources.open_source(sources.Spec.parse(f'lines:{bucket}/corpus/*.txt'), None)
  assert corpus_index.unindexed(source.index_folder, source.files, source.pattern) == source.files[:1]
  assert next(source.read(0, 1))[0] == 'FILE 0 DOCUMENT 0 opens here.'


def test_the_vocabulary_samples_a_share_of_files_all_over_without_indexing_the_rest(tmp_path, counted, monkeypatch):
  """40 files of 900 sentences, 4,000 sentences wanted: 8 files are read (500 sentences from each, the least a
  file read gives), chosen all over the corpus; with an index kept, none is indexed."""
  for f in range(40):
    (tmp_path / 'corpus').mkdir(exist_ok=True)
    (tmp_path / 'corpus' / f'part_{f:03d}.txt').write_text('\n\n'.join(
        '\n'.join(f'File {f} document {d} sentence {s} is here.' for s in range(3)) for d in range(300)))
  spec = f'lines:{tmp_path}/corpus/*.txt'
  sampled = list(vocab.sentences(spec, limit=4000, index_dir=str(tmp_path / 'index')))
  files = {int(s.split()[1]) for s in sampled}
  assert len(sampled) == 4000 and len(files) == 8 and len(counted) == 8
  assert min(files) < 10 and max(files) >= 30  # not the first files: all over
  per_file = np.bincount([int(s.split()[1]) for s in sampled], minlength=40)[sorted(files)]
  assert sorted(per_file.tolist()) == [493] + [501] * 7  # whole documents of 3 sentences until 500; the rest
  documents = [int(s.split()[3]) for s in sampled]
  assert np.histogram(documents, bins=3, range=(0, 300))[0].min() > 300  # from all over each file
  open_lines(tmp_path / 'corpus' / '*.txt', tmp_path / 'index')
  counted.clear()
  assert list(vocab.sentences(spec, limit=4000, index_dir=str(tmp_path / 'index'))) == sampled
  assert counted == []


def test_a_sample_as_large_as_the_corpus_takes_all_of_it(tmp_path):
  """A large file's share caps it on the first pass; what smaller files could not give comes from it after."""
  write_corpus(tmp_path / 'corpus', files=9, documents=10)  # 30 sentences each
  write_corpus(tmp_path / 'corpus', files=1, documents=1000, start=9)  # 3,000 sentences
  spec = f'lines:{tmp_path}/corpus/*.txt'
  everything = list(vocab.sentences(spec, limit=3270, index_dir=str(tmp_path / 'index')))
  assert len(everything) == 3270 == len(set(everything))


def test_prepare_and_inspect_on_the_command_line(tmp_path, tiny_config):
  write_corpus(tmp_path / 'corpus', files=6, documents=20)
  prepare = [sys.executable, '-m', 'albert_jax.data.prepare', f'--input=lines:{tmp_path}/corpus/part_*',
             f'--index_dir={tmp_path / "index"}', '--processes=2']
  first = subprocess.run(prepare, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert first.returncode == 0, first.stderr
  assert ': 6 files, 0 MB, 120 documents; indexed 6 files' in first.stdout and 'over 2 process(es)' in first.stdout
  again = subprocess.run(prepare, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert 'every file was indexed already' in again.stdout
  shown = subprocess.run([sys.executable, '-m', 'albert_jax.data.inspect', '--config=configs/tiny.py',
                          f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}',
                          f'--config.data.source=lines:{tmp_path}/corpus/part_*',
                          f'--config.data.index_dir={tmp_path / "index"}', '--host=5', '--host_count=8', '--num=1',
                          '--shards=16'], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert shown.returncode == 0, shown.stderr
  # 120 documents, 12 held out: host 5 of 8 serves data shards 10 and 11 of 16, documents 67..80 of the 108 in
  # training (as one shard per host would give it).
  assert any(line.startswith('host 5 of 8 (data shards 10..11 of 16): first batch ')
             for line in shown.stdout.splitlines()), shown.stdout
  assert f'its train share: lines:{tmp_path}/corpus/part_*: documents 67..80 of 120' in shown.stdout
  (tmp_path / 'corpus' / 'part_009.txt.gz').write_bytes(b'\x1f\x8b not really gzip')
  broken = subprocess.run(prepare, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert broken.returncode == 2 and broken.stderr.count('\n') == 1
  assert 'part_009.txt.gz is damaged or cut short' in broken.stderr
