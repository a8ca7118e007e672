"""The controller's metrics for what a person must fix: a refused patch (403) and an invalid
spec show as counters and a gauge an alert can read, plus the process metrics; the real
`Controller` against the API server double over HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
from kube_support import FAST_TIMING, NS, FakeSource, canary_cr, seed
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alphagate.config import GROUP, PLURAL
from alphagate.kube.client import Kube
from alphagate.shell.controller import Controller, RunOptions
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

if TYPE_CHECKING:
    from conftest import WaitFor


def samples(c: Controller) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(c.registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _get(c: Controller, name: str, **labels: str) -> float | None:
    return samples(c).get((name, frozenset(labels.items())))


def _start(apiserver: ApiServer) -> Controller:
    opts = RunOptions(namespace=NS, leader_elect=False, serve_metrics=False, watch_timeout=2.0)
    source = FakeSource(apiserver, lambda s: 0.72)
    return Controller(
        opts,
        kube=Kube.from_configuration(apiserver.configuration()),
        source_factory=lambda *a: source,
    ).start()


def test_a_refused_patch_counts_as_a_forbidden_warning(wait_for: WaitFor) -> None:
    with ApiServer(rbac=Rbac.allow_all().deny("patch", "apps", "deployments")) as apiserver:
        seed(apiserver, cr=canary_cr(timing=FAST_TIMING))
        c = _start(apiserver)
        try:
            labels = {"namespace": NS, "canary": "chat", "reason": "Forbidden"}
            wait_for(
                lambda: (_get(c, "alphagate_warnings_total", **labels) or 0) >= 1,
                15,
                "a Forbidden warning counted",
            )
            assert _get(c, "alphagate_warnings_total", **{**labels, "reason": "InvalidSpec"}) == 0
            names = {name for name, _ in samples(c)}
            assert {"process_resident_memory_bytes", "process_cpu_seconds_total"} <= names
        finally:
            c.stop()


def test_an_invalid_spec_sets_the_gauge_until_fixed(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    bad = canary_cr(timing=FAST_TIMING)
    bad["spec"]["acceptance"] = {"disableBelow": 0.6, "enableAbove": 0.5}
    seed(apiserver, cr=bad)
    c = _start(apiserver)
    try:
        key = {"namespace": NS, "canary": "chat"}
        wait_for(lambda: _get(c, "alphagate_spec_invalid", **key) == 1, 60, "spec_invalid 1")
        obj = apiserver.get("speculativecanaries", NS, "chat")
        obj["spec"]["acceptance"] = {"disableBelow": 0.5, "enableAbove": 0.6}
        apiserver.put(obj)
        wait_for(lambda: _get(c, "alphagate_spec_invalid", **key) is None, 60, "the gauge gone")
    finally:
        c.stop()


def test_the_verdict_api_is_served_next_to_the_metrics(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    seed(apiserver, cr=canary_cr(timing=FAST_TIMING))
    reads = [(verb, GROUP, PLURAL, NS) for verb in ("get", "list")]
    apiserver.users.add("reader-token", "reader", grants=reads)
    auth = {"Authorization": "Bearer reader-token"}
    opts = RunOptions(namespace=NS, leader_elect=False, metrics_port=0, watch_timeout=2.0)
    source = FakeSource(apiserver, lambda s: 0.72)
    c = Controller(
        opts,
        kube=Kube.from_configuration(apiserver.configuration()),
        source_factory=lambda *a: source,
    ).start()
    try:
        url = f"{c.metrics_url}/api/v1/verdicts/{NS}/chat"

        def answered() -> Any:  # from the controller's watch cache, as its status changes
            resp = httpx.get(url, timeout=5, headers=auth)
            doc = resp.json()
            return doc if resp.status_code == 200 and "lastDecision" in doc else None

        # a fresh one (not stale): at a 0.4 s interval, a verdict is stale after 1.2 s, which a
        # loaded machine can let pass between an evaluation and the next
        doc = wait_for(lambda: (d := answered()) and not d["stale"] and d, 15, "a fresh verdict")
        assert doc["name"] == "chat" and doc["verdict"] in ("Pass", "Inconclusive", "Fail")
        assert doc["stale"] is False
        nope = f"{c.metrics_url}/api/v1/verdicts/{NS}/nope"
        assert httpx.get(nope, timeout=5, headers=auth).status_code == 404
        assert httpx.get(url, timeout=5).status_code == 401  # no token, no verdict
    finally:
        c.stop()
