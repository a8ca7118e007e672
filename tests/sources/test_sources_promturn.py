"""Prometheus batches take the cycle's read threads by namespace in turn (sources/cycle.py):
one namespace's many distinct windows (a batch each) never hold another namespace's batch
back. Read through the cycle, as the controller does, from a Prometheus double over real HTTP
on 127.0.0.1 that answers every query late."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from loopback import Handler, Loopback

from alphagate.sources.cycle import PROMETHEUS_THREADS, Read, observe_each
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.prometheus import PrometheusSource
from specs import SOURCE_SPEC, spec_from

LATE = 0.3
"""Seconds the double takes to answer each query (a loaded Prometheus)."""


class SlowProm(Loopback):
    """Answers every query with an empty result after LATE seconds; notes when each
    namespace's first query came."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: dict[str, float] = {}
        outer = self

        class PromHandler(Handler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                query = form.get("query", [""])[0]
                found = re.search(r'namespace="([^"]+)"', query)
                with outer.lock:
                    if found:
                        outer.first.setdefault(found.group(1), time.monotonic())
                time.sleep(LATE)
                kind = "matrix" if self.path.endswith("query_range") else "vector"
                self.json(200, {"status": "success", "data": {"resultType": kind, "result": []}})

            def do_GET(self) -> None:  # the targets API: not here
                self.json(404, {"status": "error", "error": "not here"})

            def json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.answer(data, status=status, content_type="application/json")

        super().__init__(PromHandler)


@pytest.fixture
def prom() -> Iterator[SlowProm]:
    server = SlowProm()
    yield server
    server.stop()


def test_a_namespaces_many_windows_never_hold_another_namespaces_batch_back(
    prom: SlowProm,
) -> None:
    """Twelve canaries of `hostile`, each its own window (a batch each), come before one
    canary of `llm` in the cycle's reads: `llm`'s batch takes a read thread in the first turn
    (its first query asked with the first ones), not after a hostile batch has ended."""
    endpoint = PrometheusEndpoint(url=prom.url, timeout_seconds=10)
    spec = spec_from(SOURCE_SPEC, source={"kind": "prometheus", "prometheus": {}})
    now = time.time()
    hostile = 12
    assert hostile > PROMETHEUS_THREADS  # more batches than threads: some must wait
    sources = [
        PrometheusSource(endpoint, namespace="hostile", backoff_seconds=0.0) for _ in range(hostile)
    ]
    victim = PrometheusSource(endpoint, namespace="llm", backoff_seconds=0.0)
    reads = [Read(src, spec, now - 60.0 - i, now, 30.0) for i, src in enumerate(sources)]
    reads.append(Read(victim, spec, now - 60.0 - 0.5, now, 30.0))  # a window of its own
    done: dict[int, float] = {}
    try:
        got = observe_each(reads, on_done=lambda i, _: done.setdefault(i, time.monotonic()))
    finally:
        for src in [*sources, victim]:
            src.close()
    assert len(got) == hostile + 1
    assert {"hostile", "llm"} <= set(prom.first)
    # in turn: asked before any hostile batch had ended (each takes two rounds of its queries,
    # 2 x LATE at least); behind the hostile batches it waited for one of them to end. Ordered
    # against the batches' own ends, not a clock: beside the suite's workers, building the
    # cycle's reads alone once took 0.4 s
    first_end = min(done[i] for i in range(hostile))
    assert prom.first["llm"] < first_end, (prom.first["llm"], first_end)
