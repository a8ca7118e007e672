"""How long one pod's time blocks are for alpha's batches, sized from how long requests live.

A request keeps its acceptance for its whole life, so two adjacent blocks of one pod share the
requests that straddle their boundary. A request of life L (drafts spread evenly over it) in
blocks of length B straddles a given boundary with probability L / B and splits its weight u,
1 - u there; what the blocks' spread misses is its cross term 2 u (1 - u), a third of its
squared weight on average. With residual weight proportional to drafts (to L), the share of
the true variance the blocks see is 1 - sum L^3 / (3 B sum L^2) for L <= B (1 / u - 1 / (3 u^2)
for u = L / B > 1), over the finished requests of the window: vLLM's
`vllm:request_decode_time_seconds` (buckets at the bound midpoints, the last at what its exact
`_sum` leaves). Different pods share nothing, so only a pod's internal boundaries count.

`auto` (the default) tries every block length from the sample spacing (one range-query step or
pod-scrape interval, at least one scrape interval) to the window and keeps the one whose
interval is narrowest for the same evidence: the Student-t quantile on the blocks' effective
degrees of freedom (Kish, by draft tokens) times the square root of the variance inflation
above, never an inflation over `MAX_INFLATION` (the first-order model is not trusted further).
Short chat requests (a few seconds) give blocks of the sample spacing, ten per pod in a 300 s
window; 1,000-token outputs at 40 ms a step (requests of minutes) give the whole window, pods
as the batches, as before. The variance is then multiplied by that inflation. Without decode
times `auto` falls back to `FALLBACK_SECONDS`; an explicit `acceptance.batchSeconds` is used as
it is, with no inflation.
Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    Estimate,
    Judgeability,
    RequestLives,
    Unjudgeable,
)
from alphagate.core.stats import t_quantile

# Block length when `auto` has no decode times: as long as a long request lives.
FALLBACK_SECONDS: Final = 900.0
# Largest variance inflation for adjacent blocks that `auto` accepts and corrects for.
MAX_INFLATION: Final = 1.5
# Longest search for the block a window would need, in sample spacings.
_MAX_STEPS: Final = 100_000


class BlockBasis(StrEnum):
    """Where the block length came from."""

    CONFIGURED = "configured"  # acceptance.batchSeconds set to a number of seconds
    LIVES = "lives"  # auto, from the pool's decode times
    LIVES_UNKNOWN = "lives-unknown"  # auto without decode times: FALLBACK_SECONDS


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """The block length the estimate uses and what it rests on.

    `inflation` multiplies the batches' variance for what adjacent blocks of a pod share (1:
    nothing, or not modelled); `life_seconds` is the drafts-weighted request life sum L^3 /
    sum L^2 and `requests` the window's effective number of finished requests (Kish, weighted
    by decode time, a stand-in for drafts); NaN when unknown."""

    seconds: float
    basis: BlockBasis
    inflation: float = 1.0
    life_seconds: float = math.nan
    requests: float = math.nan
    spacing_seconds: float = math.nan  # the shortest block the samples allow


def _points(h: Buckets) -> list[tuple[float, float]]:
    """(representative decode time, requests) per non-empty bucket: the bound midpoint; the
    +Inf bucket at what the exact sum leaves (at least its lower bound)."""
    out: list[tuple[float, float]] = []
    prev_count, lower, used = 0.0, 0.0, 0.0
    for bound, cum in zip(h.bounds, h.counts, strict=True):
        n = cum - prev_count
        prev_count = cum
        if n > 0:
            if math.isfinite(bound):
                mid = (lower + bound) / 2.0
            else:
                rest = (h.sum - used) / n if math.isfinite(h.sum) else lower
                mid = max(lower, rest)
            out.append((mid, n))
            used += mid * n
        lower = bound
    return out


def _usable(lives: RequestLives | None) -> list[tuple[float, float]]:
    if lives is None:
        return []
    h = lives.histogram
    if len(h.bounds) != len(h.counts) or not h.bounds or h.bounds[-1] != math.inf:
        return []
    pts = _points(h)
    ok = all(math.isfinite(m) and m >= 0 and math.isfinite(n) and n >= 0 for m, n in pts)
    return pts if ok and any(m > 0 for m, _ in pts) else []


def _captured(u: float) -> float:
    """Share of a request's squared weight that lies inside blocks, at u = life / block."""
    return 1.0 - u / 3.0 if u <= 1.0 else 1.0 / u - 1.0 / (3.0 * u * u)


