"""The baseline quantile the latency guard's edges stand on, robust to one pod's episode.

The quantile's Pass and Fail edges (core/resolution.py) sit around the bucket holding the
baseline's quantile. Pooled over all baseline pods, one pod's stall or burst episode (a few
percent of its requests several times slower) lifts the pooled P99 to that episode's latency,
and with it the Fail edge: in such a window a canary whose whole tail is 1.5x slower stays far
below the edge, the window passes on the mean, and the fail streak starts over. One pod's
episode is one batch, not the baseline's quantile (the same rule as `checks.decisive`).

With three or more baseline pods that each carry enough requests to place their own quantile
(at least 1 / (1 - q)), the reference is the pod whose quantile is the median of the pods'
(its own window histogram; of an even number, the upper median); otherwise the pooled
histogram, as before. A claim of "within" (the Pass edge) stands on the lowest such pod
(`pass_reference`, two or more pods): a Pass must hold against the baseline at its best. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

from alphagate.core import histogram
from alphagate.core.model import Buckets, LatencySample

MIN_PODS: Final = 3  # below this a median is no more robust than the pool
PASS_MIN_PODS: Final = 2  # the lowest of two pods is already below either's episode


def _by_pod(samples: Sequence[LatencySample]) -> dict[str, list[LatencySample]]:
    pods: dict[str, list[LatencySample]] = {}
    for s in samples:
        if s.buckets is not None and s.buckets.total > 0:
            pods.setdefault(s.pod, []).append(s)
    return pods


def _rank(
    pods: dict[str, list[LatencySample]],
    quantile: float,
    pool: Callable[[Sequence[LatencySample]], Buckets | None],
) -> list[Buckets] | None:
    need = 1.0 / max(1.0 - quantile, 1e-12)
    ranked: list[tuple[float, float, Buckets]] = []
    for group in pods.values():
        h = pool(group)
        if h is None or h.total < need:
            return None
        lo, hi = histogram.bracket(quantile, h)
        if math.isnan(lo) or math.isnan(hi):
            return None
        ranked.append((hi, lo, h))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [h for _, _, h in ranked]


def baseline_reference(
    samples: Sequence[LatencySample],
    quantile: float,
    pool: Callable[[Sequence[LatencySample]], Buckets | None],
) -> Buckets | None:
    """The histogram whose `quantile` bucket the edges stand on: the median pod's (three or
    more pods, each with >= 1 / (1 - quantile) requests), else all pooled. `pool` pools
    samples into one histogram at the common layout."""
    return references(samples, quantile, pool, pool(samples))[0]


def pass_reference(
    samples: Sequence[LatencySample],
    quantile: float,
    pool: Callable[[Sequence[LatencySample]], Buckets | None],
) -> Buckets | None:
    """The histogram whose `quantile` bucket a claim of "within" stands on: the lowest pod's
    (two or more pods, each with >= 1 / (1 - quantile) requests), else all pooled. Stall
    episodes are short and hit pods apart: with three baseline pods at 3 requests/s, two
    stalled in about a quarter of the windows, lifting the median pod's P99 and with it the
    Pass edge, so a canary 1.2x slower on every request was shown within in 15 of 180
    windows. A claim needs the baseline at its best; a Fail keeps the median."""
    return references(samples, quantile, pool, pool(samples))[1]


def references(
    samples: Sequence[LatencySample],
    quantile: float,
    pool: Callable[[Sequence[LatencySample]], Buckets | None],
    pooled: Buckets | None,
) -> tuple[Buckets | None, Buckets | None]:
    """(`baseline_reference`, `pass_reference`) from one ranking of the pods (the latency
    check needs both, and the ranking pools every pod; the two rules are stated once, here);
    `pooled` is `pool(samples)`. A pod with fewer than 1 / (1 - quantile) requests or no
    quantile, or an unnamed one, leaves both pooled."""
    pods = _by_pod(samples)
    ranked = None if len(pods) < PASS_MIN_PODS or "" in pods else _rank(pods, quantile, pool)
    if ranked is None:
        return pooled, pooled
    # the upper median: one bad pod of four moves nothing
    fail = ranked[len(ranked) // 2] if len(ranked) >= MIN_PODS else pooled
    return fail, ranked[0]
