"""Every path a user names, local or a URL (gs://bucket/...): the one place that knows the difference.

On a pod every path is a Cloud Storage path (checkpoints must outlive a preempted VM and every host must see the
same ones), so nothing else in albert_jax wraps a user's path in pathlib, or globs, opens or renames it by hand:
`pathlib.Path('gs://b/x')` is the local path `gs:/b/x`. Paths are `etils.epath.Path`s, which orbax and TFDS take
as they are; a local path behaves exactly as before. Tools that can only read or write local files (SentencePiece's
trainer, TensorFlow's checkpoint reader) work on a local copy.
"""
import contextlib
import dataclasses
import fnmatch
import glob as local_glob
import logging
import os
import re
import shutil
import stat
import tempfile
from typing import Iterator

import aiohttp
import fsspec
from etils import epath
from etils.epath import gpath

from albert_jax import failures
from albert_jax.errors import ConfigError

# One client for gs:// whether or not TensorFlow is installed: gcsfs, the one the tests run against a GCS server.
# (epath otherwise switches to tf.io.gfile when it finds TensorFlow, and decides once per process, on first use.)
os.environ.setdefault('EPATH_USE_TF', 'false')
gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
# No listing cache: other hosts and processes write the same bucket (a host-0 marker, a new checkpoint, a result), and
# gcsfs would answer "no such file" from a listing it made before they did.
fsspec.config.conf.setdefault('gs', {}).setdefault('use_listings_cache', False)
# gcsfs retries Cloud Storage's transient errors (408, 429, 5xx, a dropped connection) six times with backoff, but
# waits for an answer without end by default: a request that stalls would hold the run forever. A connection must
# open in 30 s and bytes keep coming at least every 60 s; else the request fails and is retried like the others.
fsspec.config.conf['gs'].setdefault('requests_timeout', aiohttp.ClientTimeout(sock_connect=30, sock_read=60))
# gcsfs logs a traceback when it gives up on a request, then raises the error, which says it again: the run's one
# line (failures.py) is what a user reads, not the log's traceback before it.
logging.getLogger('gcsfs').addFilter(
    lambda record: 'out of retries on exception' not in record.getMessage()
    and 'non-retriable exception' not in record.getMessage())

Path = epath.Path


class PathError(ConfigError):
  """A path that cannot be used (no bucket, no credentials, nothing matches); the message names it and the fix."""


def is_url(path) -> bool:
  return '://' in str(path)


def path(name) -> epath.Path:
  """A user's path: a URL as it is, a local path made absolute (orbax and tensorstore want absolute paths)."""
  if isinstance(name, epath.Path) and is_url(name):
    return name
  name = os.fspath(name)
  return epath.Path(name if is_url(name) else os.path.abspath(os.path.expanduser(name)))


@dataclasses.dataclass(frozen=True)
class FileInfo:
  """A file as a listing shows it: `version` changes whenever its content may have (a local file's modification
  and status-change times; a bucket object's generation, new at every write)."""
  name: str
  size: int
  version: str


def listing(pattern: str) -> list:
  """FileInfo of each file the glob matches, sorted by name; `**` matches any number of folders, on a URL too. In
  a bucket: one listing of the glob's fixed folder
  (pages of 1,000 objects), not a request per file or per folder."""
  if not is_url(pattern):
    infos = []
    for name in sorted(local_glob.glob(os.path.expanduser(pattern), recursive=True)):
      try:
        status = os.stat(name)
      except FileNotFoundError:  # removed since the glob saw it (another process's temporary file)
        continue
      if stat.S_ISREG(status.st_mode):
        infos.append(FileInfo(os.path.abspath(name), status.st_size, f'{status.st_mtime_ns}.{status.st_ctime_ns}'))
    return infos
  base, wanted = _split_pattern(pattern)
  if wanted is None:  # no wildcard: the file itself
    return [_info(pattern, _filesystem(pattern).info(pattern))] if epath.Path(pattern).is_file() else []
  filesystem = _filesystem(base)
  root = filesystem._strip_protocol(base).rstrip('/')  # pylint: disable=protected-access
  scheme = base.split('://', 1)[0]
  infos = []
  for name, info in filesystem.find(root, detail=True).items():
    relative = tuple(name[len(root) + 1:].split('/'))
    if info.get('type', 'file') == 'file' and _matches(relative, wanted):
      infos.append(_info(f'{scheme}://{name}', info))
  return sorted(infos, key=lambda info: info.name)


def _filesystem(url: str):
  return fsspec.core.url_to_fs(url)[0]


def _info(name: str, info: dict) -> FileInfo:
  version = info.get('generation') or info.get('ETag') or info.get('etag') or info.get('mtime') or ''
  return FileInfo(name, int(info.get('size') or 0), str(version))


def _split_pattern(pattern: str) -> tuple:
  """A URL glob as (its fixed folder, the parts after it), or (the URL, None) when it has no wildcard."""
  scheme, rest = pattern.split('://', 1)
  parts = rest.split('/')
  fixed = next((i for i, part in enumerate(parts) if re.search(r'[*?\[]', part)), len(parts))
  if fixed == len(parts):
    return pattern, None
  if fixed == 0:
    raise PathError(f'{pattern}: a wildcard in the bucket name is not supported; name the bucket.')
  return f'{scheme}://' + '/'.join(parts[:fixed]), parts[fixed:]


def fixed_folder(pattern: str) -> str:
  """The folder of a glob above its first wildcard (of a plain file name, its folder), local ones made absolute."""
  if is_url(pattern):
    base, wanted = _split_pattern(pattern)
    return base.rstrip('/') if wanted is not None else base.rsplit('/', 1)[0]
  parts = os.path.abspath(os.path.expanduser(pattern)).split(os.sep)
  fixed = next((i for i, part in enumerate(parts) if re.search(r'[*?\[]', part)), len(parts) - 1)
  return os.sep.join(parts[:fixed]) or os.sep


