"""S3Gate: an HTTP proxy in front of an S3 endpoint (moto's, in server mode) that records every request and can
hold the PUTs of chosen keys until a given number of them has arrived (a barrier inside the storage protocol).

    with S3Gate("http://127.0.0.1:5000", hold=r"\\.pulumi/locks/.*\\.json", until=2) as gate:
        backend = f"s3://state?endpoint=127.0.0.1:{gate.port}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"
        ...                          # two CLIs lock the same stack: both lock PUTs are held until both arrived
        gate.requests                # [(method, path), ...] in the order they reached the gate

What it shows: where two clients interleave between a read and a write of the backend, deterministically (no
race to win). Path-style requests only (s3ForcePathStyle=true); plain HTTP (disableSSL=true). Request bodies are
forwarded as sent (an aws-chunked body keeps its framing; an HTTP-chunked one is re-sent with a length).
"""
from __future__ import annotations

import http.client
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class S3Gate:
    def __init__(self, upstream: str, *, hold: str | None = None, until: int = 2, timeout: float = 60.0):
        """upstream: http://host:port; hold: a regex of keys (bucket/key, no leading slash) whose PUTs wait until
        `until` of them have arrived, or `timeout` seconds passed (then they go on: a client never hangs)."""
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._hold = re.compile(hold) if hold else None
        self._barrier = threading.Barrier(until, timeout=timeout) if hold else None
        self.requests: list[tuple[str, str]] = []
        self.held: list[str] = []  # the keys whose PUTs waited at the barrier, in arrival order
        self.barrier_broken = False
        self._lock = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _forward(self) -> None:
                gate._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-gate", daemon=True)
        self._thread.start()

    def __enter__(self) -> "S3Gate":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._barrier is not None:
            self._barrier.abort()
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        body = _read_body(request)
        key = urlsplit(request.path).path.lstrip("/")
        with self._lock:
            self.requests.append((request.command, key))
        if request.command == "PUT" and self._hold is not None and self._hold.fullmatch(key):
            with self._lock:
                self.held.append(key)
            assert self._barrier is not None
            try:
                self._barrier.wait()
            except threading.BrokenBarrierError:
                self.barrier_broken = True
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        connection = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            connection.request(request.command, request.path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        request.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_HEADERS and name.lower() != "content-length":
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)


def _read_body(request: BaseHTTPRequestHandler) -> bytes | None:
    if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(request.rfile.readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while request.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(request.rfile.read(size))
            request.rfile.readline()
    length = request.headers.get("Content-Length")
    return request.rfile.read(int(length)) if length else None
