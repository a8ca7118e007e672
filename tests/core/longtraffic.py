"""A small, independent generator of realistic acceptance counters, for coverage tests.

Deliberately not `alphagate_lab.sim`: it is the independent check on the estimator. What it keeps
from real traffic is what breaks naive intervals:

* each request has its own per-token acceptance p ~ Beta(a, b), kept for its whole life;
* a K-token draft is accepted up to its first rejection (P(accepted >= j) = p**j);
* output lengths are lognormal (median 1,000 or 3,000 tokens): one request spans many
  30 s scrapes, so per-interval counters of one pod are correlated in time;
* a pod stalls now and then (every running request on it stops), stretching requests further.

Per request and interval the drafts are counted exactly; their accepted tokens are drawn as the
sum of that many independent truncated-geometric drafts (normal with the exact mean and
variance: hundreds of drafts per request per interval). The estimand is the long-run pooled
ratio accepted / drafted, computed by quadrature over the Beta law (`true_alpha`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from alphagate import vllm
from alphagate.core.model import AcceptanceSample, Buckets, RequestLives


@dataclass(frozen=True)
class Traffic:
    k: int = 5
    beta_a: float = 6.0  # per-request acceptance p ~ Beta(a, b)
    beta_b: float = 2.0
    median_tokens: float = 1000.0
    sigma: float = 1.0  # lognormal shape of output lengths
    step_seconds: float = 0.04  # one engine step (a draft) per running request
    concurrency: float = 16.0  # mean running requests per pod
    stall_every_seconds: float = 600.0  # mean time between stall episodes per pod
    stall_seconds: float = 20.0  # mean stall length (exponential)
    interval_seconds: float = 30.0


def _g(p: np.ndarray, k: int) -> np.ndarray:
    """Mean accepted tokens of one K-token draft at per-token acceptance p."""
    return sum(p**j for j in range(1, k + 1))


def _v(p: np.ndarray, k: int, g: np.ndarray) -> np.ndarray:
    """Variance of accepted tokens of one draft: E[X^2] = sum_j (2j - 1) p^j; `g` is _g(p, k)."""
    m2 = sum((2 * j - 1) * p**j for j in range(1, k + 1))
    return m2 - g**2


@functools.cache  # a pure function of a frozen Traffic: every coverage run asks again
def _moments(t: Traffic, points: int = 20_000) -> tuple[float, float]:
    """(E[g/(1+g)], E[1/(1+g)]) over p ~ Beta(a, b): accepted and draft steps per generated
    token (midpoint quadrature)."""
    p = (np.arange(points) + 0.5) / points
    log_pdf = (
        (t.beta_a - 1) * np.log(p)
        + (t.beta_b - 1) * np.log1p(-p)
        + math.lgamma(t.beta_a + t.beta_b)
        - math.lgamma(t.beta_a)
        - math.lgamma(t.beta_b)
    )
    w = np.exp(log_pdf) / points
    g = _g(p, t.k)
    return float(np.sum(w * g / (1 + g))), float(np.sum(w / (1 + g)))


def true_alpha(t: Traffic) -> float:
    """Pooled accepted / drafted in the long run: drafts per request are L / (1 + g(p)), so
    alpha = E[g/(1+g)] / (K E[1/(1+g)])."""
    acc, steps = _moments(t)
    return acc / (t.k * steps)


def pooled_alpha(mix: dict[str, tuple[float, Traffic]]) -> float:
    """The fleet's pooled alpha for slices given as (share of generated tokens, traffic)."""
    acc = sum(share * _moments(t)[0] for share, t in mix.values())
    drafted = sum(share * t.k * _moments(t)[1] for share, t in mix.values())
    return acc / drafted


def _progress_clock(
    rng: np.random.Generator, t: Traffic, horizon: float
) -> tuple[np.ndarray, np.ndarray]:
    """Stall episodes of one pod as a wall-time -> progress-time map (knots for np.interp)."""
    wall, prog = [0.0], [0.0]
    now = 0.0
    while now < horizon:
        gap = rng.exponential(t.stall_every_seconds)
        stall = rng.exponential(t.stall_seconds)
        start = min(horizon, now + gap)
        wall.append(start)
        prog.append(prog[-1] + (start - now))
        end = start + stall
        wall.append(end)
        prog.append(prog[-1])
        now = end
    return np.array(wall), np.array(prog)


