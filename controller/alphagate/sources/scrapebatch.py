"""One cycle's pod scrapes for every canary at once, each canary on its own budgets.

:meth:`ScrapeSource.observe` discovers, fetches and assembles one canary; a cycle of 20
canaries of 50 pods was 20 waves, each ending in a tail where a few GETs kept the others
waiting. :func:`observe_scrapes` runs the same three steps for many reads: every read's
:meth:`~ScrapeSource.plan` (discovery), then all their GETs side by side on the fetch loop, then
each read's :meth:`~ScrapeSource.finish` (increments and pools) as soon as its own GETs are
done, handed to `on_done` at once.

Isolation (docs/security.md): each source GETs through its own Fetcher, at most its own
``maxConcurrency`` at a time (no other policy's settings lower it), within its own read
deadline (`sources.budget.read_deadline`: a pod that accepts and never answers delays only its
own canary, whose read then ends typed READ_TIME), its pages in flight charged to its own
account and parsed off the loop with the canaries taken in turn (`sources.parsepool`).

The Observations are those of one read at a time: a source's pods, pages, clock and increments
memory are its own, and which other reads share its wave changes none of them. A source read
twice in one call reads its later reads after the wave, in order, as it would alone. A failure
is one read's: a pod's failure is its pool's (as always), a step that raises is that read's
result (an exception, handed back, never raised over the others).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, TypeGuard

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.sources.fetcher import submit
from alphagate.sources.pageread import Scraped
from alphagate.sources.scrape import Plan, ScrapeSource

Done = Callable[[int, "Observation | Exception"], None]
"""Told each read's result (its index in the call) as soon as it is known."""

PLAN_THREADS: Final = 8
"""Threads that plan (discover) and finish (increments, pools) a wave's reads."""


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


def observe_scrapes(
    reads: Sequence[ScrapeRead], on_done: Done | None = None
) -> list[Observation | Exception]:
    """Each read's Observation, in order, as its source's ``observe`` gives it one read at a
    time, or the exception its read raised (a bug: sources report trouble as data). Each is
    also handed to `on_done` as soon as it is known."""
    out: list[Observation | Exception | None] = [None] * len(reads)

    def done(i: int, result: Observation | Exception) -> None:
        out[i] = result
        if on_done is not None:
            on_done(i, result)

    first: dict[int, int] = {}  # id(source) -> the read of it in the wave
    later: list[int] = []
    for i, read in enumerate(reads):
        if id(read.source) in first:
            later.append(i)
        else:
            first[id(read.source)] = i
    _wave(reads, sorted(first.values()), done)
    for i in later:  # the same source again: after its first read, as one at a time would
        read = reads[i]
        try:
            obs: Observation | Exception = read.source.observe(
                read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
            )
        except Exception as exc:  # noqa: BLE001 - one read's bug is that read's result
            obs = exc
        done(i, obs)
    assert all(o is not None for o in out)
    return [o for o in out if o is not None]


def _wave(reads: Sequence[ScrapeRead], wave: Sequence[int], done: Done) -> None:
    """Plan every read of `wave`, start its GETs as soon as it is planned, finish it as soon
    as they end. Planning (discovery: API calls) and finishing run on a few threads, so one
    canary's many pools or slow listing hold no other's read; GETs hold no thread at all.
    Every source stays held from its plan to its finish, as in `observe`; taken in one order
    (by id) so two waves over the same sources cannot deadlock, each let go once finished."""
    held: dict[int, threading.Lock] = {}
    left = threading.Semaphore(0)

    def let_go(i: int, result: Observation | Exception) -> None:
        lock = held.pop(i, None)
        if lock is not None:
            lock.release()
        try:
            done(i, result)
        finally:
            left.release()

    def finish(i: int, plan: Plan, future: Future[dict[str, Scraped]]) -> None:
        try:
            result: Observation | Exception = reads[i].source.finish(plan, future.result())
        except Exception as exc:  # noqa: BLE001 - one read's bug (or its GETs') is that read's result
            result = exc
        let_go(i, result)

    def start(i: int, pool: ThreadPoolExecutor) -> None:
        read = reads[i]
        try:
            plan = read.source.plan(
                read.spec, start=read.start, end=read.end, interval=read.interval_seconds
            )
            coro = read.source.scraping(plan.targets(), plan.settings, plan.deadline)
            running = submit(coro)
        except Exception as exc:  # noqa: BLE001 - one read's bug is that read's result
            let_go(i, exc)
            return
        running.add_done_callback(lambda f: pool.submit(finish, i, plan, f))

    try:
        for i in sorted(wave, key=lambda i: id(reads[i].source)):
            reads[i].source.lock.acquire()
            held[i] = reads[i].source.lock
        workers = max(1, min(len(wave), PLAN_THREADS))
        with ThreadPoolExecutor(workers, thread_name_prefix="alphagate-plan") as pool:
            for i in wave:
                pool.submit(start, i, pool)
            for _ in wave:
                left.acquire()
    finally:
        for lock in [held.pop(i) for i in list(held)]:
            lock.release()


__all__ = ["Done", "ScrapeRead", "batchable", "observe_scrapes"]
