"""File formats that hold documents: where each document lies in one file, and its text, cleaned, as paragraphs.

A format answers two questions about one file: `index(path, skipped)` gives the locations of its documents (two
integers each: a byte span, or a Parquet row group and row), counting what it leaves out in `skipped`; and
`read(path, locations, skipped)` yields each located document as a list of paragraphs, in order. Everything about
many files (globs, one numbering over all of them, sentences) is sources.FileSource's job, and keeping what index()
found is corpus_index.py's.

Files in these formats may be compressed as people ship them (.bz2, .gz, .zst): a compressed file is read as a
stream, so reaching a document means decompressing what comes before it in its file (files are indexed whole once;
a chunk's documents are read in one pass).
"""
import bz2
import contextlib
import gzip
import io
import json
import re
from typing import Iterator

import numpy as np

from albert_jax import paths
from albert_jax.errors import ConfigError

COMPRESSED = ('.bz2', '.gz', '.zst')
# The version of what index() finds: kept indexes (corpus_index.py) of another version are not read. Raise it with
# any change to where a format finds documents or what it skips while indexing.
INDEX_VERSION = 1


class FormatError(ConfigError):
  """A file that cannot be read in its format; the message names the file, where, and the fix."""


def damaged(path, error: Exception) -> FormatError:
  return FormatError(f'{path} is damaged or cut short ({type(error).__name__}: {error}): copy or download it '
                     f'again, or leave it out of the glob.')


@contextlib.contextmanager
def open_bytes(path: paths.Path) -> Iterator:
  """The file's bytes, decompressed by its suffix, as a buffered binary stream."""
  with path.open('rb') as raw:
    name = str(path)
    if name.endswith('.bz2'):
      stream = bz2.BZ2File(raw)
    elif name.endswith('.gz'):
      stream = gzip.GzipFile(fileobj=raw)
    elif name.endswith('.zst'):
      import zstandard
      stream = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    else:
      yield raw
      return
    with stream:
      yield stream


def _decompression_errors() -> tuple:
  """What reading a damaged or cut-short file raises: bz2 and gzip EOFError or OSError, zstandard its ZstdError."""
  try:
    import zstandard
    return EOFError, OSError, zstandard.ZstdError
  except ImportError:
    return EOFError, OSError


def lines_with_offsets(path: paths.Path) -> Iterator[tuple]:
  """(first byte, line as bytes) of each line of the (decompressed) file."""
  offset = 0
  try:
    with open_bytes(path) as f:
      for line in f:
        yield offset, line
        offset += len(line)
  except _decompression_errors() as e:
    raise damaged(path, e) from None


