"""The Prometheus path at fleet size: one query per family for many canaries at once.

:meth:`PrometheusSource.observe` sends up to 17 queries a pool, 32 a canary: at 100 canaries,
some 3,000 queries every interval. :func:`observe_many` groups the pools of many canaries by the
label names their selectors use, sends those queries once per group (at most :data:`MAX_POOLS`
pools), each matching the union of the pools' values and grouped ``by`` those names as well,
and answers each pool from the group's answers by its own values. The sums are the same: every
pool is one combination of those values, so its points are exactly the points of that
combination.

A shared query that fails for a reason the query itself may cause (refused by Prometheus, too
many samples or bytes, partial data: :data:`QUERY_KINDS`) is asked again of each half of the
batch, and so on down to a pool alone, which asks its own query: a batch too large for the
server's limits costs a few queries more, a pool answers exactly as
:meth:`PrometheusSource.observe` would, and one canary's query can never fail the others. A
failure of the server (unreachable, timed out, 5xx) fails every pool of the group, as it fails
one canary at a time.

A caller holding many canaries' reads (the reconciler, once per cycle) goes through
:func:`alphagate.sources.cycle.observe_each`, which batches Prometheus reads that share an
endpoint, a deadline and a window here.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation, PoolObservation
from alphagate.errors import BudgetKind, SourceError, SourceErrorKind
from alphagate.sources import http, querybudget
from alphagate.sources.common import (
    budget_of,
    failed_observation,
    failed_pool,
    pools_of,
)
from alphagate.sources.layout import metric_of
from alphagate.sources.prometheus import POOL_LEVEL, PrometheusSource, pool_level
from alphagate.sources.promhold import HOLDS
from alphagate.sources.promql import PoolQueries, label_name, pool_queries, queries, quote
from alphagate.sources.promwire import Point, QueryTimeout
from alphagate.sources.querybudget import Payer
from alphagate.sources.scope import namespace_of, pool_labels

MAX_POOLS: Final = 256
"""Pools per batch: bounds the length of a query's matchers and the size of its answer."""

QUERY_KINDS: Final = frozenset((*POOL_LEVEL, SourceErrorKind.TOO_LARGE))
"""Shared-query failures the query may cause: each pool then asks its own query."""


SHARED_SHARE: Final = 3.0
"""A shared query may take a third of the time left: when the server gives up on it (its cost
is the batch's), its halves still have time, and theirs, down to a pool alone."""


def splittable(err: SourceError) -> bool:
    """A shared query failed for the batch's sake (its kind, an answer too large to decode,
    or the server giving up on its cost): its halves are asked, down to a pool alone. So one
    tenant's costly pools cannot fail the pools batched with them."""
    return (
        err.kind in QUERY_KINDS
        or budget_of(err) is BudgetKind.ANSWER
        or isinstance(err, QueryTimeout)
    )


def shared_within(source: PrometheusSource, pools: int) -> float | None:
    """How long the server may spend on a query shared by `pools` pools (None: a pool's own
    query, the source's timeout)."""
    if pools <= 1:
        return None
    left = http.remaining()
    return max(0.1, (left if left is not None else source.timeout_seconds) / SHARED_SHARE)


RANGE: Final = frozenset(
    ("drafts", "draft_tokens", "accepted", "per_position", "tpot_pod_buckets", "tpot_pod_sum")
)
"""The PoolQueries fields asked as range queries (first step to the window's end)."""
FIRST: Final = ("generation_tokens",)
"""What every pool asks first: a batch whose answer to it failed is asked nothing more ahead."""
PREFETCHED: Final = (
    *sorted(RANGE),
    "itl_buckets",
    "itl_sum",
    "tpot_buckets",
    "tpot_sum",
    "output_length_buckets",
    "output_length_sum",
    "running",
    "decode_time_buckets",
    "decode_time_sum",
)
"""The shared queries every pool asks (the others only in some cases: asked when needed)."""
PREFETCH_THREADS: Final = 6
"""Shared queries of one cycle's batches in flight at once."""


