"""An independent generator of one day of per-pod vLLM counters, for the state machine's
day-long check (`alphagate_lab.bench.machine`).

Deliberately not `alphagate_lab.sim` (which the closed-loop benchmark drives): a second, small
model of what real traffic does to the counters the core reads, so the core is not tuned to
one generator. What it keeps:

* arrivals: Poisson, or the real Azure LLM traces (conversation, code completion) looped over
  the day and dilated to the asked rate, dealt to pods by a router at their traffic shares;
* output lengths: from the trace, or lognormal (heavy-tailed) for Poisson arrivals;
* each request keeps its own per-token acceptance p ~ Beta for its whole life (optionally a
  share of hard requests at Beta(1, 4)); a K-token draft is accepted up to its first rejection,
  so a request of L tokens takes n ~ L / (1 + g(p)) draft steps (renewal variance) and accepts
  L - n tokens;
* a request's drafts accrue evenly over its life (n steps of `step_seconds`) and are split over
  the 30 s scrape intervals it spans; its output length is counted in vLLM's
  `request_generation_tokens` buckets when it finishes.

The truth is the long-run pooled ratio accepted / drafted, computed by quadrature over the
acceptance law (`pooled_alpha`); `calibrate` finds the Beta mean that gives an asked truth.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Final

import numpy as np
from numpy.typing import NDArray

TRACES: Final = Path(__file__).resolve().parents[2] / "sim" / "traces" / "azure-llm-2023"
LENGTH_BOUNDS: Final = (
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
)
"""vLLM's 1-2-5 buckets of `vllm:request_generation_tokens` (up to max_model_len); +Inf last."""
DAY: Final = 86400.0
HARD: Final = (1.0, 4.0)
"""Beta law of the hard requests (a prompt the drafter cannot follow)."""

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class Traffic:
    """One case's traffic: arrivals, the canary pods' shares of it, and acceptance."""

    arrivals: str = "poisson"  # "poisson", "conv" or "code" (the Azure traces)
    pod_rate: float = 0.5  # mean requests/s of one canary pod
    canary_shares: tuple[float, ...] = (0.25,)  # share of the service's traffic per canary pod
    alpha: float = 0.57  # the truth: long-run pooled accepted / drafted
    k: int = 3
    concentration: float = 8.0  # a + b of the per-request Beta law of p
    hard_share: float = 0.0  # requests at Beta(1, 4)
    median_tokens: float = 300.0  # Poisson arrivals only: lognormal outputs
    sigma: float = 1.0
    step_seconds: float = 0.025  # one engine step of one running request
    interval_seconds: float = 30.0
    # A second kind of request (long-form answers: summaries, code) with its own output
    # lengths and acceptance; its share per block of `block_seconds` is the schedule's (or
    # `long_share`), plus a daily cycle of amplitude `long_cycle`, plus N(0, long_sd) (real
    # traffic's window-to-window overdispersion), clipped to [0, 1].
    long_share: float = 0.0
    long_sd: float = 0.0
    long_cycle: float = 0.0
    long_ratio: float = 3.0  # its median output length over the others'
    long_alpha_delta: float = 0.0  # its alpha minus the others'
    mix_schedule: tuple[tuple[float, float], ...] = ()  # (seconds, long share), linear
    alpha_schedule: tuple[tuple[float, float], ...] = ()  # (seconds, alpha), linear
    block_seconds: float = 300.0

    @property
    def service_rate(self) -> float:
        return self.pod_rate * len(self.canary_shares) / sum(self.canary_shares)


@dataclass(frozen=True)
class Day:
    """Per-interval increments: interval i covers [i, i + 1) x interval_seconds."""

    interval_seconds: float
    drafts: Floats  # [canary pod, interval] draft steps
    accepted: Floats  # [canary pod, interval] accepted tokens
    generated: Floats  # [canary pod, interval] generated tokens
    lengths: Floats  # [pool (0 canary, 1 baseline), interval, bucket] finished requests
    truth: float
    k: int
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def intervals(self) -> int:
        return int(self.drafts.shape[1])


def _g(p: Floats, k: int) -> Floats:
    """Mean accepted tokens of one K-token draft at per-token acceptance p."""
    return np.asarray(sum(p**j for j in range(1, k + 1)), dtype=np.float64)


