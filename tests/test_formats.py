"""The corpus formats people hold (formats.py), on small slices of the real Wikipedia and Gutenberg files in
../shared/data/corpora (never copied into the repository), and JSON lines and Parquet files made from them."""
import bz2
import gzip
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from albert_jax import paths
from albert_jax.data import formats, pipeline, sources
from conftest import ROOT

CORPORA = ROOT.parent / 'shared' / 'data' / 'corpora'
WIKI = CORPORA / 'wikipedia'
BOOKS = CORPORA / 'books'
# A clone without the shared data beside it (a user's machine) skips these; CI (.ci/run) checks that it is there.
pytestmark = pytest.mark.skipif(not CORPORA.is_dir(), reason=f'the shared corpora are not at {CORPORA}')
STUB = b'<doc id="9" url="http://en.wikipedia.org/wiki?curid=9" title="Stub">\nStub\n\nStub may mean:\n</doc>\n'


def open_spec(text):
  source = sources.open_source(sources.Spec.parse(text), None)
  len(source)  # its index made (or read): what pipeline.open_sources does
  return source


def documents(source):
  return list(source.read(0, len(source)))


def wiki_slice(count: int) -> bytes:
  """The first `count` articles of the shared sample's first plain file, as WikiExtractor wrote them."""
  data = (WIKI / 'AA' / 'wiki_00').read_bytes()
  ends = [m.end() for m in re.finditer(rb'</doc>\n', data)]
  return data[:ends[count - 1]]


@pytest.fixture(scope='module')
def wiki_dir(tmp_path_factory):
  """20 real articles and a stub, plain in AA/ and bzip2-compressed in AB/ (as WikiExtractor --compress)."""
  root = tmp_path_factory.mktemp('wiki')
  (root / 'AA').mkdir()
  (root / 'AB').mkdir()
  text = wiki_slice(20) + STUB
  (root / 'AA' / 'wiki_00').write_bytes(text)
  (root / 'AB' / 'wiki_00.bz2').write_bytes(bz2.compress(text))
  return root


def test_wikiextractor_articles_are_documents_of_text_passages(wiki_dir):
  plain = open_spec(f'wikiextractor:{wiki_dir}/AA/wiki_*')
  both = open_spec(f'wikiextractor:{wiki_dir}/*/wiki_*')
  text = (wiki_dir / 'AA' / 'wiki_00').read_text()
  tags = text.count('<doc ')
  assert len(plain) + plain.skipped['wikiextractor: articles without text (stubs, lists; skipped)'] == tags == 21
  assert plain.skipped['wikiextractor: articles without text (stubs, lists; skipped)'] >= 1  # the stub at least
  docs = documents(plain)
  assert documents(both) == docs + docs  # the bzip2 file reads as the plain one
  # The first article, Anarchism: its title line and its section headings are not text; its passages are.
  assert docs[0][0] == ('Anarchism is a political philosophy that advocates stateless societies often defined as '
                        'self-governed voluntary institutions, but that several authors have defined as more specific '
                        'institutions based on non-hierarchical free associations.')
  assert docs[0][1] == 'Anarchism holds the state to be undesirable, unnecessary, or harmful.'
  sentences = [s for doc in docs for s in doc]
  assert 'Etymology and terminology.' in text and 'Etymology and terminology.' not in sentences
  assert not [s for s in sentences if '<doc' in s or '</doc>' in s or '<br>' in s or s == 'Anarchism']
  titles = re.findall(r'title="([^"]*)"', text)
  assert not set(titles) & set(sentences)
  assert all(len(s.split()) >= 1 for s in sentences) and len(sentences) > 20 * 30


def test_wikiextractor_reads_the_real_compressed_files(tmp_path):
  """The shared sample's own .bz2 file, against the same bytes decompressed by Python's bz2 and read as plain."""
  source = open_spec(f'wikiextractor:{WIKI}/AB/wiki_00.bz2')
  raw = bz2.decompress((WIKI / 'AB' / 'wiki_00.bz2').read_bytes())
  (tmp_path / 'wiki_00').write_bytes(raw)
  assert len(source) + source.skipped['wikiextractor: articles without text (stubs, lists; skipped)'] == \
      raw.count(b'<doc ') > 40
  docs = documents(source)
  assert docs == documents(open_spec(f'wikiextractor:{tmp_path}/wiki_00'))
  assert docs[0][0] == ('Huldrych Zwingli or Ultricht Zwingli(1 January 1484\xa0\u2013 11 October 1531) was a leader '
                        'of the Reformation in Switzerland.')  # its first article