def read_spans(path: paths.Path, spans) -> Iterator[bytes]:
  """The bytes of each (first, end) span, in one read of the part of the file they cover (spans ascending)."""
  spans = np.asarray(spans)
  base = int(spans[0][0])
  try:
    with open_bytes(path) as f:
      if f.seekable():  # bz2 and gzip seek by decompressing up to the place
        f.seek(base)
      else:  # zstandard's stream: decompress and drop
        for _ in range(base // 2 ** 20):
          f.read(2 ** 20)
        f.read(base % 2 ** 20)
      block = f.read(int(spans[-1][1]) - base)
  except _decompression_errors() as e:
    raise damaged(path, e) from None
  for first, end in spans:
    yield block[first - base:end - base]


def decode(raw: bytes, skipped) -> str:
  """UTF-8 text without a byte-order mark; undecodable bytes become U+FFFD and the document is counted."""
  text = raw.decode('utf-8', errors='replace').lstrip('\ufeff')
  if '\ufffd' in text and b'\xef\xbf\xbd' not in raw:
    skipped['documents with undecodable bytes (replaced)'] += 1
  return text


class Lines:
  """The original's format: one sentence per line, a blank line between documents."""
  segmented = True  # segmented: the paragraphs it reads are sentences already

  def index(self, path, skipped) -> list:
    spans, start, has_text, end = [], 0, False, 0
    for offset, line in lines_with_offsets(path):
      end = offset + len(line)
      if line.strip():
        has_text = True
      elif has_text:
        spans.append((start, offset))
        start, has_text = end, False
      else:
        start = end
    if has_text:
      spans.append((start, end))
    return spans

  def read(self, path, locations, skipped) -> Iterator[list]:
    for raw in read_spans(path, locations):
      yield [line.strip() for line in decode(raw, skipped).split('\n') if line.strip()]


class WholeFile:
  """Plain text, one document per file, each line a paragraph."""
  segmented = False

  def index(self, path, skipped) -> list:
    if any(str(path).endswith(suffix) for suffix in COMPRESSED):
      size = sum(len(line) for _, line in lines_with_offsets(path))
    else:
      size = path.stat().length
    return [(0, size)] if size else []

  def read(self, path, locations, skipped) -> Iterator[list]:
    for raw in read_spans(path, locations):
      yield decode(raw, skipped).split('\n')


# ---- WikiExtractor ------------------------------------------------------------------------------------------------
# Markup WikiExtractor leaves in its text: HTML tags of these names (their text is kept).
_WIKI_TAGS = re.compile(r'</?(?:br|dl|dd|dt|dfn|poem|ref|div|gallery|onlyinclude|noinclude|includeonly|b|i|u|s|'
                        r'span|ul|ol|li|table|tr|td|th|math|sup|sub|small|big|center|blockquote|score|code|pre|'
                        r'nowiki|abbr|font|hr|p|references)\b[^<>]*/?>', re.IGNORECASE)
# WikiExtractor writes a section heading as a line of its own ending in a full stop ("Etymology and terminology.");
# lists and captions that survive it are short lines too. A line of at most this many words is not a passage: on
# the shared sample, lines of 1-5 words are headings almost without exception, about 11 in 12 of 6 and 3 in 4 of 7,
# and half of 8 (a real sentence: "Aberdeen is a city in Scotland, United Kingdom.").
WIKI_PASSAGE_MIN_WORDS = 8
_DOC_OPEN, _DOC_CLOSE = re.compile(rb'^<doc\b[^>]*>\s*$'), re.compile(rb'^</doc>\s*$')
_TITLE = re.compile(r'\btitle="([^"]*)"')


def wiki_passages(lines: list, skipped=None) -> list:
  """The text passages of one article's lines (the <doc> tag line first): no title line, headings, list items or
  tags. Counts what it drops in `skipped`, if given."""
  title = _TITLE.search(lines[0])
  passages = []
  for number, line in enumerate(lines[1:]):
    line = _WIKI_TAGS.sub('', line).strip()
    if not line or (number == 0 and title and line == title.group(1).strip()):
      continue
    if len(line.split()) < WIKI_PASSAGE_MIN_WORDS:
      if skipped is not None:
        skipped['wikiextractor: headings, list items and captions (lines under 8 words, dropped)'] += 1
      continue
    passages.append(line)
  return passages


class WikiExtractor:
  """WikiExtractor's output (what google-research/bert tells users to run on a Wikipedia dump): <doc id url title>
  blocks, the title on the first line, then one paragraph per line. Each <doc> is a document; the tags, the
  title line, headings and short list lines are not text; articles left without text (stubs) are skipped and
  counted."""
  segmented = False

  def index(self, path, skipped) -> list:
    spans, opened, lines, saw_doc, book = [], None, [], False, False
    number = 0
    for number, (offset, line) in enumerate(lines_with_offsets(path), 1):
      if _DOC_OPEN.match(line):
        if opened is not None:
          raise FormatError(f'{path}, line {number}: a <doc> opens before the one opened at line {opened[1]} is '
                            f'closed: the file is damaged; extract it again with WikiExtractor.')
        opened, lines, saw_doc = (offset, number), [line.decode('utf-8', 'replace')], True
      elif _DOC_CLOSE.match(line):
        if opened is None:
          raise FormatError(f'{path}, line {number}: </doc> without a <doc> before it: the file is damaged; '
                            f'extract it again with WikiExtractor.')
        if wiki_passages(lines, skipped):
          spans.append((opened[0], offset + len(line)))
        else:
          skipped['wikiextractor: articles without text (stubs, lists; skipped)'] += 1
        opened = None
      elif opened is not None:
        lines.append(line.decode('utf-8', 'replace'))
      elif line.strip():
        skipped['wikiextractor: lines outside <doc> blocks (skipped)'] += 1
        book = book or bool(_PG_START.match(line.rstrip(b'\r\n')))
    if opened is not None:
      raise FormatError(f'{path}, line {opened[1]}: this <doc> is never closed (no </doc> before the end, line '
                        f'{number}): the file is cut short; extract or copy it again.')
    if not saw_doc and number:
      if book:
        raise FormatError(f'{path} holds no <doc ...> blocks but a Project Gutenberg START line: it is a Gutenberg '
                          f'book, not WikiExtractor output. Use gutenberg:GLOB for Gutenberg books.')
      raise FormatError(f'{path} holds no <doc ...> blocks: it is not WikiExtractor output. Use text:GLOB for plain '
                        f'text or lines:GLOB for one sentence per line.')
    return spans

  def read(self, path, locations, skipped) -> Iterator[list]:
    for raw in read_spans(path, locations):
      lines = decode(raw, skipped).split('\n')
      yield wiki_passages(lines[:-2] if lines[-1] == '' else lines[:-1])  # the </doc> line (and its newline) out


# ---- Project Gutenberg --------------------------------------------------------------------------------------------
# The header ends with the START line, the footer begins with the END line (old and new wordings: "*** START OF
# THIS PROJECT GUTENBERG EBOOK X ***", "***START OF THE PROJECT GUTENBERG EBOOK X***", "*END*THE SMALL PRINT!").
_PG_START = re.compile(rb'^\*{3} ?START OF (?:THIS|THE) PROJECT GUTENBERG[^\n]*$|^\*END\*THE SMALL PRINT[^\n]*$',
                       re.MULTILINE | re.IGNORECASE)
_PG_END = re.compile(rb'^\*{3} ?END OF (?:THIS|THE) PROJECT GUTENBERG|^End of (?:the )?Project Gutenberg',
                     re.MULTILINE | re.IGNORECASE)
_HTML = re.compile(rb'\s*(?:\xef\xbb\xbf)?\s*<(?:\?xml|!doctype|html)\b', re.IGNORECASE)  # an .htm edition
_PARAGRAPH_BREAK = re.compile(rb'\r?\n(?:[ \t]*\r?\n)+')
# Producer credits, in the paragraphs right after the header.
_CREDITS = re.compile(r'^(?:produced|prepared|transcribed|scanned|digitized|proofread|e-?text|this e-?(?:text|book)'
                      r'|updated editions|html version|an anonymous volunteer)\b', re.IGNORECASE)
# A chapter (or book, part, stave, letter) heading: where a book is cut into documents.
_CHAPTER = re.compile(r'^(?:chapter|chap\.|book|part|stave|letter|volume|canto)\s+(?:[ivxlcdm]+|\d+|the\s+\w+|'
                      r'one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|first|second|third|fourth|'
                      r'fifth|sixth|seventh|eighth|ninth|tenth|last)\b[^a-z]{0,3}(?:\s|$)', re.IGNORECASE)
_NUMERAL = re.compile(r'^(?:[IVXLC]+|\d+)\.?$')  # a chapter numbered without the word
_SENTENCE_END = re.compile(r'[.!?]["\'”’)]*$')
_NOTE = re.compile(r'project gutenberg|transcriber', re.IGNORECASE)
# Title pages, copyright and printing notes, tables of contents (dotted leaders): short paragraphs only.
_FRONT_MATTER = re.compile(r'^(?:by|author of|(?:first )?published|printed|reprinted|set up|contents)\b|\bcopyright\b|'
                           r'\.{4,}|\bpg-[ivx]+\b', re.IGNORECASE)
# A book is cut at its chapter headings, and any part grown past this many words at its next paragraph: documents
# of a few thousand words shuffle and hold out far better than 259 books of up to 240,000 words (see docs/data.md).
GUTENBERG_PART_WORDS = 5000


def _paragraph_spans(data: bytes, start: int, end: int) -> Iterator[tuple]:
  """(first, end) of each blank-line-separated paragraph of data[start:end]."""
  for match in _PARAGRAPH_BREAK.finditer(data, start, end):
    if match.start() > start:
      yield start, match.start()
    start = match.end()
  if end > start:
    yield start, end


def _is_chapter_heading(plain: str) -> bool:
  return len(plain) < 60 and bool(_CHAPTER.match(plain) or _NUMERAL.match(plain))


def gutenberg_paragraph(raw: bytes) -> str:
  """One paragraph of a book as running text: hard-wrapped lines joined, italics underscores removed; '' for what
  is not the book's prose: a heading or title-page line (mostly capitals, or a few words without a full stop), a
  bracketed caption or note, a chapter heading, a transcriber's or Project Gutenberg's note, a short line of front
  matter (a byline, a copyright or printing note, a table of contents)."""
  text = ' '.join(raw.decode('utf-8', 'replace').split()).lstrip('\ufeff').replace('_', '')
  lower = sum(c.islower() for c in text)
  if (lower <= sum(c.isupper() for c in text) or text.startswith('[') or text.endswith(']')
      or len(text.split()) < 4 and not _SENTENCE_END.search(text) or _is_chapter_heading(text)
      or _NOTE.search(text) or _FRONT_MATTER.search(text) and len(text.split()) < 25):
    return ''
  return text


class Gutenberg:
  """Project Gutenberg plain-text e-books, one book per file. The licence header (through the START line) and
  footer (from the END line or the "End of the Project Gutenberg EBook" line) and producer credits are removed;
  a file without the markers is read whole and counted. Hard-wrapped lines are joined into paragraphs. A book is
  cut into documents at its chapter headings and wherever a part passes GUTENBERG_PART_WORDS words."""
  segmented = False

  def index(self, path, skipped) -> list:
    with open_bytes(path) as f:
      data = f.read()
    if _HTML.match(data):
      skipped['gutenberg: HTML editions (skipped: use the plain-text edition, .txt)'] += 1
      return []
    start, end = _PG_START.search(data), None
    if start:
      end = _PG_END.search(data, start.end())
    else:
      skipped['gutenberg: files without the START/END markers (read whole)'] += 1
    body_start, body_end = (start.end() if start else 0), (end.start() if end else len(data))
    spans, part_start, words, front_matter = [], None, 0, True
    for first, stop in _paragraph_spans(data, body_start, body_end):
      plain = ' '.join(data[first:stop].decode('utf-8', 'replace').split())
      if front_matter and _CREDITS.match(plain):  # before the first paragraph of text: never inside a part
        skipped['gutenberg: producer credits (dropped)'] += 1
        continue
      if part_start is not None and (_is_chapter_heading(plain) or words >= GUTENBERG_PART_WORDS):
        spans.append((part_start, first))
        part_start, words = None, 0
      text = gutenberg_paragraph(data[first:stop])
      if text:
        front_matter = False
        part_start = first if part_start is None else part_start
        words += len(text.split())
    if part_start is not None:
      spans.append((part_start, body_end))
    return spans

  def read(self, path, locations, skipped) -> Iterator[list]:
    for raw in read_spans(path, locations):
      paragraphs = (gutenberg_paragraph(p) for p in _PARAGRAPH_BREAK.split(raw))
      yield [p for p in paragraphs if p]


# ---- Records: JSON lines and Parquet ------------------------------------------------------------------------------
class JsonLines:
  """One JSON object per line (plain, .gz or .zst), the document's text in `field`. A line that does not parse, or
  whose object lacks the field or holds no string there, is skipped and counted; a file where no line gives a
  text stops the run with one line naming the fields it has."""
  segmented = False

  def __init__(self, field: str = 'text'):
    self.field = field

  def index(self, path, skipped) -> list:
    spans, fields, not_json, first_bad = [], None, 0, None
    for number, (offset, line) in enumerate(lines_with_offsets(path), 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except ValueError:
        not_json, first_bad = not_json + 1, first_bad or number
        continue
      text = record.get(self.field) if isinstance(record, dict) else None
      if isinstance(text, str) and text.strip():
        spans.append((offset, offset + len(line)))
      elif isinstance(text, str):
        skipped['jsonl: records with empty text (skipped)'] += 1
      else:
        fields = fields or (sorted(record) if isinstance(record, dict) else [type(record).__name__])
        skipped[f'jsonl: records without a string "{self.field}" (skipped)'] += 1
    if not spans and (fields or first_bad):
      what = (f'no record has a string field "{self.field}" (fields: {", ".join(map(str, fields))}): name the text '
              f'field as jsonl[FIELD]:GLOB' if fields else
              f'line {first_bad} and every other line are not JSON: jsonl: reads one JSON object per line')
      raise FormatError(f'{path}: {what}.')
    if not_json:
      skipped[f'jsonl: lines that are not JSON (skipped; {path}: {not_json}, the first at line {first_bad})'] += \
          not_json
    return spans

  def read(self, path, locations, skipped) -> Iterator[list]:
    for raw in read_spans(path, locations):
      yield json.loads(raw)[self.field].split('\n')


class Parquet:
  """Parquet files (the layout of text datasets on the HF hub), the document's text in `column`, read a row group
  at a time. A file without the column stops the run with one line naming the columns it has; empty or null
  texts are skipped and counted."""
  segmented = False

  def __init__(self, column: str = 'text'):
    self.column = column

  def _open(self, path, f):
    import pyarrow.parquet as pq
    try:
      parquet = pq.ParquetFile(f)
    except Exception as e:  # pyarrow.ArrowInvalid and friends: not Parquet, or cut short
      raise FormatError(f'{path} is not a readable Parquet file ({e}): copy or download it again, or leave it out '
                        f'of the glob.') from None
    names = parquet.schema_arrow.names
    if self.column not in names:
      raise FormatError(f'{path} has no column "{self.column}" (columns: {", ".join(names)}): name the text column '
                        f'as parquet[COLUMN]:GLOB.')
    return parquet

  def index(self, path, skipped) -> list:
    with path.open('rb') as f:
      metadata = self._open(path, f).metadata
      return [(group, row) for group in range(metadata.num_row_groups)
              for row in range(metadata.row_group(group).num_rows)]

  def read(self, path, locations, skipped) -> Iterator[list]:
    locations = np.asarray(locations)
    with path.open('rb') as f:
      parquet = self._open(path, f)
      for group in dict.fromkeys(locations[:, 0].tolist()):
        texts = parquet.read_row_group(group, columns=[self.column]).column(0).to_pylist()
        for row in locations[locations[:, 0] == group][:, 1]:
          text = texts[row]
          if not isinstance(text, str):
            skipped['parquet: rows whose text is null or not a string (skipped)'] += 1
            text = ''
          yield text.split('\n')


FORMATS = {'lines': Lines, 'text': WholeFile, 'wikiextractor': WikiExtractor, 'gutenberg': Gutenberg,
           'jsonl': JsonLines, 'parquet': Parquet}
FIELD_FORMATS = ('jsonl', 'parquet')  # those that take a field name: jsonl[FIELD]:GLOB
