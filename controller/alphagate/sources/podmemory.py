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
from alphagate.sources.page import Page

# The counting itself (INCREMENT_CELLS, SERIES_CELLS, series_cells) lives beside the increments,
# which count themselves once when made (`increments.Increment.cells`, `PodState.cells`).


def increment_cells(inc: Increment) -> int:
    """Numbers held by one increment: INCREMENT_CELLS, its positions, and its buckets (each
    histogram one more, for its sum); counted once, when it is made."""
    return inc.cells


def state_cells(state: PodState) -> int:
    """Numbers one pod's memory holds: its last page's series and its increments (the count
    `PodState` keeps as they come and go)."""
    return state.cells


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
    "state_cells",
]
