"""Acceptance counters from real arrivals: the Azure LLM traces dealt to pods by a router.

Independent of `alphagate_lab.sim` (the check on the estimator must not share its model), like
`longtraffic.py`, but with the traffic the suite never wrote: arrivals and output lengths
replayed from the real Azure LLM inference traces of November 2023 (conversation: 5.5
requests/s, outputs median 129 tokens; code completion: 2.6 requests/s in bursts with idle gaps
up to 217 s, outputs median 13 tokens), looped from a seeded offset. What is drawn here:

* a router deals each request to a pod with the pod's share of the traffic (a canary pod
  beside three baselines gets 1/4); `thin` keeps a seeded fraction of the requests (low
  traffic); only the canary pods' requests are generated;
* each request's own per-token acceptance p comes from a mixture of Beta laws: most requests
  at `good`, a share `bad_share` at `bad` (the rare prompt the drafter cannot follow);
* a K-token draft is accepted up to its first rejection (P(accepted >= j) = p**j); a request
  of T output tokens verifies (T - 1) / (1 + g(p)) drafts, g(p) the mean accepted per draft;
* a request decodes from its arrival plus its prefill at one draft per engine step of
  `step_seconds`; pods stall now and then (nothing progresses), stretching the requests on it;
* per pod and 30 s interval, the counters vLLM exports (drafts, draft tokens, accepted
  tokens), and per pod over each window the decode time of every request that finished in it
  (`vllm:request_decode_time_seconds`: count, sum, buckets at vLLM's default bounds).

The estimand is the long-run pooled ratio accepted / drafted, E[g/(1+g)] / (K E[1/(1+g)]) over
the mixture (drafts per request are proportional to T / (1 + g), whatever T), by quadrature.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from alphagate import vllm
from alphagate.core.model import AcceptanceSample, Buckets, RequestLives

BOUNDS = (*vllm.DECODE_TIME_BUCKETS, math.inf)


@dataclass(frozen=True)
class Mix:
    """Per-request acceptance p ~ (1 - bad_share) Beta(good) + bad_share Beta(bad)."""

    k: int = 3
    good: tuple[float, float] = (9.0, 2.0)
    bad: tuple[float, float] = (1.0, 4.0)
    bad_share: float = 0.0


@dataclass(frozen=True)
class Setup:
    trace: str = "conv"  # "conv" or "code"
    shares: tuple[float, ...] = (0.25,)  # each canary pod's share of the (thinned) trace
    thin: float = 1.0  # fraction of the trace's requests kept
    mix: Mix = field(default_factory=Mix)
    step_seconds: float = 0.03  # one engine step (one draft per running request)
    prefill_per_token: float = 1e-4  # seconds of prefill per prompt token
    stall_every_seconds: float = 900.0  # mean time between stall episodes of a pod
    stall_seconds: float = 15.0  # mean stall length (exponential)
    interval_seconds: float = 30.0  # scrape / range-query step
    window_seconds: float = 300.0


@functools.cache
def trace(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(arrival s from the first, prompt tokens, output tokens, span s) of a vendored trace."""
    path = resources.files("alphagate_lab.sim") / "traces" / "azure-llm-2023" / f"{name}.csv"
    with path.open(encoding="utf-8") as fh:
        header, *lines = fh.read().splitlines()
    assert header.split(",") == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], header
    stamp, context, generated = zip(*(line.split(",") for line in lines), strict=True)
    # As `datetime.fromisoformat(stamp[:26]).timestamp()` computes it (whole seconds, then
    # + microseconds / 1e6), parsed by numpy in one call instead of one datetime a row: the
    # same floats, since a whole-second offset of the local zone leaves their grid alone.
    micros = np.array([x[:26] for x in stamp], dtype="datetime64[us]").astype(np.int64)
    at = (micros // 1_000_000).astype(np.float64) + (micros % 1_000_000) / 1e6
    at -= at[0]
    prompt = np.array(context, dtype=np.float64)
    out = np.array(generated, dtype=np.float64)
    span = float(at[-1]) + float(np.median(np.diff(at)))
    return at, prompt, out, span


def _g(p: np.ndarray, k: int) -> np.ndarray:
    """Mean accepted tokens of one K-token draft at per-token acceptance p."""
    return sum(p**j for j in range(1, k + 1))


def _accept_probs(p: np.ndarray, k: int) -> np.ndarray:
    """Rows: P(accepted = j), j = 0..K, for each p (stop at the first rejection)."""
    ge = np.stack([p**j for j in range(k + 1)], axis=1)  # P(A >= j)
    nxt = np.concatenate([ge[:, 1:], np.zeros((p.size, 1))], axis=1)
    probs = np.clip(ge - nxt, 0.0, None)
    return probs / probs.sum(axis=1, keepdims=True)


def _beta_pdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    log = (
        (a - 1) * np.log(x)
        + (b - 1) * np.log1p(-x)
        + math.lgamma(a + b)
        - math.lgamma(a)
        - math.lgamma(b)
    )
    return np.exp(log)


@functools.cache  # a pure function of a frozen Mix: every run of a scenario asks again
def true_alpha(mix: Mix, points: int = 20_000) -> float:
    """The pooled accepted / drafted the counters converge to (midpoint quadrature)."""
    p = (np.arange(points) + 0.5) / points
    w = (1 - mix.bad_share) * _beta_pdf(p, *mix.good) + mix.bad_share * _beta_pdf(p, *mix.bad)
    g = _g(p, mix.k)
    return float(np.sum(w * g / (1 + g)) / (mix.k * np.sum(w / (1 + g))))


@functools.cache  # 50 quadratures a call, and every stream of a policy test asks again
def mix_at(alpha: float, *, kappa: float = 11.0, k: int = 3, bad_share: float = 0.0) -> Mix:
    """A mix whose good requests are Beta(m kappa, (1 - m) kappa), m solved so the pooled
    alpha is `alpha` (with `bad_share` of the requests at Beta(1, 4))."""
    lo, hi = 1e-3, 1 - 1e-3
    for _ in range(50):
        m = (lo + hi) / 2
        mix = Mix(k=k, good=(m * kappa, (1 - m) * kappa), bad_share=bad_share)
        lo, hi = (m, hi) if true_alpha(mix, 4000) < alpha else (lo, m)
    return mix


def _draw_p(rng: np.random.Generator, mix: Mix, n: int) -> np.ndarray:
    bad = rng.random(n) < mix.bad_share
    p = rng.beta(*mix.good, n)
    p[bad] = rng.beta(*mix.bad, int(bad.sum()))
    return np.clip(p, 1e-9, 1 - 1e-9)


def _stall_clock(rng: np.random.Generator, s: Setup, horizon: float) -> tuple[np.ndarray, ...]:
    """One pod's stalls as a wall -> progress map (knots for np.interp)."""
    wall, prog = [0.0], [0.0]
    now = 0.0
    while now < horizon:
        start = min(horizon, now + rng.exponential(s.stall_every_seconds))
        wall.append(start)
        prog.append(prog[-1] + start - now)
        now = start + rng.exponential(s.stall_seconds)
        wall.append(now)
        prog.append(prog[-1])
    return np.array(wall), np.array(prog)


@dataclass(frozen=True)
class Window:
    """One window of the canary pods: the counters per pod and interval, the decode times."""

    samples: list[AcceptanceSample]
    lives: RequestLives | None
    requests: int  # requests that finished decoding in the window


def _requests(rng: np.random.Generator, s: Setup, start: float, length: float) -> tuple:
    """The canary pods' requests arriving in [start, start + length) of the looped trace."""
    at, prompt, out, span = trace(s.trace)
    loops = math.floor(start / span), math.ceil((start + length) / span) + 1
    parts_at, parts_prompt, parts_out = [], [], []
    for loop in range(*loops):
        t = at + loop * span
        keep = (t >= start) & (t < start + length)
        parts_at.append(t[keep])
        parts_prompt.append(prompt[keep])
        parts_out.append(out[keep])
    arrive = np.concatenate(parts_at) - start
    prompt_t, tokens = np.concatenate(parts_prompt), np.concatenate(parts_out)
    keep = rng.random(arrive.size) < s.thin
    arrive, prompt_t, tokens = arrive[keep], prompt_t[keep], tokens[keep]
    shares = np.array([*s.shares, max(0.0, 1.0 - sum(s.shares))])
    pod = rng.choice(shares.size, size=arrive.size, p=shares / shares.sum())
    canary = pod < len(s.shares)
    return arrive[canary], prompt_t[canary], tokens[canary], pod[canary]


def run(seed: int, s: Setup, *, windows: int, burn_in: float = 120.0) -> list[Window]:
    """`windows` disjoint windows of the canary pods, from a seeded offset into the trace."""
    rng = np.random.default_rng(seed)
    span = trace(s.trace)[3]
    length = burn_in + windows * s.window_seconds
    arrive, prompt_t, tokens, pod = _requests(rng, s, rng.uniform(0, span), length)
    p = _draw_p(rng, s.mix, arrive.size)
    g = _g(p, s.mix.k)
    drafts = np.maximum(tokens - 1, 0) / (1 + g)  # expected drafts over the request's life
    probs = _accept_probs(p, s.mix.k)
    begin = arrive + prompt_t * s.prefill_per_token  # first token, wall time (no stall)
    per_pod = [
        _pod(rng, s, j, pod == j, begin, drafts, probs, length) for j in range(len(s.shares))
    ]
    edges = burn_in + s.window_seconds * np.arange(windows + 1)
    out = []
    for w in range(windows):
        lo, hi = edges[w], edges[w + 1]
        samples = [x for pp in per_pod for x in pp[0] if lo <= x.start and x.end <= hi]
        lives = [
            (name, d[(f > lo) & (f <= hi)])
            for name, (_, f, d) in zip(
                [f"pod-{j}" for j in range(len(s.shares))], per_pod, strict=True
            )
        ]
        out.append(Window(samples, _lives(lives), sum(x.size for _, x in lives)))
    return out


def _pod(rng, s: Setup, j: int, mine, begin, drafts, probs, horizon: float):
    """One pod's interval samples, and its requests' decode finish times and durations."""
    wall, prog = _stall_clock(rng, s, horizon + 3600.0)
    b = np.interp(begin[mine], wall, prog)  # progress time when decoding starts
    d, pr = drafts[mine], probs[mine]
    e = b + d * s.step_seconds  # progress time when it ends
    finish = _wall_of(e, wall, prog)
    duration = finish - _wall_of(b, wall, prog)
    k = probs.shape[1] - 1
    intervals = int(horizon // s.interval_seconds)
    # Progress at every interval's edges, and each request's overlap with the intervals it
    # can touch (the knots bracketing its [b, e]), in one pass: an interval then draws for its
    # live requests, in their order, exactly as masking all requests for it would.
    edges = [i * s.interval_seconds for i in range(intervals + 1)]
    knots = np.interp(edges, wall, prog)
    first = np.clip(np.searchsorted(knots, b, side="right") - 1, 0, None)
    last = np.minimum(np.searchsorted(knots, e, side="left") - 1, intervals - 1)
    counts = np.clip(last - first + 1, 0, None)
    req = np.repeat(np.arange(b.size), counts)
    at = first[req] + np.arange(req.size) - np.repeat(np.cumsum(counts) - counts, counts)
    overlap = np.minimum(e[req], knots[at + 1]) - np.maximum(b[req], knots[at])
    overlap = np.clip(overlap, 0, None) / s.step_seconds
    live = overlap > 0
    req, at, overlap = req[live], at[live], overlap[live]
    order = np.argsort(at, kind="stable")  # by interval, then by request as generated
    req, at, overlap = req[order], at[order], overlap[order]
    bounds = np.searchsorted(at, np.arange(intervals + 1), side="left")
    samples = []
    for i in range(intervals):
        lo_w, hi_w = edges[i], edges[i + 1]
        if bounds[i] == bounds[i + 1]:
            continue
        frac = overlap[bounds[i] : bounds[i + 1]]
        n = np.floor(frac) + (rng.random(frac.size) < frac - np.floor(frac))
        got = rng.multinomial(n.astype(np.int64), pr[req[bounds[i] : bounds[i + 1]]])
        accepted = float((got @ np.arange(k + 1)).sum())
        total = float(n.sum())
        if total > 0:
            samples.append(
                AcceptanceSample(total, total * k, accepted, pod=f"pod-{j}", start=lo_w, end=hi_w)
            )
    return samples, finish, duration


def _wall_of(progress: np.ndarray, wall: np.ndarray, prog: np.ndarray) -> np.ndarray:
    """Wall time at which a pod reaches `progress` (the first instant, stalls skipped)."""
    idx = np.searchsorted(prog, progress, side="left")
    idx = np.clip(idx, 1, prog.size - 1)
    p0, p1, w0, w1 = prog[idx - 1], prog[idx], wall[idx - 1], wall[idx]
    slope = np.where(p1 > p0, (w1 - w0) / np.where(p1 > p0, p1 - p0, 1.0), 0.0)
    return w0 + (progress - p0) * slope


def _lives(per_pod: list[tuple[str, np.ndarray]]) -> RequestLives | None:
    """The pool's decode-time histogram over the window, as vLLM's buckets count it."""
    every = np.concatenate([d for _, d in per_pod]) if per_pod else np.zeros(0)
    if every.size == 0:
        return None
    below = np.searchsorted(np.sort(every), np.array(BOUNDS), side="right")  # count <= bound
    counts = tuple(float(c) for c in below)
    return RequestLives(histogram=Buckets(BOUNDS, counts, float(every.sum())))
