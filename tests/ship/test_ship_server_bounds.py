"""The metrics/probe server under idle and slow connections: bounded threads, probes answered.

Before: one thread per connection, no cap, no deadline; 300 idle connections were 300 threads
blocked forever. Now a connection holds no thread until its request head has arrived whole.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from alphagate.shell import server as srv
from alphagate.shell.server import Health, serve


@pytest.fixture
def running() -> Iterator[srv.Server]:
    def echo(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [f"{environ['PATH_INFO']} {len(body)} {body[:8]!r}".encode()]

    health = Health()
    health.set_ready(True)
    with serve(0, CollectorRegistry(), health=health, api=echo) as s:
        yield s


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_idle_and_slow_connections_hold_no_thread_and_probes_are_answered(
    running: srv.Server,
) -> None:
    threads = threading.active_count()
    idle = [_connect(running.port) for _ in range(200)]
    slow = [_connect(running.port) for _ in range(20)]
    try:
        for s in slow:  # a request head that never ends (slowloris)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        started = time.monotonic()
        got = httpx.get(running.url + "/healthz", timeout=5)
        assert got.status_code == 200 and got.text == "ok\n"
        assert time.monotonic() - started < 2.0
        assert httpx.get(running.url + "/metrics", timeout=5).status_code == 200
        # the workers and the waiting room, not a thread per connection
        assert threading.active_count() - threads <= srv.WORKERS + 1
    finally:
        for s in idle + slow:
            s.close()


def test_past_the_cap_new_connections_are_closed_and_heads_have_a_deadline(
    running: srv.Server,
) -> None:
    conns = [_connect(running.port) for _ in range(srv.MAX_WAITING + 20)]
    try:
        time.sleep(0.5)
        closed = 0
        for s in conns[-20:]:  # the newest ones, past the cap: closed unanswered
            s.settimeout(2)
            with contextlib.suppress(ConnectionResetError):
                closed += s.recv(1) == b""
        assert closed == 20
        # the others are closed once HEAD_SECONDS pass without a whole head
        first = conns[0]
        first.settimeout(srv.HEAD_SECONDS + 3)
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert first.recv(1) == b""
        assert time.monotonic() - started <= srv.HEAD_SECONDS + 2
    finally:
        for s in conns:
            s.close()


def test_a_request_body_after_the_head_reaches_the_app_whole(running: srv.Server) -> None:
    body = b"x" * 100_000  # far past what the waiting room reads with the head
    got = httpx.post(running.url + "/api/v1/gate/llm/chat", content=body, timeout=10)
    assert got.text == f"/api/v1/gate/llm/chat {len(body)} b'xxxxxxxx'"
    # a head and body sent in one segment
    with _connect(running.port) as s:
        s.sendall(b"POST /api/v1/x HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
        s.settimeout(5)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    assert data.endswith(b"/api/v1/x 5 b'hello'")
