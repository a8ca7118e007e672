"""Read a policy's pools from the Prometheus HTTP API (or Thanos, Mimir, VictoriaMetrics).

The PromQL is built in `sources/promql.py`; requests, secrets and answers are
`sources/promwire.py`.

A canary whose spec-decode counters exist but did not move is speculating with no traffic
(``no_data`` NO_TRAFFIC); series that exist while every ``increase()`` came back empty mean
the interval holds fewer than two scrapes (SPARSE_SCRAPES): neither reads as "speculation off".

Each (pod, step) point of the range queries becomes one AcceptanceSample (a batch for batch
means). `increase()` extrapolates to the range edges, so batch values are floats and their sum
approximates the window's increase within a scrape interval's worth of counts.

With recorded rates (the endpoint's ``recordedRulesIntervalSeconds`` E, the shipped rules
`deploy/monitoring/rules/alphagate-batches.yaml`) a step's or the window's count is E times the
sum of the recorded per-pod rates in it: each point is a rate over two rule intervals, so the
recorded window lags the raw one by about E and reaches about E further back (different edges
of the same counters, not a different answer). A sum of points cannot tell a window the rules
covered from one they stopped recording half-way: a pool where any rule the source reads has
its newest recorded point more than RECORDED_LAG_EVALUATIONS rule intervals old at the window's
end, or has no recorded series while the pool has that raw counter, is a pool error of kind
STALE (held, never judged on the older part, nor on one counter short of the others).

Failures never raise out of :meth:`PrometheusSource.observe`: they are classified
(:class:`~alphagate.errors.SourceErrorKind`) and put on the Observation (the server failed:
unreachable, timeout, HTTP status, bad JSON) or on the pool (the query failed, returned nothing
for the pool, NaN, or partial data with warnings). Only connect errors, timeouts and 502/503/504
are retried, a bounded number of times.
"""

from __future__ import annotations

import json
import math
import ssl
import time
from collections.abc import Mapping
from typing import Any, Final, Self

import httpx
import tenacity

from alphagate import vllm
from alphagate.config import LatencyMetric, PrometheusSettings, SpeculativeCanarySpec
from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    LatencySample,
    NoData,
    Observation,
    PoolObservation,
    RequestLives,
    Role,
)
from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources import http
from alphagate.sources.common import (
    MAX_POSITIONS,
    HistSum,
    PoolRef,
    budget_of,
    check_finite,
    failed_observation,
    failed_pool,
    has_drafts,
    per_position_tuple,
    pools_of,
    redact_url,
    sorted_samples,
)
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.layout import layout_error, metric_of
from alphagate.sources.page_builder import parse_number
from alphagate.sources.promql import (
    LATENCY_FAMILIES,
    RECORDED,
    RULE_LABEL,
    PoolQueries,
    duration,
    label_name,
    matchers,
    parse_duration,
    pool_queries,
    recorded_name,
)
from alphagate.sources.promwire import (
    Asker,
    FileAuth,
    Point,
    TransientError,
    WatchedFile,
    decode,
    pod_of,
    transient,
    ts,
)
from alphagate.sources.scope import check_scope, pool_labels
from alphagate.vllm_compat import layout_of

POOL_LEVEL: Final = frozenset(
    (
        SourceErrorKind.QUERY_ERROR,
        SourceErrorKind.EMPTY,
        SourceErrorKind.NAN,
        SourceErrorKind.PARTIAL,
        SourceErrorKind.STALE,
    )
)
"""Kinds that concern one query (one pool); every other kind means the server failed."""


def pool_level(err: SourceError) -> bool:
    """The failure concerns one pool's query (its kind, or an answer too large to decode),
    not the server: the other pools are still read."""
    return err.kind in POOL_LEVEL or budget_of(err) is BudgetKind.ANSWER


RECORDED_LAG_EVALUATIONS: Final = 2
"""Recorded rates whose newest point is older than this many rule intervals at the window's
end are stale: one evaluation late is the rules' own pace (a point is written after its group
ran), two missed mean the rules are behind (or stopped)."""

SCRAPE_PROBE_SECONDS: Final = 600.0
"""The targets' scrape intervals are read again at most this often (one request)."""


# --------------------------------------------------------------------------- the source


