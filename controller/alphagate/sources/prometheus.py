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
import ssl
import time
from collections.abc import Mapping
from typing import Any, Final, Self

import httpx
import tenacity

from alphagate import vllm
from alphagate.config import LatencyMetric, PrometheusSettings, SpeculativeCanarySpec
from alphagate.core.model import (
    Observation,
    PoolObservation,
    Role,
)
from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources import http, querybudget
from alphagate.sources.common import (
    PoolRef,
    budget_of,
    check_finite,
    failed_observation,
    failed_pool,
    pools_of,
    redact_url,
)
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.layout import metric_of
from alphagate.sources.promanswers import (
    acceptance,
    buckets,
    latency_samples,
    layout_check,
    lives,
    recorded_reach,
    running,
)
from alphagate.sources.promhold import HOLDS, Key, key_of
from alphagate.sources.promql import (
    duration,
    label_name,
    matchers,
    parse_duration,
    pool_queries,
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
POOL_BUDGETS: Final = (BudgetKind.ANSWER, BudgetKind.SERVER_COST, BudgetKind.QUERIES)


def pool_level(err: SourceError) -> bool:
    """The failure concerns one pool's query (its kind, or an answer too large to decode),
    not the server: the other pools are still read."""
    return err.kind in POOL_LEVEL or budget_of(err) in POOL_BUDGETS


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
        name: str | None = None,
    ) -> None:
        settings = endpoint
        self.endpoint = endpoint
        # The canary's namespace: every query matches it (sources/scope.py); None: no bound
        # (a one-off read by the admin of their own process).
        self.namespace = namespace
        self.name = name  # whose Prometheus query budget pays (sources/querybudget.py)
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
        querybudget.charge(self.namespace, self.name, target)  # QUERIES past its debt
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
        """`_read_pool`, unless the pool is held for what its own queries cost the server
        (`sources/promhold.py`): then its SERVER_COST error, no query sent."""
        key = self.hold_key(labels)
        HOLDS.check(key, f"{ref.slice}/{ref.role}")
        try:
            got = self._read_pool(ref, labels, start, end, interval, ask, metric)
        except SourceError as err:
            HOLDS.failed(key, err, interval)
            raise
        HOLDS.succeeded(key)
        return got

    def hold_key(self, labels: Mapping[str, str]) -> Key:
        """The pool's key among held pools: this endpoint and its matchers."""
        return key_of(self.base_url, labels)

    def _read_pool(
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
            recorded_reach(ask, q, end, every, f"{ref.slice}/{ref.role}")
        gen = ask.query(q.generation_tokens, at=end)
        if not gen:
            raise SourceError(
                SourceErrorKind.EMPTY,
                f"no {vllm.GENERATION_TOKENS} series match {{{matchers(labels)}}} "
                f"over the last {duration(end - start)}",
                target=f"{ref.slice}/{ref.role}",
            )
        check_finite((p.value for p in gen), vllm.GENERATION_TOKENS, q.generation_tokens)
        samples, spec_series, no_data = acceptance(ask, q, start, end, interval)
        itl = buckets(ask, q.itl_buckets, q.itl_sum, end)
        tpot = buckets(ask, q.tpot_buckets, q.tpot_sum, end)
        if metric is not None and (tpot if metric is LatencyMetric.PER_TOKEN else itl) is None:
            layout_check(ask, q.latency_present, metric, end, f"{ref.slice}/{ref.role}")
        return PoolObservation(
            slice=ref.slice,
            role=ref.role,
            acceptance=samples,
            generation_tokens=sum(p.value for p in gen),
            itl=itl,
            tpot=tpot,
            tpot_samples=latency_samples(ask, q, start, end, interval),
            pods=len({pod_of(p.labels) for p in gen}),
            spec_series=spec_series,
            no_data=no_data,
            output_lengths=buckets(ask, q.output_length_buckets, q.output_length_sum, end),
            running=running(ask, q.running, end),
            lives=lives(ask, q, end) if ref.role is Role.CANARY and samples else None,
        )


__all__ = ["POOL_LEVEL", "SCRAPE_PROBE_SECONDS", "PrometheusSource", "pool_level"]
