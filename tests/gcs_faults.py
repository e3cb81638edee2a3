"""Cloud Storage as it fails at times: a proxy in front of the test GCS server (gcs_emulator.py) that answers a seeded
share of the requests with 503 or 429, drops the connection before forwarding a request or after (the request done,
its answer lost), or answers slowly; the rest pass unchanged. Every client albert_jax uses (gcsfs, tensorstore,
google-cloud-storage) is pointed at it by the environment alone, as at the server itself.

  python tests/gcs_faults.py UPSTREAM_URL PORT RATE SEED

GET /__faults__ answers what happened so far (JSON: requests and faults by kind, and by method); POST
/__faults__?rate=R&methods=POST,PUT changes the rate, for the given methods only if named (an outage of writes:
rate 1 on POST, PUT, PATCH and DELETE). Neither is counted or faulted.
"""
import http.client
import http.server
import json
import random
import socket
import sys
import threading
import time
import urllib.parse

# Of the faulted requests: the share of each kind.
KINDS = {'503': 0.3, '429': 0.2, 'drop': 0.15, 'lost_answer': 0.15, 'slow': 0.2}
HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'proxy-connection', 'upgrade', 'te'}


class Faults:
  def __init__(self, rate: float, seed: int):
    self.rate, self.methods = rate, None
    self.random = random.Random(seed)
    self.lock = threading.Lock()
    self.counts = {'requests': 0, 'faults': 0, **dict.fromkeys(KINDS, 0)}
    self.by_method = {}

  def decide(self, method: str) -> str:
    with self.lock:
      self.counts['requests'] += 1
      counts = self.by_method.setdefault(method, {'requests': 0, 'faults': 0})
      counts['requests'] += 1
      draw, which = self.random.random(), self.random.random()
      if draw >= self.rate or (self.methods is not None and method not in self.methods):
        return 'pass'
      kind = next((k for k, cumulative in _cumulative() if which < cumulative), 'slow')
      self.counts['faults'] += 1
      self.counts[kind] += 1
      counts['faults'] += 1
      counts[kind] = counts.get(kind, 0) + 1
      return kind

  def report(self) -> dict:
    with self.lock:
      return {**self.counts, 'rate': self.rate, 'by_method': self.by_method}


def _cumulative():
  total = 0.0
  for kind, share in KINDS.items():
    total += share
    yield kind, total


class Proxy(http.server.BaseHTTPRequestHandler):
  protocol_version = 'HTTP/1.1'
  upstream: urllib.parse.SplitResult
  faults: Faults

  def log_message(self, *args):  # quiet
    pass

  def _body(self) -> bytes:
    if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
      parts = []
      while True:
        size = int(self.rfile.readline().split(b';')[0], 16)
        if size == 0:
          while self.rfile.readline() not in (b'\r\n', b'\n', b''):
            pass
          return b''.join(parts)
        parts.append(self.rfile.read(size))
        self.rfile.readline()
    return self.rfile.read(int(self.headers.get('Content-Length') or 0))

  def _answer(self, status: int, headers: list, body: bytes) -> None:
    self.send_response(status)
    for name, value in headers:
      self.send_header(name, value)
    self.send_header('Content-Length', str(len(body)))
    self.end_headers()
    if self.command != 'HEAD':
      self.wfile.write(body)

  def _drop(self) -> None:
    self.close_connection = True
    try:
      self.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass

  def _control(self) -> None:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
    if self.command == 'POST':
      with self.faults.lock:
        self.faults.rate = float(query.get('rate', [self.faults.rate])[0])
        self.faults.methods = set(query['methods'][0].split(',')) if 'methods' in query else None
    self._answer(200, [('Content-Type', 'application/json')], json.dumps(self.faults.report()).encode())

  def _handle(self) -> None:
    body = self._body()
    if self.path.startswith('/__faults__'):
      return self._control()
    kind = self.faults.decide(self.command)
    if kind == 'drop':
      return self._drop()
    if kind in ('503', '429'):
      message = json.dumps({'error': {'code': int(kind), 'message': f'injected {kind}'}}).encode()
      return self._answer(int(kind), [('Content-Type', 'application/json')], message)
    if kind == 'slow':
      time.sleep(self.faults.random.uniform(0.5, 2.0))
    upstream = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=120)
    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
    upstream.request(self.command, self.path, body=body if body or self.command in ('POST', 'PUT', 'PATCH') else None,
                     headers=headers)
    answer = upstream.getresponse()
    data = answer.read()
    upstream.close()
    if kind == 'lost_answer':  # done upstream; the client never hears of it
      return self._drop()
    self._answer(answer.status, [(k, v) for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP], data)

  do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


def serve(upstream_url: str, port: int, rate: float, seed: int) -> None:
  Proxy.upstream = urllib.parse.urlsplit(upstream_url)
  Proxy.faults = Faults(rate, seed)
  server = http.server.ThreadingHTTPServer(('127.0.0.1', port), Proxy)
  server.daemon_threads = True
  server.serve_forever()


if __name__ == '__main__':
  serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
