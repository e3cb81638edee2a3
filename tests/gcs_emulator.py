"""The Cloud Storage server the tests run: gcp-storage-emulator on 127.0.0.1, in memory, with one repair.

Real Cloud Storage sends an object's generation with its bytes (the x-goog-generation header of a media download);
the emulator leaves it out, and tensorstore, which writes orbax's arrays, reads it to know which version of an
OCDBT manifest it holds ("Malformed StorageGeneration" without it). This adds the header, as the real service sends
it, and changes nothing else.

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


objects.download = download_with_generation  # objects.get calls it for ?alt=media
server.HANDLERS = tuple((pattern, {method: download_with_generation if handler is _download else handler
                                   for method, handler in handlers.items()})
                        for pattern, handlers in server.HANDLERS)

if __name__ == '__main__':
  server.create_server('127.0.0.1', int(sys.argv[1]), in_memory=True,
                       default_bucket=sys.argv[2] if len(sys.argv) > 2 else None).run()