def inflation(
    points: Sequence[tuple[float, float]], block: float, inner: float, batches: int
) -> float:
    """True over estimated variance of alpha from `batches` blocks of `block` seconds, `inner`
    the share of the draft weight whose pod has a boundary inside ((m - 1) / m for m blocks).

    The cross terms the blocks miss (`cross`, a share of the true variance) enter twice: the
    blocks' own variances leave them out, and a block's deviation from the pooled mean shrinks
    by what it shares with its neighbour. With M batches the spread estimates the variance
    minus cross x M / (M - 1) (for adjacent blocks with covariance C: M V - 2 C against the
    true M V + 2 (M - 1) C), so the ratio is 1 / (1 - cross M / (M - 1))."""
    total = math.fsum(n * m * m for m, n in points)
    if not (total > 0 and block > 0) or inner <= 0 or batches < 2:
        return 1.0
    lost = math.fsum(n * m * m * (1.0 - _captured(m / block)) for m, n in points)
    seen = 1.0 - inner * lost / total * batches / (batches - 1)
    return 1.0 / seen if seen > 0 else math.inf


def life_seconds(points: Sequence[tuple[float, float]]) -> float:
    """The drafts-weighted request life, sum L^3 / sum L^2 (NaN when unknown)."""
    l2 = math.fsum(n * m * m for m, n in points)
    return math.fsum(n * m**3 for m, n in points) / l2 if l2 > 0 else math.nan


def effective_requests(lives: RequestLives | None) -> float:
    """Kish's effective number of finished requests, weighted by decode time (drafts): (sum
    L)^2 / sum L^2, with sum L the exact `_sum`; NaN when unknown."""
    pts = _usable(lives)
    if not pts or lives is None:
        return math.nan
    s1 = lives.histogram.sum
    if not (math.isfinite(s1) and s1 > 0):
        s1 = math.fsum(m * n for m, n in pts)
    s2 = math.fsum(n * m * m for m, n in pts)
    return min(s1 * s1 / s2, lives.count) if s2 > 0 else math.nan


