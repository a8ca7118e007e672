"""Pools whose own queries cost the shared Prometheus more than it serves wait before they are
asked again (backoff), so one tenant cannot keep loading the server every canary reads from.

Batches already keep a costly pool's failure its own (`sources/prombatch.py` splits a refused
query down to the pool alone). But the pool was asked again every interval, and each time
Prometheus spent its CPU loading samples it then refused: in the noisy-neighbour benchmark
(prometheus-pools) the victims' queries on the same server missed their deadline on every
evaluation. Here a pool whose own query the server refused for its cost (HTTP 422, e.g. too
many samples), whose answer was too large, or which timed out on the server twice in a row, is
held: for two of its canary's intervals, doubling with each failure again, at most
`MAX_HOLD_SECONDS`. While held it is a pool error typed with the SERVER_COST budget, at once,
no query sent; it is asked again when the hold ends, and one good read clears it.

A server timeout alone does not hold a pool: the server may be slow for everyone (a loaded
machine), and holding a victim for that would turn the server's stall into the victim's missing
evaluations. Keyed by endpoint and the pool's matchers (its namespace's included), so two
canaries reading the same pool share its hold, and no other pool is touched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources.common import budget_of
from alphagate.sources.promwire import QueryTimeout, StatusError

MAX_HOLD_SECONDS: Final = 600.0
"""A held pool is asked again at least this often (its failure may have been fixed)."""
MIN_HOLD_SECONDS: Final = 1.0
"""The shortest hold (an interval below a second still waits this long)."""
MAX_HELD: Final = 4096
"""Pools remembered; past it the oldest holds are forgotten (asked again)."""

Key = tuple[str, frozenset[tuple[str, str]]]


def key_of(base_url: str, labels: Mapping[str, str]) -> Key:
    return (base_url, frozenset(labels.items()))


def refused(err: SourceError) -> bool:
    """The server refused the pool's query for its cost, or its answer was too large: the
    pool's own doing, whatever the server's load."""
    return (
        (isinstance(err, StatusError) and err.status == 422)
        or err.kind is SourceErrorKind.TOO_LARGE
        or budget_of(err) in (BudgetKind.ANSWER, BudgetKind.SERIES)
    )


@dataclass(slots=True)
class _Hold:
    strikes: int
    until: float
    why: str


class Holds:
    """The held pools of one process (any thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._held: dict[Key, _Hold] = {}

    def check(self, key: Key, where: str) -> None:
        """Raise the pool's SERVER_COST error while it is held."""
        with self._lock:
            hold = self._held.get(key)
            now = self.clock()
        if hold is None or hold.until <= now:
            return
        raise BudgetError(
            BudgetKind.SERVER_COST,
            f"not asked for {hold.until - now:.0f}s more: Prometheus refused or gave up on "
            f"this pool's own query {hold.strikes} time(s) in a row ({hold.why}); held so it "
            f"does not load the server every canary reads",
            target=where,
        )

    def failed(self, key: Key, err: SourceError, interval: float) -> None:
        """Count a failure of the pool's own query; hold it if the failure was its cost."""
        timed_out = isinstance(err, QueryTimeout)
        if not (refused(err) or timed_out):
            return
        with self._lock:
            old = self._held.get(key)
            strikes = (old.strikes if old else 0) + 1
            now = self.clock()
            if refused(err) or strikes >= 2:
                base = max(interval, MIN_HOLD_SECONDS)
                seconds = min(MAX_HOLD_SECONDS, base * 2**strikes)
                until = now + seconds
            else:
                until = now  # a first server timeout: counted, not held
            if len(self._held) >= MAX_HELD and key not in self._held:
                del self._held[min(self._held, key=lambda k: self._held[k].until)]
            self._held[key] = _Hold(strikes, until, _tail(str(err)))

    def succeeded(self, key: Key) -> None:
        with self._lock:
            self._held.pop(key, None)

    def clear(self) -> None:
        """Forget every hold (a test's clean start; an admin's fixed Prometheus)."""
        with self._lock:
            self._held.clear()

    def held(self) -> int:
        """Pools held now (for a metric or a benchmark)."""
        now = self.clock()
        with self._lock:
            return sum(1 for h in self._held.values() if h.until > now)


def _tail(text: str, n: int = 200) -> str:
    """The end of an error (the server's own words come last, after the long query)."""
    return text if len(text) <= n else "..." + text[-n:]


HOLDS = Holds()
"""The process's held pools."""


__all__ = ["HOLDS", "MAX_HOLD_SECONDS", "Holds", "key_of", "refused"]
