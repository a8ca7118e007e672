"""Read a policy's pools from the Prometheus HTTP API (or Thanos, Mimir, VictoriaMetrics).

PromQL used for one pool, with `M` = the pool's matchers (slice role ``matchLabels`` plus
``source.prometheus.matchLabels``; label keys sanitised as Kubernetes SD does, ``.``/``/`` ->
``_``), `W` = the window (end - start) and `I` = the interval. Every expression is written for
both the ``vllm:`` name and the ``vllm_`` spelling a Prometheus 2 scrape stores, joined with
``or`` so one pod is never counted twice::

    acceptance batches, range query start+I..end step I, one per counter:
      sum by (instance, pod) (increase(vllm:spec_decode_num_drafts_total{M}[I]))
      sum by (instance, pod) (increase(vllm:spec_decode_num_draft_tokens_total{M}[I]))
      sum by (instance, pod) (increase(vllm:spec_decode_num_accepted_tokens_total{M}[I]))
      sum by (instance, pod, position)
        (increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{M}[I]))
    traffic and pod count, instant at end:
      sum by (instance, pod) (increase(vllm:generation_tokens_total{M}[W]))
    latency, instant at end:
      sum by (le) (increase(vllm:inter_token_latency_seconds_bucket{M}[W]))
      sum (increase(vllm:inter_token_latency_seconds_sum{M}[W]))
      (and the same two for vllm:request_time_per_output_token_seconds)
    spec-decode series present when the range queries came back empty, instant at end:
      count (last_over_time(vllm:spec_decode_num_drafts_total{M}[W]))
    scrape interval (unless the endpoint configures scrapeIntervalSeconds), at most every
    SCRAPE_PROBE_SECONDS: the ``scrapeInterval`` of the active targets whose labels match the
    pool (``GET /api/v1/targets?state=active``; unknown on backends without that API)

A canary whose spec-decode counters exist but did not move is speculating with no traffic
(``no_data`` NO_TRAFFIC); series that exist while every ``increase()`` came back empty mean
the interval holds fewer than two scrapes (SPARSE_SCRAPES): neither reads as "speculation off".

Each (pod, step) point of the range queries becomes one AcceptanceSample (a batch for batch
means). `increase()` extrapolates to the range edges, so batch values are floats and their sum
approximates the window's increase within a scrape interval's worth of counts.

Failures never raise out of :meth:`PrometheusSource.observe`: they are classified
(:class:`~alphagate.errors.SourceErrorKind`) and put on the Observation (the server failed:
unreachable, timeout, HTTP status, bad JSON) or on the pool (the query failed, returned nothing
for the pool, NaN, or partial data with warnings). Only connect errors, timeouts and 502/503/504
are retried, a bounded number of times.
"""

from __future__ import annotations

import json
import math
import os
import re
import ssl
import stat
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, Self

import httpx
import tenacity

from alphagate import vllm
from alphagate.config import PrometheusSource as PrometheusSettings
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    LatencySample,
    NoData,
    Observation,
    PoolObservation,
)
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources import http
from alphagate.sources.common import (
    MAX_POSITIONS,
    HistSum,
    PoolRef,
    check_finite,
    error_text,
    failed_observation,
    has_drafts,
    per_position_tuple,
    pools_of,
    redact_url,
    sorted_samples,
)
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.exposition import parse_number

MAX_SECRET_BYTES: Final = 64 * 1024
"""A token or password file is read up to this size: a file that never ends is refused."""
TRANSIENT_STATUS: Final = frozenset((502, 503, 504))
POOL_LEVEL: Final = frozenset(
    (
        SourceErrorKind.QUERY_ERROR,
        SourceErrorKind.EMPTY,
        SourceErrorKind.NAN,
        SourceErrorKind.PARTIAL,
    )
)
"""Kinds that concern one query (one pool); every other kind means the server failed."""

_LABEL_NAME_BAD: Final = re.compile(r"[^a-zA-Z0-9_]")
SCRAPE_PROBE_SECONDS: Final = 600.0
"""The targets' scrape intervals are read again at most this often (one request)."""
_DURATION_PART: Final = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_SECONDS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


