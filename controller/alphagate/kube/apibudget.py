"""The controller's budget of Kubernetes API requests: per canary, per namespace and overall.

Many tenants share one controller, so what one SpeculativeCanary makes it ask of the API server
has a budget that only that canary pays for (docs/security.md). Unbudgeted, one canary of 64 slices
at the 0.1 s interval floor made 713 requests a second.

Three token buckets (`Rate`: requests a second and a burst): one per canary, one per namespace
(a tenant may run many canaries) and one for the whole controller (the API server's share).
Every request the kubernetes client sends takes a token from the overall bucket, and, while it is
charged to a canary (`ApiBudget.charging`, set by the reconciler around one evaluation and by
the canary's pod discovery), from that canary's and its namespace's. An evaluation is never cut
in half by the rate: a canary is *admitted* to an evaluation (`admit`) only while none of its
buckets is in debt (an evaluation may overdraw: it is paid back before the next
one); one that is waits, alone, until they refill (the schedule defers it, typed: `Deferral`
names the budget, the rate and when it refills) while the other canaries are evaluated on
time, so a canary's rate is its budget whatever its interval. Its requests may run a bucket
into debt down to minus its burst; past that (more than twice the burst in one evaluation: no
valid policy needs it) a request is refused with `ApiBudgetError` naming the budget. Requests
charged to no canary (the watch, leases, token reviews) are counted and never deferred.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from alphagate.errors import ApiBudgetError

Key = tuple[str, str]
"""(namespace, name) of a SpeculativeCanary."""

DEFAULT_COST: Final = 8
"""What an evaluation is expected to cost before its first one is counted (a one-slice canary
costs about 6: its read, two Deployments, two pod lists, its status)."""
MAX_BUCKETS: Final = 4096
"""Buckets kept before full ones (the same as new ones) are dropped."""


class BudgetScope(StrEnum):
    """Which budget: exported as a label and named in conditions, so keep values stable."""

    CANARY = "canary"
    NAMESPACE = "namespace"
    OVERALL = "overall"


@dataclass(frozen=True, slots=True)
class Rate:
    per_second: float
    burst: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.per_second) and self.per_second > 0) or self.burst < 1:
            raise ValueError(
                f"an API budget needs a rate above 0 and a burst of at least 1: {self}"
            )

    def __str__(self) -> str:
        return f"{self.per_second:g} requests/s, burst {self.burst}"


DEFAULT_OVERALL: Final = Rate(100.0, 1000)
"""The whole controller: the API server's share (200 one-slice canaries at 30 s use ~40/s)."""
DEFAULT_NAMESPACE: Final = Rate(50.0, 1000)
"""One namespace's canaries together: a tenant with many canaries leaves the others half."""
DEFAULT_CANARY: Final = Rate(10.0, 300)
"""One canary: a 64-slice canary every 30 s fits (~9/s); at the 0.1 s floor it would ask 2,580/s."""


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """The budgets of `alphagate run` (`--api-qps`, `--api-namespace-qps`, `--api-canary-qps`
    and their bursts). A canary's burst covers one evaluation of the largest policy (64
    slices, each with its own Deployment and two pod lists: 258 requests, measured over the
    API double). None: that budget is not enforced (counted only)."""

    overall: Rate | None = field(default_factory=lambda: DEFAULT_OVERALL)
    namespace: Rate | None = field(default_factory=lambda: DEFAULT_NAMESPACE)
    canary: Rate | None = field(default_factory=lambda: DEFAULT_CANARY)

    def rate(self, scope: BudgetScope) -> Rate | None:
        return {
            BudgetScope.CANARY: self.canary,
            BudgetScope.NAMESPACE: self.namespace,
            BudgetScope.OVERALL: self.overall,
        }[scope]


