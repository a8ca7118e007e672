"""Pages are parsed off the fetch loop, by a few workers shared fairly by canaries.

The fetch loop (`sources.fetcher`) only moves bytes: one thread serves every canary's GETs,
so a page parsed on it delays every GET in flight. One tenant's heavy pages (1.8 MB of a new
shape each scrape, from 32 pods) took seconds of its time a cycle and other canaries' healthy
pods timed out. Here a page's parse is a job for a bounded pool of workers; jobs wait in one
queue per canary and the workers take the canaries in turn (round robin), so a canary with 32
pages queued delays another's one page by at most one page per worker, never by its queue.

Threads or processes: `docs/reliability.md` ("Parsing off the fetch loop") measures both side by
side with `python -m alphagate.bench.parsing`. Threads keep the victims' GETs on time on two
cores (the loop thread takes the GIL back every switch interval, 5 ms) at no memory cost;
processes cost a whole interpreter each (~45 MiB) and a pickled Page per job.

A job cancelled before a worker took it (its read's deadline passed) is dropped; one already
running finishes and its result is discarded.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from alphagate.sources.budget import budgets

R = TypeVar("R")

MAX_OWNERS = 4096
"""Owners whose last turn is remembered (about one per canary)."""


@dataclass(slots=True)
class _Job(Generic[R]):
    fn: Callable[..., R]
    args: tuple[Any, ...]
    done: asyncio.Future[R]


@dataclass(slots=True)
class PoolStats:
    """What the pool did (for benchmarks and the bench engineer's table)."""

    jobs: int = 0
    dropped: int = 0  # cancelled while queued: never parsed
    max_queued: int = 0
    by_owner: dict[str, int] = field(default_factory=dict)


class FairPool:
    """Runs `fn(*args)` in `executor`, at most `workers` at a time, taking owners in turn.
    Use from the fetch loop only (one loop per process)."""

    def __init__(self, executor: Executor, workers: int) -> None:
        self.executor = executor
        self.workers = max(1, workers)
        self._queues: dict[str, deque[_Job[Any]]] = {}
        self._running = 0
        self._turn = 0
        self._served: dict[str, int] = {}  # owner -> the turn it was last served
        self.stats = PoolStats()

    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    async def run(self, owner: str, fn: Callable[..., R], *args: Any) -> R:
        """`fn(*args)` on a worker, after the jobs of other owners queued before it in turn."""
        loop = asyncio.get_running_loop()
        job: _Job[R] = _Job(fn, args, loop.create_future())
        self._queues.setdefault(owner, deque()).append(job)
        self.stats.jobs += 1
        self.stats.by_owner[owner] = self.stats.by_owner.get(owner, 0) + 1
        self.stats.max_queued = max(self.stats.max_queued, self.queued())
        self._dispatch(loop)
        try:
            return await asyncio.shield(job.done)
        except asyncio.CancelledError:
            if not job.done.done():
                job.done.cancel()  # still queued: dropped when its turn comes
            raise

    def _next(self) -> _Job[Any] | None:
        """The next job: of the owner served longest ago (one never served first), so owners
        take turns whatever the length of their queues."""
        while self._queues:
            owner = min(self._queues, key=lambda o: self._served.get(o, -1))
            queue = self._queues[owner]
            job = queue.popleft()
            if not queue:
                del self._queues[owner]
            if job.done.cancelled():
                self.stats.dropped += 1
                continue
            self._turn += 1
            if len(self._served) > MAX_OWNERS:  # owners gone long ago: forget their turns
                self._served.clear()
            self._served[owner] = self._turn
            return job
        return None

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._running < self.workers:
            job = self._next()
            if job is None:
                return
            self._running += 1
            running = loop.run_in_executor(self.executor, job.fn, *job.args)
            running.add_done_callback(functools.partial(self._finished, loop, job))

    def _finished(
        self, loop: asyncio.AbstractEventLoop, job: _Job[Any], result: asyncio.Future[Any]
    ) -> None:
        self._running -= 1
        if not job.done.done():
            if result.cancelled():
                job.done.cancel()
            elif result.exception() is not None:
                job.done.set_exception(result.exception())  # type: ignore[arg-type]
            else:
                job.done.set_result(result.result())
        self._dispatch(loop)


_shared: FairPool | None = None
_shared_lock = threading.Lock()


def parse_pool() -> FairPool:
    """The process's parse pool: `ScrapeBudgets.parse_workers` threads (made on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            workers = budgets().parse_workers
            executor = ThreadPoolExecutor(workers, thread_name_prefix="alphagate-parse")
            _shared = FairPool(executor, workers)
        return _shared


def use_pool(pool: FairPool | None) -> FairPool | None:
    """Replace the process's parse pool (a benchmark's process pool; None: the default, made
    again on next use). Returns the one replaced; the caller shuts its executor down."""
    global _shared
    with _shared_lock:
        old, _shared = _shared, pool
    return old


__all__ = ["FairPool", "PoolStats", "parse_pool", "use_pool"]
