"""GETs start by namespace share: one tenant's heavy pages cannot fill the fetch loop.

The fetch loop (`sources.fetcher`) is one thread for every canary's GETs: every chunk it
receives and decodes, it handles in turn with everyone's. Twenty canaries of one namespace on
four pods of 1.6 MB had 80 such GETs a cycle, up to one per canary at once, and a victim's
55 KB page, received a chunk a turn beside them, missed its read's deadline. The parse pool
(`sources.parsepool`) shares the parse workers by namespace; this shares the receiving.

Each GET, before it starts (and once its canary's memory has room for its page: a GET waiting
for its own canary's memory holds none of its namespace's share), holds against its namespace
the bytes its page is expected to
take (its canary's largest page last time), then what it has really received (decoded) if
that is more, until its body is read. A namespace may hold its share of
`ScrapeBudgets.receive_bytes`: that over the namespaces reading (holding, waiting, or done
reading within the last `READING_SECONDS`: a namespace that reads every interval keeps its
share between cycles, so another's backlog cannot fill the loop just before its GETs start),
never under an eighth of it (`FLOOR_PARTS`).
Alone, a namespace may hold it all; a namespace that holds nothing may always start one GET.
A GET past its namespace's share waits, its namespace's canaries taken in turn (the one holding
least, then the one that started a GET longest ago, first); the read's deadline, passed
while it waits, fails that pod typed RECEIVE (`sources.scrape`). A GET never waits on another
namespace's share, only its own. A page is expected to be at least as large as the same URL's
last one (twenty canaries on the same pods: one that never got to read a page of them does
not expect a small one).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Final

from alphagate.sources.budget import MiB, budgets
from alphagate.sources.parsepool import tenant_of

READING_SECONDS: Final = 10.0
"""A namespace whose last GET ended this recently still counts as reading."""
MAX_NAMESPACES: Final = 4096
"""Namespaces remembered as reading (older ones are forgotten first)."""
FLOOR_PARTS: Final = 8
"""A namespace's share is never under this part of the budget: with many namespaces reading,
the loop may receive more than the budget at once (an eighth of it per namespace) rather than
take every namespace's GETs one at a time."""
MAX_URLS: Final = 16384
"""URLs whose last page size is remembered (the least recently read forgotten first)."""


@dataclass(slots=True)
class Hold:
    """One GET's bytes held against its namespace (from its start until its body is read)."""

    owner: str
    namespace: str
    held: int
    url: str = ""
    received: int = 0  # decoded bytes received so far
    done: bool = False


@dataclass(slots=True)
class ShareStats:
    """What the shares did (for benchmarks and tests)."""

    started: int = 0
    waited: int = 0  # GETs that waited for their namespace's share
    peak: dict[str, int] = field(default_factory=dict)  # namespace -> most bytes held at once


