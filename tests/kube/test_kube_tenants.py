"""One tenant's canary cannot stall the control loop: the real reconciler's schedule, its
`/healthz` over HTTP, real pod scrapes on 127.0.0.1, the API double.

A pod that accepts connections and never answers, under a policy that waits 300 s for it,
used to hold every canary's evaluation (the cycle waited for its read) and, past 240 s, made
`/healthz` stale: the kubelet restarted the controller every cycle. Now the attacker's read
ends at its own deadline, typed (READ_TIME), while the victim is evaluated on its interval and
the probe stays live.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from kube_support import NS, canary_cr
from prometheus_client import CollectorRegistry

from alphagate.core.model import CheckKind, SourceEvidence
from alphagate.errors import BudgetKind
from alphagate.kube.client import Kube
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
from alphagate.shell.server import Health, serve
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

PAGE = (
    b'vllm:generation_tokens_total{engine="0",model_name="m"} 100\n'
    b'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10\n'
)


@pytest.fixture
def pods() -> Iterator[tuple[str, str]]:
    """A healthy pod's URL, and one that accepts connections and never answers."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    healthy = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    healthy.daemon_threads = True
    threading.Thread(target=healthy.serve_forever, kwargs={"poll_interval": 0.05}).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel accepts; nobody ever reads or answers
    try:
        yield (
            f"http://127.0.0.1:{healthy.server_address[1]}/metrics",
            f"http://127.0.0.1:{silent.getsockname()[1]}/metrics",
        )
    finally:
        healthy.shutdown()
        healthy.server_close()
        silent.close()


def tenant(apiserver: ApiServer, name: str, interval: float, **scrape: Any) -> None:
    """A canary `name` on Deployments of its own, read by pod scrapes every `interval` s."""
    for dep in (f"{name}-canary", f"{name}-baseline"):
        apiserver.put(DeploymentTemplate(dep, NS, args=["--model", "m"], replicas=1).build())
    # compressed: tenants side by side for seconds; sandbox pods need no warm-up
    timing = {"intervalSeconds": interval, "windowSeconds": interval, "warmupSeconds": 0}
    apiserver.put(
        canary_cr(
            name,
            target={"name": f"{name}-canary", "container": "vllm"},
            baseline={"name": f"{name}-baseline", "container": "vllm"},
            source={"kind": "podScrape", "scrape": scrape},
            timing={**timing, "minDwellSeconds": 0, "rolloutTimeoutSeconds": 60},  # compressed
        )
    )


def test_a_pod_that_never_answers_stalls_neither_the_loop_nor_another_canary(
    apiserver: ApiServer, kube: Kube, pods: tuple[str, str]
) -> None:
    healthy, silent = pods
    tenant(apiserver, "victim", 1.0)
    # 300 s per pod, as the schema allows; a 10 s interval: its read's deadline is 8 s
    tenant(apiserver, "attacker", 10.0, timeoutSeconds=300)

    def source(spec: Any, ns: str, name: str) -> ScrapeSource:
        pod = silent if name == "attacker" else healthy
        pools = {("chat", role): [Target(pod, pod=f"{name}-0")] for role in ("canary", "baseline")}
        return ScrapeSource(StaticDiscovery(pools), owner=f"{ns}/{name}")

    seen: list[tuple[float, Outcome]] = []
    health = Health(stale_after_seconds=1.5)  # far below the attacker's 8 s read
    rec = Reconciler(
        kube,
        source_factory=source,
        health=health,
        namespace=NS,
        on_outcome=lambda out: seen.append((time.monotonic(), out)),
    )
    stop = threading.Event()
    loop = threading.Thread(target=rec.loop.run, args=(stop,), daemon=True)
    server = serve(0, CollectorRegistry(), health=health)
    probes: list[int] = []
    began = time.monotonic()
    loop.start()
    try:
        with httpx.Client() as client:
            while time.monotonic() - began < 12 and not any(o.name == "attacker" for _, o in seen):
                probes.append(client.get(server.url + "/healthz").status_code)
                time.sleep(0.2)
    finally:
        stop.set()
        rec.loop.wake()
        loop.join(15)
        server.close()
    attacker = [(t, o) for t, o in seen if o.name == "attacker"]
    assert attacker, "the attacker's read never ended"
    ended, out = attacker[0]
    victim = [t for t, o in seen if o.name == "victim" and t < ended]
    # the victim was evaluated on its 1 s interval all along the attacker's 8 s read
    assert len(victim) >= 5
    assert probes and set(probes) == {200}  # /healthz never went stale
    # the attacker alone is an Error, typed with the budget it spent
    assert out.status is not None
    healthy_cond = out.status.condition("SourceHealthy")
    assert healthy_cond is not None and healthy_cond.reason == "BudgetExceeded"
    assert out.evaluation is not None
    budgets = [
        b
        for c in out.evaluation.checks
        if c.kind is CheckKind.SOURCE and isinstance(c.evidence, SourceEvidence)
        for b in c.evidence.budgets
    ]
    assert BudgetKind.READ_TIME in budgets
    for _, o in seen:
        if o.name == "victim":
            cond = o.status.condition("SourceHealthy") if o.status is not None else None
            assert cond is not None and cond.status == "True", cond