class PrometheusSource:
    """A `Source` over the Prometheus HTTP API. Build once per policy; close() when done."""

    def __init__(
        self,
        endpoint: PrometheusEndpoint,
        *,
        timeout_seconds: float | None = None,
        transport: httpx.BaseTransport | None = None,
        attempts: int = 3,
        backoff_seconds: float = 0.2,
        max_backoff_seconds: float = 2.0,
        max_response_bytes: int | None = None,
        namespace: str | None = None,
    ) -> None:
        settings = endpoint
        self.endpoint = endpoint
        # The canary's namespace: every query matches it (sources/scope.py); None: no bound
        # (a one-off read by the admin of their own process).
        self.namespace = namespace
        # A policy may ask for a shorter deadline than the endpoint's, never a longer one.
        self.timeout_seconds = min(
            timeout_seconds or endpoint.timeout_seconds, endpoint.timeout_seconds
        )
        self.max_response_bytes = max_response_bytes or endpoint.max_response_bytes
        self.attempts = max(1, attempts)
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        # (read at, [(target labels, scrape interval seconds)]) from the targets API
        self._targets: tuple[float, list[tuple[dict[str, str], float]]] | None = None
        token = (
            WatchedFile(settings.bearer_token_file, "bearer token file")
            if settings.bearer_token_file
            else None
        )
        basic = settings.basic_auth
        auth = FileAuth(
            token=token,
            username=basic.username if basic else None,
            password=WatchedFile(basic.password_file, "password file") if basic else None,
        )
        verify: ssl.SSLContext | bool = True
        # A bad CA bundle must not crash the controller: every observe reports it instead.
        self._config_error: SourceError | None = None
        if settings.ca_file:
            try:
                verify = ssl.create_default_context(cafile=settings.ca_file)
            except (OSError, ssl.SSLError) as exc:
                self._config_error = SourceError(
                    SourceErrorKind.UNREACHABLE,
                    f"cannot load CA bundle {settings.ca_file}: {exc}",
                    target=redact_url(settings.url),
                )
        self.base_url = settings.url.rstrip("/") + "/"
        self.display_url = redact_url(self.base_url)
        self._client = http.client(
            base_url=self.base_url,
            auth=auth,
            verify=verify,
            headers={"Accept": "application/json", **settings.headers},
            timeout=httpx.Timeout(self.timeout_seconds),
            transport=transport,
        )

    @classmethod
    def from_spec(
        cls,
        spec: SpeculativeCanarySpec,
        endpoints: SourcesConfig,
        *,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> PrometheusSource:
        """The source for a policy's `prometheus.endpoint`, as the admin configured it, reading
        `namespace`'s series only (None: no namespace bound). Raises EndpointError when no
        endpoint has that name, NamespaceError when the policy selects another namespace."""
        wanted = spec.source.prometheus or PrometheusSettings()
        endpoint = endpoints.prometheus_endpoint(wanted.endpoint)
        check_scope(spec, endpoint, namespace)
        return cls(endpoint, timeout_seconds=wanted.timeout_seconds, namespace=namespace, **kwargs)

    def labels_of(self, spec: SpeculativeCanarySpec, ref: PoolRef) -> dict[str, str]:
        """Every matcher of a pool's queries, its namespace's included (sources/scope.py)."""
        return pool_labels(spec, ref, self.endpoint, self.namespace)

    def reads_recorded(self, interval: float) -> float | None:
        """The recorded rates' interval when pools are read from them: the endpoint has them
        (``recordedRulesIntervalSeconds``) and `interval` is a whole multiple of it."""
        every = self.endpoint.recorded_rules_interval_seconds
        if every is None or interval < every:
            return None
        return every if abs(interval / every - round(interval / every)) < 1e-6 else None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- queries

    def query(
        self, expr: str, *, at: float | None = None, within: float | None = None
    ) -> list[Point]:
        """An instant query; raises SourceError (classified) on any failure. `within`: the
        server gives up after that many seconds (default: the source's timeout)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = ts(at)
        return self._request("api/v1/query", params, "vector", expr, within)

    def query_range(
        self, expr: str, *, start: float, end: float, step: float, within: float | None = None
    ) -> list[Point]:
        """A range query; raises SourceError (classified) on any failure."""
        params = {"query": expr, "start": ts(start), "end": ts(end), "step": ts(step)}
        return self._request("api/v1/query_range", params, "matrix", expr, within)

    def _request(
        self,
        path: str,
        params: dict[str, str],
        result_type: str,
        expr: str,
        within: float | None = None,
    ) -> list[Point]:
        if self._config_error is not None:
            raise self._config_error
        server = min(within or self.timeout_seconds, self.timeout_seconds)
        params = {**params, "timeout": duration(max(server, 0.001))}
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(
                multiplier=self.backoff_seconds, max=self.max_backoff_seconds
            ),
            retry=tenacity.retry_if_exception(transient),
            reraise=True,
        )
        # One deadline for the query, its retries included: a slow server costs one timeout.
        last: list[SourceError] = []  # the last transient failure, if the deadline cuts retries
        with http.deadline(self.timeout_seconds):
            for attempt in retrying:
                with attempt:
                    try:
                        return self._once(path, params, result_type, expr, last)
                    except SourceError as err:
                        if transient(err):
                            last[:] = [err]
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(
        self,
        path: str,
        params: dict[str, str],
        result_type: str,
        expr: str,
        last: list[SourceError] | None = None,
    ) -> list[Point]:
        target = f"{self.display_url}{path} query={expr}"
        left = http.remaining()
        spent = http.budget_spent()
        if spent is not None:  # the canary's read deadline, not this query's own
            raise BudgetError(
                BudgetKind.READ_TIME, f"the read's deadline of {spent} passed", target=target
            )
        if left is not None and left <= 0:
            if last:  # retries ran out of time: say what kept failing (refused, 503, ...)
                raise SourceError(
                    last[0].kind,
                    f"retried until the {self.timeout_seconds}s deadline; last: {last[0]}",
                    target=target,
                )
            raise SourceError(
                SourceErrorKind.TIMEOUT,
                f"no answer within {self.timeout_seconds}s",
                target=target,
            )
        try:
            with self._client.stream("POST", path, data=params) as resp:
                body = http.read_body(resp, max_bytes=self.max_response_bytes, where=target)
        except httpx.TimeoutException as exc:
            spent = http.budget_spent()
            if spent is not None:
                raise BudgetError(
                    BudgetKind.READ_TIME, f"the read's deadline of {spent} passed", target=target
                ) from exc
            raise TransientError(
                SourceErrorKind.TIMEOUT,
                f"{type(exc).__name__}: no complete answer within {self.timeout_seconds}s",
                target=target,
            ) from exc
        except httpx.ConnectError as exc:
            raise TransientError(
                SourceErrorKind.UNREACHABLE, f"connect failed: {exc}", target=target
            ) from exc
        except httpx.TransportError as exc:
            raise SourceError(
                SourceErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", target=target
            ) from exc
        return decode(
            resp.status_code,
            resp.headers,
            body,
            result_type,
            target,
            max_points=self.endpoint.max_answer_points,
            max_labels=self.endpoint.max_answer_labels,
        )

    # ----------------------------------------------------------------- observe

    def observe(
        self,
        spec: SpeculativeCanarySpec,
        *,
        start: float,
        end: float,
        interval_seconds: float,
    ) -> Observation:
        """Read every pool over [start, end]. Never raises for source trouble."""
        window = end - start
        if window < 0.001 or interval_seconds < 0.001:  # PromQL durations are whole ms
            err = SourceError(
                SourceErrorKind.QUERY_ERROR,
                f"empty window: start={start} end={end} interval={interval_seconds}",
            )
            return failed_observation(spec, err, at=end, window=max(window, 0.0))
        metric = metric_of(spec.latency.enabled, spec.latency.metric)
        pools: list[PoolObservation] = []
        scrapes: list[float] = []
        for ref in pools_of(spec):
            try:
                labels = self.labels_of(spec, ref)
                pools.append(self._pool(ref, labels, start, end, interval_seconds, metric=metric))
                measured = self._scrape_interval(labels)
                if measured is not None:
                    scrapes.append(measured)
            except SourceError as err:
                if not pool_level(err):
                    return failed_observation(spec, err, at=end, window=window)
                pools.append(failed_pool(ref.slice, ref.role, err))
        return Observation(
            at=end,
            window_seconds=window,
            pools=tuple(pools),
            scrape_interval_seconds=max(scrapes) if scrapes else None,
        )

    def _scrape_interval(self, labels: Mapping[str, str]) -> float | None:
        """How often the pool's pods are scraped: the endpoint's scrapeIntervalSeconds, else
        the longest ``scrapeInterval`` of the active targets whose labels match the pool's
        (a matcher key a target lacks may be a metric label: skipped; at least one must match).
        None when unknown; a failed read never fails the observation."""
        if self.endpoint.scrape_interval_seconds is not None:
            return self.endpoint.scrape_interval_seconds
        wanted = {label_name(k): v for k, v in labels.items()}
        found = [
            seconds
            for target, seconds in self._active_targets()
            if any(k in target for k in wanted)
            and all(target[k] == v for k, v in wanted.items() if k in target)
        ]
        return max(found) if found else None

    def _active_targets(self) -> list[tuple[dict[str, str], float]]:
        now = time.monotonic()
        if self._targets is not None and now - self._targets[0] < SCRAPE_PROBE_SECONDS:
            return self._targets[1]
        out: list[tuple[dict[str, str], float]] = []
        try:
            with (
                http.deadline(self.timeout_seconds),
                self._client.stream("GET", "api/v1/targets", params={"state": "active"}) as resp,
            ):
                body = http.read_body(
                    resp, max_bytes=self.max_response_bytes, where="api/v1/targets"
                )
            if resp.status_code == 200:
                data = json.loads(body).get("data", {})
                for t in data.get("activeTargets", []) if isinstance(data, dict) else []:
                    seconds = parse_duration(str(t.get("scrapeInterval", "")))
                    target_labels = t.get("labels")
                    if seconds and isinstance(target_labels, dict):
                        out.append(({str(k): str(v) for k, v in target_labels.items()}, seconds))
        except (SourceError, httpx.HTTPError, ValueError, AttributeError, RecursionError):
            out = []  # unknown (Thanos, Mimir, an old Prometheus): no warning, no failure
        self._targets = (now, out)
        return out

    def _pool(
        self,
        ref: PoolRef,
        labels: Mapping[str, str],
        start: float,
        end: float,
        interval: float,
        ask: Asker | None = None,
        metric: LatencyMetric | None = None,
    ) -> PoolObservation:
        """One pool's observation over its matchers `labels` (`labels_of`); `ask` answers its
        queries (default: this source, one query each; a batch answers them from queries
        shared by many pools). `metric`: the latency the policy judges; a pool without its
        histogram because its vLLM is too old for it is an error naming the release needed."""
        every = self.reads_recorded(interval)
        q = pool_queries(
            labels,
            window_seconds=end - start,
            interval_seconds=interval,
            recorded=every,
        )
        ask = ask or self
        if every is not None:
            _recorded_reach(ask, q, end, every, f"{ref.slice}/{ref.role}")
        gen = ask.query(q.generation_tokens, at=end)
        if not gen:
            raise SourceError(
                SourceErrorKind.EMPTY,
                f"no {vllm.GENERATION_TOKENS} series match {{{matchers(labels)}}} "
                f"over the last {duration(end - start)}",
                target=f"{ref.slice}/{ref.role}",
            )
        check_finite((p.value for p in gen), vllm.GENERATION_TOKENS, q.generation_tokens)
        samples, spec_series, no_data = _acceptance(ask, q, start, end, interval)
        itl = _buckets(ask, q.itl_buckets, q.itl_sum, end)
        tpot = _buckets(ask, q.tpot_buckets, q.tpot_sum, end)
        if metric is not None and (tpot if metric is LatencyMetric.PER_TOKEN else itl) is None:
            _layout_check(ask, q.latency_present, metric, end, f"{ref.slice}/{ref.role}")
        return PoolObservation(
            slice=ref.slice,
            role=ref.role,
            acceptance=samples,
            generation_tokens=sum(p.value for p in gen),
            itl=itl,
            tpot=tpot,
            tpot_samples=_latency_samples(ask, q, start, end, interval),
            pods=len({pod_of(p.labels) for p in gen}),
            spec_series=spec_series,
            no_data=no_data,
            output_lengths=_buckets(ask, q.output_length_buckets, q.output_length_sum, end),
            running=_running(ask, q.running, end),
            lives=_lives(ask, q, end) if ref.role is Role.CANARY and samples else None,
        )


def _layout_check(ask: Asker, expr: str, metric: LatencyMetric, at: float, where: str) -> None:
    """Raise the pool's EMPTY error when its pods' latency families are a vLLM layout too old
    for the guard's `metric` (vllm_compat); nothing for a layout it cannot place."""
    names = {
        vllm.unescaped(p.labels.get("__name__", "")).removesuffix(vllm.COUNT)
        for p in ask.query(expr, at=at)
    }
    seen = layout_of(
        {*names, vllm.base(vllm.GENERATION_TOKENS)},
        examined={*LATENCY_FAMILIES, vllm.base(vllm.GENERATION_TOKENS)},
    )
    err = layout_error([seen], metric, where)
    if err is not None:
        raise err


def _recorded_reach(ask: Asker, q: PoolQueries, end: float, every: float, where: str) -> None:
    """Raise STALE unless every recorded rate the pool reads reaches the window's end.

    The recorded points of a window are summed as its counts, whatever their number: with
    the rules behind (a slow group skips evaluations and writes late), stopped or removed, a
    window would be judged on its older part, or on none, as if that were all that happened;
    with one rule missing or behind (a hand-edited rules file), its counter alone is short
    (accepted tokens short of drafts read as a low alpha). So each rule's newest point (over
    the pool's pods) must be at most RECORDED_LAG_EVALUATIONS rule intervals old at `end`,
    and a rule with no series while the pool has its raw counters is missing. A counter the
    pods do not export (no speculation, an older vLLM) has nothing to check."""
    newest: dict[str, float] = {}
    for p in ask.query(q.recorded_at, at=end):
        rule = p.labels.get(RULE_LABEL, "")
        newest[rule] = max(newest.get(rule, p.value), p.value)
    allowed = RECORDED_LAG_EVALUATIONS * every
    behind = {r: end - t for r, t in newest.items() if end - t > allowed + 1e-3}
    missing: list[str] = []
    if len(newest) < len(RECORDED):
        raw = {
            recorded_name(p.labels.get("__name__", ""))
            for p in ask.query(q.traffic_present, at=end)
            if p.value > 0
        }
        missing = sorted(raw - newest.keys())
    if behind:
        lag = max(behind.values())
        why = (
            f"the recorded rates end up to {lag:.1f}s before the window's end (at most "
            f"{allowed:g}s, {RECORDED_LAG_EVALUATIONS} rule intervals) for "
            f"{', '.join(sorted(behind))}: the recording rules are behind; see "
            f"prometheus_rule_group_last_duration_seconds"
        )
    elif missing:
        why = (
            f"no recorded rates ({', '.join(missing)}) although the pods' counters exist: are "
            f"the recording rules (alphagate-batches.yaml) installed, every rule of them?"
        )
    else:
        return
    raise SourceError(SourceErrorKind.STALE, why, target=where)


def _lives(ask: Asker, q: PoolQueries, at: float) -> RequestLives | None:
    """The pool's decode times over the window (what sizes alpha's blocks); None when the
    pods export none or no request finished."""
    h = _buckets(ask, q.decode_time_buckets, q.decode_time_sum, at)
    return RequestLives(h) if h is not None and h.total > 0 else None


def _running(ask: Asker, expr: str, at: float) -> float | None:
    """Requests running per pod, averaged over the window; None when not exported."""
    points = ask.query(expr, at=at)
    if not points:
        return None
    check_finite((p.value for p in points), vllm.RUNNING, expr)
    return points[0].value


def _acceptance(
    ask: Asker, q: PoolQueries, start: float, end: float, interval: float
) -> tuple[tuple[AcceptanceSample, ...], bool, NoData | None]:
    """The batches, whether spec-decode series exist, and why there are no batches."""
    first = min(start + interval, end)
    series: dict[str, dict[tuple[str, float], float]] = {}
    for name, expr in (
        ("drafts", q.drafts),
        ("draft_tokens", q.draft_tokens),
        ("accepted", q.accepted),
    ):
        points = ask.query_range(expr, start=first, end=end, step=interval)
        check_finite((p.value for p in points), name, expr)
        series[name] = {(pod_of(p.labels), p.at): p.value for p in points}
    if not series["drafts"]:
        # no series (speculation off: expected) or series with too few scrapes per interval
        present = ask.query(q.spec_present, at=end) if q.spec_present else []
        if any(p.value > 0 for p in present):
            return (), True, NoData.SPARSE_SCRAPES
        return (), False, None
    per_pos: dict[tuple[str, float], dict[int, float]] = {}
    for p in ask.query_range(q.per_position, start=first, end=end, step=interval):
        check_finite((p.value,), "per_position", q.per_position)
        pos = p.labels.get(vllm.POSITION, "")
        if not (pos.isascii() and pos.isdigit()):
            continue  # not a draft position: not a series we can use
        if len(pos) > 4 or int(pos) >= MAX_POSITIONS:
            raise SourceError(
                SourceErrorKind.QUERY_ERROR,
                f"draft position {pos[:12]!r} is beyond the {MAX_POSITIONS} alphagate accepts",
                target=q.per_position,
            )
        per_pos.setdefault((pod_of(p.labels), p.at), {})[int(pos)] = p.value
    out = []
    for key, drafts in series["drafts"].items():
        pod, at = key
        if key not in series["draft_tokens"] or key not in series["accepted"]:
            continue  # a point without all three counters cannot be a batch
        sample = AcceptanceSample(
            drafts=drafts,
            draft_tokens=series["draft_tokens"][key],
            accepted_tokens=series["accepted"][key],
            per_position=per_position_tuple(per_pos.get(key, {})),
            pod=pod,
            start=at - interval,
            end=at,
        )
        if has_drafts(sample):
            out.append(sample)
    return sorted_samples(out), True, (None if out else NoData.NO_TRAFFIC)


def _latency_samples(
    ask: Asker, q: PoolQueries, start: float, end: float, interval: float
) -> tuple[LatencySample, ...]:
    """Per pod per interval TPOT increments (exact _sum, bucket counts): guard batches."""
    if not q.tpot_pod_buckets:
        return ()
    first = min(start + interval, end)
    counts: dict[tuple[str, float], dict[float, float]] = {}
    for p in ask.query_range(q.tpot_pod_buckets, start=first, end=end, step=interval):
        check_finite((p.value,), "histogram buckets", q.tpot_pod_buckets)
        try:
            le = parse_number(p.labels.get(vllm.LE, "NaN"))
        except ValueError:
            continue
        if not math.isnan(le):
            counts.setdefault((pod_of(p.labels), p.at), {})[le] = p.value
    if not counts:
        return ()
    sums = {}
    for p in ask.query_range(q.tpot_pod_sum, start=first, end=end, step=interval):
        check_finite((p.value,), "histogram sum", q.tpot_pod_sum)
        sums[(pod_of(p.labels), p.at)] = p.value
    out = []
    for (pod, at), by_le in counts.items():
        bounds = tuple(sorted(by_le))
        total = by_le.get(math.inf, 0.0)
        if (pod, at) not in sums or not total > 0 or bounds[-1] != math.inf:
            continue
        out.append(
            LatencySample(
                count=total,
                sum=sums[(pod, at)],
                buckets=Buckets(bounds=bounds, counts=tuple(by_le[b] for b in bounds)),
                pod=pod,
                start=at - interval,
                end=at,
            )
        )
    return tuple(sorted(out, key=lambda t: (t.pod, t.start)))


def _buckets(ask: Asker, buckets_expr: str, sum_expr: str, at: float) -> Buckets | None:
    points = ask.query(buckets_expr, at=at)
    if not points:
        return None
    check_finite((p.value for p in points), "histogram buckets", buckets_expr)
    acc = HistSum()
    for p in points:
        try:
            le = parse_number(p.labels.get(vllm.LE, "NaN"))
        except ValueError:
            continue
        if not math.isnan(le):
            acc.add({le: p.value})
    totals = ask.query(sum_expr, at=at)
    check_finite((p.value for p in totals), "histogram sum", sum_expr)
    acc.sum = sum(p.value for p in totals) if totals else math.nan
    return acc.to_buckets()
