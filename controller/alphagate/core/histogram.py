"""Bucket math on cumulative histograms, with Prometheus `histogram_quantile` semantics.

`quantile` follows promql/quantile.go (`BucketQuantile`) rule for rule: q outside [0, 1] gives
-Inf/+Inf, buckets are sorted and equal bounds coalesced, non-monotonic cumulative counts are
fixed up like `ensureMonotonicAndIgnoreSmallDeltas`, an empty histogram gives NaN, a rank in the
+Inf bucket gives the highest finite bound, the first bucket interpolates from 0 when its bound
is positive, and everything else interpolates linearly inside the bucket. One deliberate
difference: NaN counts give NaN here (Prometheus would return an arbitrary bound), because the
core turns NaN into a verdict, never into a number.

`bracket` returns the bucket edges that hold the quantile: the honest uncertainty of a P99 read
from coarse buckets. `exceedance` counts observations above a bucket edge, for the regression
test in checks.py. `delta`/`merge`/`scale` are the small algebra sources and checks need.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Final

from alphagate.core import resolution
from alphagate.core.model import Buckets

# promql/quantile.go: smallDeltaTolerance, and almost.Equal's minNormal.
SMALL_DELTA_TOLERANCE: Final = 1e-12
_MIN_NORMAL: Final = 2.2250738585072014e-308
# No pool observes 1e15 latencies in one window: larger counts are corrupt.
MAX_PLAUSIBLE: Final = 1e15


def problem(buckets: Buckets) -> str | None:
    """Describe what makes `buckets` unusable (shape, NaN or negative counts), or None."""
    if _plainly_usable(buckets):
        return None
    if len(buckets.bounds) != len(buckets.counts):
        return f"{len(buckets.bounds)} bounds but {len(buckets.counts)} counts"
    if not buckets.bounds:
        return "no buckets"
    if any(math.isnan(b) for b in buckets.bounds):
        return "a bucket bound is NaN"
    if max(buckets.bounds) != math.inf:
        return "no +Inf bucket"
    for b, c in zip(buckets.bounds, buckets.counts, strict=True):
        if not math.isfinite(c):
            return f"count of bucket le={b:g} is {c}"
        if c < 0:
            return f"count of bucket le={b:g} is negative ({c:g}); a counter reset was not handled"
        if c > MAX_PLAUSIBLE:
            return f"count of bucket le={b:g} is implausibly large ({c:g})"
    return None


def _plainly_usable(buckets: Buckets) -> bool:
    """The common case in a few C-level passes (every latency check validates every sample):
    a finite sum of the bounds but +Inf's rules out NaN, a finite sum of the counts rules out
    NaN and infinities, and min and max over finite counts bound the rest. False sends the
    buckets to the itemised checks, which name the problem."""
    bounds, counts = buckets.bounds, buckets.counts
    if not bounds or len(bounds) != len(counts) or bounds[-1] != math.inf:
        return False
    return (
        math.isfinite(sum(bounds[:-1]))
        and math.isfinite(sum(counts))
        and min(counts) >= 0
        and max(counts) <= MAX_PLAUSIBLE
    )


def _almost_equal(a: float, b: float, epsilon: float) -> bool:
    """Prometheus util/almost.Equal."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < _MIN_NORMAL:
        return diff < epsilon * _MIN_NORMAL
    return diff / min(abs_sum, math.inf) < epsilon


def _prepared(buckets: Buckets) -> list[tuple[float, float]] | None:
    """Sorted, coalesced, monotonic (bound, cumulative count) pairs, or None if unusable."""
    if problem(buckets) is not None:
        return None
    bounds = buckets.bounds
    if all(map(operator.lt, bounds, islice(bounds, 1, None))):
        # strictly ascending (every layout vLLM or `alphagate plan` writes): sorted, no
        # bound to coalesce
        merged = list(zip(bounds, buckets.counts, strict=True))
    else:
        pairs = sorted(zip(bounds, buckets.counts, strict=True), key=operator.itemgetter(0))
        # coalesceBuckets: equal bounds add up.
        merged = [pairs[0]]
        for bound, count in pairs[1:]:
            if bound == merged[-1][0]:
                merged[-1] = (bound, merged[-1][1] + count)
            else:
                merged.append((bound, count))
    # ensureMonotonicAndIgnoreSmallDeltas: decreases are lifted to the last kept count; `prev`
    # is not updated on a correction.
    prev = merged[0][1]
    for i in range(1, len(merged)):
        bound, cur = merged[i]
        if cur == prev:
            continue
        if cur < prev or _almost_equal(prev, cur, SMALL_DELTA_TOLERANCE):
            merged[i] = (bound, prev)
            continue
        prev = cur
    return merged


def _locate(q: float, pairs: list[tuple[float, float]]) -> tuple[int, float] | None:
    """The bucket index holding rank q * total (sort.Search over finite buckets), and the rank."""
    if len(pairs) < 2:
        return None
    total = pairs[-1][1]
    if total == 0:
        return None
    rank = q * total
    for i in range(len(pairs) - 1):
        if pairs[i][1] >= rank:
            return i, rank
    return len(pairs) - 1, rank


