"""The real Prometheus (1 s scrapes) over simulated vLLM pods: the Prometheus source must see
what the pod-scrape source and the simulator's own counters see.

Tolerances (stated, and why):
* alpha, Prometheus vs pod scrape: 0.02 absolute. Same counters; `increase()` extrapolates the
  window edges and the two read at instants up to one scrape interval (1 s) apart.
* alpha, pod scrape vs the simulator's counters over the same window: 0.02 (one sim tick of
  drift between our scrape and the snapshot taken next to it).
* alpha vs the scenario's configured 0.7: 0.05 (per-pod alpha noise and offsets in the sim).
* ITL P99: 10% relative between any two of the three, and the same bucket bracket.
* generated tokens: 15% relative (extrapolation at both window edges of a ~12 s window).
* requests running (a gauge of a few requests per pod, read at two instants up to a scrape
  apart): within 3 square roots of the larger, plus one.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.histogram import bracket, quantile
from alphagate.core.model import Buckets, Observation, PoolObservation, Role
from alphagate.errors import SourceErrorKind
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.endpoints import PrometheusEndpoint as PrometheusSettings
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer, available

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

ALPHA = 0.7
INTERVAL = 3.0
ROUNDS = 4

SCENARIO = Scenario.model_validate(
    {
        "name": "sources-integration",
        "seed": 11,
        "tick": 0.5,
        "traffic": {"rate": 30},
        # Alike requests of one length: a few seconds of traffic must show the configured
        # alpha (realistic per-request spread is the simulator's own test).
        "slices": {
            "chat": {"alpha": ALPHA, "output_tokens": 64, "output_sigma": 0, "request_spread": 1e4}
        },
        "pools": [
            {
                "name": "chat-canary",
                "role": "canary",
                "slice": "chat",
                "replicas": 2,
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
            },
            {"name": "chat-baseline", "role": "baseline", "slice": "chat", "replicas": 2},
        ],
    }
)


def make_spec(url: str) -> SpeculativeCanarySpec:
    def pool(role: str, sl: str) -> dict[str, Any]:
        return {"matchLabels": {"role": role, "slice": sl}}

    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "chat-canary"},
            "baseline": {"name": "chat-baseline"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "chat",
                    "canary": pool("canary", "chat"),
                    "baseline": pool("baseline", "chat"),
                },
                {
                    "name": "escaped",
                    "canary": pool("canary", "escaped"),
                    "baseline": pool("baseline", "escaped"),
                },
            ],
            "source": {"kind": "prometheus", "prometheus": {"timeoutSeconds": 5}},
        }
    )


class EscapedExporter:
    """A plain prometheus_client exporter (>= 0.23): answering Prometheus 2's OpenMetrics Accept,
    it escapes names to `vllm_...`, so Prometheus stores the underscore spelling. Alpha 0.5."""

    def __init__(self) -> None:
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.drafts = Counter(vllm.base(vllm.SPEC_DRAFTS), "h", labels, registry=reg).labels(
            "m", "0"
        )
        self.tokens = Counter(vllm.base(vllm.SPEC_DRAFT_TOKENS), "h", labels, registry=reg).labels(
            "m", "0"
        )
        self.accepted = Counter(vllm.base(vllm.SPEC_ACCEPTED), "h", labels, registry=reg).labels(
            "m", "0"
        )
        self.gen = Counter(vllm.base(vllm.GENERATION_TOKENS), "h", labels, registry=reg).labels(
            "m", "0"
        )
        self.itl = Histogram(vllm.ITL, "h", labels, buckets=vllm.ITL_BUCKETS, registry=reg).labels(
            "m", "0"
        )
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=reg)
        self.port = self.server.server_address[1]
        self.stop_event = threading.Event()
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()

    def _work(self) -> None:
        deadline = time.monotonic() + 300  # bounded even if teardown never comes
        while not self.stop_event.wait(0.1) and time.monotonic() < deadline:
            self.drafts.inc(10)
            self.tokens.inc(40)
            self.accepted.inc(20)
            self.gen.inc(30)
            self.itl.observe(0.03)

    def stop(self) -> None:
        self.stop_event.set()
        self.worker.join(5)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[SimServer, PrometheusServer]]:
    exporter = EscapedExporter()
    prom = PrometheusServer(
        scrape_interval=1.0,
        scrape_configs=[
            {
                "job_name": "escaped",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{exporter.port}"],
                        "labels": {"pod": "esc-0", "role": "canary", "slice": "escaped"},
                    }
                ],
            }
        ],
    )
    sim = SimServer(Fleet(SCENARIO), file_sd=prom.targets_path)
    try:
        sim.start()
        prom.start()
        yield sim, prom
    finally:
        prom.close()
        sim.close()
        exporter.stop()


def alpha(pool: PoolObservation) -> float:
    drafted = sum(s.draft_tokens for s in pool.acceptance)
    return sum(s.accepted_tokens for s in pool.acceptance) / drafted


def p99(b: Buckets | None) -> float:
    return quantile(0.99, b)


def sim_window(
    before: dict[str, Any], after: dict[str, Any], pods: list[str]
) -> tuple[float, Buckets]:
    """alpha and ITL buckets straight from the simulator's counters (no HTTP, no parser)."""
    acc = sum(
        after[p].counters[vllm.SPEC_ACCEPTED] - before[p].counters[vllm.SPEC_ACCEPTED] for p in pods
    )
    tok = sum(
        after[p].counters[vllm.SPEC_DRAFT_TOKENS] - before[p].counters[vllm.SPEC_DRAFT_TOKENS]
        for p in pods
    )
    h0 = [before[p].histograms[vllm.ITL] for p in pods]
    h1 = [after[p].histograms[vllm.ITL] for p in pods]
    bounds = (*h1[0].bounds, math.inf)
    counts = tuple(
        float(sum(b.buckets[i] - a.buckets[i] for a, b in zip(h0, h1, strict=True)))
        for i in range(len(bounds))
    )
    return acc / tok, Buckets(bounds, counts)