_RE2_SPECIAL: Final = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _alternation(values: Sequence[str]) -> str:
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in sorted(set(values)))


def union_matchers(pools: Sequence[Mapping[str, str]]) -> str:
    """Matchers every pool's series satisfy: ``k="v"`` or ``k=~"v1|v2"`` per label name."""
    out = []
    for key in sorted({label_name(k) for p in pools for k in p}):
        values = [v for p in pools for k, v in p.items() if label_name(k) == key]
        if len(set(values)) == 1:
            out.append(f"{key}={quote(values[0])}")
        else:
            out.append(f"{key}=~{quote(_alternation(values))}")
    return ",".join(out)


@dataclass(slots=True)
class _Batch:
    """Pools whose selectors use the same label names, and the answers to their queries."""

    source: PrometheusSource
    keys: tuple[str, ...]
    pools: list[dict[str, str]]
    window: float
    interval: float
    payer: Payer | None = None  # the namespace (and its canaries) sharing the batch's queries
    shared: PoolQueries | None = None
    answers: dict[str, list[Point] | SourceError] = field(default_factory=dict)
    indexed: dict[str, dict[tuple[str, ...], list[Point]]] = field(default_factory=dict)
    halves: tuple[_Batch, _Batch] | None = None

    def half(self, index: int) -> tuple[_Batch, int]:
        """The half of this batch holding its pool `index`, and the pool's index there. A
        query refused for the batch's sake is asked of each half, and so on down: a batch
        too large for the server's limits costs a few queries more, not one per pool."""
        if self.halves is None:
            mid = len(self.pools) // 2
            self.halves = (
                _Batch(self.source, self.keys, self.pools[:mid], *self._rest()),
                _Batch(self.source, self.keys, self.pools[mid:], *self._rest()),
            )
        first = len(self.halves[0].pools)
        return (self.halves[0], index) if index < first else (self.halves[1], index - first)

    def _rest(self) -> tuple[float, float, Payer | None]:
        return self.window, self.interval, self.payer

    def queries(self) -> PoolQueries:
        if self.shared is None:
            self.shared = queries(
                union_matchers(self.pools),
                window_seconds=self.window,
                interval_seconds=self.interval,
                keys=self.keys,
                recorded=self.source.reads_recorded(self.interval),
            )
        return self.shared

    def answer(self, name: str, ask: tuple[float, float, float] | float) -> list[Point]:
        """The shared query `name` (a PoolQueries field), asked once; errors are kept."""
        got = self.answers.get(name)
        if got is None:
            expr = getattr(self.queries(), name)
            within = shared_within(self.source, len(self.pools))
            try:
                with querybudget.paying(self.payer):  # shared: the namespace's own budget
                    got = self._ask(expr, ask, within)
            except SourceError as err:
                got = err
            self.answers[name] = got
        if isinstance(got, SourceError):
            raise got
        return got

    def _ask(
        self, expr: str, ask: tuple[float, float, float] | float, within: float | None
    ) -> list[Point]:
        if isinstance(ask, tuple):
            start, end, step = ask
            return self.source.query_range(expr, start=start, end=end, step=step, within=within)
        return self.source.query(expr, at=ask, within=within)

    def prefetch(
        self, start: float, end: float, interval: float, pool: Executor, names: Sequence[str]
    ) -> list[Future[None]]:
        """Ask this batch's shared queries side by side on `pool` (under this thread's read
        deadline), not one after another as its pools come to need them: a read of some 20
        queries then lasts about its slowest query, not their sum (at 50 ms a round trip the
        sum alone was 1.0 of a 1.6 s deadline, and a busier shared Prometheus took it past)."""
        q = self.queries()
        first = min(start + interval, end)
        held = http.current()

        def ask(name: str, when: tuple[float, float, float] | float) -> None:
            with http.carry(held), contextlib.suppress(SourceError):
                self.answer(name, when)

        return [
            pool.submit(ask, name, (first, end, interval) if name in RANGE else end)
            for name in names
            if getattr(q, name)
        ]

    def by_values(
        self, name: str, ask: tuple[float, float, float] | float
    ) -> dict[tuple[str, ...], list[Point]]:
        """The shared answer `name` grouped by the values of `keys` (a missing label is ""):
        each pool takes its own group, so a batch costs one pass over its points, not one
        per pool (200 pools and some 10^5 points at 5,000 pods)."""
        got = self.indexed.get(name)
        if got is None:
            got = {}
            keys = self.keys
            for p in self.answer(name, ask):
                got.setdefault(tuple(p.labels.get(k, "") for k in keys), []).append(p)
            self.indexed[name] = got
        return got


