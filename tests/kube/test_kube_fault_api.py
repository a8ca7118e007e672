"""The fault matrix, API side: an API server that never answers, 409 storms, 500s, 403s, a
reply lost after the write landed, a controller killed before or after its patch or after
its status write, a leader change mid-flip. The real `kubernetes` client over HTTP against
the API double (or a silent socket); docs/reliability.md tabulates these."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from alphagate.config import DeploymentRef
from alphagate.errors import KubeError
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.sandbox.apiserver import ApiServer


@pytest.fixture
def silent() -> Iterator[str]:
    """A server on 127.0.0.1 that accepts connections and never answers (bounded: the test's
    client gives up first; the sockets close when the fixture ends)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        sock.close()


def test_an_api_server_that_never_answers_costs_one_request_deadline(
    apiserver: ApiServer, silent: str
) -> None:
    cfg = apiserver.configuration()
    cfg.host = silent
    kube = Kube.from_configuration(cfg, timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(KubeError) as caught:
            Actuator(kube.api_client).read("llm", DeploymentRef(name="chat-canary"))
        took = time.monotonic() - started
    finally:
        kube.close()
    assert caught.value.reason == "Unreachable"  # a failed request, not a stuck loop
    assert took < 5.0  # bounded by the deadline, not the OS's TCP timeout (minutes)