def test_wikiextractor_damage_stops_with_one_line_naming_file_and_line(tmp_path):
  text = wiki_slice(3)
  cut = text[:text.rindex(b'</doc>')]  # the third article never closed
  (tmp_path / 'cut').write_bytes(cut)
  opening_line = cut[:cut.rindex(b'<doc ')].count(b'\n') + 1
  with pytest.raises(formats.FormatError, match=rf'cut, line {opening_line}: this <doc> is never closed'):
    open_spec(f'wikiextractor:{tmp_path}/cut')
  (tmp_path / 'half.bz2').write_bytes(bz2.compress(text)[:len(bz2.compress(text)) // 2])
  with pytest.raises(formats.FormatError, match='half.bz2 is damaged or cut short'):
    open_spec(f'wikiextractor:{tmp_path}/half.bz2')
  (tmp_path / 'plain.txt').write_text('Just some prose.\nNo tags at all.\n')
  with pytest.raises(formats.FormatError, match='not WikiExtractor output. Use text:GLOB'):
    open_spec(f'wikiextractor:{tmp_path}/plain.txt')
  shutil.copy(BOOKS / 'Brontë - Jane Eyre: An Autobiography.txt', tmp_path / 'eyre.txt')  # a book given as Wikipedia
  with pytest.raises(formats.FormatError, match='eyre.txt holds no <doc ...> blocks but a Project Gutenberg START '
                                                'line: .* Use gutenberg:GLOB'):
    open_spec(f'wikiextractor:{tmp_path}/eyre.txt')
  # On the command line: one line on stderr, exit status 2.
  run = subprocess.run([sys.executable, '-m', 'albert_jax.data.vocab', f'--input=wikiextractor:{tmp_path}/cut',
                        f'--output={tmp_path}/v'], capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert run.returncode == 2 and run.stderr.count('\n') == 1 and 'is never closed' in run.stderr, run.stderr


@pytest.fixture(scope='module')
def books_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('books')
  shutil.copy(BOOKS / 'Austen - Emma.txt', root / 'emma.txt')  # "*** START OF THIS PROJECT GUTENBERG EBOOK"
  shutil.copy(BOOKS / 'Brontë - Jane Eyre: An Autobiography.txt', root / 'eyre.txt')  # "***START OF THE ..."
  return root


def test_gutenberg_books_without_licence_credits_or_hard_wraps(books_dir):
  emma = open_spec(f'gutenberg:{books_dir}/emma.txt')
  docs = documents(emma)
  sentences = [s for doc in docs for s in doc]
  raw = (books_dir / 'emma.txt').read_text()
  assert 'Project Gutenberg' in raw and not [s for s in sentences if 'Gutenberg' in s or 'START OF' in s]
  assert 'Produced by An Anonymous Volunteer' in raw and emma.skipped['gutenberg: producer credits (dropped)'] == 1
  # The novel's first sentence, wrapped over four lines in the file, is one sentence; its last sentence ends it.
  assert sentences[0] == ('Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy '
                          'disposition, seemed to unite some of the best blessings of existence; and had lived '
                          'nearly twenty-one years in the world with very little to distress or vex her.')
  assert sentences[-1].endswith('were fully answered in the perfect happiness of the union.')
  assert not [s for s in sentences if '\n' in s or s.startswith('CHAPTER') or '_' in s]
  # Cut at its 55 chapter headings (counted in the file), and parts never much past GUTENBERG_PART_WORDS.
  chapters = len(re.findall(r'^CHAPTER [IVXL]+$', raw, re.MULTILINE))
  assert chapters == 55 and chapters <= len(docs) <= chapters + 10
  longest_paragraph = max(len(p.split()) for p in raw.split('\n\n'))
  assert max(sum(len(s.split()) for s in doc) for doc in docs) < formats.GUTENBERG_PART_WORDS + longest_paragraph
  eyre = documents(open_spec(f'gutenberg:{books_dir}/eyre.txt'))
  assert eyre[0][0].startswith('A preface to the first edition of "Jane Eyre" being unnecessary, I gave none')
  assert not [s for doc in eyre for s in doc if 'David Price' in s or 'Gutenberg' in s]


def test_gutenberg_without_markers_is_read_whole_and_html_is_skipped(tmp_path):
  (tmp_path / 'plain.txt').write_text('A book with no licence header at all, as someone saved it.\n\n'
                                      'It has a second paragraph, wrapped\nover two lines.\n')
  html = b'<?xml version="1.0"?>\n<!DOCTYPE html>\n<html><body><p>Text.</p></body></html>\n'
  (tmp_path / 'book.txt').write_bytes(html)
  source = open_spec(f'gutenberg:{tmp_path}/*.txt')
  assert documents(source) == [['A book with no licence header at all, as someone saved it.',
                                'It has a second paragraph, wrapped over two lines.']]
  assert source.skipped == {'gutenberg: files without the START/END markers (read whole)': 1,
                            'gutenberg: HTML editions (skipped: use the plain-text edition, .txt)': 1}


@pytest.fixture(scope='module')
def records(wiki_dir):
  """The wiki slice's articles as records: {'id', 'text'} with one paragraph per line (HF hub datasets' layout)."""
  source = open_spec(f'wikiextractor:{wiki_dir}/AA/wiki_*')
  texts = ['\n'.join(paragraphs) for paragraphs in source.format.read(
      paths.path(source.files[0].name), source.index.locations(0, 0, len(source)), source.skipped)]
  return [{'id': i, 'text': text} for i, text in enumerate(texts)], documents(source)


def write_jsonl(path, rows, opener=open):
  with opener(path, 'wt', encoding='utf-8') as f:
    f.writelines(json.dumps(row) + '\n' for row in rows)


def test_jsonl_plain_gz_and_zst_and_a_named_field(records, tmp_path):
  import zstandard
  rows, expected = records
  write_jsonl(tmp_path / 'a.jsonl', rows)
  write_jsonl(tmp_path / 'b.jsonl.gz', rows, gzip.open)
  (tmp_path / 'c.jsonl.zst').write_bytes(zstandard.ZstdCompressor().compress(
      ''.join(json.dumps(row) + '\n' for row in rows).encode()))
  for name in ('a.jsonl', 'b.jsonl.gz', 'c.jsonl.zst'):
    assert documents(open_spec(f'jsonl:{tmp_path}/{name}')) == expected, name
  write_jsonl(tmp_path / 'body.jsonl', [{'body': row['text']} for row in rows])
  assert documents(open_spec(f'jsonl[body]:{tmp_path}/body.jsonl')) == expected
  # Bad records are skipped and counted, the rest read; a file with no usable record stops with one line.
  mixed = tmp_path / 'mixed' / 'm.jsonl'
  mixed.parent.mkdir()
  lines = [json.dumps(row) for row in rows]
  mixed.write_text('\n'.join(lines[:5] + ['{"text": "cut sh', json.dumps({'title': 'no text'}),
                                          json.dumps({'text': ''})] + lines[5:]) + '\n')
  source = open_spec(f'jsonl:{mixed}')
  assert documents(source) == expected
  assert source.skipped == {f'jsonl: lines that are not JSON (skipped; {mixed}: 1, the first at line 6)': 1,
                            'jsonl: records without a string "text" (skipped)': 1,
                            'jsonl: records with empty text (skipped)': 1}
  with pytest.raises(formats.FormatError, match=r'no record has a string field "text" \(fields: body\): name the '
                                                r'text field as jsonl\[FIELD\]:GLOB'):
    open_spec(f'jsonl:{tmp_path}/body.jsonl')
  (tmp_path / 'prose.txt').write_text('Not JSON.\nNor this.\n')
  with pytest.raises(formats.FormatError, match='line 1 and every other line are not JSON'):
    open_spec(f'jsonl:{tmp_path}/prose.txt')
  whole = (tmp_path / 'b.jsonl.gz').read_bytes()
  (tmp_path / 'cut.jsonl.gz').write_bytes(whole[:len(whole) // 2])
  with pytest.raises(formats.FormatError, match='cut.jsonl.gz is damaged or cut short'):
    open_spec(f'jsonl:{tmp_path}/cut.jsonl.gz')


def test_parquet_reads_by_row_group_and_names_a_missing_column(records, tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  rows, expected = records
  table = pa.table({'id': [r['id'] for r in rows] + [99], 'text': [r['text'] for r in rows] + [None]})
  pq.write_table(table, tmp_path / 'wiki.parquet', row_group_size=7)
  assert pq.ParquetFile(tmp_path / 'wiki.parquet').metadata.num_row_groups == 3
  source = open_spec(f'parquet:{tmp_path}/wiki.parquet')
  assert len(source) == len(rows) + 1
  assert list(source.read(3, 16)) == expected[3:16]  # across row groups
  docs = documents(source)
  assert docs[:-1] == expected and docs[-1] == []  # the null row: no text
  assert source.skipped == {'parquet: rows whose text is null or not a string (skipped)': 1}
  pq.write_table(table.rename_columns(['id', 'content']), tmp_path / 'content.parquet')
  assert documents(open_spec(f'parquet[content]:{tmp_path}/content.parquet'))[:-1] == expected
  with pytest.raises(formats.FormatError, match=r'has no column "text" \(columns: id, content\): name the text '
                                                r'column as parquet\[COLUMN\]:GLOB'):
    open_spec(f'parquet:{tmp_path}/content.parquet')
  whole = (tmp_path / 'wiki.parquet').read_bytes()
  (tmp_path / 'cut.parquet').write_bytes(whole[:len(whole) // 2])
  with pytest.raises(formats.FormatError, match='cut.parquet is not a readable Parquet file'):
    open_spec(f'parquet:{tmp_path}/cut.parquet')
  with pytest.raises(sources.SourceError, match=r"only jsonl and parquet take a \[FIELD\]"):
    sources.Spec.parse('gutenberg[text]:/x/*.txt')


def assert_resumed_exactly(make, expected: list, at: int) -> None:
  """A pipeline of `make()` serves `at` batches; another, given its state, serves expected[at:] exactly."""
  first = make()
  for _ in range(at):
    first.next_batch()
  resumed = make()
  resumed.restore(json.loads(json.dumps(first.state())))
  for step in range(at, len(expected)):
    batch = resumed.next_batch()
    for key in batch:
      np.testing.assert_array_equal(batch[key], expected[step][key], err_msg=f'step {step} {key}')


def test_real_corpora_feed_per_host_shards_that_resume_exactly(wiki_dir, books_dir, tiny_config, builtin_tokenizer):
  """The pipeline's guarantees hold for the new sources: disjoint host shards, held-out tails, exact resume, and
  a held-out MLM set per source."""
  config = tiny_config.copy_and_resolve_references()
  config.data.source = f'wikiextractor:{wiki_dir}/*/wiki_*@3,gutenberg:{books_dir}/*.txt@1'
  config.data.chunk_documents = 8
  config.data.eval_fraction = 0.1
  opened = pipeline.open_sources(config.data)
  for source in opened:
    ranges = [pipeline.document_ranges(len(source), 0.1, split, host, 2, source.name)
              for split in ('train', 'eval') for host in (0, 1)]
    assert sorted(d for first, stop in ranges for d in range(first, stop)) == list(range(len(source)))
  reference = pipeline.Pipeline(config.data, builtin_tokenizer, host=1, host_count=2, batch_size=8, opened=opened)
  expected = [reference.next_batch() for _ in range(12)]
  assert_resumed_exactly(lambda: pipeline.Pipeline(config.data, builtin_tokenizer, host=1, host_count=2, batch_size=8),
                         expected, at=5)
  held_out = pipeline.held_out_sets(config.data, builtin_tokenizer, config.train.batch_size,
                                    config.train.eval_batches, opened=opened)
  assert sorted(held_out) == ['random', 'sop/gutenberg', 'sop/wikiextractor', 'swap']
  assert all(held_out['sop/gutenberg']) and all(held_out['sop/wikiextractor'])


def test_sources_in_a_bucket_read_as_local_ones(wiki_dir, books_dir, records, bucket, tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  rows, _ = records
  pq.write_table(pa.table({'text': [r['text'] for r in rows]}), tmp_path / 'w.parquet', row_group_size=5)
  write_jsonl(tmp_path / 'w.jsonl.gz', rows, gzip.open)
  local = {'wikiextractor': f'{wiki_dir}/*/wiki_*', 'gutenberg': f'{books_dir}/emma.txt',
           'parquet': f'{tmp_path}/w.parquet', 'jsonl': f'{tmp_path}/w.jsonl.gz'}
  paths.copy_tree(str(wiki_dir), f'{bucket}/wiki')
  paths.path(f'{bucket}/books/emma.txt').write_bytes((books_dir / 'emma.txt').read_bytes())
  paths.path(f'{bucket}/rec/w.parquet').write_bytes((tmp_path / 'w.parquet').read_bytes())
  paths.path(f'{bucket}/rec/w.jsonl.gz').write_bytes((tmp_path / 'w.jsonl.gz').read_bytes())
  remote = {'wikiextractor': f'{bucket}/wiki/**/wiki_*', 'gutenberg': f'{bucket}/books/*.txt',
            'parquet': f'{bucket}/rec/*.parquet', 'jsonl': f'{bucket}/rec/*.jsonl.gz'}
  for kind in local:
    assert documents(open_spec(f'{kind}:{remote[kind]}')) == documents(open_spec(f'{kind}:{local[kind]}')), kind
