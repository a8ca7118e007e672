"""A small, independent generator of per-pod, per-interval TPOT histograms, for the latency
guard's tests and its benchmark (`alphagate_lab.bench.latency_guard`). It shares nothing with the
simulator or the guard but the input types.

Each finished request reports one time per output token (vLLM's
`request_time_per_output_token_seconds`): a per-request lognormal around the pool's median,
times a slowdown for the canary, plus, when a stall episode of its pod overlapped its life, the
stalled time spread over its tokens. Stalls hit every pod of both roles alike (per-pod Poisson
episodes), so they cluster slow requests in one pod for a while: the correlation a guard that
treats requests as independent mistakes for a regression. Counts are binned into a bucket
layout (vLLM's default unless told); sums are exact.

Two kinds of regression: `slowdown` scales every request (uniform), `tail_share` of the
requests are `tail_factor` times slower (tail-only: the mean moves by a few percent while the
P99 moves a lot). `tail_factor_for` finds the factor that moves the P99 by a given ratio.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from alphagate.core.model import Buckets, LatencySample

VLLM_BOUNDS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, float("inf"),
)  # fmt: skip
_N = NormalDist()


@dataclass(frozen=True)
class Pool:
    median: float = 0.015  # seconds per output token
    sigma: float = 0.25  # per-request spread
    slowdown: float = 1.0
    pods: int = 2
    rate: float = 1.0  # finished requests per second per pod
    tokens: float = 500.0  # output tokens per request (mean, exponential)
    stall_every: float = 900.0  # seconds between stall episodes per pod (mean)
    stall_seconds: float = 20.0  # mean stall length
    interval: float = 30.0
    bounds: tuple[float, ...] = VLLM_BOUNDS
    tail_share: float = 0.0  # share of requests `tail_factor` times slower (tail-only)
    tail_factor: float = 1.0


def quantile(p: Pool, q: float = 0.99) -> float:
    """The q-quantile of the pool's per-request time per token without stalls (bisection on
    the lognormal mixture)."""
    lo, hi = p.median * p.slowdown * 1e-3, p.median * p.slowdown * max(1.0, p.tail_factor) * 1e3

    def sf(x: float) -> float:
        z = math.log(x / (p.median * p.slowdown)) / p.sigma
        z_tail = math.log(x / (p.median * p.slowdown * p.tail_factor)) / p.sigma
        return (1 - p.tail_share) * (1 - _N.cdf(z)) + p.tail_share * (1 - _N.cdf(z_tail))

    for _ in range(200):
        mid = math.sqrt(lo * hi)
        step = (mid, hi) if sf(mid) > 1.0 - q else (lo, mid)
        if step == (lo, hi):  # a fixed point (~60 steps): the rest would repeat it exactly
            break
        lo, hi = step
    return math.sqrt(lo * hi)


@functools.cache  # a pure function of floats and a frozen (hashable) Pool; ~90 ms a bisection
def tail_factor_for(ratio: float, base: Pool, share: float = 0.03, q: float = 0.99) -> float:
    """The factor by which `share` of the requests must be slower for the pool's q-quantile
    to move by `ratio` (bisection). Cached: the benchmark and the tests ask again per run."""
    target = ratio * quantile(base, q)
    lo, hi = 1.0, 1e3
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        moved = quantile(Pool(**{**base.__dict__, "tail_share": share, "tail_factor": mid}), q)
        step = (mid, hi) if moved < target else (lo, mid)
        if step == (lo, hi):  # as in `quantile`: the same float as all 200 steps
            break
        lo, hi = step
    return math.sqrt(lo * hi)


def _stalls(rng: np.random.Generator, p: Pool, horizon: float) -> np.ndarray:
    n = rng.poisson(horizon / p.stall_every)
    start = rng.uniform(-60.0, horizon, n)
    return np.stack([start, start + rng.exponential(p.stall_seconds, n)], axis=1)


def pool_samples(
    rng: np.random.Generator, p: Pool, *, intervals: int, t0: float = 0.0, prefix: str = "pod"
) -> list[LatencySample]:
    """Per-pod, per-interval increments of the TPOT histogram over `intervals` scrapes."""
    out = []
    horizon = intervals * p.interval
    bounds = np.array(p.bounds[:-1])
    for j in range(p.pods):
        stalls = _stalls(rng, p, horizon)
        n = rng.poisson(p.rate * horizon)
        finish = rng.uniform(0.0, horizon, n)
        tokens = np.maximum(2.0, rng.exponential(p.tokens, n))
        tpot = p.median * p.slowdown * np.exp(p.sigma * rng.standard_normal(n))
        if p.tail_share > 0:
            tpot = np.where(rng.random(n) < p.tail_share, tpot * p.tail_factor, tpot)
        life = tokens * tpot
        begin = finish - life
        stalled = np.zeros(n)
        for s0, s1 in stalls:
            stalled += np.clip(np.minimum(finish, s1) - np.maximum(begin, s0), 0.0, None)
        tpot = tpot + stalled / tokens
        which = np.minimum((finish // p.interval).astype(int), intervals - 1)
        # One pass instead of one mask and one sort per interval: the times grouped by
        # interval in their original order (a stable sort; each group's sum is then the same
        # float as summing its mask), the cumulative counts from one bincount of (interval,
        # bucket): the bucket of a time is the first bound >= it, as searchsorted's `right`.
        small = intervals <= np.iinfo(np.int16).max  # 16-bit keys: numpy's radix sort
        order = np.argsort(which.astype(np.int16) if small else which, kind="stable")
        grouped = tpot[order]
        edges = np.searchsorted(which[order], np.arange(intervals + 1), side="left")
        bucket = np.searchsorted(bounds, tpot, side="left")
        width = bounds.size + 1
        hist = np.bincount(which * width + bucket, minlength=intervals * width)
        cums = np.cumsum(hist.reshape(intervals, width), axis=1)[:, :-1].astype(float).tolist()
        pod = f"{prefix}-{j}"
        for i in range(intervals):
            v = grouped[edges[i] : edges[i + 1]]
            size = float(v.size)
            start = t0 + i * p.interval
            out.append(
                LatencySample(
                    count=size,
                    sum=float(v.sum()),
                    buckets=Buckets(bounds=p.bounds, counts=(*cums[i], size)),
                    pod=pod,
                    start=start,
                    end=start + p.interval,
                )
            )
    return out
