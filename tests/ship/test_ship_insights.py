"""Insights (draft length, diagnosis, short outputs) in the exporter's metrics and the status."""

from __future__ import annotations

import math
import random

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alphagate import config
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import analyse
from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
)
from alphagate.kube.insights_status import insights_status
from alphagate.kube.status.resource import CanaryStatus
from alphagate.shell import exporter, metric_names

INF = math.inf
BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, INF)
NOW = 1_800_000_000.0


def _spec() -> config.SpeculativeCanarySpec:
    return config.SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "c"},
            "baseline": {"name": "b"},
            "speculativeConfig": {"method": "eagle3", "model": "x/e3", "num_speculative_tokens": 5},
            "slices": [
                {"name": "chat", "canary": {"matchLabels": {"r": "c"}},
                 "baseline": {"matchLabels": {"r": "b"}}},
            ],
            "source": {"kind": "prometheus", "prometheus": {"endpoint": "default"}},
            "draftLength": {"costPerPosition": 0.05},
        }
    )  # fmt: skip


def _observation() -> Observation:
    rng = random.Random(5)
    cond = (0.85, 0.7, 0.1, 0.1, 0.1)
    samples = []
    for b in range(10):
        per = [0] * 5
        for _ in range(300):
            for i in range(5):
                if rng.random() >= cond[i]:
                    break
                per[i] += 1
        samples.append(
            AcceptanceSample(300, 1500, sum(per), tuple(map(float, per)), pod=f"p{b}",
                             start=NOW - 300, end=NOW)
        )  # fmt: skip
    canary = PoolObservation(
        "chat", Role.CANARY, acceptance=tuple(samples), generation_tokens=5000.0,
        tpot=Buckets(BOUNDS, (300.0, 700.0, 940.0, 980.0, 1000.0, 1000.0), 24.0), pods=10,
    )  # fmt: skip
    baseline = PoolObservation(
        "chat", Role.BASELINE, generation_tokens=5000.0,
        tpot=Buckets(BOUNDS, (0.0, 100.0, 980.0, 1000.0, 1000.0, 1000.0), 32.0), pods=10,
    )  # fmt: skip
    return Observation(at=NOW, window_seconds=300.0, pools=(canary, baseline))


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_insights_are_exported_and_vanish_when_absent() -> None:
    spec, obs = _spec(), _observation()
    memory = Memory(state=State.ON, since=NOW - 7200, last_flip_at=NOW - 7200)
    ev = evaluate(spec, obs, memory, Rollout(speculation_on=True, completed_at=NOW - 7000),
                  now=NOW)  # fmt: skip
    ins = analyse(spec, obs, estimates=ev.estimates, combined=ev.combined,
                  running_per_pod=200.0, cost_per_position=0.05)  # fmt: skip
    assert ins.draft is not None and ins.draft.recommended_k == 2
    rec = exporter.Recorder(CollectorRegistry())
    rec.set_leader(True)
    c = {"namespace": "llm", "canary": "chat"}
    rec.record(ev, **c, duration_seconds=0.1, speculation_on=True, spec=spec, insights=ins)
    s = _scrape(rec.registry)

    def v(name: str, **labels: str) -> float:
        return s[(name, frozenset((c | labels).items()))]

    assert v(metric_names.DRAFT_CONFIGURED_K) == 5 and v(metric_names.DRAFT_RECOMMENDED_K) == 2
    assert v(metric_names.DRAFT_ADVICE, advice="shorten") == 1
    assert v(metric_names.DRAFT_ADVICE, advice="keep") == 0
    assert 0.8 < v(metric_names.DRAFT_POSITION_RATE, position="0") < 0.9
    assert v(metric_names.LATENCY_SHAPE, shape="meanBetterTailWorse") == 1
    assert (metric_names.SHORT_OUTPUTS, frozenset(c.items())) not in s  # unknown: not exported
    rec.record(ev, **c, duration_seconds=0.1, speculation_on=True, spec=spec)
    after = {name for name, _ in _scrape(rec.registry)}
    assert not (after & metric_names.INSIGHT_NAMES)


def test_insights_in_the_status_round_trip() -> None:
    spec, obs = _spec(), _observation()
    ins = analyse(spec, obs, running_per_pod=200.0)
    status = CanaryStatus(state="On", insights=insights_status(ins))
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    block = dumped["insights"]
    assert block["draftLength"]["advice"] == "shorten"
    assert block["draftLength"]["recommendedK"] == 2 and block["draftLength"]["configuredK"] == 5
    assert len(block["draftLength"]["positionRates"]) == 5
    assert block["diagnosis"]["shape"] == "meanBetterTailWorse"
    assert block["diagnosis"]["mitigations"][0] == "shorterDraft:strong"
    assert block["outputs"]["finding"] == "unknown"
    back = CanaryStatus.model_validate(dumped)
    assert back.insights == status.insights
