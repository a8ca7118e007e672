"""Read a policy's pools by scraping the pods' /metrics directly.

Each :meth:`ScrapeSource.observe` discovers the pools' pods, scrapes every distinct URL once,
concurrently (at most ``scrape.maxConcurrency`` at a time, each bounded by
``scrape.timeoutSeconds`` in total and ``scrape.maxBodyBytes``), and turns each pod's counters
into an increment since the previous scrape of that pod. A counter that went down, or whose
``_created`` timestamp changed, was reset by a restart: the increment is then the new value,
never negative. Increments live in a per-pod ring buffer; a pool's observation sums those
whose midpoint falls inside the window, like PromQL ``increase`` over the window, and each
increment that carries drafts is one AcceptanceSample (a batch for batch means).

The first scrape of a pod gives no increment (there is nothing to subtract), unless
``since_start`` is set: then the counters since the pod started are the first increment. That
is what one-shot reads (``alphagate evaluate``) use.

A pool whose pods export spec-decode series is speculating (``spec_series``) even when its
counters did not move (``no_data`` NO_TRAFFIC) or no increment falls in the window yet
(SPARSE_SCRAPES): never "speculation off". The source scrapes once per evaluation, so its
scrape interval is the evaluation interval (``Observation.scrape_interval_seconds``).

A pod that refuses the connection (it vanished after listing: ``pod_gone``) is left out of the
pool. Other failures (timeout, malformed or oversized page, HTTP status) are kept in
:attr:`ScrapeSource.failures` and fail the pool only when more than ``max_failed_fraction`` of
its pods failed, or all did. Nothing here raises for source trouble.

A read is three steps: :meth:`ScrapeSource.plan` (discovery), the GETs, and
:meth:`ScrapeSource.finish` (increments and pools). ``observe`` runs them for one canary;
:mod:`alphagate.sources.scrapebatch` runs many sources' GETs in one wave between them.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

from alphagate.config import LatencyMetric, ScrapeSettings, SpeculativeCanarySpec
from alphagate.core.model import (
    Observation,
    PoolObservation,
    Role,
)
from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources import http
from alphagate.sources import layout as pagelayout
from alphagate.sources.assemble import assemble
from alphagate.sources.budget import (
    CELL_BYTES,
    FIRST_PAGE_BYTES,
    IN_FLIGHT,
    KEPT,
    Account,
    describe_deadline,
    mib,
    read_deadline,
)
from alphagate.sources.common import (
    SERIES_LABELS,
    PoolRef,
    budget_of,
    failed_pool,
    pools_of,
)
from alphagate.sources.discovery import Discovery, Target, scrape_settings
from alphagate.sources.fetcher import Fetcher, Stage, run, where_of
from alphagate.sources.getshare import GET_SHARE
from alphagate.sources.increments import PodState, series_cells
from alphagate.sources.pageread import ACCEPT, Scraped, scraped
from alphagate.sources.parsepool import parse_pool, tenant_of
from alphagate.sources.podmemory import increment_cells, kept_cells

# --------------------------------------------------------------------------- the source


@dataclass(frozen=True, slots=True)
class Plan:
    """One read between discovery and assembly: its settings, pools and their targets."""

    settings: ScrapeSettings
    refs: list[PoolRef]
    found: Mapping[tuple[str, Role], list[Target] | SourceError]
    start: float
    end: float
    interval: float
    metric: LatencyMetric | None = None  # the latency the policy judges (None: guard off)
    deadline: float = math.inf
    """Seconds the whole read may last (`sources.budget.read_deadline`)."""

    def targets(self) -> list[Target]:
        """Every pool's targets, each URL once (a pod in two pools is scraped once)."""
        every = (t for v in self.found.values() if isinstance(v, list) for t in v)
        return list({t.url: t for t in every}.values())


