"""What one pod's counters did between two scrapes: reset-safe increments of the counters and
histograms alphagate reads (a restart, a `_created` change or a counter that went down starts
afresh, never a negative count), the pod's memory between scrapes, and the checks a page must
pass before its numbers are used. Pure: the scrape source feeds it pages."""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from alphagate.core.model import AcceptanceSample, Buckets, LatencySample
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources import page
from alphagate.sources.common import MAX_POSITIONS, HistSum, has_drafts, per_position_tuple
from alphagate.sources.page import Counter, Gauge, Hist, LabelKey, Series

RING_LIMIT: Final = 4096
"""Hard bound on increments kept per pod, whatever the window."""

INCREMENT_CELLS = 10
"""Numbers every increment carries besides its positions and buckets (times, counts...)."""
SERIES_CELLS = 12
"""A series' own objects (its label set, its dicts) cost about as much as this many numbers.
Measured with tracemalloc on kept pods (parser caches cleared): a vLLM page's pod, 5
increments, 24 KB for 411 cells; a pod of 1,000-series pages, 2.92 MB for 18,125 cells. At
`CELL_BYTES` a cell and these per series: 42 KB and 3.0 MB, never under what was measured."""


def series_cells(series: Iterable[Series]) -> int:
    """Numbers held by these series (each a cell)."""
    n = 0
    for s in series:
        n += SERIES_CELLS + len(s.counters) + len(s.created) + len(s.gauges)
        n += len(s.per_position) + len(s.per_position_created)
        for h in s.histograms.values():
            n += len(h.buckets) + 3
    return n


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
    # Derived once, not compared: every observe whose window holds the increment (tens of
    # them) reads these, and an increment never changes.
    cells: int = field(init=False, repr=False, compare=False)  # numbers it holds (podmemory)
    tpot: LatencySample | None = field(init=False, repr=False, compare=False)
    batch: AcceptanceSample | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        hist_cells = sum(len(buckets) + 1 for buckets, _ in self.histograms.values())
        object.__setattr__(self, "cells", INCREMENT_CELLS + len(self.per_position) + hist_cells)
        object.__setattr__(self, "tpot", latency_sample(self, Hist.TPOT))
        object.__setattr__(self, "batch", _batch(self))


def _batch(inc: Increment) -> AcceptanceSample | None:
    """The increment as one acceptance batch; None when it carries no drafts, or when it is
    not speculating or has an out-of-range position (`acceptance_batch` says which)."""
    if not inc.speculating or (inc.per_position and max(inc.per_position) >= MAX_POSITIONS):
        return None
    sample = AcceptanceSample(
        drafts=inc.drafts,
        draft_tokens=inc.draft_tokens,
        accepted_tokens=inc.accepted,
        per_position=per_position_tuple(inc.per_position),
        pod=inc.pod,
        start=inc.start,
        end=inc.end,
    )
    return sample if has_drafts(sample) else None


def acceptance_batch(inc: Increment) -> AcceptanceSample | None:
    """A speculating increment's batch (None: it carries no drafts). Raises SourceError for a
    draft position beyond MAX_POSITIONS, as building the batch always has."""
    if inc.batch is not None:
        return inc.batch
    if inc.per_position and max(inc.per_position) >= MAX_POSITIONS:
        per_position_tuple(inc.per_position)  # raises, naming the position
    return None


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
    now, before = cur.buckets, prev.buckets
    # Past the first test both hold the same bounds, so `before` is read in `now`'s order.
    reset = (
        now.keys() != before.keys()
        or _created_changed(cur.created, prev.created)
        or any(map(operator.lt, now.values(), map(before.__getitem__, now)))
        or (math.isfinite(cur.count) and math.isfinite(prev.count) and cur.count < prev.count)
    )
    if reset:
        return dict(now), cur_sum, True
    prev_sum = prev.sum if math.isfinite(prev.sum) else 0.0
    return (
        dict(zip(now, map(operator.sub, now.values(), map(before.__getitem__, now)), strict=True)),
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
    """Last snapshot of one pod (in one pool) and its recent increments.

    `cells` counts the numbers both hold (`podmemory`), kept current by `update` and `prune`
    so that the source's count after each read costs one addition per pod."""

    pod: str
    last: dict[LabelKey, Series] | None = None
    last_at: float = 0.0
    ring: deque[Increment] = field(default_factory=lambda: deque(maxlen=RING_LIMIT))
    last_cells: int = 0  # series_cells(last)
    cells: int = 0  # last_cells + the ring's increments' cells

    def update(self, series: dict[LabelKey, Series], at: float, *, since_start: bool) -> None:
        if self.last is None:
            if since_start:
                began = _started_at(series.values())
                start = began if began is not None and began < at else at
                self._append(increment(self.pod, None, series, start=start, end=at))
        else:
            self._append(increment(self.pod, self.last, series, start=self.last_at, end=at))
        new_cells = series_cells(series.values())
        self.cells += new_cells - self.last_cells
        self.last, self.last_cells = series, new_cells
        self.last_at = at

    def _append(self, inc: Increment) -> None:
        if len(self.ring) == self.ring.maxlen:  # the deque drops its oldest
            self.cells -= self.ring[0].cells
        self.ring.append(inc)
        self.cells += inc.cells

    def prune(self, before: float) -> None:
        while self.ring and self.ring[0].end < before:
            self.cells -= self.ring.popleft().cells


def _started_at(series: Iterable[Series]) -> float | None:
    """The pod's start as its counters' `_created` stamps tell it, if they do."""
    stamps = [v for s in series for v in s.created.values() if math.isfinite(v)]
    return min(stamps) if stamps else None
