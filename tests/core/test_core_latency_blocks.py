"""The latency guard's default block length (`latency.batchSeconds`) on one canary pod beside
three baseline pods, vLLM's default buckets: a stall episode inside one block is one outlier
among the window's blocks and does not fail it, while a uniform slowdown of the whole window
does; and the default's ten blocks a window see a regression more often than 60 s blocks do."""

from __future__ import annotations

import numpy as np

from alphagate.config import LatencyGuard
from alphagate.core import latency_check
from alphagate.core.model import Buckets, LatencySample, PoolObservation, Role, Verdict
from alphagate_lab.bench import latency_traffic as lt

BOUNDS = lt.VLLM_BOUNDS
STEP = 30.0  # seconds per sample, as the controller's range step
STEPS = 10  # a 300 s window


def _pod(
    rng: np.random.Generator, pod: str, *, slowdown: float = 1.0, stalled: int | None = None
) -> list[LatencySample]:
    """One pod's samples, 3 finished requests/s at 15 ms median per token (spread 0.25); in
    step `stalled` every request is 4x slower (a stall episode wholly inside one block)."""
    out = []
    for i in range(STEPS):
        v = 0.015 * slowdown * np.exp(0.25 * rng.standard_normal(int(rng.poisson(3.0 * STEP))))
        if i == stalled:
            v = v * 4.0
        cum = tuple(float(c) for c in np.searchsorted(np.sort(v), BOUNDS[:-1], side="right"))
        out.append(
            LatencySample(
                count=float(v.size),
                sum=float(v.sum()),
                buckets=Buckets(bounds=BOUNDS, counts=(*cum, float(v.size))),
                pod=pod,
                start=STEP * i,
                end=STEP * (i + 1),
            )
        )
    return out


def _verdict(seed: int, *, slowdown: float = 1.0, stalled: int | None = None) -> Verdict:
    rng = np.random.default_rng(seed)
    canary = _pod(rng, "c", slowdown=slowdown, stalled=stalled)
    baseline = [s for j in range(3) for s in _pod(rng, f"b{j}")]
    return latency_check.check_latency(
        PoolObservation(slice="chat", role=Role.CANARY, tpot_samples=tuple(canary)),
        PoolObservation(slice="chat", role=Role.BASELINE, tpot_samples=tuple(baseline)),
        guard=LatencyGuard(),
    ).verdict


def test_the_default_block_is_shorter_than_the_window_by_ten() -> None:
    assert LatencyGuard().batch_seconds == 30.0


def test_a_stall_episode_inside_one_block_does_not_fail_the_window() -> None:
    # the canary's mean per token is 1.3x the baseline's in these windows, all from one block
    verdicts = [_verdict(seed, stalled=seed % STEPS) for seed in range(60)]
    assert Verdict.FAIL not in verdicts
    assert verdicts.count(Verdict.PASS) == 0  # nor is a window with a stall shown within


def test_a_uniform_1_5x_window_of_one_canary_pod_fails() -> None:
    verdicts = [_verdict(seed, slowdown=1.5) for seed in range(60)]
    assert verdicts.count(Verdict.FAIL) == len(verdicts)


def _fail_rate(slowdown: float, guard: LatencyGuard, seeds: range) -> float:
    fails = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        canary = lt.pool_samples(rng, lt.Pool(slowdown=slowdown, pods=1), intervals=10, prefix="c")
        baseline = lt.pool_samples(rng, lt.Pool(pods=3), intervals=10, prefix="b")
        fails += (
            latency_check.check_latency(
                PoolObservation(slice="chat", role=Role.CANARY, tpot_samples=tuple(canary)),
                PoolObservation(slice="chat", role=Role.BASELINE, tpot_samples=tuple(baseline)),
                guard=guard,
            ).verdict
            is Verdict.FAIL
        )
    return fails / len(seeds)


def test_ten_blocks_a_window_see_a_1_2x_regression_more_often_than_five() -> None:
    # one canary pod, stall episodes on every pod (the simulator's ~20 s every ~15 min)
    seeds = range(150)
    ten = _fail_rate(1.2, LatencyGuard(), seeds)
    five = _fail_rate(1.2, LatencyGuard(batch_seconds=60.0), seeds)  # the former default
    equal = _fail_rate(1.0, LatencyGuard(), seeds)
    print(f"1.2x, one canary pod: {ten:.2f} of windows fail at 30 s blocks, {five:.2f} at 60 s")
    assert ten > five
    assert equal == 0.0