def _v(p: Floats, k: int) -> Floats:
    """Variance of one draft's accepted tokens: E[X^2] = sum_j (2j - 1) p^j."""
    m2 = sum((2 * j - 1) * p**j for j in range(1, k + 1))
    return np.asarray(m2 - _g(p, k) ** 2, dtype=np.float64)


def _beta_weights(a: float, b: float, points: int) -> tuple[Floats, Floats]:
    p = (np.arange(points) + 0.5) / points
    log_pdf = (
        (a - 1) * np.log(p)
        + (b - 1) * np.log1p(-p)
        + math.lgamma(a + b)
        - math.lgamma(a)
        - math.lgamma(b)
    )
    w = np.exp(log_pdf)
    return p, w / w.sum()


def pooled_alpha(mean: float, t: Traffic, points: int = 4000) -> float:
    """Long-run accepted / drafted: a request of L tokens drafts L / (1 + g) steps and accepts
    L g / (1 + g) tokens, L independent of p, so alpha = E[g/(1+g)] / (K E[1/(1+g)])."""
    acc = steps = 0.0
    laws = [((mean * t.concentration, (1 - mean) * t.concentration), 1.0 - t.hard_share)]
    if t.hard_share > 0:
        laws.append((HARD, t.hard_share))
    for (a, b), share in laws:
        p, w = _beta_weights(a, b, points)
        g = _g(p, t.k)
        acc += share * float(np.sum(w * g / (1 + g)))
        steps += share * float(np.sum(w / (1 + g)))
    return acc / (t.k * steps)


