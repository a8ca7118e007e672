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
from dataclasses import dataclass
from typing import Any, Final, Self

from alphagate.config import ScrapeSource as ScrapeSettings
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import (
    AcceptanceSample,
    LatencySample,
    NoData,
    Observation,
    PoolObservation,
    Role,
)
from alphagate.errors import BudgetError, SourceError, SourceErrorKind
from alphagate.sources import exposition, http
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
from alphagate.sources.exposition import Hist, Page
from alphagate.sources.fetcher import Fetcher, run, where_of
from alphagate.sources.increments import PodState, check_page, latency_sample

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


def scraped(target: Target, body: bytes, content_type: str, at: float) -> Scraped:
    """A page's bytes -> Scraped: the page, or the classified reason it cannot be read.
    Whatever is wrong with this page fails this pod only."""
    where = where_of(target)
    try:
        return Scraped(target, at, page=parse_page(body, content_type=content_type, where=where))
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
        self.lock = threading.Lock()
        """Held by a read from :meth:`plan` to :meth:`finish` (`observe`, or a cycle's wave)."""
        self.failures: dict[tuple[str, Role], list[SourceError]] = {}
        """Per pool, the pods that failed in the last observe (kept even when tolerated)."""
        self.bytes_read = 0
        """Bytes read off the wire by every scrape so far (compressed, as sent)."""

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _http(self, settings: ScrapeSettings) -> Fetcher:
        if self._fetcher is None or self._fetcher.concurrency != settings.max_concurrency:
            self.close()
            self._fetcher = Fetcher(
                headers={"Accept": ACCEPT},
                concurrency=settings.max_concurrency,
                accept_encoding=self.accept_encoding,
            )
        return self._fetcher

    def scrape(self, targets: Iterable[Target], settings: ScrapeSettings) -> dict[str, Scraped]:
        """Scrape each distinct URL once, at most `maxConcurrency` at a time."""
        unique = list({t.url: t for t in targets}.values())
        if not unique:
            return {}
        return run(self.scraping(unique, settings))

    def scraping(
        self,
        unique: Sequence[Target],
        settings: ScrapeSettings,
        room: asyncio.Semaphore | None = None,
    ) -> Coroutine[Any, Any, dict[str, Scraped]]:
        """:meth:`scrape` of distinct targets as a coroutine to run on the fetch loop, in a
        wave with other sources' (`room`: the wave's bound on GETs in flight). Call it on the
        caller's thread: it may replace the source's Fetcher."""
        fetcher = self._http(settings)
        return self._fetch(fetcher, unique, settings, room)

    async def _fetch(
        self,
        fetcher: Fetcher,
        unique: Sequence[Target],
        settings: ScrapeSettings,
        room: asyncio.Semaphore | None,
    ) -> dict[str, Scraped]:
        if not unique:
            return {}
        before = fetcher.bytes_read
        clock = self.clock
        try:
            results = await fetcher.fetch(
                unique,
                timeout=settings.timeout_seconds,
                max_bytes=settings.max_body_bytes,
                max_lines=settings.max_lines,
                on_body=lambda t, body, ctype: scraped(t, body, ctype, clock()),
                on_error=lambda t, err: Scraped(t, clock(), error=err),
                room=room,
            )
        finally:
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
        window = max(end - start, 0.0)
        self._retention = max(self._retention, window + 2 * interval)
        refs = pools_of(spec)
        found: dict[tuple[str, Role], list[Target] | SourceError] = {}
        for ref in refs:
            try:
                found[(ref.slice, ref.role)] = self.discovery.targets(spec, ref)
            except SourceError as err:
                found[(ref.slice, ref.role)] = err
            except Exception as exc:  # last resort: a Discovery is pluggable, never let it crash us
                found[(ref.slice, ref.role)] = SourceError(
                    SourceErrorKind.UNREACHABLE,
                    f"discovery failed: {exc!r}",  # repr names the type
                )
        return Plan(settings, refs, found, start=start, end=end, interval=interval)

    def finish(self, plan: Plan, scraped: Mapping[str, Scraped]) -> Observation:
        """A read's last step: the pods' pages (by URL) into increments and every pool's
        PoolObservation over the plan's window."""
        now = self.clock()
        self.failures = {}
        pools = [
            self._pool(ref, plan.found[(ref.slice, ref.role)], scraped, plan.start)
            for ref in plan.refs
        ]
        self._prune(now)
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
        return self._assemble(ref, start, ok)

    def _update(
        self,
        key: tuple[str, Role, str],
        target: Target,
        result: Scraped,
        series_filter: Mapping[str, str],
    ) -> Scraped:
        """One pod's page into its increments (the pod's failure when it cannot be kept)."""
        assert result.page is not None
        series = {s.labels: s for s in result.page.matching(series_filter)}
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PodState(target.name)
        state.update(series, result.at, since_start=self.since_start)
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
                on_body=lambda t, body, ctype: scraped(t, body, ctype, time.time()),
                on_error=lambda t, err: Scraped(t, time.time(), error=err),
            )
        finally:
            fetcher.close()
        if result.error is not None:
            raise result.error
        assert result.page is not None
        return result.page
    try:
        with open(target, "rb") as fh:
            body = fh.read(max_body_bytes + 1)
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
        return parse_page(body, where=target, strict=True)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SourceError(
            SourceErrorKind.PARSE, f"cannot read the page: {exc!r}", target=target
        ) from exc