def spacing(samples: Sequence[AcceptanceSample], scrape_interval: float | None) -> float:
    """The shortest block the samples allow: their typical span (one range-query step, or one
    evaluation interval of pod scrapes), and at least one scrape interval of the pods (a
    shorter range holds no increment of its own)."""
    spans = sorted(s.end - s.start for s in samples if s.end > s.start)
    step = spans[len(spans) // 2] if spans else 0.0
    scrape = scrape_interval if scrape_interval is not None and scrape_interval > 0 else 0.0
    return max(step, scrape)


@dataclass(frozen=True, slots=True)
class _Candidate:
    seconds: float
    dof: float
    inner: float
    batches: int


def _by_pod(samples: Sequence[AcceptanceSample]) -> list[list[tuple[float, float, float]]]:
    """(start, end, draft tokens) per pod, in time order: what cutting into blocks needs."""
    pods: dict[str, list[tuple[float, float, float]]] = {}
    for s in samples:
        pods.setdefault(s.pod, []).append((s.start, s.end, s.draft_tokens))
    return [sorted(v) for v in pods.values()]


def _candidate(pods: Sequence[Sequence[tuple[float, float, float]]], seconds: float) -> _Candidate:
    """Blocks of `seconds` cut as `batching.blocks` cuts them (consecutive samples until the
    block spans `seconds`, a shorter tail joining the block before it): Kish dof over their
    draft tokens, the share of weight whose pod has an inner boundary, the block count."""
    weights: list[float] = []
    inner = 0.0
    for items in pods:
        cut: list[float] = []
        first = last = 0.0
        for start, end, tokens in items:
            if cut and last - first >= seconds:
                cut.append(tokens)
                first = start
            elif cut:
                cut[-1] += tokens
            else:
                cut.append(tokens)
                first = start
            last = end
        if len(cut) > 1 and last - first < seconds:
            tail = cut.pop()
            cut[-1] += tail
        weights.extend(cut)
        if cut:
            inner += math.fsum(cut) * (len(cut) - 1) / len(cut)
    total = math.fsum(weights)
    squares = math.fsum(w * w for w in weights)
    dof = total * total / squares - 1.0 if squares > 0 else 0.0
    return _Candidate(seconds, dof, inner / total if total > 0 else 0.0, len(weights))


def _multiples(most: int) -> list[int]:
    """The block lengths tried, in sample spacings: every one up to eight, then about 25%
    apart up to `most` (a long window holds many samples; the best length is not that sharp)."""
    out = list(range(1, min(most, 8) + 1))
    while out and out[-1] < most:
        out.append(min(most, max(out[-1] + 1, round(out[-1] * 1.25))))
    return out


def plan(
    samples: Sequence[AcceptanceSample],
    lives: RequestLives | None,
    *,
    configured: float | None,
    scrape_interval: float | None,
    confidence: float,
) -> BlockPlan:
    """The block length for these samples (see the module docstring); `configured` None is
    `auto`."""
    usable = [s for s in samples if s.draft_tokens > 0]
    step = spacing(usable, scrape_interval)
    requests = effective_requests(lives)
    if configured is not None:
        return BlockPlan(configured, BlockBasis.CONFIGURED, requests=requests, spacing_seconds=step)
    pts = _usable(lives)
    if not pts:
        return BlockPlan(
            FALLBACK_SECONDS, BlockBasis.LIVES_UNKNOWN, requests=requests, spacing_seconds=step
        )
    life = life_seconds(pts)
    span = max((s.end for s in usable), default=0.0) - min((s.start for s in usable), default=0.0)
    if not step > 0 or not span > 0:
        seconds = span or step or FALLBACK_SECONDS
        return BlockPlan(seconds, BlockBasis.LIVES, 1.0, life, requests, step or seconds)
    q = 0.5 + confidence / 2.0
    best: tuple[float, float, float] | None = None  # (score, seconds, inflation)
    pods = _by_pod(usable)
    for k in _multiples(int(span / step + 1e-9)):
        c = _candidate(pods, k * step)
        infl = inflation(pts, c.seconds, c.inner, c.batches)
        if c.dof <= 0 or infl > MAX_INFLATION:
            continue
        score = t_quantile(q, c.dof) * math.sqrt(infl)
        if best is None or score < best[0] - 1e-12:
            best = (score, c.seconds, infl)
    if best is None:  # one batch however cut: pods are the batches
        return BlockPlan(max(span, step), BlockBasis.LIVES, 1.0, life, requests, step)
    return BlockPlan(best[1], BlockBasis.LIVES, best[2], life, requests, step)


def needed_block(lives: RequestLives | None, step: float) -> float:
    """The shortest block (a multiple of `step`) two of which on one pod keep the variance
    inflation within MAX_INFLATION (with more blocks it only falls); NaN when lives or `step`
    are unknown."""
    pts = _usable(lives)
    if not pts or not step > 0:
        return math.nan

    def fits(k: int) -> bool:
        return inflation(pts, k * step, 0.5, 2) <= MAX_INFLATION

    hi = 1
    while hi < _MAX_STEPS and not fits(hi):  # the inflation falls as blocks lengthen
        hi *= 2
    lo = hi // 2  # does not fit (or is 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi * step


def judgeable(
    plan: BlockPlan,
    estimate: Estimate | None,
    lives: RequestLives | None,
    *,
    window_seconds: float,
) -> Judgeability | None:
    """Why a window with drafts has fewer than two batches, and what window (or how many
    canary pods) would have two; None when it has them (or has no drafts at all)."""
    if estimate is None or estimate.conclusive:
        return None
    if plan.basis is BlockBasis.CONFIGURED:
        cause, block = Unjudgeable.BLOCKS_TOO_LONG, plan.seconds
    elif plan.basis is BlockBasis.LIVES_UNKNOWN:
        cause, block = Unjudgeable.DECODE_TIMES_UNKNOWN, plan.seconds
    elif 2.0 * plan.spacing_seconds > window_seconds + 1e-9:
        cause, block = Unjudgeable.WINDOW_TOO_SHORT, plan.spacing_seconds
    else:
        block = needed_block(lives, plan.spacing_seconds)
        if not math.isfinite(block):
            block = plan.seconds
        fits = 2.0 * block <= window_seconds + 1e-9
        cause = Unjudgeable.DRAFTS_IN_ONE_BLOCK if fits else Unjudgeable.REQUESTS_OUTLIVE_WINDOW
    return Judgeability(cause, block, 2.0 * block, window_seconds)