class GetShare:
    """The namespaces' shares of the bytes the fetch loop receives at once. Use from the
    fetch loop only (one loop per process)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}  # namespace -> bytes its GETs hold
        self._owner_held: dict[str, int] = {}  # owner -> bytes its GETs hold
        self._waiting: dict[str, dict[str, deque[tuple[int, str, asyncio.Future[Hold]]]]] = {}
        self._last: dict[str, float] = {}  # namespace -> when its last GET ended
        self._turn: dict[str, int] = {}  # owner -> the number of its last GET's start
        self._sizes: OrderedDict[str, int] = OrderedDict()  # url -> its last page's bytes
        self._starts = 0
        self.clock = time.monotonic
        self.stats = ShareStats()

    def reading(self) -> set[str]:
        """Namespaces reading now: holding, waiting, or done within READING_SECONDS."""
        since = self.clock() - READING_SECONDS
        recent = {ns for ns, at in self._last.items() if at >= since}
        return recent | set(self._held) | set(self._waiting)

    def share(self, namespace: str) -> tuple[int, int]:
        """`namespace`'s share in bytes, and the namespaces reading (itself counted)."""
        n = len(self.reading() | {namespace})
        whole = budgets().receive_bytes
        return max(whole // n, whole // FLOOR_PARTS), n

    def describe(self, namespace: str) -> str:
        """The share, for the error a person reads."""
        share, n = self.share(namespace)
        return (
            f"namespace {namespace}'s share of the pages the fetch loop receives at once: "
            f"{share / MiB:.1f} MiB ({budgets().receive_bytes / MiB:.0f} MiB shared by {n} "
            "namespaces reading)"
        )

    def held(self, namespace: str) -> int:
        return self._held.get(namespace, 0)

    def _fits(self, namespace: str, expected: int) -> bool:
        held = self._held.get(namespace, 0)
        return held == 0 or held + expected <= self.share(namespace)[0]

    async def enter(self, owner: str, expected: int, url: str = "") -> Hold:
        """Hold `expected` bytes (or `url`'s last page's, if more) for one GET of `owner`
        (``namespace/name``), once they fit its namespace's share (at once when its namespace
        holds nothing)."""
        ns = tenant_of(owner)
        expected = max(expected, self._sizes.get(url, 0))
        if ns not in self._waiting and self._fits(ns, expected):
            return self._grant(owner, ns, expected, url)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Hold] = loop.create_future()
        queue = self._waiting.setdefault(ns, {}).setdefault(owner, deque())
        queue.append((expected, url, waiter))
        self.stats.waited += 1
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave(waiter.result())  # granted as it was cancelled: let it go
            else:
                self._forget(ns, owner, waiter)
            raise

    def grow(self, hold: Hold, received: int) -> None:
        """The GET has received `received` bytes: hold them if more than held (never waits:
        the page is on its way; the namespace's next GETs wait instead)."""
        hold.received = max(hold.received, received)
        more = received - hold.held
        if more > 0 and not hold.done:
            hold.held += more
            self._add(hold.owner, hold.namespace, more)

    def leave(self, hold: Hold) -> None:
        """The GET's body is read (or it failed): its bytes are let go, waiters may start."""
        if hold.done:
            return
        hold.done = True
        self._add(hold.owner, hold.namespace, -hold.held)
        if hold.url and hold.received:
            self._sizes[hold.url] = hold.received
            self._sizes.move_to_end(hold.url)
            if len(self._sizes) > MAX_URLS:
                self._sizes.popitem(last=False)
        self._last[hold.namespace] = self.clock()
        if len(self._last) > MAX_NAMESPACES:
            for ns in sorted(self._last, key=self._last.__getitem__)[: MAX_NAMESPACES // 2]:
                del self._last[ns]
        self._dispatch(hold.namespace)

    def _grant(self, owner: str, namespace: str, expected: int, url: str) -> Hold:
        self.stats.started += 1
        self._starts += 1
        self._turn[owner] = self._starts
        if len(self._turn) > MAX_NAMESPACES:  # owners long gone: forget the oldest half
            for o in sorted(self._turn, key=self._turn.__getitem__)[: MAX_NAMESPACES // 2]:
                del self._turn[o]
        self._add(owner, namespace, expected)
        return Hold(owner, namespace, expected, url)

    def _add(self, owner: str, namespace: str, n: int) -> None:
        held = self._held.get(namespace, 0) + n
        if held > 0:
            self._held[namespace] = held
            self.stats.peak[namespace] = max(self.stats.peak.get(namespace, 0), held)
        else:
            self._held.pop(namespace, None)
        mine = self._owner_held.get(owner, 0) + n
        if mine > 0:
            self._owner_held[owner] = mine
        else:
            self._owner_held.pop(owner, None)

    def _dispatch(self, namespace: str) -> None:
        """Start `namespace`'s waiting GETs that now fit, its canaries in turn: the one holding
        least first, then the one whose last GET started longest ago."""
        owners = self._waiting.get(namespace)
        while owners:
            owner = min(owners, key=lambda o: (self._owner_held.get(o, 0), self._turn.get(o, 0)))
            queue = owners[owner]
            expected, url, waiter = queue[0]
            if not waiter.done() and not self._fits(namespace, expected):
                return
            queue.popleft()
            if not queue:
                del owners[owner]
            if not waiter.done():  # a cancelled waiter is skipped
                waiter.set_result(self._grant(owner, namespace, expected, url))
        self._waiting.pop(namespace, None)

    def _forget(self, namespace: str, owner: str, waiter: asyncio.Future[Hold]) -> None:
        owners = self._waiting.get(namespace, {})
        queue = owners.get(owner)
        if queue is None:
            return
        for item in list(queue):
            if item[2] is waiter:
                queue.remove(item)
        if not queue:
            del owners[owner]
        if not owners:
            self._waiting.pop(namespace, None)
        self._dispatch(namespace)


GET_SHARE = GetShare()
"""The process's shares (one fetch loop per process)."""


__all__ = ["GET_SHARE", "READING_SECONDS", "GetShare", "Hold", "ShareStats"]