def pod_samples(
    rng: np.random.Generator,
    t: Traffic,
    pod: str,
    *,
    intervals: int,
    burn_in_seconds: float = 3600.0,
    decode_times: list[float] | None = None,
) -> list[AcceptanceSample]:
    """Counter increments of one pod over `intervals` scrapes after a burn-in (steady state);
    `decode_times` gets the wall-clock decode time of every request finishing in them."""
    horizon = burn_in_seconds + intervals * t.interval_seconds
    wall, prog = _progress_clock(rng, t, horizon + 1.0)
    # Arrivals keep `concurrency` requests running on average (Little's law, in progress time).
    mean_len = t.median_tokens * math.exp(t.sigma**2 / 2)
    p_mean = t.beta_a / (t.beta_a + t.beta_b)
    mean_steps = mean_len / (1 + float(_g(np.array(p_mean), t.k)))
    rate = t.concurrency / (mean_steps * t.step_seconds)
    n = rng.poisson(rate * horizon)
    arrive_wall = rng.uniform(0, horizon, n)
    arrive = np.interp(arrive_wall, wall, prog)
    p = rng.beta(t.beta_a, t.beta_b, n)
    length = t.median_tokens * np.exp(t.sigma * rng.standard_normal(n))
    edges = burn_in_seconds + t.interval_seconds * np.arange(intervals + 1)
    pe = np.interp(edges, wall, prog)
    if decode_times is None:
        # Drop the requests that surely end before the scrapes (even at g = 0, one draft a
        # token) or start after them, before computing g: nothing after reads them.
        latest = arrive + np.maximum(1.0, np.round(length)) * t.step_seconds
        maybe = (latest > pe[0]) & (arrive < pe[-1])
        arrive, p, length = arrive[maybe], p[maybe], length[maybe]
    g = _g(p, t.k)
    steps = np.maximum(1.0, np.round(length / (1 + g)))
    finish = arrive + steps * t.step_seconds
    if decode_times is not None:
        # the first wall instant the pod's progress reaches `finish` (stalls hold it still)
        idx = np.clip(np.searchsorted(prog, finish, side="left"), 1, prog.size - 1)
        p0, p1, w0, w1 = prog[idx - 1], prog[idx], wall[idx - 1], wall[idx]
        done = w0 + (finish - p0) * np.where(p1 > p0, (w1 - w0) / np.maximum(p1 - p0, 1e-12), 0)
        inside = (done > edges[0]) & (done <= edges[-1])
        decode_times.extend((done - arrive_wall)[inside].tolist())
    # Only the requests alive in the scrapes (most finished in the burn-in) are looked at per
    # interval: the others never overlap one, and the kept ones stay in their order.
    near = (finish > pe[0]) & (arrive < pe[-1])
    arrive, finish, g = arrive[near], finish[near], g[near]
    v = _v(p[near], t.k, g)
    # All intervals at once, (interval, request) row by row: the same elementwise floats as one
    # interval at a time, and one normal draw of all the live cells is the per-interval draws
    # in their order; each interval's sums are over its own contiguous slice, as before.
    overlap = np.maximum(np.minimum(finish, pe[1:, None]) - np.maximum(arrive, pe[:-1, None]), 0.0)
    drafts = np.floor(overlap / t.step_seconds)
    live = drafts > 0
    d = drafts[live]
    accepted = d * np.broadcast_to(g, live.shape)[live] + np.sqrt(
        d * np.broadcast_to(v, live.shape)[live]
    ) * rng.standard_normal(d.size)
    cut = np.concatenate(([0], np.cumsum(live.sum(axis=1)))).tolist()
    out = []
    for i in range(intervals):
        total_d = float(d[cut[i] : cut[i + 1]].sum())
        acc = _clip(float(accepted[cut[i] : cut[i + 1]].sum()), total_d * t.k)
        start = float(edges[i])
        out.append(
            AcceptanceSample(
                drafts=total_d,
                draft_tokens=total_d * t.k,
                accepted_tokens=acc,
                pod=pod,
                start=start,
                end=start + t.interval_seconds,
            )
        )
    return out


def _clip(x: float, top: float) -> float:
    """np.clip(x, 0, top) of one float (NaN stays NaN) without numpy's per-call cost."""
    return x if math.isnan(x) else min(max(x, 0.0), top)


def window_lives(
    seed: int, t: Traffic, *, pods: int, intervals: int = 10
) -> tuple[list[AcceptanceSample], RequestLives | None]:
    """`window`'s samples (the same draws) and the pods' decode-time histogram over them, as
    `vllm:request_decode_time_seconds` would export it."""
    rng = np.random.default_rng(seed)
    out: list[AcceptanceSample] = []
    times: list[float] = []
    for j in range(pods):
        out.extend(pod_samples(rng, t, f"pod-{j}", intervals=intervals, decode_times=times))
    if not times:
        return out, None
    d = np.array(times)
    bounds = (*vllm.DECODE_TIME_BUCKETS, math.inf)
    counts = tuple(float(np.sum(d <= b)) for b in bounds)
    return out, RequestLives(histogram=Buckets(bounds, counts, float(d.sum())))


def window(seed: int, t: Traffic, *, pods: int, intervals: int = 10) -> list[AcceptanceSample]:
    """One evaluation window's samples: `pods` independent pods, `intervals` scrapes each."""
    rng = np.random.default_rng(seed)
    out: list[AcceptanceSample] = []
    for j in range(pods):
        out.extend(pod_samples(rng, t, f"pod-{j}", intervals=intervals))
    return out
