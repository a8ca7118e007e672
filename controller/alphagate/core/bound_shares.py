"""A pool's shares above bucket bounds over independent batches, and its histogram pooled
over the layout both pools carry: what every test of a latency comparison reads, each sample's
bounds indexed once per comparison and each bound's share worked out once. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

from alphagate.core.batching import Denominators, Ratio, blocks
from alphagate.core.model import Buckets, LatencySample

# increase() extrapolates counts to fractions; below a millionth of an observation is noise
# (and its square underflows the batch statistics)
MIN_COUNT: Final = 1e-6


class Indexes:
    """Each sample's cumulative count by bound, built once per comparison: the batches, the
    pooled histograms and every baseline reference read the same samples' bounds."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Buckets, dict[float, float]]] = {}

    def __call__(self, b: Buckets) -> dict[float, float]:
        got = self._by_id.get(id(b))
        if got is None or got[0] is not b:
            got = (b, cum_index(b))
            self._by_id[id(b)] = got
        return got[1]


class SharesAbove:
    """A pool's share of observations above a bound over independent batches of its samples;
    the batches are cut once, as every bound of a comparison reads the same ones, and each
    bound's share is worked out once (the tail's edges are bounds the tests read too). What
    depends on the batches' totals alone is shared by every bound (`Denominators`)."""

    def __init__(
        self, samples: Sequence[LatencySample], batch_seconds: float, index: Indexes
    ) -> None:
        usable = [s for s in samples if s.buckets is not None and s.buckets.total >= MIN_COUNT]
        self._blocks: list[tuple[float, list[tuple[float, dict[float, float]]]]] = []
        for block in blocks(usable, batch_seconds):
            members = [(s.buckets.total, index(s.buckets)) for s in block if s.buckets is not None]
            total = 0.0
            for n, _ in members:
                total += n
            self._blocks.append((total, members))
        # The usual batch is one sample (blocks of 30 s over 30 s scrapes): its share above a
        # bound is one subtraction, read in one comprehension.
        self._singles = (
            [(members[0][0], members[0][1].get) for _, members in self._blocks]
            if all(len(members) == 1 for _, members in self._blocks)
            else None
        )
        totals = [total for total, _ in self._blocks]
        self._weighed = [total > 0 for total in totals]  # `ratio` drops batches of no weight
        self._all_weighed = all(self._weighed)
        self._ratio = Denominators([t for t, w in zip(totals, self._weighed, strict=True) if w])
        self._seen: dict[float, Ratio | None] = {}

    def __call__(self, bound: float) -> Ratio | None:
        if bound in self._seen:
            return self._seen[bound]
        nan = math.nan
        if self._singles is not None:
            # max(0.0, v) with NaN to 0, without the call: 0.0 + v is v itself for v > 0
            aboves = [v if (v := n - get(bound, nan)) > 0.0 else 0.0 for n, get in self._singles]
        else:
            aboves = []
            for _, members in self._blocks:
                above = 0.0
                for n, cum in members:
                    v = n - cum.get(bound, nan)
                    if v > 0.0:
                        above += v
                aboves.append(above)
        if not self._all_weighed:
            aboves = [a for a, w in zip(aboves, self._weighed, strict=True) if w]
        self._seen[bound] = got = self._ratio(aboves)
        return got


def cum_index(b: Buckets) -> dict[float, float]:
    """The cumulative count at each bound of `b` (the first, should a bound repeat): one
    lookup per bound where a comparison reads every bound of every sample."""
    if len(b.bounds) == len(b.counts):
        out = dict(zip(b.bounds, b.counts, strict=True))
        if len(out) == len(b.bounds):  # no bound repeats: the same dict, built in C
            return out
    out = {}
    for bound, count in zip(b.bounds, b.counts, strict=True):
        out.setdefault(bound, count)
    return out


def common_bounds(
    canary: Sequence[LatencySample], baseline: Sequence[LatencySample]
) -> list[float]:
    """Finite bucket bounds every sample of both pools carries (the layouts must agree)."""
    layouts = [
        frozenset(s.buckets.bounds)
        for s in (*canary, *baseline)
        if s.buckets is not None and s.buckets.total > 0
    ]
    if not layouts:
        return []
    return sorted(x for x in frozenset.intersection(*layouts) if math.isfinite(x))


def pooled(
    samples: Sequence[LatencySample],
    layout: Sequence[float],
    index: Callable[[Buckets], dict[float, float]] = cum_index,
) -> Buckets | None:
    """One cumulative histogram over the samples at the common finite bounds `layout`."""
    usable = [s.buckets for s in samples if s.buckets is not None and s.buckets.total > 0]
    if not usable or not layout:
        return None
    rows = [at(cum, layout) for cum in map(index, usable)]
    counts = [math.fsum(column) for column in zip(*rows, strict=True)]
    total = math.fsum(b.total for b in usable)
    return Buckets(bounds=(*layout, math.inf), counts=(*counts, total))


def at(cum: dict[float, float], layout: Sequence[float]) -> Sequence[float]:
    """The cumulative counts at `layout` (NaN where a bound is missing), in one C-level
    lookup for the usual sample that has them all."""
    try:
        return [cum[x] for x in layout]
    except KeyError:
        return [cum.get(x, math.nan) for x in layout]
