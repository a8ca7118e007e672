"""What one pod's counters did between two scrapes: reset-safe increments of the counters and
histograms alphagate reads (a restart, a `_created` change or a counter that went down starts
afresh, never a negative count), the pod's memory between scrapes, and the checks a page must
pass before its numbers are used. Pure: the scrape source feeds it pages."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from alphagate.core.model import Buckets, LatencySample
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources import page
from alphagate.sources.common import MAX_POSITIONS, HistSum
from alphagate.sources.page import Counter, Gauge, Hist, LabelKey, Series

RING_LIMIT: Final = 4096
"""Hard bound on increments kept per pod, whatever the window."""


@dataclass(frozen=True, slots=True)
class Increment:
    """What one pod did between two scrapes (summed over its engines)."""

    pod: str
    start: float
    end: float
    speculating: bool
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: Mapping[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0
    histograms: Mapping[Hist, tuple[Mapping[float, float], float]] = field(default_factory=dict)
    resets: int = 0  # series found reset (restart) in this increment
    running: float | None = None  # vllm:num_requests_running at the end (None: not exported)


def _delta(cur: float, prev: float | None, reset: bool) -> tuple[float, bool]:
    """Counter increase; a decrease is a reset (counts restart at 0). Returns (inc, was_reset)."""
    if prev is None:
        return cur, False
    if reset or cur < prev:
        return cur, True
    return cur - prev, False


def _created_changed(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a != b


def _hist_delta(
    cur: page.Histogram, prev: page.Histogram | None
) -> tuple[dict[float, float], float, bool]:
    cur_sum = cur.sum if math.isfinite(cur.sum) else 0.0
    if prev is None:
        return dict(cur.buckets), cur_sum, False
    reset = (
        set(cur.buckets) != set(prev.buckets)
        or _created_changed(cur.created, prev.created)
        or any(v < prev.buckets[le] for le, v in cur.buckets.items() if le in prev.buckets)
        or (math.isfinite(cur.count) and math.isfinite(prev.count) and cur.count < prev.count)
    )
    if reset:
        return dict(cur.buckets), cur_sum, True
    prev_sum = prev.sum if math.isfinite(prev.sum) else 0.0
    return (
        {le: v - prev.buckets[le] for le, v in cur.buckets.items()},
        max(cur_sum - prev_sum, 0.0),
        False,
    )


def increment(
    pod: str,
    prev: Mapping[LabelKey, Series] | None,
    cur: Mapping[LabelKey, Series],
    *,
    start: float,
    end: float,
) -> Increment:
    """The increment from `prev` to `cur` snapshots of one pod's (filtered) series.

    `prev` None means "count from zero" (a series born since the last scrape, or since_start).
    """
    totals = dict.fromkeys(Counter, 0.0)
    per_pos: dict[int, float] = {}
    hists: dict[Hist, HistSum] = {}
    resets = 0
    speculating = False
    running: float | None = None
    for key, s in cur.items():
        r = s.gauges.get(Gauge.RUNNING)
        if r is not None:
            running = (running or 0.0) + r
        p = prev.get(key) if prev is not None else None
        speculating = speculating or s.speculating
        for c, value in s.counters.items():
            created = _created_changed(s.created.get(c), p.created.get(c) if p else None)
            inc, was = _delta(value, p.counters.get(c) if p else None, created)
            totals[c] += inc
            resets += was
        for pos, value in s.per_position.items():
            created = _created_changed(
                s.per_position_created.get(pos), p.per_position_created.get(pos) if p else None
            )
            inc, was = _delta(value, p.per_position.get(pos) if p else None, created)
            per_pos[pos] = per_pos.get(pos, 0.0) + inc
            resets += was
        for h, hist in s.histograms.items():
            buckets, total, was = _hist_delta(hist, p.histograms.get(h) if p else None)
            hists.setdefault(h, HistSum()).add(buckets, total)
            resets += was
    return Increment(
        pod=pod,
        start=start,
        end=end,
        speculating=speculating,
        drafts=totals[Counter.DRAFTS],
        draft_tokens=totals[Counter.DRAFT_TOKENS],
        accepted=totals[Counter.ACCEPTED],
        per_position=per_pos,
        generation_tokens=totals[Counter.GENERATION_TOKENS],
        histograms={h: (acc.counts, acc.sum) for h, acc in hists.items()},
        resets=resets,
        running=running,
    )


def latency_sample(inc: Increment, hist: Hist) -> LatencySample | None:
    """One pod's increment of a latency histogram as the guard's batch (exact sum and count);
    None when the pod exported no such histogram or observed nothing in the interval."""
    got = inc.histograms.get(hist)
    if got is None:
        return None
    counts, total_sum = got
    bounds = tuple(sorted(counts))
    if not bounds or bounds[-1] != math.inf:
        return None
    count = counts[math.inf]
    if not count > 0:
        return None
    return LatencySample(
        count=count,
        sum=total_sum,
        buckets=Buckets(bounds=bounds, counts=tuple(counts[b] for b in bounds)),
        pod=inc.pod,
        start=inc.start,
        end=inc.end,
    )


def check_page(series: Iterable[Series], target: str) -> None:
    """Values must be finite, counts never negative (a negative counter would read as a reset
    and then as growth) and draft positions plausible (a position label sizes a list)."""
    for s in series:
        counts = [*s.counters.values(), *s.per_position.values()]
        for h in s.histograms.values():
            counts.extend(h.buckets.values())
            if math.isfinite(h.count):
                counts.append(h.count)
        for v in (*counts, *s.gauges.values()):
            if not math.isfinite(v):
                raise SourceError(
                    SourceErrorKind.NAN, f"series {dict(s.labels)} has value {v}", target=target
                )
        if counts and min(counts) < 0:
            raise SourceError(
                SourceErrorKind.PARSE,
                f"series {dict(s.labels)} has a negative count ({min(counts):g})",
                target=target,
            )
        for pos in (*s.per_position, *s.per_position_created):
            if not 0 <= pos < MAX_POSITIONS:
                raise SourceError(
                    SourceErrorKind.PARSE,
                    f"series {dict(s.labels)} has draft position {pos}, beyond the "
                    f"{MAX_POSITIONS} alphagate accepts",
                    target=target,
                )


@dataclass(slots=True)
class PodState:
    """Last snapshot of one pod (in one pool) and its recent increments."""

    pod: str
    last: dict[LabelKey, Series] | None = None
    last_at: float = 0.0
    ring: deque[Increment] = field(default_factory=lambda: deque(maxlen=RING_LIMIT))

    def update(self, series: dict[LabelKey, Series], at: float, *, since_start: bool) -> None:
        if self.last is None:
            if since_start:
                began = _started_at(series.values())
                start = began if began is not None and began < at else at
                inc = increment(self.pod, None, series, start=start, end=at)
                self.ring.append(inc)
        else:
            self.ring.append(increment(self.pod, self.last, series, start=self.last_at, end=at))
        self.last = series
        self.last_at = at

    def prune(self, before: float) -> None:
        while self.ring and self.ring[0].end < before:
            self.ring.popleft()


def _started_at(series: Iterable[Series]) -> float | None:
    """The pod's start as its counters' `_created` stamps tell it, if they do."""
    stamps = [v for s in series for v in s.created.values() if math.isfinite(v)]
    return min(stamps) if stamps else None
