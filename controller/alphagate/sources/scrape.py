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
import json
import math
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Self

from alphagate import files, vllm_compat
from alphagate.config import LatencyMetric, ScrapeSettings, SpeculativeCanarySpec
from alphagate.core.model import (
    AcceptanceSample,
    LatencySample,
    NoData,
    Observation,
    PoolObservation,
    RequestLives,
    Role,
)
from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources import exposition, http
from alphagate.sources import layout as pagelayout
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
    HistSum,
    PoolRef,
    budget_of,
    failed_pool,
    has_drafts,
    per_position_tuple,
    pools_of,
    sorted_samples,
)
from alphagate.sources.discovery import Discovery, Target, scrape_settings
from alphagate.sources.fetcher import Fetcher, Stage, run, where_of
from alphagate.sources.increments import PodState, check_page, latency_sample
from alphagate.sources.page import Hist, Page
from alphagate.sources.parsepool import parse_pool
from alphagate.sources.podmemory import check_buckets, increment_cells, kept_cells, series_cells

ACCEPT: Final = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
"""Ask for the classic text format: no OpenMetrics name escaping (vllm-metrics.md §5)."""


# --------------------------------------------------------------------------- fetching


@dataclass(frozen=True, slots=True)
class Scraped:
    """One scrape: the page or the classified failure."""

    target: Target
    at: float
    page: Page | None = None
    error: SourceError | None = None
    layout: vllm_compat.Layout | None = None  # only for a page lacking a latency histogram


def scraped(target: Target, body: bytes, content_type: str, at: float) -> Scraped:
    """A page's bytes -> Scraped: the page, or the classified reason it cannot be read.
    Whatever is wrong with this page fails this pod only."""
    where = where_of(target)
    try:
        page = parse_page(body, content_type=content_type, where=where)
        check_buckets(page, where)  # each bucket is kept per pod per interval
        if not pagelayout.needs_layout(page):
            return Scraped(target, at, page=page)
        text = exposition.decode(body, target=where)
        return Scraped(target, at, page=page, layout=pagelayout.page_layout(page, text))
    except SourceError as exc:
        return Scraped(target, at, error=exc)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # The parser met something it did not expect (e.g. a non-ASCII digit in a label it
        # converts): this page is bad, the other pods are not.
        bad = SourceError(SourceErrorKind.PARSE, f"cannot read the page: {exc!r}", target=where)
        return Scraped(target, at, error=bad)


def parse_page(body: bytes, *, content_type: str = "", where: str, strict: bool = False) -> Page:
    """A page's bytes -> Page, refusing what is not the text format and bad values."""
    _not_json(body, content_type, where)
    page = exposition.parse(exposition.decode(body, target=where), target=where, strict=strict)
    check_page(page.series.values(), where)
    return page