class ScrapeSource:
    """A `Source` that scrapes pods. Stateful: keep one per policy across evaluations."""

    def __init__(
        self,
        discovery: Discovery,
        *,
        settings: ScrapeSettings | None = None,
        clock: Callable[[], float] = time.time,
        since_start: bool = False,
        max_failed_fraction: float = 0.1,
        accept_encoding: str = http.ACCEPT_ENCODING,
        owner: str = "",
    ) -> None:
        self.discovery = discovery
        self.settings = settings
        self.clock = clock
        self.since_start = since_start
        self.max_failed_fraction = max_failed_fraction
        self.accept_encoding = accept_encoding
        self._fetcher: Fetcher | None = None
        self._states: dict[tuple[str, Role, str], PodState] = {}
        self._retention = 0.0
        self._interval = math.inf  # the last read's interval (its deadline depends on it)
        self.owner = owner or f"scrape-{id(self):x}"
        """Whose budgets this source spends (the canary, ``namespace/name``)."""
        self._cells = 0  # numbers kept (`podmemory`), within the canary's share of KEPT
        self._page_bytes = FIRST_PAGE_BYTES  # the largest page of the last read: the next GET's
        # reservation in the canary's memory in flight
        KEPT.register(self)
        self._account: Account | None = None  # the pages of a read, held until `finish`
        self.lock = threading.Lock()
        """Held by a read from :meth:`plan` to :meth:`finish` (`observe`, or a cycle's wave)."""
        self.failures: dict[tuple[str, Role], list[SourceError]] = {}
        """Per pool, the pods that failed in the last observe (kept even when tolerated)."""
        self.bytes_read = 0
        """Bytes read off the wire by every scrape so far (compressed, as sent)."""

    def close(self) -> None:
        """Close the connections; what it kept no longer counts against the budget."""
        KEPT.forget(self)
        self._let_go()
        self._close_fetcher()

    def _let_go(self) -> None:
        """The pages of the last read no longer count as in flight."""
        account, self._account = self._account, None
        if account is not None:
            account.close()

    def _close_fetcher(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _http(self, settings: ScrapeSettings) -> Fetcher:
        if self._fetcher is None or self._fetcher.concurrency != settings.max_concurrency:
            self._close_fetcher()
            self._fetcher = Fetcher(
                headers={"Accept": ACCEPT},
                concurrency=settings.max_concurrency,
                accept_encoding=self.accept_encoding,
            )
        return self._fetcher

    def scrape(self, targets: Iterable[Target], settings: ScrapeSettings) -> dict[str, Scraped]:
        """Scrape each distinct URL once, at most `maxConcurrency` at a time, within the last
        planned read's deadline."""
        unique = list({t.url: t for t in targets}.values())
        if not unique:
            return {}
        seconds = read_deadline(settings.timeout_seconds, self._interval)
        return run(self.scraping(unique, settings, seconds))

    def scraping(
        self,
        unique: Sequence[Target],
        settings: ScrapeSettings,
        deadline: float | None = None,
    ) -> Coroutine[Any, Any, dict[str, Scraped]]:
        """:meth:`scrape` of distinct targets as a coroutine to run on the fetch loop, beside
        other sources' reads; `deadline`: seconds the whole read may last from its start (None:
        no deadline but each GET's timeout). Call it on the caller's thread: it may replace the
        source's Fetcher."""
        fetcher = self._http(settings)
        return self._fetch(fetcher, unique, settings, deadline)

    async def _fetch(
        self,
        fetcher: Fetcher,
        unique: Sequence[Target],
        settings: ScrapeSettings,
        seconds: float | None,
    ) -> dict[str, Scraped]:
        if not unique:
            return {}
        before = fetcher.bytes_read
        clock = self.clock
        owner = self.owner
        pool = parse_pool()
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None or math.isinf(seconds) else loop.time() + seconds
        why = describe_deadline(seconds or 0.0, settings.timeout_seconds, self._interval)

        largest = [0]

        account = IN_FLIGHT.open(owner)
        self._let_go()  # an earlier read that never finished
        self._account = account

        async def parse(target: Target, body: bytes, ctype: str) -> Scraped:
            largest[0] = max(largest[0], len(body))
            # off the fetch loop, the canaries taken in turn (sources.parsepool)
            try:
                got = await pool.run(owner, scraped, target, body, ctype, clock())
            except BudgetError as err:  # its namespace is past its share of the parse workers
                return Scraped(target, clock(), error=err)
            if got.page is None:
                return got
            try:  # the parsed page is held until `finish`: the canary's memory in flight
                account.charge(
                    CELL_BYTES * series_cells(got.page.series.values()), where_of(target)
                )
            except BudgetError as err:
                return Scraped(target, got.at, error=err)
            return got

        def late(target: Target, stage: Stage) -> SourceError:
            budget = _LATE[stage]
            waited = f": {GET_SHARE.describe(tenant_of(owner))}" if stage == "share" else ""
            return BudgetError(
                budget,
                f"the read's deadline of {why} passed {_STAGES[stage]}{waited}",
                target=where_of(target),
            )

        try:
            results = await fetcher.fetch(
                unique,
                timeout=settings.timeout_seconds,
                max_bytes=settings.max_body_bytes,
                max_lines=settings.max_lines,
                on_body=parse,
                on_error=lambda t, err: Scraped(t, clock(), error=err),
                deadline=deadline,
                late=late,
                account=account,
                expected=lambda: self._page_bytes,
                owner=owner,
            )
        finally:  # the account is let go in `finish`, once the pages are kept or dropped
            if largest[0]:
                self._page_bytes = largest[0]
            self.bytes_read += fetcher.bytes_read - before
        return {r.target.url: r for r in results}

    def observe(
        self,
        spec: SpeculativeCanarySpec,
        *,
        start: float,
        end: float,
        interval_seconds: float,
    ) -> Observation:
        """Scrape now and report every pool over the window. Never raises for source trouble.

        Pod-scraping reads the present: `end` is taken as now and increments are those whose
        midpoint lies after `start`."""
        with self.lock:
            plan = self.plan(spec, start=start, end=end, interval=interval_seconds)
            return self.finish(plan, self.scrape(plan.targets(), plan.settings))

    def plan(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval: float
    ) -> Plan:
        """A read's first step: its settings and every pool's targets (or why there are none).
        The caller holds the source's lock from here to :meth:`finish`."""
        settings = self.settings or scrape_settings(spec)
        KEPT.register(self)  # again, if it was closed and is read anew
        window = max(end - start, 0.0)
        self._retention = max(self._retention, window + 2 * interval)
        self._interval = interval
        refs = pools_of(spec)
        found: dict[tuple[str, Role], list[Target] | SourceError] = {}
        for ref in refs:
            try:
                found[(ref.slice, ref.role)] = self.discovery.targets(spec, ref)
            except SourceError as err:
                found[(ref.slice, ref.role)] = err
            except Exception as exc:  # noqa: BLE001 - last resort: a Discovery is pluggable, never let it crash us
                found[(ref.slice, ref.role)] = SourceError(
                    SourceErrorKind.UNREACHABLE,
                    f"discovery failed: {exc!r}",  # repr names the type
                )
        metric = pagelayout.metric_of(spec.latency.enabled, spec.latency.metric)
        deadline = read_deadline(settings.timeout_seconds, interval)
        return Plan(
            settings,
            refs,
            found,
            start=start,
            end=end,
            interval=interval,
            metric=metric,
            deadline=deadline,
        )

    def finish(self, plan: Plan, scraped: Mapping[str, Scraped]) -> Observation:
        """A read's last step: the pods' pages (by URL) into increments and every pool's
        PoolObservation over the plan's window."""
        now = self.clock()
        self.failures = {}
        self._prune(now)  # first: what the window no longer needs frees the canary's share
        self._cells = kept_cells(self._states.values())
        pools = [
            self._pool(ref, plan.found[(ref.slice, ref.role)], scraped, plan.start, plan.metric)
            for ref in plan.refs
        ]
        self._cells = kept_cells(self._states.values())
        KEPT.set(self, self._cells)
        self._let_go()
        window = max(plan.end - plan.start, 0.0)
        return Observation(
            at=plan.end,
            window_seconds=window,
            pools=tuple(pools),
            scrape_interval_seconds=plan.interval,
        )

    def _pool(
        self,
        ref: PoolRef,
        found: list[Target] | SourceError,
        scraped: Mapping[str, Scraped],
        start: float,
        metric: LatencyMetric | None = None,
    ) -> PoolObservation:
        if isinstance(found, SourceError):
            return failed_pool(ref.slice, ref.role, found)
        series_filter = {k: v for k, v in ref.match_labels.items() if k in SERIES_LABELS}
        ok: set[str] = set()
        errors: list[SourceError] = []
        for target in found:
            result = scraped[target.url]
            if result.error is None:
                assert result.page is not None
                key = (ref.slice, ref.role, target.name)
                result = self._update(key, target, result, series_filter)
            if result.error is not None:
                errors.append(result.error)
                continue
            ok.add(target.name)
        if errors:
            self.failures[(ref.slice, ref.role)] = errors
        # A pod that refused the connection is gone (deleted after listing): not a failure.
        failed = [e for e in errors if e.kind is not SourceErrorKind.POD_GONE]
        gone = len(errors) - len(failed)
        where = f"{ref.slice}/{ref.role}"
        if not found:
            err = SourceError(
                SourceErrorKind.EMPTY, f"no ready pods match {dict(ref.match_labels)}", target=where
            )
            return failed_pool(ref.slice, ref.role, err)
        if not ok:
            detail = "; ".join(str(e) for e in (failed or errors)[:3])
            err = _pods_failed((failed or errors), f"all {len(found)} pods failed: {detail}", where)
            return failed_pool(ref.slice, ref.role, err)
        if failed and len(failed) > self.max_failed_fraction * (len(found) - gone):
            detail = "; ".join(str(e) for e in failed[:3])
            message = f"{len(failed)} of {len(found) - gone} pods failed: {detail}"
            err = _pods_failed(failed, message, where, SourceErrorKind.PARTIAL)
            return failed_pool(ref.slice, ref.role, err, pods=len(ok))
        layouts = (r.layout for t in found if (r := scraped[t.url]).layout is not None)
        old = pagelayout.layout_error(layouts, metric, where)
        if old is not None:  # a vLLM too old for the guard: say which release it needs
            return failed_pool(ref.slice, ref.role, old, pods=len(ok))
        return assemble(self._states, ref, start, ok)

    def _update(
        self,
        key: tuple[str, Role, str],
        target: Target,
        result: Scraped,
        series_filter: Mapping[str, str],
    ) -> Scraped:
        """One pod's page into its increments; the pod's failure (MEMORY) when keeping it
        would take the canary past its share of what the controller keeps (`podmemory`)."""
        assert result.page is not None
        series = {s.labels: s for s in result.page.matching(series_filter)}
        state = self._states.get(key)
        new_last = series_cells(series.values())
        old_last = state.last_cells if state is not None else 0
        grows = (state is not None and state.last is not None) or self.since_start
        projected = self._cells - old_last + new_last + (new_last if grows else 0)
        share = KEPT.share_cells()
        if projected > share:
            err = BudgetError(
                BudgetKind.MEMORY,
                f"keeping this pod's page and increments would take the canary to "
                f"{mib(projected):.1f} MiB, over its share of {mib(share):.1f} MiB "
                f"({KEPT.describe()})",
                target=where_of(target),
            )
            return Scraped(target, result.at, error=err)
        if state is None:
            state = self._states[key] = PodState(target.name)
        ring = len(state.ring)
        state.update(series, result.at, since_start=self.since_start)
        added = increment_cells(state.ring[-1]) if len(state.ring) > ring else 0
        self._cells += new_last - old_last + added
        return result

    def _prune(self, now: float) -> None:
        before = now - self._retention
        for key in list(self._states):
            state = self._states[key]
            state.prune(before)
            if not state.ring and state.last_at < before:
                del self._states[key]


_STAGES: Final[Mapping[Stage, str]] = {
    "queued": "before a slot to read this pod was free",
    "share": "while this pod's GET waited for its namespace's share of the fetch loop",
    "get": "while this pod's page was being read",
    "parse": "while this page waited for or was in parsing",
}
_LATE: Final[Mapping[Stage, BudgetKind]] = {
    "queued": BudgetKind.READ_TIME,
    "share": BudgetKind.RECEIVE,
    "get": BudgetKind.READ_TIME,
    "parse": BudgetKind.PARSE_TIME,
}


def _pods_failed(
    errors: Sequence[SourceError],
    message: str,
    where: str,
    kind: SourceErrorKind | None = None,
) -> SourceError:
    """A pool's error from its pods' failures: a budget its pods spent stays typed (the first
    such budget), else `kind` (None: the first failure's kind)."""
    budget = next((b for b in map(budget_of, errors) if b is not None), None)
    if budget is not None:
        return BudgetError(budget, message, target=where)
    return SourceError(kind or errors[0].kind, message, target=where)