def test_prometheus_matches_pod_scrape_and_scenario(
    stack: tuple[SimServer, PrometheusServer],
) -> None:
    sim, prom = stack
    prom.wait_for_targets(5, timeout=40)
    prom.wait_for("sum(increase(vllm:spec_decode_num_drafts_total[3s])) > 0", timeout=20)
    prom.wait_for("sum(increase(vllm_spec_decode_num_drafts_total[3s])) > 0", timeout=20)
    spec = make_spec(prom.url)
    canary = [p for p in sim.ports if "canary" in p]
    baseline = [p for p in sim.ports if "baseline" in p]
    discovery = StaticDiscovery(
        {
            ("chat", Role.CANARY): [Target(sim.url(p), pod=p) for p in canary],
            ("chat", Role.BASELINE): [Target(sim.url(p), pod=p) for p in baseline],
        }
    )
    with ScrapeSource(discovery) as scrape:
        t0 = time.time()
        before = {p: sim.snapshot(p) for p in canary}
        scrape.observe(spec, start=t0 - INTERVAL, end=t0, interval_seconds=INTERVAL)
        obs_scrape: Observation | None = None
        for k in range(1, ROUNDS + 1):
            pace = t0 + k * INTERVAL - time.time()  # pacing the loop under test, not a wait
            if pace > 0:
                time.sleep(pace)
            end = time.time()
            obs_scrape = scrape.observe(spec, start=t0, end=end, interval_seconds=INTERVAL)
        after = {p: sim.snapshot(p) for p in canary}
    assert obs_scrape is not None
    # Let Prometheus scrape past `end` before asking it about [t0, end].
    prom.wait_for(
        f'min(timestamp(vllm:generation_tokens_total{{job="vllm"}})) >= {end}', timeout=10
    )
    with PrometheusSource(PrometheusSettings(url=prom.url), backoff_seconds=0.1) as source:
        obs_prom = source.observe(spec, start=t0, end=end, interval_seconds=INTERVAL)

    assert obs_prom.source_error is None
    pc, sc = obs_prom.pool("chat", Role.CANARY), obs_scrape.pool("chat", Role.CANARY)
    assert pc is not None and sc is not None and pc.error is None and sc.error is None, (pc, sc)
    assert pc.pods == sc.pods == 2
    assert {s.pod for s in pc.acceptance} == {s.pod for s in sc.acceptance} == set(canary)
    assert len(pc.acceptance) >= 2 * (ROUNDS - 1) and len(sc.acceptance) == 2 * ROUNDS

    truth_alpha, truth_itl = sim_window(before, after, canary)
    a_prom, a_scrape = alpha(pc), alpha(sc)
    assert a_prom == pytest.approx(a_scrape, abs=0.02)
    assert a_scrape == pytest.approx(truth_alpha, abs=0.02)
    assert a_prom == pytest.approx(ALPHA, abs=0.05)

    q_prom, q_scrape, q_truth = p99(pc.itl), p99(sc.itl), p99(truth_itl)
    assert all(math.isfinite(q) and q > 0 for q in (q_prom, q_scrape, q_truth))
    assert q_prom == pytest.approx(q_scrape, rel=0.10)
    assert q_scrape == pytest.approx(q_truth, rel=0.10)
    assert bracket(0.99, pc.itl) == bracket(0.99, sc.itl) == bracket(0.99, truth_itl)
    assert pc.generation_tokens == pytest.approx(sc.generation_tokens, rel=0.15)
    # output lengths (vllm:request_generation_tokens) and the live batch
    # (vllm:num_requests_running) read alike by both sources
    assert pc.output_lengths is not None and sc.output_lengths is not None
    assert pc.output_lengths.total > 0 and sc.output_lengths.total > 0
    mean_p = pc.output_lengths.sum / pc.output_lengths.total
    mean_s = sc.output_lengths.sum / sc.output_lengths.total
    assert mean_p == pytest.approx(mean_s, rel=0.15)
    assert pc.running is not None and sc.running is not None and sc.running > 0 < pc.running
    # a gauge read at two instants up to a scrape apart: Poisson-scale difference, not a ratio
    assert abs(pc.running - sc.running) <= 3 * math.sqrt(max(pc.running, sc.running)) + 1
    # decode times (vllm:request_decode_time_seconds), what sizes alpha's blocks: the canary
    # pool's histogram with its exact sum, from both sources; none read for the baseline
    assert pc.lives is not None and sc.lives is not None
    assert pc.lives.count > 0 and sc.lives.count > 0
    life_p = pc.lives.histogram.sum / pc.lives.count
    life_s = sc.lives.histogram.sum / sc.lives.count
    assert life_p == pytest.approx(life_s, rel=0.15)

    pb, sb = obs_prom.pool("chat", Role.BASELINE), obs_scrape.pool("chat", Role.BASELINE)
    assert pb is not None and sb is not None and pb.error is None and sb.error is None
    assert pb.acceptance == () and sb.acceptance == ()  # speculation off: no series, no error
    assert pb.lives is None and sb.lives is None
    assert pb.pods == sb.pods == 2
    assert p99(pb.itl) == pytest.approx(p99(sb.itl), rel=0.10)
    assert pb.tpot is not None and sb.tpot is not None

    # The escaped spelling: Prometheus stored vllm_..., and the same queries read it.
    assert prom.query('count(vllm_spec_decode_num_drafts_total{slice="escaped"})')
    assert not prom.query('count(vllm:spec_decode_num_drafts_total{slice="escaped"})')
    esc = obs_prom.pool("escaped", Role.CANARY)
    assert esc is not None and esc.error is None and esc.pods == 1
    assert alpha(esc) == pytest.approx(0.5, abs=1e-9)
    assert esc.itl is not None and bracket(0.99, esc.itl) == (0.025, 0.05)
    missing = obs_prom.pool("escaped", Role.BASELINE)
    assert missing is not None and missing.error is not None
    assert missing.error_kind is SourceErrorKind.EMPTY


def test_prometheus_stopped_mid_run_is_classified(
    stack: tuple[SimServer, PrometheusServer],
) -> None:
    _, prom = stack
    spec = make_spec(prom.url)
    settings = PrometheusSettings(url=prom.url, timeoutSeconds=2)
    with PrometheusSource(settings, attempts=2, backoff_seconds=0.05) as source:
        prom.wait_for("sum(increase(vllm:spec_decode_num_drafts_total[3s])) > 0", timeout=40)
        now = time.time()
        before = source.observe(spec, start=now - 6, end=now, interval_seconds=INTERVAL)
        assert before.source_error is None
        prom.stop()
        later = time.time()
        after = source.observe(spec, start=later - 6, end=later, interval_seconds=INTERVAL)
    assert after.source_error is not None and after.source_error_kind is SourceErrorKind.UNREACHABLE
    assert all(p.error == after.source_error for p in after.pools)
    assert all(p.acceptance == () and p.itl is None for p in after.pools)