class _PoolAsker:
    """Answers one pool's queries from its batch's shared answers (an `Asker`)."""

    def __init__(
        self, batch: _Batch, index: int, own: PoolQueries, labels: Mapping[str, str]
    ) -> None:
        self.batch, self.index = batch, index
        self.names = {getattr(own, f.name): f.name for f in fields(PoolQueries)}
        wanted = {label_name(k): v for k, v in labels.items()}
        # a pool whose keys collapse to one label name with two values matches nothing
        agree = all(wanted[label_name(k)] == v for k, v in labels.items())
        self.key = tuple(wanted.get(k, "") for k in batch.keys) if agree else None

    def _mine(self, name: str, ask: tuple[float, float, float] | float) -> list[Point] | None:
        """The pool's points of the shared answer, or of the halves that answered it when
        the server refused the query for the batch's sake; None when the pool must ask
        alone (its half of one pool was refused too)."""
        batch, index = self.batch, self.index
        while True:
            try:
                groups = batch.by_values(name, ask)
                break
            except SourceError as err:
                if not splittable(err) or len(self.batch.pools) == 1:
                    raise
                if len(batch.pools) == 1:
                    return None
                batch, index = batch.half(index)
        return [] if self.key is None else groups.get(self.key, [])

    def query(self, expr: str, *, at: float | None = None) -> list[Point]:
        assert at is not None
        got = self._mine(self.names[expr], at)
        return self.batch.source.query(expr, at=at) if got is None else got

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Point]:
        got = self._mine(self.names[expr], (start, end, step))
        if got is None:
            return self.batch.source.query_range(expr, start=start, end=end, step=step)
        return got


def _payers(
    source: PrometheusSource,
    owners: Sequence[str | None],
    names: Sequence[str | None] | None,
) -> list[Payer | None]:
    """Who pays each spec's own queries: its canary (and namespace), when its namespace is
    known; one spec alone defaults to the source's canary."""
    if names is None:
        names = [source.name if len(owners) == 1 else None] * len(owners)
    return [
        None if ns is None else (ns, (n,) if n else ()) for ns, n in zip(owners, names, strict=True)
    ]


def _answered(batches: Sequence[_Batch]) -> list[_Batch]:
    """The batches whose first query was answered."""
    return [b for b in batches if not isinstance(b.answers.get(FIRST[0]), SourceError)]


