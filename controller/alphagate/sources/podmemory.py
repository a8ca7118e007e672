"""What a pod-scrape source keeps between scrapes, counted, and the page checks that bound it.

A `ScrapeSource` keeps, per (pool, pod), the pod's last page (its series of our families) and
its increments over the window (`increments.PodState`). That is memory one canary makes the
controller hold for as long as its window: 20 canaries selecting 4 pods of heavy pages held
601 MB; one pod exporting a histogram of 19,000 buckets added 1.7 MB an increment to a ring of
4,096. So what is kept is counted in cells (one number each) and each canary may keep its share
of the budget (`sources.budget.KEPT`); a histogram has at most `MAX_BUCKETS` buckets.
"""

from __future__ import annotations

from collections.abc import Iterable

from alphagate.errors import BudgetError, BudgetKind
from alphagate.sources.budget import MAX_BUCKETS
from alphagate.sources.increments import Increment, PodState
from alphagate.sources.page import Page, Series

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


def increment_cells(inc: Increment) -> int:
    """Numbers held by one increment."""
    return (
        INCREMENT_CELLS
        + len(inc.per_position)
        + sum(len(buckets) + 1 for buckets, _ in inc.histograms.values())
    )


def state_cells(state: PodState) -> int:
    """Numbers one pod's memory holds: its last page's series and its increments."""
    last = series_cells(state.last.values()) if state.last is not None else 0
    return last + sum(map(increment_cells, state.ring))


def kept_cells(states: Iterable[PodState]) -> int:
    """Numbers every pod's memory of one source holds."""
    return sum(map(state_cells, states))


def check_buckets(page: Page, where: str) -> None:
    """Refuse (BUCKETS) a page with a histogram of more than MAX_BUCKETS buckets: each bucket
    is kept per pod per interval, and such a layout is a broken or hostile exporter."""
    for s in page.series.values():
        for fam, h in s.histograms.items():
            if len(h.buckets) > MAX_BUCKETS:
                raise BudgetError(
                    BudgetKind.BUCKETS,
                    f"histogram {fam.value} {dict(s.labels)} has {len(h.buckets)} buckets; the "
                    f"controller keeps at most {MAX_BUCKETS} per histogram",
                    target=where,
                )


__all__ = [
    "check_buckets",
    "increment_cells",
    "kept_cells",
    "series_cells",
    "state_cells",
]