def _not_json(body: bytes, content_type: str, where: str) -> None:
    """A JSON body (an API endpoint, a Prometheus answer) parses as an empty page: refuse it."""
    if "json" in content_type.lower():
        raise SourceError(
            SourceErrorKind.PARSE,
            f"got {content_type.split(';')[0].strip()}, not the Prometheus text format "
            "(is this the /metrics path?)",
            target=where,
        )
    head = body[:64].lstrip()
    if head[:1] in (b"{", b"[") and body.rstrip()[-1:] in (b"}", b"]"):
        try:
            json.loads(body)
        except ValueError:
            return
        raise SourceError(
            SourceErrorKind.PARSE,
            "the body is JSON, not the Prometheus text format (is this the /metrics path?)",
            target=where,
        )


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
            got = await pool.run(owner, scraped, target, body, ctype, clock())
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
            budget = BudgetKind.PARSE_TIME if stage == "parse" else BudgetKind.READ_TIME
            return BudgetError(
                budget,
                f"the read's deadline of {why} passed {_STAGES[stage]}",
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
        return self._assemble(ref, start, ok)

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
        old_last = series_cells(state.last.values()) if state and state.last is not None else 0
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

    def _assemble(self, ref: PoolRef, start: float, ok: set[str]) -> PoolObservation:
        samples: list[AcceptanceSample] = []
        tpot_samples: list[LatencySample] = []
        gen = 0.0
        hists = {h: HistSum() for h in Hist}
        running: dict[str, list[float]] = {}
        pods = set(ok)
        spec_series = False  # spec-decode series on a pod now, or in an increment of the window
        spec_increments = 0
        for (slice_name, role, pod), state in self._states.items():
            if slice_name != ref.slice or role is not ref.role:
                continue
            if pod in ok and state.last is not None:
                spec_series = spec_series or any(s.speculating for s in state.last.values())
            for inc in state.ring:
                if (inc.start + inc.end) / 2 <= start:
                    continue
                pods.add(pod)
                gen += inc.generation_tokens
                if inc.running is not None:
                    running.setdefault(pod, []).append(inc.running)
                for h, (buckets, total) in inc.histograms.items():
                    hists[h].add(buckets, total)
                tpot = latency_sample(inc, Hist.TPOT)
                if tpot is not None:
                    tpot_samples.append(tpot)
                if not inc.speculating:
                    continue
                spec_series = True
                spec_increments += 1
                sample = AcceptanceSample(
                    drafts=inc.drafts,
                    draft_tokens=inc.draft_tokens,
                    accepted_tokens=inc.accepted,
                    per_position=per_position_tuple(inc.per_position),
                    pod=pod,
                    start=inc.start,
                    end=inc.end,
                )
                if has_drafts(sample):
                    samples.append(sample)
        no_data: NoData | None = None
        if spec_series and not samples:
            no_data = NoData.NO_TRAFFIC if spec_increments else NoData.SPARSE_SCRAPES
        return PoolObservation(
            slice=ref.slice,
            role=ref.role,
            acceptance=sorted_samples(samples),
            generation_tokens=gen,
            itl=hists[Hist.ITL].to_buckets(),
            tpot=hists[Hist.TPOT].to_buckets(),
            tpot_samples=tuple(sorted(tpot_samples, key=lambda t: (t.pod, t.start))),
            pods=len(pods),
            spec_series=spec_series,
            no_data=no_data,
            output_lengths=hists[Hist.OUTPUT_LENGTH].to_buckets(),
            lives=_lives(hists[Hist.DECODE_TIME]) if ref.role is Role.CANARY and samples else None,
            running=(
                math.fsum(math.fsum(v) / len(v) for v in running.values()) / len(running)
                if running
                else None
            ),
        )

    def _prune(self, now: float) -> None:
        before = now - self._retention
        for key in list(self._states):
            state = self._states[key]
            state.prune(before)
            if not state.ring and state.last_at < before:
                del self._states[key]


def _lives(decode: HistSum) -> RequestLives | None:
    """The pool's decode times over the window (what sizes alpha's blocks); None when the
    pods export none or no request finished."""
    h = decode.to_buckets()
    return RequestLives(h) if h is not None and h.total > 0 else None


_STAGES: Final[Mapping[Stage, str]] = {
    "queued": "before a slot to read this pod was free",
    "get": "while this pod's page was being read",
    "parse": "while this page waited for or was in parsing",
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


def read_page(
    target: str,
    *,
    timeout_seconds: float = 10.0,
    max_body_bytes: int = 64 << 20,
    max_lines: int = 1_000_000,
) -> Page:
    """One page from a URL or a file path (for `inspect`). Raises SourceError."""
    return read_page_layout(
        target, timeout_seconds=timeout_seconds, max_body_bytes=max_body_bytes, max_lines=max_lines
    )[0]


def read_page_layout(
    target: str,
    *,
    timeout_seconds: float = 10.0,
    max_body_bytes: int = 64 << 20,
    max_lines: int = 1_000_000,
) -> tuple[Page, vllm_compat.Layout]:
    """One page from a URL or a file path, and its vLLM layout (the text searched too, so an
    old family the parser does not keep is seen). Raises SourceError."""
    if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
        raise SourceError(
            SourceErrorKind.TIMEOUT,
            f"timeout must be a positive number of seconds, got {timeout_seconds}",
            target=target,
        )
    if target.startswith(("http://", "https://")):
        fetcher = Fetcher(headers={"Accept": ACCEPT}, concurrency=1)
        try:
            (result,) = fetcher.get_all(
                [Target(url=target)],
                timeout=timeout_seconds,
                max_bytes=max_body_bytes,
                max_lines=max_lines,
                on_body=lambda t, body, ctype: _with_layout(
                    scraped(t, body, ctype, time.time()), body
                ),
                on_error=lambda t, err: Scraped(t, time.time(), error=err),
            )
        finally:
            fetcher.close()
        if result.error is not None:
            raise result.error
        assert result.page is not None and result.layout is not None
        return result.page, result.layout
    try:
        body = files.read_regular(target, max_body_bytes)
    except OSError as exc:
        raise SourceError(
            SourceErrorKind.UNREACHABLE, f"cannot read: {exc.strerror or exc}", target=target
        ) from exc
    if len(body) > max_body_bytes:
        raise SourceError(
            SourceErrorKind.TOO_LARGE, f"file exceeds {max_body_bytes} bytes", target=target
        )
    if body.count(b"\n") > max_lines:
        raise SourceError(
            SourceErrorKind.TOO_LARGE, f"file has more than {max_lines} lines", target=target
        )
    try:
        page = parse_page(body, where=target, strict=True)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SourceError(
            SourceErrorKind.PARSE, f"cannot read the page: {exc!r}", target=target
        ) from exc
    return page, pagelayout.page_layout(page, exposition.decode(body, target=target))


def _with_layout(result: Scraped, body: bytes) -> Scraped:
    """`result` with its page's whole layout (the text searched even when nothing is missing)."""
    if result.page is None:
        return result
    text = exposition.decode(body, target=result.target.url)
    return replace(result, layout=pagelayout.page_layout(result.page, text))
