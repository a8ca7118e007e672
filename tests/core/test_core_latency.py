"""The latency guard on exact sums: measured speed-up, per-bound exceedance with Holm, and a
seeded simulation (alphagate/bench/latency_traffic.py: per-request spread, per-pod stall episodes on
both roles, vLLM's default buckets) for its false-alarm rate and its power."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alphagate.config import LatencyGuard
from alphagate.core import latency, latency_check
from alphagate.core.model import (
    Buckets,
    LatencyEvidence,
    LatencySample,
    PoolObservation,
    Role,
    Verdict,
)
from alphagate_lab.bench import latency_traffic as latencytraffic

BOUNDS = latencytraffic.VLLM_BOUNDS


def _pool(role: Role, samples: list[LatencySample]) -> PoolObservation:
    return PoolObservation(slice="chat", role=role, tpot_samples=tuple(samples))


def _window(seed: int, slowdown: float, *, pods: int = 2) -> tuple[PoolObservation, ...]:
    rng = np.random.default_rng(seed)
    c = latencytraffic.pool_samples(
        rng, latencytraffic.Pool(slowdown=slowdown, pods=pods), intervals=10, prefix="c"
    )
    b = latencytraffic.pool_samples(rng, latencytraffic.Pool(), intervals=10, prefix="b")
    return _pool(Role.CANARY, c), _pool(Role.BASELINE, b)


def _fail_rate(slowdown: float, seeds: range, guard: LatencyGuard) -> float:
    fails = 0
    for seed in seeds:
        c, b = _window(seed, slowdown)
        fails += latency_check.check_latency(c, b, guard=guard).verdict is Verdict.FAIL
    return fails / len(seeds)


def test_holm_step_down() -> None:
    assert latency.holm([0.001, 0.04, 0.03], 0.05) == [True, False, False]
    assert latency.holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]
    assert latency.holm([math.nan, 0.01], 0.05) == [False, True]


def _flat(mean: float, pod: str, intervals: int, n: float = 50.0) -> list[LatencySample]:
    """Requests of one pod, their TPOT spread evenly +-10% around `mean` each interval."""
    out = []
    for i in range(intervals):
        jitter = 1.0 + 0.02 * ((i * 7) % 5 - 2)
        values = np.linspace(0.9, 1.1, int(n)) * mean * jitter
        cum = tuple(float(np.sum(values <= b)) for b in BOUNDS[:-1])
        out.append(
            LatencySample(
                count=n,
                sum=float(values.sum()),
                buckets=Buckets(bounds=BOUNDS, counts=(*cum, n)),
                pod=pod,
                start=30.0 * i,
                end=30.0 * (i + 1),
            )
        )
    return out


def test_measured_speedup_is_baseline_over_canary_with_an_interval() -> None:
    canary = _flat(0.010, "c", 10) + _flat(0.010, "c2", 10)
    baseline = _flat(0.015, "b", 10) + _flat(0.015, "b2", 10)
    report = latency.compare(canary, baseline, quantile=0.99, margin=0.1, significance=0.01)
    sp = report.speedup
    assert sp is not None
    assert sp.value == pytest.approx(1.5, rel=0.02)
    assert sp.lower < sp.value < sp.upper
    assert sp.canary_mean == pytest.approx(0.010, rel=0.02)
    assert not report.regressed


def test_real_vllm_canary_slower_per_token_does_not_pass() -> None:
    # The real-vLLM e2e: canary 44.5 ms vs baseline 24.0 ms mean per token, one pod each;
    # the old guard read both P99s inside one bucket and passed it.
    canary = _pool(Role.CANARY, _flat(0.0445, "c", 10, n=20))
    baseline = _pool(Role.BASELINE, _flat(0.024, "b", 10, n=20))
    r = latency_check.check_latency(canary, baseline, guard=LatencyGuard())
    assert r.verdict is Verdict.FAIL, r.reason
    assert isinstance(r.evidence, LatencyEvidence) and r.evidence.speedup is not None
    assert r.evidence.speedup.value == pytest.approx(24.0 / 44.5, rel=0.02)


def test_one_batch_each_is_inconclusive() -> None:
    canary = _pool(Role.CANARY, [_flat(0.03, "c", 1, n=500)[0]])
    baseline = _pool(Role.BASELINE, [_flat(0.015, "b", 1, n=500)[0]])
    r = latency_check.check_latency(canary, baseline, guard=LatencyGuard())
    assert r.verdict is Verdict.INCONCLUSIVE


def test_equal_latency_with_stalls_rarely_fails_a_window() -> None:
    rate = _fail_rate(1.0, range(10_000, 10_400), LatencyGuard())
    print(f"equal latency with stalls: {rate:.4f} of windows fail")
    assert rate <= 0.005


@pytest.mark.slow
@pytest.mark.parametrize(("slowdown", "per_window"), [(1.5, 0.85), (2.0, 0.99)])
def test_regressions_are_caught(slowdown: float, per_window: float) -> None:
    guard = LatencyGuard()
    rate = _fail_rate(slowdown, range(300), guard)
    # two consecutive disjoint failing windows among the first three
    within_3 = rate**2 * (2.0 - rate)
    print(
        f"{slowdown}x slower: {rate:.3f} of windows fail; rollback within 3 windows {within_3:.3f}"
    )
    assert rate >= per_window