def parse_duration(text: str) -> float | None:
    """A Prometheus duration (``1m30s``, ``500ms``) in seconds; None when it is not one."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


# --------------------------------------------------------------------------- PromQL


def label_name(key: str) -> str:
    """A pod label key as Prometheus' Kubernetes SD stores it (``app.kubernetes.io/x`` ->
    ``app_kubernetes_io_x``)."""
    return _LABEL_NAME_BAD.sub("_", key)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(labels: Mapping[str, str]) -> str:
    """``k="v",...`` sorted by key, values escaped."""
    return ",".join(f"{label_name(k)}={_quote(v)}" for k, v in sorted(labels.items()))


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds as ``30s``, anything finer in milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"duration must be positive, got {seconds}")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _either(template: Callable[[str], str], name: str) -> str:
    return f"({template(name)}) or ({template(vllm.escaped(name))})"


def increase_by(name: str, m: str, rng: str, by: str) -> str:
    """``sum by (by) (increase(name{m}[rng]))`` for both spellings of `name`."""
    grouping = f" by ({by})" if by else ""
    return _either(lambda n: f"sum{grouping} (increase({n}{{{m}}}[{rng}]))", name)


def recorded_name(name: str) -> str:
    """The series deploy/monitoring/rules/alphagate-batches.yaml records for `name`: its per-pod
    rate (both spellings merged), evaluated every ``recordedRulesIntervalSeconds``."""
    return f"alphagate:{vllm.escaped(name).removesuffix(vllm.TOTAL)}:rate"


def recorded_by(every: float) -> Callable[[str, str, str, str], str]:
    """``E * sum by (by) (sum_over_time(recorded{m}[rng]))`` with E the rules' interval: the
    increase over `rng` from the recorded per-pod rates (one point per E seconds)."""

    def of(name: str, m: str, rng: str, by: str) -> str:
        grouping = f" by ({by})" if by else ""
        inner = f"sum{grouping} (sum_over_time({recorded_name(name)}{{{m}}}[{rng}]))"
        return f"{every:g} * {inner}"

    return of


@dataclass(frozen=True, slots=True)
class PoolQueries:
    """The PromQL for one pool (see the module docstring)."""

    drafts: str
    draft_tokens: str
    accepted: str
    per_position: str
    generation_tokens: str
    itl_buckets: str
    itl_sum: str
    tpot_buckets: str
    tpot_sum: str
    # per pod per interval, for the latency guard's batches (exact sums)
    tpot_pod_buckets: str = ""
    tpot_pod_sum: str = ""
    # are there spec-decode series at all over the window (when the batches came back empty)
    spec_present: str = ""
    # output lengths (finished requests) and requests running per pod, over the window
    output_length_buckets: str = ""
    output_length_sum: str = ""
    running: str = ""


def pool_queries(
    match_labels: Mapping[str, str],
    *,
    window_seconds: float,
    interval_seconds: float,
    recorded: float | None = None,
) -> PoolQueries:
    return queries(
        matchers(match_labels),
        window_seconds=window_seconds,
        interval_seconds=interval_seconds,
        recorded=recorded,
    )


def queries(
    m: str,
    *,
    window_seconds: float,
    interval_seconds: float,
    keys: tuple[str, ...] = (),
    recorded: float | None = None,
) -> PoolQueries:
    """The queries for matchers `m`, each also grouped by the label names `keys` (a batch of
    pools tells its pools apart by them, see :mod:`alphagate.sources.prombatch`). `recorded`:
    read the recorded rates, recorded every that many seconds, instead of raw counters (for
    the families the rules record; the others are read raw)."""
    w, i = duration(window_seconds), duration(interval_seconds)
    extra = "".join(f", {k}" for k in keys)
    by_keys = f" by ({extra[2:]})" if keys else ""
    pod = "instance, pod" + extra
    raw = {
        "spec_present": _either(
            lambda n: f"count{by_keys} (last_over_time({n}{{{m}}}[{w}]))", vllm.SPEC_DRAFTS
        ),
        "output_length_buckets": increase_by(
            vllm.REQUEST_GENERATION_TOKENS + vllm.BUCKET, m, w, vllm.LE + extra
        ),
        "output_length_sum": increase_by(
            vllm.REQUEST_GENERATION_TOKENS + vllm.SUM, m, w, extra[2:]
        ),
        # mean over the window per pod (engines of a pod add up), then the mean over pods
        "running": _either(
            lambda n: f"avg{by_keys} (sum by ({pod}) (avg_over_time({n}{{{m}}}[{w}])))",
            vllm.RUNNING,
        ),
    }
    of: Callable[[str, str, str, str], str] = increase_by
    if recorded:
        # One recorded point per `recorded` seconds: a range 1 ms short of the step holds
        # step / recorded of them whatever the phase (Prometheus 2 ranges include both ends).
        of = recorded_by(recorded)
        w, i = duration(window_seconds - 0.001), duration(interval_seconds - 0.001)
    return PoolQueries(
        drafts=of(vllm.SPEC_DRAFTS, m, i, pod),
        draft_tokens=of(vllm.SPEC_DRAFT_TOKENS, m, i, pod),
        accepted=of(vllm.SPEC_ACCEPTED, m, i, pod),
        per_position=of(vllm.SPEC_PER_POS, m, i, f"{pod}, {vllm.POSITION}"),
        generation_tokens=of(vllm.GENERATION_TOKENS, m, w, pod),
        itl_buckets=of(vllm.ITL + vllm.BUCKET, m, w, vllm.LE + extra),
        itl_sum=of(vllm.ITL + vllm.SUM, m, w, extra[2:]),
        tpot_buckets=of(vllm.TPOT + vllm.BUCKET, m, w, vllm.LE + extra),
        tpot_sum=of(vllm.TPOT + vllm.SUM, m, w, extra[2:]),
        tpot_pod_buckets=of(vllm.TPOT + vllm.BUCKET, m, i, f"{pod}, {vllm.LE}"),
        tpot_pod_sum=of(vllm.TPOT + vllm.SUM, m, i, pod),
        **raw,
    )


# --------------------------------------------------------------------------- HTTP plumbing


class _WatchedFile:
    """A secret file re-read whenever it changes (kubelet rotates projected tokens by swapping
    a symlink, so the stat of the target changes)."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._stamp: tuple[int, int, int] | None = None
        self._value = ""

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise SourceError(
                    SourceErrorKind.UNREACHABLE,
                    f"{self.what} {self.path} is not a regular file",
                )
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                with open(self.path, "rb") as fh:
                    raw = fh.read(MAX_SECRET_BYTES + 1)
                if len(raw) > MAX_SECRET_BYTES:
                    raise SourceError(
                        SourceErrorKind.UNREACHABLE,
                        f"{self.what} {self.path} is larger than {MAX_SECRET_BYTES} bytes",
                    )
                self._value = raw.decode("utf-8", errors="strict").strip()
                self._stamp = stamp
        except OSError as exc:
            raise SourceError(
                SourceErrorKind.UNREACHABLE,
                f"cannot read {self.what} {self.path}: {exc.strerror or exc}",
            ) from exc
        except UnicodeDecodeError:
            raise SourceError(
                SourceErrorKind.UNREACHABLE, f"{self.what} {self.path} is not UTF-8 text"
            ) from None
        return self._value


