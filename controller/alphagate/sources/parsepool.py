"""Pages are parsed off the fetch loop, by a few workers shared fairly by canaries.

The fetch loop (`sources.fetcher`) only moves bytes: one thread serves every canary's GETs,
so a page parsed on it delays every GET in flight. One tenant's heavy pages (1.8 MB of a new
shape each scrape, from 32 pods) took seconds of its time a cycle and other canaries' healthy
pods timed out. Here a page's parse is a job for a bounded pool of workers; jobs wait in one
queue per canary and the workers take the canaries in turn (round robin), so a canary with 32
pages queued delays another's one page by at most one page per worker, never by its queue.
Turns are shared by worker time (a heavy page costs its owner a hundred light ones), an
owner holds at most half the workers while another waits, and a namespace holds at most its
part of the workers (the workers over the namespaces parsing, at least one) while another
namespace parses, even when a worker is idle: twenty canaries of one namespace held both
workers with 1.6 MB pages and a victim's page, first in the queue, still waited for one.

Threads or processes: `docs/reliability.md` ("Parsing off the fetch loop") measures both side by
side with `python -m alphagate_lab.bench.parsing`. Threads keep the victims' GETs on time on two
cores (the loop thread takes the GIL back every switch interval, 5 ms) at no memory cost;
processes cost a whole interpreter each (~45 MiB) and a pickled Page per job.

Turns decide who goes first, not how much: a tenant whose pages need more parsing than the
machine has would still take a worker every turn it is owed, and its parsing holds the GIL the
victims' parsing and the fetch loop need. So each namespace (a tenant: twenty canaries of one
namespace are one tenant) has a share of the workers' time over the last `SPEND_WINDOW` seconds
(decaying): the workers' time over the namespaces parsing in that window. A page of a namespace
past its share, while another namespace parses, is refused before it is parsed
(BudgetError PARSE_TIME, that pod only), never after; alone, a namespace may use every worker.

A job cancelled before a worker took it (its read's deadline passed) is dropped at once, its
page let go; one already running finishes and its result is discarded.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from alphagate.errors import BudgetError, BudgetKind
from alphagate.sources.budget import budgets

R = TypeVar("R")

MAX_OWNERS = 4096
"""Owners whose worker time is remembered (about one per canary)."""
SPEND_WINDOW = 10.0
"""Seconds over which a namespace's parsing is weighed against its share (a decaying sum)."""
IDLE_SPEND = 0.01
"""Worker seconds (decayed) under which a namespace no longer counts as parsing."""


def tenant_of(owner: str) -> str:
    """The namespace of an owner ``namespace/name`` (an owner without one is its own)."""
    return owner.split("/", 1)[0] if "/" in owner else owner


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
    refused: int = 0  # refused before parsing: the namespace past its share
    by_owner: dict[str, int] = field(default_factory=dict)