def calibrate(t: Traffic) -> float:
    """The mean of the (non-hard) requests' Beta law that gives the pooled truth `t.alpha`."""
    lo, hi = 1e-3, 1 - 1e-3
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if pooled_alpha(mid, t) < t.alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@cache
def trace(name: str) -> tuple[Floats, Floats]:
    """(arrival seconds from the first, output tokens) of one Azure trace, as published."""
    times: list[float] = []
    tokens: list[float] = []
    with (TRACES / f"{name}.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])
            times.append(stamp.timestamp())
            tokens.append(max(1.0, float(row["GeneratedTokens"])))
    at = np.asarray(times)
    return at - at.min(), np.asarray(tokens)


def _arrivals(t: Traffic, rng: np.random.Generator, span: float) -> tuple[Floats, Floats]:
    """(arrival times, output lengths) over [0, span) for the whole service."""
    rate = t.service_rate
    if t.arrivals == "poisson":
        n = rng.poisson(rate * span)
        at = np.sort(rng.uniform(0.0, span, n))
        mu = math.log(t.median_tokens)
        return at, np.maximum(1.0, np.round(rng.lognormal(mu, t.sigma, n)))
    times, tokens = trace(t.arrivals)
    period = float(times.max()) + float(np.mean(np.diff(times)))
    dilate = (len(times) / period) / rate  # the trace's rate over the asked one
    looped = period * dilate
    offset = rng.uniform(0.0, looped)  # each seed starts somewhere else in the trace
    loops = math.ceil((span + offset) / looped)
    at = np.concatenate([times * dilate + i * looped for i in range(loops)]) - offset
    out = np.tile(tokens, loops)
    keep = (at >= 0) & (at < span)
    return at[keep], out[keep]


def _schedule(points: tuple[tuple[float, float], ...], at: Floats, default: float) -> Floats:
    if not points:
        return np.full(len(at), default)
    xs, ys = zip(*points, strict=True)
    return np.asarray(np.interp(at, np.asarray(xs), np.asarray(ys)), dtype=np.float64)


@cache
def _mean_for(alpha: float, t: Traffic) -> float:
    return calibrate(replace(t, alpha=alpha, alpha_schedule=(), mix_schedule=()))


def _acceptance(
    t: Traffic, rng: np.random.Generator, at: Floats, long: NDArray[np.bool_]
) -> Floats:
    """Per-request acceptance p: the Beta law whose pooled alpha is the request's kind's alpha
    at its arrival (rounded to 0.005 so each law is calibrated once)."""
    alpha = _schedule(t.alpha_schedule, at, t.alpha) + np.where(long, t.long_alpha_delta, 0.0)
    alpha = np.clip(np.round(alpha / 0.005) * 0.005, 0.02, 0.98)
    p = np.empty(len(at))
    for value in np.unique(alpha):
        pick = alpha == value
        mean = _mean_for(float(value), t)
        p[pick] = rng.beta(mean * t.concentration, (1 - mean) * t.concentration, int(pick.sum()))
    if t.hard_share > 0:
        hard = rng.random(len(at)) < t.hard_share
        p[hard] = rng.beta(*HARD, int(hard.sum()))
    return np.asarray(p, dtype=np.float64)


def _long(t: Traffic, rng: np.random.Generator, at: Floats, span: float) -> NDArray[np.bool_]:
    """Which requests are long-form: the share per block, with its cycle and overdispersion."""
    if not (t.long_share > 0 or t.mix_schedule or t.long_cycle > 0):
        return np.zeros(len(at), dtype=bool)
    blocks = math.ceil(span / t.block_seconds) + 1
    mids = np.asarray((np.arange(blocks) + 0.5) * t.block_seconds, dtype=np.float64)
    share = _schedule(t.mix_schedule, mids, t.long_share)
    share = share + t.long_cycle * np.sin(2 * math.pi * mids / DAY)
    share = np.clip(share + rng.normal(0.0, t.long_sd, blocks) * (t.long_sd > 0), 0.0, 1.0)
    block = np.minimum((at // t.block_seconds).astype(np.int64), blocks - 1)
    return np.asarray(rng.random(len(at)) < share[block], dtype=bool)


def _spread(
    out: Floats, row: NDArray[np.int64], start: Floats, end: Floats, amount: Floats, dt: float
) -> None:
    """Add each request's `amount` to out[row, interval] in proportion to its life in it."""
    life = np.maximum(end - start, 1e-9)
    first = np.floor(start / dt).astype(np.int64)
    span = int(np.max(np.floor(end / dt).astype(np.int64) - first, initial=0)) + 1
    cols = out.shape[1]
    for j in range(span):
        idx = first + j
        lo = np.maximum(start, idx * dt)
        hi = np.minimum(end, (idx + 1) * dt)
        part = np.clip(hi - lo, 0.0, None) / life
        ok = (part > 0) & (idx < cols)
        np.add.at(out, (row[ok], idx[ok]), amount[ok] * part[ok])


def day(t: Traffic, seed: int, span: float = DAY) -> Day:
    """One `span` of counters for the canary pods (and output lengths for both pools)."""
    rng = np.random.default_rng(seed)
    at, length = _arrivals(t, rng, span)
    n = len(at)
    shares = np.asarray((*t.canary_shares, 1.0 - sum(t.canary_shares)))
    pod = rng.choice(len(shares), size=n, p=shares / shares.sum())
    long = _long(t, rng, at, span)
    length = np.where(long, np.maximum(1.0, np.round(length * t.long_ratio)), length)
    p = _acceptance(t, rng, at, long)
    g, v = _g(p, t.k), _v(p, t.k)
    mean_steps = length / (1 + g)
    sd = np.sqrt(length * v / (1 + g) ** 3)
    fewest = np.ceil(length / (t.k + 1))  # every step accepts at most K tokens
    steps = np.clip(np.round(rng.normal(mean_steps, sd)), fewest, length)
    end = at + steps * t.step_seconds
    dt = t.interval_seconds
    cols = math.ceil(span / dt)
    pods = len(t.canary_shares)
    canary = pod < pods
    rows = pod[canary].astype(np.int64)
    drafts = np.zeros((pods, cols))
    accepted = np.zeros((pods, cols))
    generated = np.zeros((pods, cols))
    c_at, c_end = at[canary], end[canary]
    _spread(drafts, rows, c_at, c_end, steps[canary], dt)
    _spread(accepted, rows, c_at, c_end, (length - steps)[canary], dt)
    _spread(generated, rows, c_at, c_end, length[canary], dt)
    lengths = np.zeros((2, cols, len(LENGTH_BOUNDS) + 1))
    bucket = np.searchsorted(np.asarray(LENGTH_BOUNDS), length, side="left")
    done = np.floor(end / dt).astype(np.int64)
    ok = done < cols
    np.add.at(lengths, ((~canary).astype(np.int64)[ok], done[ok], bucket[ok]), 1.0)
    return Day(dt, drafts, accepted, generated, lengths, t.alpha, t.k, {"requests": float(n)})