class _FileAuth(httpx.Auth):
    """Bearer token or basic auth whose secret lives in a file that may rotate."""

    def __init__(
        self, *, token: _WatchedFile | None, username: str | None, password: _WatchedFile | None
    ) -> None:
        self.token = token
        self.username = username
        self.password = password

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.token is not None:
            request.headers["Authorization"] = f"Bearer {self.token.read()}"
        elif self.username is not None and self.password is not None:
            basic = httpx.BasicAuth(self.username, self.password.read())
            request.headers["Authorization"] = basic._auth_header
        yield request


class _StatusError(SourceError):
    """HTTP status failure; `status` decides whether it is retried."""

    def __init__(self, status: int, message: str, *, target: str, kind: SourceErrorKind) -> None:
        self.status = status
        super().__init__(kind, message, target=target)


class _TransientError(SourceError):
    """A connect error or timeout: worth another attempt."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _StatusError):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, _TransientError)


class Asker(Protocol):
    """What answers a pool's queries: a PrometheusSource, or a batch of pools."""

    def query(self, expr: str, *, at: float | None = None) -> list[Point]: ...

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Point]: ...


@dataclass(frozen=True, slots=True)
class Point:
    """One value of one series at one time."""

    labels: Mapping[str, str]
    at: float
    value: float


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
    ) -> None:
        settings = endpoint
        self.endpoint = endpoint
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
            _WatchedFile(settings.bearer_token_file, "bearer token file")
            if settings.bearer_token_file
            else None
        )
        basic = settings.basic_auth
        auth = _FileAuth(
            token=token,
            username=basic.username if basic else None,
            password=_WatchedFile(basic.password_file, "password file") if basic else None,
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
        cls, spec: SpeculativeCanarySpec, endpoints: SourcesConfig, **kwargs: Any
    ) -> PrometheusSource:
        """The source for a policy's `prometheus.endpoint`, as the admin configured it.
        Raises SourceError when no endpoint has that name."""
        wanted = spec.source.prometheus or PrometheusSettings()
        endpoint = endpoints.prometheus_endpoint(wanted.endpoint)
        return cls(endpoint, timeout_seconds=wanted.timeout_seconds, **kwargs)

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

    def query(self, expr: str, *, at: float | None = None) -> list[Point]:
        """An instant query; raises SourceError (classified) on any failure."""
        params = {"query": expr}
        if at is not None:
            params["time"] = _ts(at)
        return self._request("api/v1/query", params, "vector", expr)

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Point]:
        """A range query; raises SourceError (classified) on any failure."""
        params = {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        return self._request("api/v1/query_range", params, "matrix", expr)

    def _request(
        self, path: str, params: dict[str, str], result_type: str, expr: str
    ) -> list[Point]:
        if self._config_error is not None:
            raise self._config_error
        params = {**params, "timeout": duration(self.timeout_seconds)}
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(
                multiplier=self.backoff_seconds, max=self.max_backoff_seconds
            ),
            retry=tenacity.retry_if_exception(_transient),
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
                        if _transient(err):
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
            raise _TransientError(
                SourceErrorKind.TIMEOUT,
                f"{type(exc).__name__}: no complete answer within {self.timeout_seconds}s",
                target=target,
            ) from exc
        except httpx.ConnectError as exc:
            raise _TransientError(
                SourceErrorKind.UNREACHABLE, f"connect failed: {exc}", target=target
            ) from exc
        except httpx.TransportError as exc:
            raise SourceError(
                SourceErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", target=target
            ) from exc
        return _decode(resp.status_code, resp.headers, body, result_type, target)

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
        extra = dict(spec.source.prometheus.match_labels) if spec.source.prometheus else {}
        pools: list[PoolObservation] = []
        scrapes: list[float] = []
        for ref in pools_of(spec):
            try:
                pools.append(self._pool(ref, extra, start, end, interval_seconds))
                measured = self._scrape_interval({**extra, **ref.match_labels})
                if measured is not None:
                    scrapes.append(measured)
            except SourceError as err:
                if err.kind not in POOL_LEVEL:
                    return failed_observation(spec, err, at=end, window=window)
                pools.append(
                    PoolObservation(ref.slice, ref.role, error=error_text(err), error_kind=err.kind)
                )
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
        extra: Mapping[str, str],
        start: float,
        end: float,
        interval: float,
        ask: Asker | None = None,
    ) -> PoolObservation:
        """One pool's observation; `ask` answers its queries (default: this source, one query
        each; a batch answers them from queries shared by many pools)."""
        labels = {**extra, **ref.match_labels}
        q = pool_queries(
            labels,
            window_seconds=end - start,
            interval_seconds=interval,
            recorded=self.reads_recorded(interval),
        )
        ask = ask or self
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
        return PoolObservation(
            slice=ref.slice,
            role=ref.role,
            acceptance=samples,
            generation_tokens=sum(p.value for p in gen),
            itl=_buckets(ask, q.itl_buckets, q.itl_sum, end),
            tpot=_buckets(ask, q.tpot_buckets, q.tpot_sum, end),
            tpot_samples=_latency_samples(ask, q, start, end, interval),
            pods=len({_pod(p.labels) for p in gen}),
            spec_series=spec_series,
            no_data=no_data,
            output_lengths=_buckets(ask, q.output_length_buckets, q.output_length_sum, end),
            running=_running(ask, q.running, end),
        )


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
        series[name] = {(_pod(p.labels), p.at): p.value for p in points}
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
        per_pos.setdefault((_pod(p.labels), p.at), {})[int(pos)] = p.value
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
            counts.setdefault((_pod(p.labels), p.at), {})[le] = p.value
    if not counts:
        return ()
    sums = {}
    for p in ask.query_range(q.tpot_pod_sum, start=first, end=end, step=interval):
        check_finite((p.value,), "histogram sum", q.tpot_pod_sum)
        sums[(_pod(p.labels), p.at)] = p.value
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


