"""The namespace is a boundary on the Prometheus path, against the real Prometheus holding two
namespaces' pods with the same pod labels (`role`, `slice`): a canary reads its own
namespace's series only, one query at a time or batched with another namespace's canary; a
policy selecting another namespace is refused before any query; the admin may allow it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation, Role
from alphagate.errors import NamespaceError
from alphagate.sources import FailedSource, make_source
from alphagate.sources.cycle import Read, observe_each
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer, available

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

INTERVAL = 3.0
OURS, THEIRS = "llm", "team-b"

# Two namespaces, the same labels on every pod: only the namespace tells them apart. Ours
# speculates at alpha 0.8, theirs at 0.3.
SCENARIO = Scenario.model_validate(
    {
        "name": "two-namespaces",
        "seed": 3,
        "tick": 0.5,
        "traffic": {"rate": 30},
        "slices": {
            s: {"alpha": a, "output_tokens": 64, "output_sigma": 0, "request_spread": 1e4}
            for s, a in (("ours", 0.8), ("theirs", 0.3))
        },
        "pools": [
            {
                "name": f"{s}-{role}",
                "namespace": ns,
                "role": role,
                "slice": s,
                "replicas": 2 if role == "canary" else 1,
                **(
                    {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}
                    if role == "canary"
                    else {}
                ),
            }
            for s, ns in (("ours", OURS), ("theirs", THEIRS))
            for role in ("canary", "baseline")
        ],
    }
)


def policy(canary: dict[str, str], *, extra: dict[str, str] | None = None) -> SpeculativeCanarySpec:
    """One slice selected by `canary` (and role=baseline for the baseline), read through the
    `default` endpoint; `extra`: source.prometheus.matchLabels."""
    prometheus: dict[str, Any] = {"timeoutSeconds": 5}
    if extra is not None:
        prometheus["matchLabels"] = extra
    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "ours-canary"},
            "baseline": {"name": "ours-baseline"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": canary},
                    "baseline": {"matchLabels": {"role": "baseline"}},
                }
            ],
            "source": {"kind": "prometheus", "prometheus": prometheus},
            # compressed: seconds of a real Prometheus
            "timing": {"intervalSeconds": INTERVAL, "windowSeconds": 4 * INTERVAL},
        }
    )


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    server = PrometheusServer(scrape_interval=1.0)
    sim = SimServer(Fleet(SCENARIO), file_sd=server.targets_path)
    try:
        sim.start()
        server.start()
        server.wait_for_targets(6, timeout=40)
        server.wait_for('count(vllm:spec_decode_num_drafts_total{namespace="team-b"}) >= 2')
        time.sleep(4 * INTERVAL + 1)  # a window's worth of history
        yield server
    finally:
        server.close()
        sim.close()


class Queries(httpx.HTTPTransport):
    """Every PromQL expression sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/v1/query"):
            self.sent += parse_qs(request.content.decode())["query"]
        return super().handle_request(request)


def window() -> tuple[float, float]:
    end = time.time() - 1.5  # Prometheus has scraped past it
    return end - 4 * INTERVAL, end


def canary_pods(obs: Observation) -> set[str]:
    pool = obs.pools[0]
    assert pool.role is Role.CANARY and pool.error is None, pool
    return {s.pod for s in pool.acceptance}


def alpha(obs: Observation) -> float:
    pool = obs.pools[0]
    return sum(s.accepted_tokens for s in pool.acceptance) / sum(
        s.draft_tokens for s in pool.acceptance
    )


def test_a_canary_reads_its_own_namespace_only(prom: PrometheusServer) -> None:
    spec = policy({"role": "canary"})  # no namespace matcher: today's default
    start, end = window()
    sent = Queries()
    source = make_source(spec, namespace=OURS, endpoints=SourcesConfig.single(prom.url))
    assert isinstance(source, PrometheusSource)
    source._client._transport = sent  # the same client, its queries seen
    with source:
        ours = source.observe(spec, start=start, end=end, interval_seconds=INTERVAL)
    # what a read without the bound gives: both namespaces' pods mixed
    with PrometheusSource(PrometheusEndpoint(url=prom.url)) as unbound:
        mixed = unbound.observe(spec, start=start, end=end, interval_seconds=INTERVAL)
    assert len(canary_pods(mixed)) == 4
    assert {p.split("-")[0] for p in canary_pods(ours)} == {"ours"}
    assert ours.pools[0].pods == 2 and ours.pools[1].pods == 1
    assert alpha(ours) == pytest.approx(0.8, abs=0.06)
    assert sent.sent and all('namespace="llm"' in q for q in sent.sent)


def test_a_policy_selecting_another_namespace_is_refused_before_any_query(
    prom: PrometheusServer,
) -> None:
    endpoints = SourcesConfig.single(prom.url)
    for spec in (
        policy({"role": "canary", "namespace": THEIRS}),
        policy({"role": "canary"}, extra={"namespace": THEIRS}),
    ):
        source = make_source(spec, namespace=OURS, endpoints=endpoints)
        assert isinstance(source, FailedSource) and source.spec_invalid
        assert isinstance(source.error, NamespaceError)
        assert source.reason == "CrossNamespace"
        assert "team-b" in str(source.error) and "llm" in str(source.error)
    # naming its own namespace is no crossing
    named = policy({"role": "canary", "namespace": OURS})
    own = make_source(named, namespace=OURS, endpoints=endpoints)
    assert isinstance(own, PrometheusSource)
    own.close()


def test_the_admin_may_allow_cross_namespace_reads(prom: PrometheusServer) -> None:
    endpoint = PrometheusEndpoint(url=prom.url, allow_cross_namespace=True)
    endpoints = SourcesConfig(prometheus=[endpoint])
    start, end = window()
    theirs = policy({"role": "canary", "namespace": THEIRS})
    unnamed = policy({"role": "canary"})
    src = make_source(theirs, namespace=OURS, endpoints=endpoints)
    assert isinstance(src, PrometheusSource)
    with src:
        got = src.observe(theirs, start=start, end=end, interval_seconds=INTERVAL)
    assert {p.split("-")[0] for p in canary_pods(got)} == {"theirs"}
    assert alpha(got) == pytest.approx(0.3, abs=0.06)
    src = make_source(unnamed, namespace=OURS, endpoints=endpoints)
    assert isinstance(src, PrometheusSource)
    with src:
        own = src.observe(unnamed, start=start, end=end, interval_seconds=INTERVAL)
    assert {p.split("-")[0] for p in canary_pods(own)} == {"ours"}


def test_batched_canaries_of_two_namespaces_never_share_a_query(prom: PrometheusServer) -> None:
    spec = policy({"role": "canary"})
    endpoints = SourcesConfig.single(prom.url)
    start, end = window()
    sent = Queries()
    sources = []
    for ns in (OURS, THEIRS):
        src = make_source(spec, namespace=ns, endpoints=endpoints)
        assert isinstance(src, PrometheusSource)
        src._client._transport = sent
        sources.append(src)
    try:
        got = observe_each([Read(s, spec, start, end, INTERVAL) for s in sources])
    finally:
        for s in sources:
            s.close()
    assert [{p.split("-")[0] for p in canary_pods(o)} for o in got] == [{"ours"}, {"theirs"}]
    assert alpha(got[0]) == pytest.approx(0.8, abs=0.06)
    assert alpha(got[1]) == pytest.approx(0.3, abs=0.06)
    # every query names exactly one namespace, never a union of both
    assert sent.sent
    for q in sent.sent:
        assert ('namespace="llm"' in q) != ('namespace="team-b"' in q), q
