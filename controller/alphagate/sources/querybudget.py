"""The Prometheus query budget: queries a second per canary and per namespace.

Many tenants share one Prometheus through the controller (docs/security.md). Unbudgeted, one
namespace could make the controller send queries without bound: a canary at the 0.1 s interval
floor asks some 30 queries every 0.1 s, and twenty such canaries 6,000 a second, although a
Prometheus answer cannot change faster than the server's scrape and evaluation interval.

Two token buckets (the Kubernetes API budget's model, `kube.apibudget`): one per canary, one per
namespace. Every query the controller sends to Prometheus takes a token from the namespace's
bucket, and from the canaries it serves: a canary's own query costs it one token, a batch's
query shared by k canaries of the namespace costs each of them 1/k (batches never mix
namespaces). A read
is never cut in half by the rate: a bucket may run into debt down to minus its burst, and the
schedule *defers* a canary while its bucket or its namespace's is in debt (`deferral`), so it
waits, alone, until they refill while other namespaces are read on time. A query past a whole
burst of debt is refused, typed (`BudgetError`, `BudgetKind.QUERIES`): that pool fails,
typed (an Error that holds the canary's state, as every read budget), no other namespace's
canary is touched. The budgets are the admin's
(`QueryBudgets`, ``prometheusBudgets`` in the controller's config); `configure` installs them.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from pydantic import Field

from alphagate.config import StrictModel
from alphagate.errors import BudgetError, BudgetKind

MAX_BUCKETS: Final = 4096
"""Buckets kept; full ones (the same as new ones) are dropped first."""

Payer = tuple[str, tuple[str, ...]]
"""(namespace, the canaries sharing the query): the namespace pays one token, each canary its
share (a canary alone pays one)."""


class QueryBudgets(StrictModel):
    """Prometheus queries a second the controller may send for one canary, one namespace."""

    canary_qps: float = Field(
        default=20.0, gt=0.0, le=100_000.0, allow_inf_nan=False,
        description="Queries a second one canary's own reads may cost, on average.",
    )  # fmt: skip
    canary_burst: int = Field(
        default=600, ge=1, le=1_000_000,
        description="Queries one canary may send at once before its rate holds it.",
    )  # fmt: skip
    namespace_qps: float = Field(
        default=100.0, gt=0.0, le=100_000.0, allow_inf_nan=False,
        description="Queries a second one namespace's canaries may cost together.",
    )  # fmt: skip
    namespace_burst: int = Field(
        default=3000, ge=1, le=1_000_000,
        description="Queries one namespace may send at once before its rate holds it.",
    )  # fmt: skip


class _Bucket:
    """Tokens refilled at `qps` up to `burst`; taking may run into debt."""

    __slots__ = ("at", "burst", "qps", "tokens")

    def __init__(self, qps: float, burst: int, now: float) -> None:
        self.qps, self.burst, self.tokens, self.at = qps, burst, float(burst), now

    def refill(self, now: float) -> float:
        if now > self.at:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.qps)
            self.at = now
        return self.tokens


@dataclass(frozen=True, slots=True)
class QueryDeferral:
    """Why a canary waits: whose Prometheus query budget is in debt, and for how long."""

    scope: str  # "canary" or "namespace"
    owner: str  # "ns/name" or the namespace
    retry_in: float  # seconds until that bucket is out of debt

    @property
    def reason(self) -> str:
        return f"{self.scope.capitalize()}QueryBudgetExceeded"

    def message(self) -> str:
        return (
            f"the {self.scope} {self.owner}'s Prometheus query budget is spent: "
            f"evaluation deferred {self.retry_in:.1f} s"
        )


class QueryBudget:
    """The process's buckets (thread-safe: the read threads take, the schedule admits)."""

    def __init__(
        self, config: QueryBudgets | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config or QueryBudgets()
        self.clock = clock
        self._lock = threading.Lock()
        self._canaries: dict[tuple[str, str], _Bucket] = {}
        self._namespaces: dict[str, _Bucket] = {}
        self.sent: dict[str, int] = {}  # queries sent, by namespace (tests, the benchmark)

    def take(self, payer: Payer, target: str = "") -> None:
        """Pay one query; BudgetError (QUERIES) past a whole burst of debt (nothing taken)."""
        namespace, names = payer
        share = 1.0 / len(names) if names else 0.0
        with self._lock:
            now = self.clock()
            buckets = [
                (f"namespace {namespace}", 1.0, self._bucket(self._namespaces, namespace, now))
            ]
            for name in names:
                bucket = self._bucket(self._canaries, (namespace, name), now)
                buckets.append((f"canary {namespace}/{name}", share, bucket))
            for whose, n, b in buckets:
                if b.refill(now) - n < -b.burst:
                    raise BudgetError(
                        BudgetKind.QUERIES,
                        f"{whose} spent its Prometheus query budget ({b.qps:g}/s, burst "
                        f"{b.burst}) and a burst more",
                        target=target,
                    )
            for _, n, b in buckets:
                b.tokens -= n
            self.sent[namespace] = self.sent.get(namespace, 0) + 1

    def deferral(self, namespace: str, name: str) -> QueryDeferral | None:
        """Why this canary must wait before its next read (a bucket in debt), or None."""
        with self._lock:
            now = self.clock()
            for scope, owner, b in (
                ("canary", f"{namespace}/{name}", self._canaries.get((namespace, name))),
                ("namespace", namespace, self._namespaces.get(namespace)),
            ):
                if b is not None and b.refill(now) < 0:
                    return QueryDeferral(scope, owner, -b.tokens / b.qps)
        return None

    def forget(self, namespace: str, name: str) -> None:
        """The canary is gone: drop its bucket (its namespace's stays, shared)."""
        with self._lock:
            self._canaries.pop((namespace, name), None)

    def _bucket(self, table: dict[Any, _Bucket], key: Any, now: float) -> _Bucket:
        b = table.get(key)
        if b is None:
            if len(table) >= MAX_BUCKETS:  # full buckets are the same as new ones
                for k in [k for k, v in table.items() if v.refill(now) >= v.burst]:
                    del table[k]
            c = self.config
            qps, burst = (
                (c.namespace_qps, c.namespace_burst)
                if table is self._namespaces
                else (c.canary_qps, c.canary_burst)
            )
            b = table[key] = _Bucket(qps, burst, now)
        return b


_budget = QueryBudget()
_PAYING: contextvars.ContextVar[Payer | None] = contextvars.ContextVar(
    "alphagate_prometheus_payer", default=None
)


def configure(config: QueryBudgets) -> None:
    """Install the admin's budgets for this process (`alphagate run --config`)."""
    global _budget
    _budget = QueryBudget(config)


def current() -> QueryBudget:
    return _budget


@contextlib.contextmanager
def paying(payer: Payer | None) -> Iterator[None]:
    """Charge the queries sent in the block (on this thread) to `payer`."""
    token = _PAYING.set(payer)
    try:
        yield
    finally:
        _PAYING.reset(token)


def payer() -> Payer | None:
    """Who pays for a query sent now (set by `paying`), or None."""
    return _PAYING.get()


def joined(payer: Payer | None, other: Payer | None) -> Payer | None:
    """Who pays a query shared by both (of one namespace: batches never mix them)."""
    if payer is None or other is None:
        return payer or other
    return payer[0], tuple(sorted({*payer[1], *other[1]}))


def charge(namespace: str | None, name: str | None, target: str) -> None:
    """Pay for one query about to be sent by a source of `namespace`'s canary `name`: from
    whoever `paying` names, else that canary (nothing without a namespace: an admin's one-off
    read). BudgetError (QUERIES) past a whole burst of debt."""
    paid_by = _PAYING.get() or (
        (namespace, (name,) if name else ()) if namespace is not None else None
    )
    if paid_by is not None:
        _budget.take(paid_by, target)


__all__ = [
    "QueryBudget",
    "QueryBudgets",
    "QueryDeferral",
    "charge",
    "configure",
    "current",
    "paying",
]