class TokenBucket:
    """Taking may run into debt."""

    def __init__(self, rate: Rate, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate.burst)
        self._at = now

    def refill(self, now: float) -> float:
        if now > self._at:
            self.tokens = min(
                float(self.rate.burst), self.tokens + (now - self._at) * self.rate.per_second
            )
        self._at = max(self._at, now)
        return self.tokens

    def take(self, now: float, n: float = 1.0, *, floor: float | None = None) -> bool:
        """False (nothing taken) when that would go below `floor`."""
        self.refill(now)
        if floor is not None and self.tokens - n < floor:
            return False
        self.tokens -= n
        return True

    def ready_at(self, now: float, need: float) -> float:
        """When the bucket will have refilled to `need` tokens had nothing been taken meanwhile
        (now if it holds them)."""
        have = self.refill(now)
        return now if have >= need else now + (need - have) / self.rate.per_second

    def full(self, now: float) -> bool:
        return self.refill(now) >= self.rate.burst


@dataclass(frozen=True, slots=True)
class Deferral:
    scope: BudgetScope
    owner: str  # the canary "ns/name", the namespace, or "controller"
    rate: Rate
    cost: int  # requests its last evaluation made
    until: float  # monotonic time the budget is out of debt
    at: float  # monotonic time it was first deferred
    retry_in: float  # seconds from the admission that deferred it to `until`

    @property
    def reason(self) -> str:
        return f"{self.scope.value.capitalize()}ApiBudgetExceeded"

    def message(self) -> str:
        late = max(self.until - self.at, 0.0)
        return (
            f"{_WHOSE[self.scope](self.owner)} Kubernetes API budget ({self.rate}) is spent "
            f"(one evaluation costs {self.cost} requests): evaluation deferred {late:.1f} s"
        )


_CHARGED: contextvars.ContextVar[Key | None] = contextvars.ContextVar(
    "alphagate_api_charged", default=None
)


@dataclass(slots=True)
class _Tally:
    total: int = 0
    charged: int = 0
    refused: int = 0
    by_canary: dict[Key, int] = field(default_factory=dict)


