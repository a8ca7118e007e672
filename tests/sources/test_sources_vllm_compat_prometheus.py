"""The real Prometheus scraping the compatibility table's pages: a pool of vLLM 0.10.2 pods (no
per-token histogram) is an error naming the release the default guard needs, through the
Prometheus source one canary at a time and in a batch; a pool of 0.33.0 pods is read."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from vllm_pages import page

from alphagate import vllm_compat
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.errors import SourceErrorKind
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.prombatch import observe_many
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.testing.prometheus import PrometheusServer, available
from specs import SOURCE_SPEC, spec_from

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

OLD, NEW = "0.10.2", "0.33.0"


class StaticPage:
    """One pod's page, served on 127.0.0.1."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    pods = {v: StaticPage(page(vllm_compat.release(v))) for v in (OLD, NEW)}
    targets = [
        {
            "targets": [pods[v].address],
            "labels": {"pod": f"{v}-{role}", "role": role, "slice": "chat", "release": v},
        }
        for v in (OLD, NEW)
        for role in ("canary", "baseline")
    ]
    server = PrometheusServer(targets=targets, scrape_interval=1.0)
    try:
        server.start()
        # two scrapes of every pod: increase() over the window has points
        server.wait_for("count(count_over_time(vllm:generation_tokens_total[30s]) >= 2) == 4")
        yield server
    finally:
        server.close()
        for p in pods.values():
            p.close()


def spec(release: str) -> SpeculativeCanarySpec:
    return spec_from(
        SOURCE_SPEC,
        source={
            "kind": "prometheus",
            "prometheus": {"timeoutSeconds": 5, "matchLabels": {"release": release}},
        },
    )


def _check(obs: Observation, release: str) -> None:
    for pool in obs.pools:
        if release == OLD:
            assert pool.error_kind is SourceErrorKind.EMPTY, pool
            assert "vLLM 0.10.2 layout" in (pool.error or "")
            assert "upgrade vLLM to 0.11.0 or newer" in (pool.error or "")
        else:
            assert pool.error is None, pool.error
            assert pool.tpot is not None


def test_prometheus_pool_error_names_the_release_needed(prom: PrometheusServer) -> None:
    source = PrometheusSource(PrometheusEndpoint(url=prom.url), timeout_seconds=5)
    end = time.time()
    try:
        for release in (OLD, NEW):
            obs = source.observe(spec(release), start=end - 30, end=end, interval_seconds=5)
            _check(obs, release)
        batch = observe_many(
            source,
            [spec(OLD), spec(NEW)],
            start=end - 30,
            end=end,
            interval_seconds=5,
        )
        _check(batch[0], OLD)
        _check(batch[1], NEW)
    finally:
        source.close()