def quantile(q: float, buckets: Buckets | None) -> float:
    """Prometheus `histogram_quantile(q, buckets)`; NaN when empty, missing or bad."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if buckets is None:
        return math.nan
    pairs = _prepared(buckets)
    if pairs is None:
        return math.nan
    found = _locate(q, pairs)
    if found is None:
        return math.nan
    b, rank = found
    if b == len(pairs) - 1:
        return pairs[-2][0]
    if b == 0 and pairs[0][0] <= 0:
        return pairs[0][0]
    start = 0.0
    end, count = pairs[b]
    if b > 0:
        start = pairs[b - 1][0]
        count -= pairs[b - 1][1]
        rank -= pairs[b - 1][1]
    if count == 0:
        # Go float division: 0/0 is NaN (only reachable with q == 0 and an empty first bucket).
        return math.nan if rank == 0 else start + (end - start) * math.copysign(math.inf, rank)
    return start + (end - start) * (rank / count)


def bracket(q: float, buckets: Buckets | None) -> tuple[float, float]:
    """The (lower, upper) edges of the bucket holding the q-quantile; (NaN, NaN) when unknown.

    The first bucket's lower edge is 0 when its bound is positive (as the interpolation
    assumes); a quantile in the +Inf bucket is (highest finite bound, +Inf).
    """
    nan = (math.nan, math.nan)
    if buckets is None or math.isnan(q) or not 0 <= q <= 1:
        return nan
    pairs = _prepared(buckets)
    if pairs is None:
        return nan
    found = _locate(q, pairs)
    if found is None:
        return nan
    b, _ = found
    if b == 0:
        return (0.0 if pairs[0][0] > 0 else -math.inf, pairs[0][0])
    return (pairs[b - 1][0], pairs[b][0])


@dataclass(frozen=True, slots=True)
class Exceedance:
    """Observations above `edge` (a bucket bound) out of `total`."""

    edge: float
    above: float
    total: float

    @property
    def fraction(self) -> float:
        return self.above / self.total if self.total > 0 else math.nan


def exceedance(limit: float, buckets: Buckets | None) -> Exceedance | None:
    """Count observations above the smallest bucket bound >= `limit`.

    Using the bound at or above the limit never overstates how many observations exceed the
    limit, so a regression test built on it stays conservative. None when the histogram is
    unusable or empty, or when no finite bound reaches the limit (the buckets cannot tell).
    """
    if buckets is None or math.isnan(limit):
        return None
    pairs = _prepared(buckets)
    if pairs is None or len(pairs) < 2:
        return None
    total = pairs[-1][1]
    if not total > 0:
        return None
    # Tolerate float noise from scaling (0.1 * 3 vs 0.30000000000000004).
    for bound, count in pairs:
        if bound >= limit * (1 - 1e-12) or bound >= limit:
            if math.isinf(bound):
                return None
            return Exceedance(edge=bound, above=max(0.0, total - count), total=total)
    return None


def fraction_above(bound: float, buckets: Buckets | None) -> float:
    """Fraction of observations above the smallest bucket bound >= `bound` (NaN if unknown)."""
    found = exceedance(bound, buckets)
    return found.fraction if found is not None else math.nan


def is_reset(prev: Buckets, cur: Buckets) -> bool:
    """True when `cur` cannot be a later reading of the same counters as `prev`."""
    if prev.bounds != cur.bounds or len(prev.counts) != len(cur.counts):
        return True
    return any(c < p for p, c in zip(prev.counts, cur.counts, strict=True))


def delta(prev: Buckets | None, cur: Buckets) -> Buckets | None:
    """Increase from `prev` to `cur` (two scrapes of cumulative counters).

    A reset (any count decreased, or the bucket layout changed: the pod restarted) means the
    counters started again from zero, so the increase is `cur` itself: never negative. None
    when `cur` is unusable (NaN, negative, malformed).
    """
    if problem(cur) is not None:
        return None
    if prev is None or problem(prev) is not None or is_reset(prev, cur):
        return cur
    return Buckets(
        bounds=cur.bounds,
        counts=tuple(c - p for p, c in zip(prev.counts, cur.counts, strict=True)),
        sum=cur.sum - prev.sum,
    )


def merge(*histograms: Buckets) -> Buckets:
    """Sum histograms with the same bounds (pods of one pool). Different bounds are a
    programming or configuration error: raise ValueError naming both layouts."""
    if not histograms:
        raise ValueError("merge needs at least one histogram")
    first = histograms[0]
    for i, h in enumerate(histograms):
        if len(h.bounds) != len(h.counts):
            raise ValueError(f"histogram {i} has {len(h.bounds)} bounds but {len(h.counts)} counts")
        if h.bounds != first.bounds:
            raise ValueError(
                f"cannot merge histograms with different bucket bounds: histogram 0 has "
                f"{_fmt(first.bounds)}, histogram {i} has {_fmt(h.bounds)}"
            )
    counts = tuple(math.fsum(col) for col in zip(*(h.counts for h in histograms), strict=True))
    return Buckets(bounds=first.bounds, counts=counts, sum=math.fsum(h.sum for h in histograms))


def scale(buckets: Buckets, factor: float) -> Buckets:
    """Multiply every bound (and the sum) by `factor`: e.g. per-step latency -> per-token with
    factor 1 / tokens-per-step. Counts are unchanged; +Inf stays +Inf."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"scale factor must be finite and positive, got {factor}")
    return Buckets(
        bounds=tuple(b * factor for b in buckets.bounds),
        counts=buckets.counts,
        sum=buckets.sum * factor,
    )


def resolution_at(
    q: float, reference: Buckets | None, margin: float, layout: Sequence[float] | None = None
) -> resolution.Resolution | None:
    """What a guard "within (1 + margin) x this histogram's q-quantile" can claim: the edges
    around the bucket holding the quantile, the canary counted in `layout` (default: the
    reference's own bounds). None when the quantile is unknown."""
    lo, hi = bracket(q, reference)
    if reference is None or math.isnan(lo) or math.isnan(hi):
        return None
    return resolution.relative(
        reference.bounds if layout is None else layout, max(lo, 0.0), hi, margin
    )


def _fmt(bounds: Sequence[float]) -> str:
    return "[" + ", ".join(f"{b:g}" for b in bounds) + "]"
