"""What one canary's read may make the controller spend, and who pays when it spends more.

Many tenants share one controller (docs/security.md), so every read has budgets of its own, and
spending one fails only that canary's pod, pool or read, typed (`BudgetError` with a
`BudgetKind`), never another canary's:

* **time** (`read_deadline`): a canary's whole read (its pods' GETs and the parsing of their
  pages, or its Prometheus queries) ends by its own deadline: its ``timeoutSeconds`` twice (a
  second round of GETs), at most `READ_SHARE` of its interval, never over
  `ScrapeBudgets.max_read_seconds`. Reads run beside one another: a canary never waits for
  another's deadline.
* **memory in flight** (`InFlight`): the pages a canary's GETs hold, received, decoded and
  parsed (until the read is finished), are charged to its account. Each account may hold its
  share, ``min(perCanaryBytes, inFlightBytes / reads in flight)``, and borrow the budget's idle
  room beyond it; a GET starts only once a page of the size its canary's pages had last time
  fits (so a canary's concurrency falls as its own pages grow, never because of another's),
  and a page past both its share and the idle room fails (MEMORY). A canary within its share
  is never refused.
* **memory kept** (`kept_share`): the last page and the increments kept per pod are counted in
  cells (one number each, `CELL_BYTES` apiece); a canary may keep ``keptBytes / scrape
  canaries`` at most: the page that would take it past is refused (MEMORY).
* **receiving** (`sources.getshare`): the pages a namespace's GETs receive at once, at most
  its share of ``receiveBytes`` (that over the namespaces reading); its next GETs wait, and a
  read whose deadline passes while they wait fails those pods (RECEIVE).
* **buckets** (`MAX_BUCKETS`): a histogram with more ``le`` buckets is refused (BUCKETS).

The budgets are the admin's (`ScrapeBudgets`, ``podScrape.budgets`` in the controller's config);
`configure` installs them for the process.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Final

from pydantic import Field

from alphagate.config import StrictModel
from alphagate.errors import BudgetError, BudgetKind

MiB: Final = 1024 * 1024

READ_SHARE: Final = 0.8
"""A read ends within this share of its canary's interval (leaving the rest for deciding)."""
MIN_READ_SECONDS: Final = 1.0
"""A read is given at least this long (or its timeout, when shorter), whatever its interval."""
MAX_BUCKETS: Final = 512
"""`le` buckets a histogram may have. vLLM's layouts have 15 to 30; finer custom buckets
(``--custom-histogram-buckets``) rarely 100. Each bucket is kept per pod per interval."""
FIRST_PAGE_BYTES: Final = 64 * 1024
"""What a page is expected to hold before its canary's first is read (vLLM's: ~55 KB)."""
CELL_BYTES: Final = 100
"""What one kept number costs in Python (a float in a dict: key, value and slot); a series'
own objects count as some more (`increments.SERIES_CELLS`, where both are measured)."""


class ScrapeBudgets(StrictModel):
    """The budgets every canary's read gets (admin-owned: `podScrape.budgets`)."""

    max_read_seconds: float = Field(
        default=60.0, ge=1.0, le=600.0, allow_inf_nan=False,
        description="No canary's read lasts longer, whatever its timeoutSeconds and interval.",
    )  # fmt: skip
    in_flight_bytes: int = Field(
        default=48 * MiB, ge=4 * MiB, le=4096 * MiB,
        description="Pages being read and parsed, all canaries together (lent beyond a "
        "canary's share while idle: at most twice this at once).",
    )  # fmt: skip
    per_canary_bytes: int = Field(
        default=16 * MiB, ge=1 * MiB, le=4096 * MiB,
        description="A canary's share of inFlightBytes, at most.",
    )  # fmt: skip
    kept_bytes: int = Field(
        default=64 * MiB, ge=4 * MiB, le=4096 * MiB,
        description="Pages and increments kept between scrapes, all canaries together; each "
        "canary may keep this over the number of pod-scraping canaries.",
    )  # fmt: skip
    receive_bytes: int = Field(
        default=8 * MiB, ge=1 * MiB, le=4096 * MiB,
        description="Pages the fetch loop receives at once, all namespaces together; each "
        "namespace reading may hold this over the namespaces reading (sources/getshare.py).",
    )  # fmt: skip
    parse_workers: int = Field(
        default=2, ge=1, le=32,
        description="Threads that parse pages, off the fetch loop, shared fairly by canaries.",
    )  # fmt: skip


_budgets = ScrapeBudgets()


def configure(budgets: ScrapeBudgets) -> None:
    """Install the admin's budgets for this process (`alphagate run --config`)."""
    global _budgets
    _budgets = budgets


def budgets() -> ScrapeBudgets:
    return _budgets


def read_deadline(timeout_seconds: float, interval_seconds: float) -> float:
    """Seconds one canary's whole read may last (see the module docstring)."""
    fits = min(2 * timeout_seconds, READ_SHARE * interval_seconds)
    floor = min(timeout_seconds, MIN_READ_SECONDS)
    return min(_budgets.max_read_seconds, max(fits, floor))


def describe_deadline(seconds: float, timeout_seconds: float, interval_seconds: float) -> str:
    """Where a read's deadline comes from, for the error a person reads."""
    if seconds >= _budgets.max_read_seconds:
        why = "the controller's maxReadSeconds"
    elif seconds >= 2 * timeout_seconds:
        why = f"twice its {timeout_seconds:g}s timeout"
    elif seconds > READ_SHARE * interval_seconds:
        why = f"the {MIN_READ_SECONDS:g}s floor"
    else:
        why = f"{READ_SHARE:.0%} of its {interval_seconds:g}s interval"
    return f"{seconds:.3g}s ({why})"


# --------------------------------------------------------------------------- in flight


