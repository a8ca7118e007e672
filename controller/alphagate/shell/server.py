"""The controller's HTTP endpoints: /metrics for Prometheus, /healthz and /readyz for the kubelet.

`Health` is the control loop's liveness (it reads a monotonic clock, to notice a stuck loop)
and readiness; `serve` runs `make_app` in a daemon thread, on loopback unless told otherwise.
Connections are bounded: a connection holds no thread until its request head has arrived
(`_BoundedServer`), so idle or slow clients cannot take the probes' threads.
"""

from __future__ import annotations

import contextlib
import io
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final
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


MAX_WAITING: Final = 256
"""Connections whose request head has not fully arrived; a newer one past this is closed."""
HEAD_SECONDS: Final = 5.0
"""The deadline for a connection's request head (line and headers) to arrive whole."""
MAX_HEAD: Final = 16 * 1024
"""A request head larger than this is closed unanswered."""
WORKERS: Final = 4
"""Threads that answer requests whose head has arrived (never one per connection)."""
MAX_QUEUED: Final = 64
"""Requests waiting for a worker; past this one is answered 503 at once."""
IO_SECONDS: Final = 10.0
"""A worker's socket deadline for the request body and for writing the answer."""


class _Prefixed:
    """The request's stream: the head the waiting room already read, then the socket."""

    def __init__(self, head: bytes, rest: Any) -> None:
        self._head = io.BytesIO(head)
        self._rest = rest

    def readline(self, limit: int = -1) -> bytes:
        line = self._head.readline(limit)
        if line.endswith(b"\n") or 0 <= limit <= len(line):
            return line
        return line + bytes(self._rest.readline(-1 if limit < 0 else limit - len(line)))

    def read(self, n: int = -1) -> bytes:
        data = self._head.read(n)
        if n < 0:
            return data + bytes(self._rest.read())
        return data + (bytes(self._rest.read(n - len(data))) if len(data) < n else b"")

    def close(self) -> None:
        self._rest.close()


class _BoundedServer(WSGIServer):
    """Idle and slow connections cost no thread. Accepted connections wait in one selector
    thread (the waiting room, at most MAX_WAITING, HEAD_SECONDS each) until their whole
    request head has arrived; only then does one of WORKERS threads answer it. A probe is
    answered while hundreds of idle or byte-a-second connections are open."""

    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 makes clients wait)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._new: queue.SimpleQueue[tuple[socket.socket, Any]] = queue.SimpleQueue()
        self._heads: dict[socket.socket, bytes] = {}
        self._heads_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="alphagate-http")
        self._queued = threading.BoundedSemaphore(MAX_QUEUED)
        self._closing = threading.Event()
        self.refused = 0  # connections closed by a cap or a deadline (tests, the benchmark)
        self._room = threading.Thread(target=self._wait_for_heads, daemon=True)
        self._room.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._new.put((request, client_address))

    def _wait_for_heads(self) -> None:
        """The waiting room: read heads without blocking; hand whole ones to the workers.
        Ends when the server closes."""
        sel = selectors.DefaultSelector()
        waiting: dict[socket.socket, tuple[float, bytearray, Any]] = {}
        while not self._closing.is_set():
            while not self._new.empty():
                sock, addr = self._new.get()
                if len(waiting) >= MAX_WAITING:
                    self._drop(sock)
                    continue
                sock.setblocking(False)
                waiting[sock] = (time.monotonic() + HEAD_SECONDS, bytearray(), addr)
                sel.register(sock, selectors.EVENT_READ, data=sock)
            for key, _ in sel.select(0.05) if waiting else ():
                sock = key.data
                _, buf, addr = waiting[sock]
                try:
                    chunk = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                buf += chunk
                if chunk and b"\r\n\r\n" not in buf and len(buf) <= MAX_HEAD:
                    continue
                sel.unregister(sock)
                del waiting[sock]
                if chunk and len(buf) <= MAX_HEAD:
                    self._hand(sock, bytes(buf), addr)
                else:
                    self._drop(sock)
            if not waiting:
                self._closing.wait(0.05)
            now = time.monotonic()
            for sock in [s for s, (deadline, _, _) in waiting.items() if deadline < now]:
                sel.unregister(sock)
                del waiting[sock]
                self._drop(sock)
        for sock in waiting:
            self._drop(sock)
        sel.close()

    def _hand(self, sock: socket.socket, head: bytes, addr: Any) -> None:
        if not self._queued.acquire(blocking=False):
            with contextlib.suppress(OSError):
                sock.setblocking(True)
                sock.settimeout(1.0)
                sock.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            self._drop(sock)
            return
        with self._heads_lock:
            self._heads[sock] = head
        try:
            self._pool.submit(self._answer, sock, addr)
        except RuntimeError:  # the pool is shut: the server is closing
            self._queued.release()
            self._drop(sock)

    def _answer(self, sock: socket.socket, addr: Any) -> None:
        try:
            sock.setblocking(True)
            sock.settimeout(IO_SECONDS)
            self.finish_request(sock, addr)
        except Exception:  # noqa: BLE001 - last resort, as socketserver does: one request, not the server
            self.handle_error(sock, addr)
        finally:
            with self._heads_lock:
                self._heads.pop(sock, None)
            self.shutdown_request(sock)
            self._queued.release()

    def head_of(self, sock: socket.socket) -> bytes:
        with self._heads_lock:
            return self._heads.get(sock, b"")

    def _drop(self, sock: socket.socket) -> None:
        self.refused += 1
        self.shutdown_request(sock)

    def server_close(self) -> None:
        self._closing.set()
        self._room.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        super().server_close()


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        server = self.server
        if isinstance(server, _BoundedServer):  # the head was read by the waiting room
            self.rfile = _Prefixed(server.head_of(self.connection), self.rfile)  # type: ignore[assignment]

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
        server_class=_BoundedServer,
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
