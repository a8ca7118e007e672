"""The controller's HTTP endpoints: /metrics for Prometheus, /healthz and /readyz for the kubelet.

`Health` is the control loop's liveness (it reads a monotonic clock, to notice a stuck loop)
and readiness; `serve` runs `make_app` in a daemon thread, on loopback unless told otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app


class Health:
    """What /healthz and /readyz answer.

    Live: the control loop has beaten within `stale_after_seconds` (None: always live once
    started) and no `stuck` check names a reason (reads in flight far past every read
    deadline: `Reconciler.overdue`). The loop beats on every tick and every canary it decides;
    it never waits for a canary's read (those run beside it, each within its own deadline), so
    a tenant's slow pods or Prometheus queries never make it silent: only a stuck controller
    does. Ready: the shell said so (caches synced, leader election running). A standby
    replica is ready: it serves metrics and can take over.
    """

    def __init__(
        self,
        *,
        stale_after_seconds: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._clock = clock or time.monotonic
        self._stale_after = stale_after_seconds
        self._last_beat = self._clock()
        self._ready = False
        self._why_not_ready = "starting"
        self._lock = threading.Lock()
        self._stuck: list[Callable[[], str | None]] = []

    def watch(self, stuck: Callable[[], str | None]) -> None:
        """Add a check that names why the control loop is stuck (None: it is not)."""
        with self._lock:
            self._stuck.append(stuck)

    def beat(self) -> None:
        with self._lock:
            self._last_beat = self._clock()

    def set_ready(self, ready: bool, reason: str = "") -> None:
        with self._lock:
            self._ready = ready
            self._why_not_ready = "" if ready else (reason or "not ready")

    def live(self) -> tuple[bool, str]:
        with self._lock:
            checks = list(self._stuck)
            silent = self._clock() - self._last_beat
            if self._stale_after is not None and silent > self._stale_after:
                return False, f"control loop silent for {silent:.0f}s (> {self._stale_after:g}s)"
        for check in checks:
            why = check()
            if why is not None:
                return False, f"control loop stuck: {why}"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        alive, why = self.live()
        if not alive:
            return False, why
        with self._lock:
            return (True, "ok") if self._ready else (False, self._why_not_ready)


Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def make_app(
    registry: CollectorRegistry, health: Health | None = None, api: WSGIApp | None = None
) -> WSGIApp:
    """A WSGI app: /metrics (prometheus_client, content negotiation included), /healthz,
    /readyz, and `api` (the verdict API, `alphagate.verdicts`) under /api/. Without `health`,
    both probes answer ok."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if api is not None and path.startswith("/api/"):
            return api(environ, start_response)
        if path in ("/healthz", "/livez", "/readyz"):
            if health is None:
                ok, why = True, "ok"
            elif path == "/readyz":
                ok, why = health.ready()
            else:
                ok, why = health.live()
            body = (why + "\n").encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(
                status,
                [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
            )
            return [body]
        if path in ("/metrics", "/"):
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        body = b"not found\n"
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [body]

    return app


class _ThreadingServer(WSGIServer):
    """One thread per request, daemon threads: a slow scrape never blocks a probe."""

    daemon_threads = True
    allow_reuse_address = True

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._handle, args=(request, client_address), daemon=True)
        thread.start()

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # last resort, as socketserver does: one request, not the server
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the log; the structured log says what matters."""


@dataclass
class Server:
    """A running metrics/health server; `close()` stops it and joins its thread."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    port: int,
    registry: CollectorRegistry,
    host: str = "127.0.0.1",
    *,
    health: Health | None = None,
    api: WSGIApp | None = None,
) -> Server:
    """Serve `make_app` on host:port in a daemon thread (port 0 picks a free one).

    The default host is loopback; in a cluster the run command passes 0.0.0.0 so the kubelet
    and Prometheus can reach the pod.
    """
    server = make_server(
        host,
        port,
        make_app(registry, health, api),
        server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.2},
        daemon=True,
        name=f"alphagate-metrics-{server.server_port}",
    )
    thread.start()
    return Server(host=host, port=server.server_port, _server=server, _thread=thread)


def series(registry: CollectorRegistry) -> Iterator[tuple[str, dict[str, str], float]]:
    """Every sample in `registry` as (name, labels, value): a small helper for tests and
    the status command."""
    for family in registry.collect():
        for sample in family.samples:
            yield sample.name, dict(sample.labels), sample.value