class Account:
    """One canary read's pages in flight, charged as they are received and decoded."""

    __slots__ = ("__weakref__", "_pool", "held", "owner")

    def __init__(self, pool: InFlight, owner: str) -> None:
        self._pool = pool
        self.owner = owner
        self.held = 0

    def share(self) -> int:
        return self._pool.share()

    async def room(self, expected: int) -> int:
        """Wait until a page of `expected` bytes fits this canary's share beside what it
        holds (at once when it holds nothing), then hold that much for it: a GET may start.
        Returns what was held (the GET's reservation)."""
        await self._pool.wait_for_room(self, expected)
        self._pool.add(self, expected)
        return expected

    def charge(self, n: int, where: str) -> None:
        """Hold `n` more bytes: granted within the canary's share, or beyond it while the
        budget as a whole has room (idle room is lent); else BudgetError(MEMORY)."""
        share = self.share()
        if not self._pool.grant(self, n, share):
            raise BudgetError(
                BudgetKind.MEMORY,
                f"pages in flight would reach {(self.held + n) / MiB:.1f} MiB, over this "
                f"canary's share of {share / MiB:.1f} MiB ({self._pool.describe()})",
                target=where,
            )
        self._pool.add(self, n)

    def release(self, n: int) -> None:
        self._pool.add(self, -min(n, self.held))

    def close(self) -> None:
        self._pool.close(self)


class InFlight:
    """Every read's pages in flight (the fetch loop's; `Account`s are charged from any
    thread). Shares are equal among the reads open now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[Account] = weakref.WeakSet()
        self.used = 0
        self.peak = 0
        self._freed: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def open(self, owner: str) -> Account:
        account = Account(self, owner)
        with self._lock:
            self._open.add(account)
        return account

    def close(self, account: Account) -> None:
        with self._lock:
            self.used -= account.held
            account.held = 0
            self._open.discard(account)
        self._wake()

    def share(self) -> int:
        b = _budgets
        with self._lock:
            readers = max(1, len(self._open))
        return min(b.per_canary_bytes, b.in_flight_bytes // readers)

    def describe(self) -> str:
        with self._lock:
            readers = max(1, len(self._open))
        b = _budgets
        return (
            f"{b.in_flight_bytes / MiB:.0f} MiB for pages in flight shared by {readers} "
            f"reads, at most {b.per_canary_bytes / MiB:.0f} MiB each"
        )

    def add(self, account: Account, n: int) -> None:
        with self._lock:
            account.held += n
            self.used += n
            self.peak = max(self.peak, self.used)
        if n < 0:
            self._wake()

    def grant(self, account: Account, n: int, share: int) -> bool:
        """Hold `n` more for `account` if it stays within `share`, or if the whole budget has
        room for it. A canary within its share is never refused; lending idle room can take
        the total past the budget by at most the shares of those within theirs (so at most
        twice the budget), and only while shares shrink as reads join."""
        with self._lock:
            within = account.held + n <= share
            if not within and self.used + n > _budgets.in_flight_bytes:
                return False
            account.held += n
            self.used += n
            self.peak = max(self.peak, self.used)
        return True

    def _fits(self, account: Account, expected: int) -> bool:
        with self._lock:
            used = self.used
        if account.held == 0 or account.held + expected <= self.share():
            return True
        return used + expected <= _budgets.in_flight_bytes

    async def wait_for_room(self, account: Account, expected: int) -> None:
        """On the fetch loop: return once `expected` more bytes fit `account`'s share or the
        budget's idle room (or it holds nothing: one page is always tried, and refused if it
        outgrows both)."""
        while not self._fits(account, expected):
            loop = asyncio.get_running_loop()
            if self._freed is None or self._freed[0] is not loop:
                self._freed = (loop, asyncio.Event())
            freed = self._freed[1]
            freed.clear()  # checked and cleared in one step of the loop: no wake-up is lost
            await freed.wait()

    def _wake(self) -> None:
        held = self._freed
        if held is not None and not held[0].is_closed():
            held[0].call_soon_threadsafe(held[1].set)


IN_FLIGHT = InFlight()
"""The process's pages in flight (one fetch loop per process)."""


# --------------------------------------------------------------------------- kept


class Kept:
    """Cells kept between scrapes by every pod-scraping canary (one counter each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()

    def register(self, source: object) -> None:
        with self._lock:
            self._sources.setdefault(source, 0)

    def set(self, source: object, cells: int) -> None:
        with self._lock:
            self._sources[source] = cells

    def forget(self, source: object) -> None:
        with self._lock:
            self._sources.pop(source, None)

    def cells_of(self, source: object) -> int:
        with self._lock:
            return self._sources.get(source, 0)

    def canaries(self) -> int:
        with self._lock:
            return max(1, len(self._sources))

    def total_cells(self) -> int:
        with self._lock:
            return sum(self._sources.values())

    def share_cells(self) -> int:
        """Cells one canary may keep: keptBytes over the pod-scraping canaries."""
        return max(1, _budgets.kept_bytes // CELL_BYTES // self.canaries())

    def describe(self) -> str:
        return (
            f"{_budgets.kept_bytes / MiB:.0f} MiB kept for pages and increments, shared by "
            f"{self.canaries()} pod-scraping canaries"
        )


KEPT = Kept()
"""The process's kept pages and increments, per source."""


def mib(cells: int) -> float:
    """Cells as MiB (for people)."""
    return cells * CELL_BYTES / MiB


__all__ = [
    "CELL_BYTES",
    "IN_FLIGHT",
    "KEPT",
    "MAX_BUCKETS",
    "Account",
    "InFlight",
    "Kept",
    "ScrapeBudgets",
    "budgets",
    "configure",
    "describe_deadline",
    "read_deadline",
]
