"""The Cloud Storage server the tests run: gcp-storage-emulator on 127.0.0.1, in memory, with two repairs.

Real Cloud Storage sends an object's generation with its bytes (the x-goog-generation header of a media download);
the emulator leaves it out, and tensorstore, which writes orbax's arrays, reads it to know which version of an
OCDBT manifest it holds ("Malformed StorageGeneration" without it). This adds the header, as the real service sends
it.

A resumable upload's session, once complete, answers a request repeated to it (a client retrying the last chunk
whose answer it never got) with the object, 200, as the real service does; the emulator forgets the session and
answers 404, which gcsfs takes for a missing file. This keeps each completed session's object for such a retry.
Nothing else changes.

  python tests/gcs_emulator.py PORT [BUCKET]     # BUCKET: a bucket to create at start
"""
import sys

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_download = objects.download


def download_with_generation(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  try:
    obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
  except NotFound:
    return
  response['x-goog-generation'] = str(obj['generation'])
  response['x-goog-metageneration'] = str(obj['metageneration'])


_upload_partial, _finalize = objects.upload_partial, objects._finalize_resumable_object  # pylint: disable=protected-access
_completed = {}  # upload_id -> the object its session made


def finalize_and_remember(response, storage, obj, data, upload_id):
  _finalize(response, storage, obj, data, upload_id)
  _completed[upload_id] = storage.get_file_obj(obj['bucket'], obj['name'])


def upload_partial_repeatable(request, response, storage, *args, **kwargs):
  upload_id = (request.query.get('upload_id') or [None])[0]
  if upload_id in _completed:
    response.json(_completed[upload_id])
    return
  _upload_partial(request, response, storage, *args, **kwargs)


objects.download = download_with_generation  # objects.get calls it for ?alt=media
objects._finalize_resumable_object = finalize_and_remember  # pylint: disable=protected-access
objects.upload_partial = upload_partial_repeatable  # the POST workaround in objects calls it by this name
REPLACED = {_download: download_with_generation, _upload_partial: upload_partial_repeatable}
server.HANDLERS = tuple((pattern, {method: REPLACED.get(handler, handler) for method, handler in handlers.items()})
                        for pattern, handlers in server.HANDLERS)

if __name__ == '__main__':
  server.create_server('127.0.0.1', int(sys.argv[1]), in_memory=True,
                       default_bucket=sys.argv[2] if len(sys.argv) > 2 else None).run()
