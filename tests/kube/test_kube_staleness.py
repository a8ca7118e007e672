"""The controller end to end: speculation without a verdict, and timing too short for scrapes.

* A speculating canary that serves nothing gives endless Inconclusive windows: after
  staleness.afterSeconds the status's VerdictFresh turns False, the metric
  alphagate_verdict_age_seconds and alphagate_alert{condition="verdict-stale"} say so, a
  VerdictStale Event is sent; with failSafe disable (opt-in) the canary is rolled back.
* An interval or window shorter than two scrape intervals sets TimingFits=False with one
  Warning Event and one log line, not one per evaluation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kube_support import NS, Clock, FakeSource, canary_cr, seed, speculating
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import NoData, Observation, Role
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.shell.exporter import Recorder
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer


class IdleSource(FakeSource):
    """The canary speculates (its spec-decode series exist) but serves nothing; the source
    says the scrape interval it saw."""

    def __init__(self, apiserver: ApiServer, scrape_interval: float | None = None) -> None:
        super().__init__(apiserver, lambda s: 0.7)
        self.scrape_interval = scrape_interval

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        obs = super().observe(spec, start=start, end=end, interval_seconds=interval_seconds)
        on = speculating(self.apiserver, "chat-canary")
        pools = tuple(
            dataclasses.replace(p, acceptance=(), spec_series=on, no_data=NoData.NO_TRAFFIC)
            if p.role is Role.CANARY
            else p
            for p in obs.pools
        )
        return dataclasses.replace(obs, pools=pools, scrape_interval_seconds=self.scrape_interval)


def _reconciler(kube: Kube, source: FakeSource, clock: Clock, registry: Any = None) -> Any:
    recorder = Recorder(registry) if registry is not None else None
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
        recorder=recorder,
    )


def _step(rec: Reconciler, clock: Clock, n: int = 1) -> Any:
    out = None
    for _ in range(n):
        clock.tick()
        out = rec.reconcile(NS, "chat")
    return out


def _events(apiserver: ApiServer) -> list[tuple[str, str, str, int]]:
    return [
        (e["type"], e["reason"], e["message"], int(e.get("count") or 1))
        for e in apiserver.objects("events", NS, group="")
    ]


def _metrics(registry: CollectorRegistry) -> dict[tuple[str, frozenset[Any]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _condition(apiserver: ApiServer, kind: str) -> Any:
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    return st.condition(kind)


def test_an_idle_canary_goes_stale_and_everyone_is_told(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver, cr=canary_cr(staleness={"afterSeconds": 60}))
    clock = Clock()
    registry = CollectorRegistry()
    rec = _reconciler(kube, IdleSource(apiserver), clock, registry)
    _step(rec, clock)  # a new canary probes: speculation on, then nothing but Inconclusive
    assert speculating(apiserver, "chat-canary")
    _step(rec, clock, 3)
    fresh = _condition(apiserver, "VerdictFresh")
    assert fresh is not None and fresh.status == "True" and fresh.reason == "Fresh"
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "Probing"

    out = _step(rec, clock, 4)  # 70 s after the enable, every window Inconclusive
    (unit,) = out.units
    assert unit.evaluation.verdict.value == "Inconclusive"
    assert unit.evaluation.verdict_age_seconds >= 60
    fresh = _condition(apiserver, "VerdictFresh")
    assert fresh.status == "False" and fresh.reason == "VerdictStale"
    assert speculating(apiserver, "chat-canary")  # hold is the default: alert only
    m = _metrics(registry)
    labels = frozenset({"namespace": NS, "canary": "chat"}.items())
    assert m[("alphagate_verdict_age_seconds", labels)] >= 60
    stale = frozenset({"namespace": NS, "canary": "chat", "condition": "verdict-stale"}.items())
    assert m[("alphagate_alert", stale)] == 1
    stale_events = [e for e in _events(apiserver) if e[1] == "VerdictStale"]
    assert len(stale_events) == 1 and stale_events[0][0] == "Warning"
    # the acceptance check says why: typed, not "off"
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.last_decision is not None and "verdict-stale" in st.last_decision.alerts


def test_stale_fail_safe_rolls_back_when_opted_in(apiserver: ApiServer, kube: Kube) -> None:
    cr = canary_cr(staleness={"afterSeconds": 60, "failSafe": "disable"})
    seed(apiserver, cr=cr)
    clock = Clock()
    rec = _reconciler(kube, IdleSource(apiserver), clock)
    _step(rec, clock)
    assert speculating(apiserver, "chat-canary")
    _step(rec, clock, 7)
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "RolledBack" and not speculating(apiserver, "chat-canary")
    assert st.history[-1].cause == "stale-fail-safe"


def test_timing_too_short_for_the_scrape_interval_is_warned_once(
    apiserver: ApiServer, kube: Kube
) -> None:
    # a Prometheus policy evaluated every 10 s over 10 s, while Prometheus scrapes every 30 s
    cr = canary_cr(source={"kind": "prometheus", "prometheus": {}})
    seed(apiserver, cr=cr)
    clock = Clock()
    registry = CollectorRegistry()
    source = IdleSource(apiserver, scrape_interval=30.0)
    rec = _reconciler(kube, source, clock, registry)
    _step(rec, clock, 4)
    fits = _condition(apiserver, "TimingFits")
    assert fits is not None and fits.status == "False" and fits.reason == "TimingTooShort"
    assert "spec.timing.intervalSeconds" in fits.message
    warned = [e for e in _events(apiserver) if e[1] == "TimingTooShort"]
    # one Event per problem (interval, window), each sent once over four evaluations
    assert len(warned) == 2 and all(e[3] == 1 for e in warned)
    # and a gauge per problem for as long as it holds (the AlphagateTimingTooShort alert)
    problems = {
        dict(labels)["problem"]
        for (name, labels), value in _metrics(registry).items()
        if name == "alphagate_timing_problem" and value == 1
    }
    assert problems == {"interval-too-short", "window-too-short"}

    source.scrape_interval = 2.0  # Prometheus now scrapes every 2 s
    _step(rec, clock)
    fits = _condition(apiserver, "TimingFits")
    assert fits.status == "True" and fits.reason == "Fits"
    assert not [k for k in _metrics(registry) if k[0] == "alphagate_timing_problem"]
