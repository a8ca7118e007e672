"""analyse(): draft length, diagnosis and short outputs from one observation."""

from __future__ import annotations

import math
import random
from typing import Any

from alphagate import config
from alphagate.core.diagnosis import Mitigation, Shape, Support
from alphagate.core.draft_length import CostSource, DraftAdvice
from alphagate.core.insights import analyse
from alphagate.core.model import AcceptanceSample, Buckets, Observation, PoolObservation, Role
from alphagate.core.suitability import Finding

INF = math.inf
BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, INF)


def _spec(**spec_config: Any) -> config.SpeculativeCanarySpec:
    cfg = {"method": "eagle3", "model": "x/eagle3", "num_speculative_tokens": 5} | spec_config
    return config.SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "c"},
            "baseline": {"name": "b"},
            "speculativeConfig": cfg,
            "slices": [
                {"name": "chat", "canary": {"matchLabels": {"t": "c"}},
                 "baseline": {"matchLabels": {"t": "b"}}},
            ],
            "source": {"kind": "prometheus", "prometheus": {}},
        }
    )  # fmt: skip


def _samples(cond: tuple[float, ...], seed: int = 1) -> tuple[AcceptanceSample, ...]:
    rng = random.Random(seed)
    k = len(cond)
    out = []
    for b in range(10):
        per = [0] * k
        for _ in range(300):
            for i in range(k):
                if rng.random() >= cond[i]:
                    break
                per[i] += 1
        out.append(AcceptanceSample(300, 300 * k, sum(per), tuple(map(float, per)), pod=f"p{b}"))
    return tuple(out)


def _obs(canary: PoolObservation, baseline: PoolObservation) -> Observation:
    return Observation(at=1000.0, window_seconds=300.0, pools=(canary, baseline))


def test_p99_trap_with_a_long_draft_on_a_full_batch() -> None:
    spec = _spec()
    canary = PoolObservation(
        "chat",
        Role.CANARY,
        acceptance=_samples((0.85, 0.7, 0.1, 0.1, 0.1)),
        # per token: mean 24 ms (was 32), but the tail reaches past 75 ms
        tpot=Buckets(BOUNDS, (300.0, 700.0, 940.0, 980.0, 1000.0, 1000.0), 24.0),
        pods=2,
    )
    baseline = PoolObservation(
        "chat",
        Role.BASELINE,
        tpot=Buckets(BOUNDS, (0.0, 100.0, 980.0, 1000.0, 1000.0, 1000.0), 32.0),
        pods=2,
    )
    out = analyse(spec, _obs(canary, baseline), running_per_pod=200.0)
    assert out.draft is not None and out.draft.advice is DraftAdvice.SHORTEN
    assert out.draft.recommended_k == 2
    assert out.draft.cost.source is CostSource.POLICY  # no per-step sums: the method default
    assert out.diagnosis is not None and out.diagnosis.shape is Shape.MEAN_BETTER_TAIL_WORSE
    top = out.diagnosis.mitigations[0]
    assert top.mitigation is Mitigation.SHORTER_DRAFT and top.support is Support.STRONG
    assert out.outputs.finding is Finding.UNKNOWN  # no output-length histogram given
    ev = out.evidence()
    assert ev["draft_length_advice"] == "shorten" and ev["latency_shape"] == "meanBetterTailWorse"


def test_measured_cost_wins_and_short_outputs_are_flagged() -> None:
    spec = _spec(num_speculative_tokens=3)
    step = Buckets(BOUNDS, (1000.0,) * 6, 10.0)
    canary = PoolObservation(
        "chat",
        Role.CANARY,
        acceptance=_samples((0.8, 0.8, 0.8)),
        itl=Buckets(BOUNDS, (1000.0,) * 6, 12.0),
        pods=1,
    )
    baseline = PoolObservation("chat", Role.BASELINE, itl=step, pods=1)
    lengths = Buckets((10.0, 20.0, 50.0, 100.0, INF), (10.0, 30.0, 40.0, 40.0, 40.0), 800.0)
    out = analyse(spec, _obs(canary, baseline), output_lengths=lengths)
    assert out.draft is not None and out.draft.cost.source is CostSource.MEASURED
    assert out.draft.cost.per_position > 0
    assert out.diagnosis is None  # no per-token histograms
    assert out.outputs.finding is Finding.HOLDS


def test_speculation_off_has_no_draft_report() -> None:
    spec = _spec()
    canary = PoolObservation("chat", Role.CANARY, pods=1)
    baseline = PoolObservation("chat", Role.BASELINE, pods=1)
    out = analyse(spec, _obs(canary, baseline))
    assert out.draft is None and out.diagnosis is None
    failed = Observation(1000.0, 300.0, (canary, baseline), source_error="down")
    assert analyse(spec, failed).draft is None


def test_live_running_and_output_lengths_come_from_the_observation() -> None:
    """The pools' vllm:num_requests_running (mean per pod) prices a draft position and flags a
    saturated batch; vllm:request_generation_tokens on either pool judges short outputs."""
    spec = _spec()
    cond = (0.85, 0.7, 0.1, 0.1, 0.1)
    tpot_c = Buckets(BOUNDS, (300.0, 700.0, 940.0, 980.0, 1000.0, 1000.0), 24.0)
    tpot_b = Buckets(BOUNDS, (0.0, 100.0, 980.0, 1000.0, 1000.0, 1000.0), 32.0)
    short = Buckets((10.0, 20.0, 50.0, 100.0, INF), (5.0, 20.0, 38.0, 40.0, 40.0), 1200.0)

    def obs(running: float | None) -> Observation:
        canary = PoolObservation(
            "chat", Role.CANARY, acceptance=_samples(cond), tpot=tpot_c, pods=2, running=running
        )
        base = PoolObservation(
            "chat", Role.BASELINE, tpot=tpot_b, pods=2, output_lengths=short, running=3.0
        )
        return _obs(canary, base)

    idle, busy = analyse(spec, obs(1.0)), analyse(spec, obs(200.0))
    assert idle.draft is not None and busy.draft is not None
    assert busy.draft.cost.per_position > 2 * idle.draft.cost.per_position
    assert busy.draft.recommended_k < idle.draft.recommended_k or (
        busy.draft.best_k < idle.draft.best_k
    )
    assert busy.diagnosis is not None and idle.diagnosis is not None
    cap_busy = next(
        m for m in busy.diagnosis.mitigations if m.mitigation is Mitigation.CAP_CONCURRENCY
    )
    cap_idle = next(
        m for m in idle.diagnosis.mitigations if m.mitigation is Mitigation.CAP_CONCURRENCY
    )
    assert cap_busy.support > cap_idle.support and cap_busy.evidence["running_per_pod"] == 200.0
    assert busy.outputs.finding is Finding.HOLDS  # 30 tokens per request on average
    assert busy.outputs.evidence["mean_output_tokens"] == 30.0
    # an explicit value still wins over the observation's
    assert analyse(spec, obs(200.0), running_per_pod=1.0).draft == idle.draft
    # no gauge, no histogram: unknown, never a guess
    bare = analyse(spec, _obs(PoolObservation("chat", Role.CANARY, acceptance=_samples(cond)),
                              PoolObservation("chat", Role.BASELINE)))  # fmt: skip
    assert bare.outputs.finding is Finding.UNKNOWN