class FairPool:
    """Runs `fn(*args)` in `executor`, at most `workers` at a time, sharing the workers' time
    fairly among owners. Use from the fetch loop only (one loop per process).

    Fair by time, not by jobs: one tenant's page may cost a hundred times another's, so the
    owner that has used the least worker time goes next (an owner that comes back after a
    pause starts level with the others, never ahead), and no owner holds more than half the
    workers while another waits (`per_owner`): a heavy page in parse delays another owner's by
    at most nothing when a worker is free, one page when not."""

    def __init__(self, executor: Executor, workers: int) -> None:
        self.executor = executor
        self.workers = max(1, workers)
        self.per_owner = max(1, self.workers // 2)
        self._queues: dict[str, deque[_Job[Any]]] = {}
        self._running: dict[str, int] = {}
        self._used: dict[str, float] = {}  # owner -> worker seconds (level when it comes back)
        self._spent: dict[str, tuple[float, float]] = {}  # tenant -> (decayed seconds, at)
        self.clock = time.monotonic
        self.stats = PoolStats()

    def _decayed(self, tenant: str, now: float) -> float:
        spent, at = self._spent.get(tenant, (0.0, now))
        return spent * math.exp(-(now - at) / SPEND_WINDOW)

    def share(self, now: float) -> tuple[float, int]:
        """A tenant's share of the workers' time over the window, and the tenants parsing."""
        parsing = {t for t, _ in self._spent.items() if self._decayed(t, now) > IDLE_SPEND}
        parsing |= {tenant_of(o) for o in (*self._queues, *self._running)}
        n = max(1, len(parsing))
        return self.workers * SPEND_WINDOW / n, n

    def _per_tenant(self, now: float) -> int:
        """Workers one namespace may hold at once: all of them alone, else its part of them
        (at least one) while other namespaces parse, so a victim's page finds a worker no
        other namespace holds (it waits for its own namespace's pages only)."""
        _, n = self.share(now)
        return self.workers if n <= 1 else max(1, self.workers // n)

    def check_share(self, owner: str) -> None:
        """Refuse `owner`'s next page (PARSE_TIME) when its namespace is past its share of the
        workers' time while another namespace parses too."""
        now = self.clock()
        tenant = tenant_of(owner)
        spent = self._decayed(tenant, now)
        share, n = self.share(now)
        if n > 1 and spent > share:
            self.stats.refused += 1
            raise BudgetError(
                BudgetKind.PARSE_TIME,
                f"namespace {tenant}'s pages took {spent:.1f}s of the parse workers over the "
                f"last ~{SPEND_WINDOW:g}s, over its share of {share:.1f}s ({self.workers} "
                f"workers shared by {n} namespaces parsing): refused before parsing",
            )

    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    async def run(self, owner: str, fn: Callable[..., R], *args: Any) -> R:
        """`fn(*args)` on a worker, once the owners that used less worker time have gone.
        Raises BudgetError (PARSE_TIME) at once when the owner's namespace is past its share
        (`check_share`)."""
        self.check_share(owner)
        loop = asyncio.get_running_loop()
        job: _Job[R] = _Job(fn, args, loop.create_future())
        if owner not in self._queues and not self._running.get(owner):
            self._level(owner)
        self._queues.setdefault(owner, deque()).append(job)
        self.stats.jobs += 1
        self.stats.by_owner[owner] = self.stats.by_owner.get(owner, 0) + 1
        self.stats.max_queued = max(self.stats.max_queued, self.queued())
        self._dispatch(loop)
        try:
            return await asyncio.shield(job.done)
        except asyncio.CancelledError:
            if not job.done.done():
                job.done.cancel()
                self._drop(owner, job)  # still queued: dropped now, its page let go
            raise

    def _drop(self, owner: str, job: _Job[Any]) -> None:
        """Take a cancelled job out of its queue (its arguments, a page, are let go)."""
        queue = self._queues.get(owner)
        if queue is None:
            return
        try:
            queue.remove(job)
        except ValueError:
            return  # a worker has it already
        self.stats.dropped += 1
        if not queue:
            del self._queues[owner]

    def _level(self, owner: str) -> None:
        """An owner coming (back) starts at the least time of the active owners: never ahead
        of them for having been idle (or new), never behind for its past."""
        active = [self._used[o] for o in (*self._queues, *self._running) if o in self._used]
        floor = min(active) if active else max(self._used.values(), default=0.0)
        if len(self._used) > MAX_OWNERS:  # owners gone long ago
            self._used = {o: self._used[o] for o in (*self._queues, *self._running)}
        self._used[owner] = max(self._used.get(owner, 0.0), floor)

    def _next(self) -> tuple[str, _Job[Any]] | None:
        """The next job: of the namespace, then the owner, with the least worker time among
        owners under their share of the workers (or any, when no other owner waits)."""
        while self._queues:
            waiting = len(self._queues)
            now = self.clock()
            per_tenant = self._per_tenant(now)
            busy: dict[str, int] = {}
            for o, n in self._running.items():
                busy[tenant_of(o)] = busy.get(tenant_of(o), 0) + n
            ready = [
                o
                for o in self._queues
                if (waiting == 1 or self._running.get(o, 0) < self.per_owner)
                and busy.get(tenant_of(o), 0) < per_tenant
            ]
            if not ready:
                return None
            # the namespace that parsed least lately first (twenty canaries of one namespace
            # are one tenant: their backlog waits behind another's page), then the canary
            owner = min(
                ready, key=lambda o: (self._decayed(tenant_of(o), now), self._used.get(o, 0.0))
            )
            queue = self._queues[owner]
            job = queue.popleft()
            if not queue:
                del self._queues[owner]
            if job.done.cancelled():
                self.stats.dropped += 1
                continue
            return owner, job
        return None

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while sum(self._running.values()) < self.workers:
            picked = self._next()
            if picked is None:
                return
            owner, job = picked
            self._running[owner] = self._running.get(owner, 0) + 1
            began = time.monotonic()
            running = loop.run_in_executor(self.executor, job.fn, *job.args)
            running.add_done_callback(functools.partial(self._finished, loop, owner, began, job))

    def _finished(
        self,
        loop: asyncio.AbstractEventLoop,
        owner: str,
        began: float,
        job: _Job[Any],
        result: asyncio.Future[Any],
    ) -> None:
        self._running[owner] -= 1
        if not self._running[owner]:
            del self._running[owner]
        now = time.monotonic()
        self._used[owner] = self._used.get(owner, 0.0) + now - began
        tenant = tenant_of(owner)
        self._spent[tenant] = (self._decayed(tenant, self.clock()) + now - began, self.clock())
        if len(self._spent) > MAX_OWNERS:
            self._spent = {
                t: v for t, v in self._spent.items() if self._decayed(t, now) > IDLE_SPEND
            }
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


__all__ = ["SPEND_WINDOW", "FairPool", "PoolStats", "parse_pool", "tenant_of", "use_pool"]