def read_range(name, start: int, length: int) -> bytes:
  """`length` bytes of a file from byte `start`: in a bucket one ranged request for exactly those bytes (a
  buffered reader would fetch megabytes ahead)."""
  if length <= 0:
    return b''
  name = str(name)
  if is_url(name):
    return _filesystem(name).cat_file(name, start, start + length)
  with open(name, 'rb') as f:
    f.seek(start)
    return f.read(length)


def write_whole(name, data: bytes) -> None:
  """Writes a file so that a reader sees all of it or none: a local one under a temporary name, then renamed; a
  bucket's object appears whole when its upload ends."""
  target = path(name)
  if is_url(target):
    target.write_bytes(data)
    return
  temporary = f'{target}.{os.getpid()}.tmp'
  with open(temporary, 'wb') as f:
    f.write(data)
  os.replace(temporary, target)


def _relative_files(directory: epath.Path, prefix: tuple = ()) -> Iterator[tuple]:
  """Every file under `directory`, as a tuple of path parts below it (a bucket has no real folders: list them)."""
  if not directory.is_dir():
    return
  for child in directory.iterdir():
    if child.is_dir():
      yield from _relative_files(child, prefix + (child.name,))
    else:
      yield prefix + (child.name,)


def _matches(parts: tuple, pattern: list) -> bool:
  if not pattern:
    return not parts
  if pattern[0] == '**':
    return any(_matches(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
  return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def files_under(directory) -> list:
  """Every file below `directory` (local or URL), relative to it, sorted."""
  directory = path(directory)
  return sorted('/'.join(parts) for parts in _relative_files(directory))


def copy_tree(source, destination) -> None:
  """Copies every file below `source` to the same place below `destination` (either may be local or a URL)."""
  source, destination = path(source), path(destination)
  for relative in files_under(source):
    target = destination / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((source / relative).read_bytes())


def move_tree(source, destination) -> None:
  """Moves a folder. A bucket has no folders to rename: its objects are copied, then deleted."""
  source, destination = path(source), path(destination)
  if not is_url(source) and not is_url(destination):
    os.rename(source, destination)
    return
  copy_tree(source, destination)
  source.rmtree()


@contextlib.contextmanager
def local_copy(name) -> Iterator[str]:
  """A local path holding what `name` holds (a file or a folder), for tools that read only local files: `name`
  itself when it is local, else a temporary copy, removed afterwards."""
  if not is_url(name):
    yield str(path(name))
    return
  source = path(name)
  with tempfile.TemporaryDirectory(prefix='albert_jax-') as tmp:
    local = os.path.join(tmp, source.name)
    if source.is_dir():
      copy_tree(source, local)
    else:
      shutil.copyfileobj(source.open('rb'), open(local, 'wb'))
    yield local


@contextlib.contextmanager
def writable_locally(name) -> Iterator[str]:
  """A local folder for tools that write only local files, whose contents end up in `name`: `name` itself when it
  is local, else a temporary folder copied there (only if the block completes)."""
  if not is_url(name):
    os.makedirs(path(name), exist_ok=True)
    yield str(path(name))
    return
  with tempfile.TemporaryDirectory(prefix='albert_jax-') as tmp:
    yield tmp
    copy_tree(tmp, name)


def make_folder(name, flag: str = '--workdir') -> epath.Path:
  """`name` as a folder that exists, made if need be; a folder that cannot be made (a read-only or system path, a
  file in the way, no permission) is a PathError naming it and the reason, before anything is written."""
  folder = path(name)
  try:
    folder.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    reason = e.strerror or ' '.join(str(e).split())[:200]
    raise PathError(f'{flag} {name} cannot be made ({reason}): name a folder this user can write, or a gs:// '
                    'bucket path.') from None
  return folder


def check_reachable(*names) -> None:
  """Stops early, naming the path and the fix, when a gs:// URL in `names` (paths, or settings holding them such
  as 'lines:gs://b/*.txt,builtin') cannot be used: Cloud Storage without credentials, or a bucket that does not
  exist (a write there would fail only at the first checkpoint, and creating folders in a missing bucket can
  hang)."""
  buckets = sorted({bucket for n in names if n for bucket in re.findall(r'gs://([^/,@\s]+)', str(n))})
  if not buckets:
    return
  _check_credentials(buckets[0])
  for bucket in buckets:
    try:
      found = epath.Path(f'gs://{bucket}').exists()
    except Exception as e:  # pylint: disable=broad-except  (permission denied, network, ...: the client's own words)
      if failures.transient(e):  # Cloud Storage failing still after the client's retries: not the user's path
        raise
      raise PathError(f'gs://{bucket} cannot be reached ({type(e).__name__}: {" ".join(str(e).split())[:200]}): '
                      f'check the bucket name and that this machine\'s account may read and write it.') from None
    if not found:
      raise PathError(f'bucket gs://{bucket} does not exist (or this machine\'s account cannot see it): create it '
                      f'with gcloud storage buckets create gs://{bucket} --location=REGION, or fix the path.')


def _check_credentials(bucket: str) -> None:
  if os.environ.get('STORAGE_EMULATOR_HOST'):  # the storage clients talk to a local server without credentials
    return
  import google.auth
  try:
    google.auth.default()
  except google.auth.exceptions.DefaultCredentialsError:
    raise PathError(f'gs://{bucket}: no Google Cloud credentials on this machine. On a TPU VM its service account '
                    f'provides them; elsewhere run gcloud auth application-default login, or set '
                    f'GOOGLE_APPLICATION_CREDENTIALS to a service account key file.') from None