def observe_many(
    source: PrometheusSource,
    specs: Sequence[SpeculativeCanarySpec],
    *,
    start: float,
    end: float,
    interval_seconds: float,
    namespaces: Sequence[str | None] | None = None,
    names: Sequence[str | None] | None = None,
) -> list[Observation]:
    """What ``source.observe`` gives for each spec, over one window, from shared queries.
    `namespaces`: each spec's canary namespace (default: the source's), matched by every
    query of its pools (sources/scope.py); pools of different namespaces never share a query,
    so one tenant's pools cannot fail another's. `names`: each spec's canary name: a pool's
    own queries are paid from its canary's Prometheus query budget, a batch's shared ones from
    its namespace's (sources/querybudget.py)."""
    window = end - start
    if not specs:
        return []
    if window < 0.001 or interval_seconds < 0.001:
        return [
            source.observe(s, start=start, end=end, interval_seconds=interval_seconds)
            for s in specs
        ]
    owners = list(namespaces) if namespaces is not None else [source.namespace] * len(specs)
    payers = _payers(source, owners, names)
    units: list[dict[str, str] | SourceError] = []  # each pool's matchers, or why none
    unit_owners: list[Payer | None] = []  # who pays each pool's share of a batch
    for spec, namespace, paid_by in zip(specs, owners, payers, strict=True):
        for ref in pools_of(spec):
            unit_owners.append(paid_by)
            try:
                matched = pool_labels(spec, ref, source.endpoint, namespace)
                # a held pool (sources/promhold.py) joins no shared query
                HOLDS.check(source.hold_key(matched), f"{ref.slice}/{ref.role}")
                units.append(matched)
            except SourceError as err:
                units.append(err)
    batches: dict[tuple[tuple[str, ...], str], list[_Batch]] = {}
    placed: list[tuple[_Batch, int] | None] = []
    for labels, owner in zip(units, unit_owners, strict=True):
        if isinstance(labels, SourceError):
            placed.append(None)
            continue
        keys = tuple(sorted({label_name(k) for k in labels}))
        group = batches.setdefault((keys, namespace_of(labels, source.endpoint)), [])
        if not group or len(group[-1].pools) >= MAX_POOLS:
            group.append(_Batch(source, keys, [], window, interval_seconds))
        group[-1].payer = querybudget.joined(group[-1].payer, owner)
        placed.append((group[-1], len(group[-1].pools)))
        group[-1].pools.append(labels)
    with ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="alphagate-promq") as pool:
        every = [batch for group in batches.values() for batch in group]
        # first what every pool asks first (a batch whose query fails asks nothing more),
        # then the rest of each answered batch's queries, all side by side
        for names, batches_now in ((FIRST, every), (PREFETCHED, None)):
            asked = [
                job
                for batch in (batches_now if batches_now is not None else _answered(every))
                for job in batch.prefetch(start, end, interval_seconds, pool, names)
            ]
            for job in asked:
                job.result()
    out: list[Observation] = []
    k = 0
    for spec, paid_by in zip(specs, payers, strict=True):
        pools: list[PoolObservation] = []
        scrapes: list[float] = []
        failed: SourceError | None = None
        metric = metric_of(spec.latency.enabled, spec.latency.metric)
        for ref in pools_of(spec):
            where, labels = placed[k], units[k]
            k += 1
            if failed is not None:
                continue
            if isinstance(labels, SourceError) or where is None:
                assert isinstance(labels, SourceError)
                pools.append(failed_pool(ref.slice, ref.role, labels))
                continue
            batch, index = where
            own = pool_queries(
                labels,
                window_seconds=window,
                interval_seconds=interval_seconds,
                recorded=source.reads_recorded(interval_seconds),
            )
            asker = _PoolAsker(batch, index, own, labels)
            try:
                with querybudget.paying(paid_by):  # a pool's own queries: its canary's budget
                    pools.append(
                        source._pool(
                            ref, labels, start, end, interval_seconds, ask=asker, metric=metric
                        )
                    )
                measured = source._scrape_interval(labels)
                if measured is not None:
                    scrapes.append(measured)
            except SourceError as err:
                if not pool_level(err):
                    failed = err
                    continue
                pools.append(failed_pool(ref.slice, ref.role, err))
        if failed is not None:
            out.append(failed_observation(spec, failed, at=end, window=window))
        else:
            out.append(
                Observation(
                    at=end,
                    window_seconds=window,
                    pools=tuple(pools),
                    scrape_interval_seconds=max(scrapes) if scrapes else None,
                )
            )
    return out


__all__ = ["MAX_POOLS", "QUERY_KINDS", "observe_many", "union_matchers"]
