"""/healthz, /readyz and /metrics on one small HTTP server: the service's (automation/service/server.py) and a
runner's (automation/runner/). What the probes answer and what /metrics exposes are the caller's."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

Probe = Callable[[], tuple[bool, dict]]


class Exposition(Protocol):
    def exposition(self) -> bytes: ...


class ProbeServer:
    """Serves the probes and the metrics on `bind:port` (port 0: any free port)."""

    def __init__(self, metrics: Exposition, *, healthy: Probe, ready: Probe, bind: str = "0.0.0.0", port: int = 8080):
        metrics_, healthy_, ready_ = metrics, healthy, ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, metrics_.exposition(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez", "/readyz"):
                    ok, detail = (ready_ if path == "/readyz" else healthy_)()
                    body = json.dumps({"ok": ok, **detail}, sort_keys=True).encode() + b"\n"
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: keep the log quiet
                pass

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
