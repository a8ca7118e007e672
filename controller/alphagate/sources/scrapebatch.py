"""One cycle's pod scrapes for every canary at once: one wave of GETs, not one per canary.

:meth:`ScrapeSource.observe` discovers, fetches and assembles one canary; a cycle of 20
canaries of 50 pods was 20 waves, each ending in a tail where a few GETs kept the others
waiting. :func:`observe_scrapes` runs the same three steps for many reads: every read's
:meth:`~ScrapeSource.plan` (discovery), then all their GETs together on the fetch loop (each
source through its own Fetcher: its headers, deadline, byte and line caps, its own counters),
then every read's :meth:`~ScrapeSource.finish` (increments and pools) in order. Each source
keeps its own ``maxConcurrency``; the wave as a whole holds at most :func:`wave_bound` GETs in
flight, so it never needs more memory than one source may (``SCRAPE_MEMORY_BUDGET``) nor more
sockets than one source may open.

The Observations are those of one read at a time: a source's pods, pages, clock and increments
memory are its own, and which other reads share its wave changes none of them. A source read
twice in one call reads its later reads after the wave, in order, as it would alone. A failure
is one read's: a pod's failure is its pool's (as always), a step that raises is that read's
result (an exception, handed back, never raised over the others).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from alphagate.config import SpeculativeCanarySpec
from alphagate.config.source import SCRAPE_MEMORY_BUDGET, scrape_page_cost
from alphagate.core.model import Observation
from alphagate.sources.fetcher import run_together
from alphagate.sources.scrape import Plan, Scraped, ScrapeSource

MAX_IN_FLIGHT: Final = 256
"""GETs in flight in one wave at most: the most one source may ask for (``maxConcurrency``
is at most 256), so a wave never opens more sockets at once than one source could."""


@dataclass(frozen=True, slots=True)
class ScrapeRead:
    """One canary's read of a cycle through a pod-scrape source."""

    source: ScrapeSource
    spec: SpeculativeCanarySpec
    start: float
    end: float
    interval_seconds: float


def batchable(source: object) -> TypeGuard[ScrapeSource]:
    """A ScrapeSource whose read is the stock plan, scrape, finish (a subclass that scrapes
    its own way, as the backtest's recorded pages do, reads alone)."""
    return (
        isinstance(source, ScrapeSource)
        and type(source).observe is ScrapeSource.observe
        and type(source).scrape is ScrapeSource.scrape
        and type(source).scraping is ScrapeSource.scraping
    )


def wave_bound(plans: Sequence[Plan]) -> int:
    """GETs in flight in one wave: as many of the costliest page as fit the memory budget the
    config keeps for scrapes, at most MAX_IN_FLIGHT. Each source's maxConcurrency x page cost
    is validated against that budget, so the bound is never below the costliest source's own
    maxConcurrency (43 GETs at the default caps: 2 MiB and 20,000 lines a page)."""
    cost = max(scrape_page_cost(p.settings.max_body_bytes, p.settings.max_lines) for p in plans)
    return max(1, min(MAX_IN_FLIGHT, SCRAPE_MEMORY_BUDGET // max(cost, 1)))


def observe_scrapes(reads: Sequence[ScrapeRead]) -> list[Observation | Exception]:
    """Each read's Observation, in order, as its source's ``observe`` gives it one read at a
    time, or the exception its read raised (a bug: sources report trouble as data)."""
    out: list[Observation | Exception | None] = [None] * len(reads)
    first: dict[int, int] = {}  # id(source) -> the read of it in the wave
    later: list[int] = []
    for i, read in enumerate(reads):
        if id(read.source) in first:
            later.append(i)
        else:
            first[id(read.source)] = i
    wave = sorted(first.values())
    with contextlib.ExitStack() as held:
        # Every source of the wave stays ours from plan to finish, as in `observe`; taken in
        # one order (by id) so two waves over the same sources cannot deadlock.
        for i in sorted(wave, key=lambda i: id(reads[i].source)):
            held.enter_context(reads[i].source.lock)
        _wave([reads[i] for i in wave], out, wave)
    for i in later:  # the same source again: after its first read, as one at a time would
        read = reads[i]
        try:
            out[i] = read.source.observe(
                read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
            )
        except Exception as exc:  # one read's bug is that read's result
            out[i] = exc
    assert all(o is not None for o in out)
    return [o for o in out if o is not None]


def _wave(
    reads: Sequence[ScrapeRead], out: list[Observation | Exception | None], at: Sequence[int]
) -> None:
    """Plan every read, GET all their pages in one wave, finish every read (into `out[at]`)."""
    plans: list[Plan | None] = []
    for read, i in zip(reads, at, strict=True):
        try:
            plans.append(
                read.source.plan(
                    read.spec, start=read.start, end=read.end, interval=read.interval_seconds
                )
            )
        except Exception as exc:  # one read's bug is that read's result
            out[i] = exc
            plans.append(None)
    ready = [p for p in plans if p is not None]
    room = asyncio.Semaphore(wave_bound(ready)) if ready else None
    jobs: list[tuple[ScrapeRead, Plan, int]] = []
    coros: list[Coroutine[Any, Any, dict[str, Scraped]]] = []
    for read, plan, i in zip(reads, plans, at, strict=True):
        if plan is None:
            continue
        try:
            coros.append(read.source.scraping(plan.targets(), plan.settings, room))
        except Exception as exc:  # one read's bug is that read's result
            out[i] = exc
            continue
        jobs.append((read, plan, i))
    for (read, plan, i), got in zip(jobs, run_together(coros), strict=True):
        if isinstance(got, BaseException):
            if not isinstance(got, Exception):
                raise got  # an interrupt, not a read's failure
            out[i] = got
            continue
        try:
            out[i] = read.source.finish(plan, got)
        except Exception as exc:  # one read's bug is that read's result
            out[i] = exc


__all__ = ["MAX_IN_FLIGHT", "ScrapeRead", "batchable", "observe_scrapes", "wave_bound"]
