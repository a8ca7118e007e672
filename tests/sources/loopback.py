"""A loopback HTTP server for source tests: the pods and Prometheus doubles the tests read over
real HTTP. Each double is a `Loopback` with its own `Handler` subclass (what it answers)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alphagate.sources.discovery import Target

EXPOSITION = "text/plain; version=0.0.4"
"""The Content-Type of a Prometheus text page, as vLLM serves it."""


class Handler(BaseHTTPRequestHandler):
    """A quiet handler (no access log on the test's stderr) with one way to answer."""

    def head(self, length: int, *, status: int = 200, content_type: str = EXPOSITION) -> None:
        """The status line and headers of a `length`-byte answer (the body is the caller's)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def answer(self, body: bytes, *, status: int = 200, content_type: str = EXPOSITION) -> None:
        self.head(len(body), status=status, content_type=content_type)
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class Loopback:
    """`handler` served on 127.0.0.1 (a free port) by daemon threads until `stop()`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def targets(self, *names: str) -> list[Target]:
        """One scrape target a pod name, at `/<name>/metrics`."""
        return [Target(f"{self.url}/{n}/metrics", pod=n) for n in names]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