class ApiBudget:
    """Thread-safe."""

    def __init__(
        self, config: BudgetConfig | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config if config is not None else BudgetConfig()
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._overall = TokenBucket(self.config.overall, now) if self.config.overall else None
        self._namespaces: dict[str, TokenBucket] = {}
        self._canaries: dict[Key, TokenBucket] = {}
        self._cost: dict[Key, int] = {}  # requests of the last evaluation, by canary
        self._spent: dict[Key, int] = {}  # requests since the last admission, by canary
        self._deferred: dict[Key, Deferral] = {}
        self.tally = _Tally()

    @contextlib.contextmanager
    def charging(self, namespace: str, name: str) -> Iterator[None]:
        """This thread's (this task's) requests inside the block."""
        token = _CHARGED.set((namespace, name))
        try:
            yield
        finally:
            _CHARGED.reset(token)

    def spend(self, what: str = "") -> None:
        """One request is about to be sent: take its tokens. Raises ApiBudgetError when its
        canary or namespace is already in debt by a whole burst."""
        key = _CHARGED.get()
        with self._lock:
            now = self._clock()
            self.tally.total += 1
            if self._overall is not None:
                self._overall.take(now)
            if key is None:
                return
            buckets = (
                (BudgetScope.CANARY, self._canary(key, now)),
                (BudgetScope.NAMESPACE, self._namespace(key[0], now)),
            )
            for scope, bucket in buckets:
                if bucket is not None and bucket.refill(now) - 1.0 < -bucket.rate.burst:
                    self.tally.refused += 1
                    raise ApiBudgetError(
                        f"{what or 'request'}: refused: {_whose(scope, key)} Kubernetes API "
                        f"budget ({bucket.rate}) is in debt by a whole burst",
                        scope=scope.value,
                    )
            for _, bucket in buckets:
                if bucket is not None:
                    bucket.take(now)
            self.tally.charged += 1
            self.tally.by_canary[key] = self.tally.by_canary.get(key, 0) + 1
            self._spent[key] = self._spent.get(key, 0) + 1

    def admit(self, keys: Sequence[Key]) -> tuple[list[Key], dict[Key, Deferral]]:
        """Which canaries may start an evaluation now, in order: each whose buckets are not in
        debt once those admitted before it in this round have taken their last evaluation's
        cost; the others with their Deferral (kept for `deferral`)."""
        admitted: list[Key] = []
        deferred: dict[Key, Deferral] = {}
        with self._lock:
            now = self._clock()
            pending: dict[str, float] = {}  # tokens promised in this round, by namespace
            promised = 0.0
            for key in keys:
                if key in self._spent:  # its last evaluation is over: what it cost
                    self._cost[key] = max(self._spent.pop(key), 1)
                cost = self._cost.get(key, DEFAULT_COST)
                why = self._short(key, cost, now, promised, pending.get(key[0], 0.0))
                if why is not None:
                    before = self._deferred.get(key)
                    if before is not None:  # still short: late since the first deferral
                        why = dataclasses.replace(why, at=before.at)
                    deferred[key] = self._deferred[key] = why
                    continue
                admitted.append(key)
                promised += cost
                pending[key[0]] = pending.get(key[0], 0.0) + cost
            self._prune(now)
        return admitted, deferred

    def _short(
        self, key: Key, cost: int, now: float, promised: float, in_namespace: float
    ) -> Deferral | None:
        """The first budget in debt once the requests promised before in this round are
        taken, or None."""
        for scope, bucket, ahead in (
            (BudgetScope.CANARY, self._canary(key, now), 0.0),
            (BudgetScope.NAMESPACE, self._namespace(key[0], now), in_namespace),
            (BudgetScope.OVERALL, self._overall, promised),
        ):
            if bucket is not None and bucket.refill(now) - ahead < 0:
                until = bucket.ready_at(now, ahead)
                owner = _owner(scope, key)
                return Deferral(scope, owner, bucket.rate, cost, until, now, until - now)
        return None

    def deferral(self, namespace: str, name: str) -> Deferral | None:
        """The last deferral of this canary since it was last asked (then forgotten)."""
        with self._lock:
            return self._deferred.pop((namespace, name), None)

    def cost(self, namespace: str, name: str) -> int:
        with self._lock:
            return self._cost.get((namespace, name), DEFAULT_COST)

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        with self._lock:
            self._canaries.pop(key, None)
            self._cost.pop(key, None)
            self._spent.pop(key, None)
            self._deferred.pop(key, None)

    def _canary(self, key: Key, now: float) -> TokenBucket | None:
        return _bucket(self._canaries, key, self.config.canary, now)

    def _namespace(self, namespace: str, now: float) -> TokenBucket | None:
        return _bucket(self._namespaces, namespace, self.config.namespace, now)

    def _prune(self, now: float) -> None:
        """Bound the tables: a full bucket is the same as a new one."""
        if len(self._canaries) > MAX_BUCKETS:
            self._canaries = {k: b for k, b in self._canaries.items() if not b.full(now)}
        if len(self._namespaces) > MAX_BUCKETS:
            self._namespaces = {k: b for k, b in self._namespaces.items() if not b.full(now)}


def _bucket(
    table: dict[Any, TokenBucket], key: Any, rate: Rate | None, now: float
) -> TokenBucket | None:
    """The key's bucket, made full on first use; None when that budget is not enforced."""
    if rate is None:
        return None
    if key not in table:
        table[key] = TokenBucket(rate, now)
    return table[key]


_WHOSE: Final[dict[BudgetScope, Callable[[str], str]]] = {
    BudgetScope.CANARY: lambda owner: f"canary {owner}'s",
    BudgetScope.NAMESPACE: lambda owner: f"namespace {owner}'s",
    BudgetScope.OVERALL: lambda owner: "the controller's overall",
}


def _owner(scope: BudgetScope, key: Key) -> str:
    if scope is BudgetScope.CANARY:
        return f"{key[0]}/{key[1]}"
    return key[0] if scope is BudgetScope.NAMESPACE else "controller"


def _whose(scope: BudgetScope, key: Key) -> str:
    return _WHOSE[scope](_owner(scope, key))


class Charged:
    """A kubernetes API object (CoreV1Api ...) whose calls are charged to one canary: the pod
    discovery of a canary's source runs wherever the scrape wave runs it, yet pays from that
    canary's budget."""

    def __init__(self, api: Any, budget: ApiBudget, namespace: str, name: str) -> None:
        self._api = api
        self._budget = budget
        self._key = (namespace, name)

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._api, attr)
        if not callable(target):
            return target

        def charged(*args: Any, **kwargs: Any) -> Any:
            with self._budget.charging(*self._key):
                return target(*args, **kwargs)

        return charged