# --------------------------------------------------------------------------- decoding


def _ts(value: float) -> str:
    return repr(float(value))


def _pod(labels: Mapping[str, str]) -> str:
    """A batch's pod: the `pod` label when relabelling adds one, else the scrape instance."""
    return labels.get("pod") or labels.get("instance") or ""


def _decode(
    status_code: int, headers: httpx.Headers, raw: bytes, result_type: str, target: str
) -> list[Point]:
    text = raw.decode("utf-8", errors="replace")
    body: Any = None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if 300 <= status_code < 400:
        location = headers.get("location", "")
        raise _StatusError(
            status_code,
            f"HTTP {status_code} redirect"
            + (f" to {redact_url(location)}" if location else "")
            + ": redirects are not followed; configure the endpoint's final URL",
            target=target,
            kind=SourceErrorKind.HTTP_STATUS,
        )
    if status_code >= 400 or status_code < 200:
        detail = ""
        if isinstance(body, dict):
            detail = f" {body.get('errorType', '')}: {body.get('error', '')}".rstrip(": ")
        kind = SourceErrorKind.HTTP_STATUS
        if status_code in (400, 422) and isinstance(body, dict) and "error" in body:
            kind = SourceErrorKind.QUERY_ERROR
        elif (
            status_code in TRANSIENT_STATUS
            and isinstance(body, dict)
            and body.get("errorType") == "timeout"
        ):
            kind = SourceErrorKind.TIMEOUT
        snippet = detail or f" {text[:200]!r}"
        raise _StatusError(status_code, f"HTTP {status_code}{snippet}", target=target, kind=kind)
    if not isinstance(body, dict):
        raise SourceError(
            SourceErrorKind.BAD_JSON,
            f"response is not a JSON object: {text[:200]!r}",
            target=target,
        )
    status = body.get("status")
    if status == "error":
        raise SourceError(
            SourceErrorKind.QUERY_ERROR,
            f"{body.get('errorType', 'error')}: {body.get('error', '')}",
            target=target,
        )
    data = body.get("data")
    if status != "success" or not isinstance(data, dict):
        raise SourceError(
            SourceErrorKind.BAD_JSON, f"unexpected response shape: {str(body)[:200]}", target=target
        )
    warnings = body.get("warnings")
    if warnings:
        raise SourceError(
            SourceErrorKind.PARTIAL, f"warnings: {'; '.join(map(str, warnings))}", target=target
        )
    if data.get("resultType") != result_type or not isinstance(data.get("result"), list):
        raise SourceError(
            SourceErrorKind.BAD_JSON,
            f"expected a {result_type}, got resultType={data.get('resultType')!r}",
            target=target,
        )
    try:
        return list(_points(data["result"], result_type))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SourceError(
            SourceErrorKind.BAD_JSON, f"malformed {result_type}: {exc!r}", target=target
        ) from exc


def _points(result: list[Any], result_type: str) -> Generator[Point, None, None]:
    for item in result:
        metric = item["metric"]
        if not isinstance(metric, dict):
            raise TypeError("metric is not an object")
        labels = {str(k): str(v) for k, v in metric.items()}
        pairs = [item["value"]] if result_type == "vector" else item["values"]
        for at, value in pairs:
            if not isinstance(value, str):  # the API sends sample values as strings
                raise TypeError(f"sample value {value!r} is not a string")
            yield Point(labels, float(at), parse_number(value))
