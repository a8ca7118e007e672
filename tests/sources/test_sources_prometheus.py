"""PrometheusSource against a fake Prometheus HTTP API (httpx.MockTransport), plus real sockets
for the failures a transport mock cannot show (slow answers, nothing listening)."""

from __future__ import annotations

import json
import math
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import BudgetError, BudgetKind, SourceErrorKind
from alphagate.sources.endpoints import PrometheusEndpoint as PrometheusSettings
from alphagate.sources.prombatch import observe_many
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.promhold import Holds, key_of
from alphagate.sources.promql import duration, matchers, pool_queries
from alphagate.sources.promwire import QueryTimeout, StatusError
from specs import SOURCE_SPEC, spec_from

START, END, STEP = 1000.0, 1060.0, 20.0


def make_spec(url: str = "http://prom.test:9090", **prom: Any) -> SpeculativeCanarySpec:
    return spec_from(SOURCE_SPEC, source={"kind": "prometheus", "prometheus": {**prom}})


def ok(result_type: str, result: list[Any], **extra: Any) -> httpx.Response:
    body = {"status": "success", "data": {"resultType": result_type, "result": result}, **extra}
    return httpx.Response(200, json=body)


class FakeProm:
    """Answers like Prometheus for the pools of make_spec(): canary speculates on 2 pods,
    baseline has no spec series. `override(query, form)` may return a response instead."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], httpx.Headers]] = []
        self.targets_requests = 0
        self.override: Callable[[str, dict[str, str]], httpx.Response | None] = lambda q, f: None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = {k: v[0] for k, v in urllib.parse.parse_qs(request.content.decode()).items()}
        path = request.url.path
        if path.endswith("/api/v1/targets"):  # the scrape interval: tests/sources/test_*_idle
            self.targets_requests += 1
            return httpx.Response(404, json={"status": "error", "error": "not here"})
        self.requests.append((path, form, request.headers))
        q = form["query"]
        forced = self.override(q, form)
        if forced is not None:
            return forced
        canary = 'role="canary"' in q
        if path.endswith("/query_range"):
            steps = [float(form["start"]) + i * float(form["step"]) for i in range(3)]
            if not canary:
                return ok("matrix", [])
            pods = {"p1": 1.0, "p2": 2.0}
            if "accepted_tokens_per_pos" in q:
                result = [
                    {
                        "metric": {"pod": pod, "instance": "i", "position": str(pos)},
                        "values": [[t, str(10.0 * m / (pos + 1))] for t in steps],
                    }
                    for pod, m in pods.items()
                    for pos in range(2)
                ]
                return ok("matrix", result)
            if "request_time_per_output_token_seconds_bucket" in q:
                result = [
                    {
                        "metric": {"pod": pod, "instance": "i", "le": le},
                        "values": [[t, str(c * m)] for t in steps],
                    }
                    for pod, m in pods.items()
                    for le, c in (("0.05", 8.0), ("+Inf", 10.0))
                ]
                return ok("matrix", result)
            if "request_time_per_output_token_seconds_sum" in q:
                result = [
                    {
                        "metric": {"pod": pod, "instance": "i"},
                        "values": [[t, str(0.3 * m)] for t in steps],
                    }
                    for pod, m in pods.items()
                ]
                return ok("matrix", result)
            per = {"num_drafts": 20.0, "num_draft_tokens": 80.0, "num_accepted": 15.0}
            value = next(v for k, v in per.items() if f"spec_decode_{k}" in q)
            result = [
                {
                    "metric": {"pod": pod, "instance": "i"},
                    "values": [[t, str(value * m)] for t in steps],
                }
                for pod, m in pods.items()
            ]
            return ok("matrix", result)
        at = float(form["time"])
        if "generation_tokens" in q:
            pods = ["p1", "p2"] if canary else ["b1", "b2", "b3"]
            return ok("vector", [{"metric": {"pod": p}, "value": [at, "100"]} for p in pods])
        if "_bucket" in q:
            bounds = ["0.01", "0.025", "0.05", "+Inf"]
            counts = [10, 90, 99, 100] if canary else [50, 95, 100, 100]
            return ok(
                "vector",
                [
                    {"metric": {"le": b}, "value": [at, str(c)]}
                    for b, c in zip(bounds, counts, strict=True)
                ],
            )
        if "_sum" in q:
            return ok("vector", [{"metric": {}, "value": [at, "1.5"]}])
        return ok("vector", [])


@pytest.fixture
def fake() -> FakeProm:
    return FakeProm()


def source(fake: FakeProm, **kw: Any) -> PrometheusSource:
    settings = kw.pop("settings", PrometheusSettings(url="http://prom.test:9090"))
    kw.setdefault("backoff_seconds", 0.0)
    return PrometheusSource(settings, transport=httpx.MockTransport(fake), **kw)


def observe(src: PrometheusSource, spec: SpeculativeCanarySpec | None = None):  # type: ignore[no-untyped-def]
    return src.observe(spec or make_spec(), start=START, end=END, interval_seconds=STEP)


# ------------------------------------------------------------------------- PromQL


def test_promql_has_both_spellings_matchers_and_ranges() -> None:
    q = pool_queries(
        {"slice": "chat", "app.kubernetes.io/name": 'v"x'}, window_seconds=300, interval_seconds=30
    )
    sel = '{app_kubernetes_io_name="v\\"x",slice="chat"}'
    assert q.drafts == (
        f"(sum by (instance, pod) (increase(vllm:spec_decode_num_drafts_total{sel}[30s])))"
        f" or (sum by (instance, pod) (increase(vllm_spec_decode_num_drafts_total{sel}[30s])))"
    )
    assert "[300s]" in q.itl_buckets and "sum by (le)" in q.itl_buckets
    assert "vllm_inter_token_latency_seconds_bucket" in q.itl_buckets
    assert duration(2.5) == "2500ms" and duration(60) == "60s"
    assert matchers({"b": "2", "a": "1"}) == 'a="1",b="2"'


# ------------------------------------------------------------------------- success


def test_success_several_series(fake: FakeProm) -> None:
    with source(fake) as src:
        obs = observe(src)
    assert obs.source_error is None and obs.window_seconds == 60 and obs.at == END
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is None
    assert canary.pods == 2 and canary.generation_tokens == 200
    assert len(canary.acceptance) == 6  # 2 pods x 3 steps
    p2 = [s for s in canary.acceptance if s.pod == "p2"]
    assert {(s.drafts, s.draft_tokens, s.accepted_tokens) for s in p2} == {(40.0, 160.0, 30.0)}
    assert p2[0].per_position == (20.0, 10.0)
    assert p2[0].end - p2[0].start == STEP and p2[0].end == START + STEP
    assert canary.itl is not None and canary.itl.bounds[-1] == math.inf
    assert canary.itl.counts == (10, 90, 99, 100) and canary.itl.sum == 1.5
    assert canary.tpot is not None and canary.tpot.total == 100
    # per pod per interval TPOT increments, the latency guard's batches (exact sums)
    assert len(canary.tpot_samples) == 6
    t2 = [t for t in canary.tpot_samples if t.pod == "p2"]
    assert {(t.count, t.sum) for t in t2} == {(20.0, 0.6)}
    assert t2[0].buckets is not None and t2[0].buckets.counts == (16.0, 20.0)
    assert t2[0].end - t2[0].start == STEP
    # The acceptance ranges step by the interval and start one interval after the window start.
    ranges = [f for p, f, _ in fake.requests if p.endswith("query_range")]
    assert ranges and all(
        f["step"] == repr(STEP) and float(f["start"]) == START + STEP for f in ranges
    )


def test_speculation_off_is_not_an_error(fake: FakeProm) -> None:
    with source(fake) as src:
        obs = observe(src)
    base = obs.pool("chat", Role.BASELINE)
    assert base is not None and base.error is None
    assert base.acceptance == () and base.pods == 3 and base.itl is not None


def test_extra_matchers_from_settings_reach_every_query(fake: FakeProm) -> None:
    with source(fake) as src:
        observe(src, make_spec(matchLabels={"namespace": "llm"}))
    assert all('namespace="llm"' in f["query"] for _, f, _ in fake.requests)


# ------------------------------------------------------------------------- pool-level failures


def test_empty_vector_is_classified_not_zero(fake: FakeProm) -> None:
    fake.override = lambda q, f: (
        ok("vector", []) if "generation_tokens" in q and "canary" in q else None
    )
    with source(fake) as src:
        obs = observe(src)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None
    assert canary.error_kind is SourceErrorKind.EMPTY and 'role="canary"' in canary.error
    assert canary.acceptance == () and canary.itl is None
    base = obs.pool("chat", Role.BASELINE)
    assert base is not None and base.error is None  # the other pool is still read


def test_status_error_is_a_query_error_and_not_retried(fake: FakeProm) -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected"}
    fake.override = lambda q, f: httpx.Response(400, json=body) if "canary" in q else None
    with source(fake, attempts=5) as src:
        obs = observe(src)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None
    assert canary.error_kind is SourceErrorKind.QUERY_ERROR and "parse error" in canary.error
    assert "generation_tokens" in canary.error  # names the query
    canary_requests = [f for _, f, _ in fake.requests if "canary" in f["query"]]
    assert len(canary_requests) == 1


def test_422_execution_error(fake: FakeProm) -> None:
    body = {"status": "error", "errorType": "execution", "error": "many-to-many matching"}
    fake.override = lambda q, f: httpx.Response(422, json=body) if "_bucket" in q else None
    with source(fake) as src:
        obs = observe(src)
    assert all(p.error and p.error_kind is SourceErrorKind.QUERY_ERROR for p in obs.pools)


def test_nan_is_classified(fake: FakeProm) -> None:
    def nan(q: str, f: dict[str, str]) -> httpx.Response | None:
        if "num_draft_tokens" in q and "canary" in q:
            return ok("matrix", [{"metric": {"pod": "p1"}, "values": [[START + STEP, "NaN"]]}])
        return None

    fake.override = nan
    with source(fake) as src:
        obs = observe(src)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None
    assert canary.error_kind is SourceErrorKind.NAN
    assert canary.acceptance == ()


def test_partial_response_with_warnings(fake: FakeProm) -> None:
    def partial(q: str, f: dict[str, str]) -> httpx.Response | None:
        if "generation_tokens" in q and "baseline" in q:
            vec = [{"metric": {"pod": "b1"}, "value": [END, "5"]}]
            return ok("vector", vec, warnings=["store 10.0.0.7:10901 unavailable"])
        return None

    fake.override = partial
    with source(fake) as src:
        obs = observe(src)
    base = obs.pool("chat", Role.BASELINE)
    assert base is not None and base.error is not None
    assert base.error_kind is SourceErrorKind.PARTIAL and "10.0.0.7" in base.error
    assert obs.source_error is None


# ------------------------------------------------------------------------- server-level failures


def test_503_is_retried_then_ok(fake: FakeProm) -> None:
    calls = {"n": 0}

    def flaky(q: str, f: dict[str, str]) -> httpx.Response | None:
        calls["n"] += 1
        return httpx.Response(503, text="unavailable") if calls["n"] <= 2 else None

    fake.override = flaky
    with source(fake, attempts=3) as src:
        obs = observe(src)
    assert obs.source_error is None and all(p.error is None for p in obs.pools)
    first = fake.requests[0][1]["query"]
    assert [f["query"] for _, f, _ in fake.requests[:3]] == [first] * 3


def test_503_exhausts_bounded_retries(fake: FakeProm) -> None:
    fake.override = lambda q, f: httpx.Response(504, text="gateway timeout")
    with source(fake, attempts=4) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.HTTP_STATUS
    assert "504" in obs.source_error
    assert len(fake.requests) == 4  # bounded, then the whole read stops
    assert all(p.error == obs.source_error for p in obs.pools)
    assert all(p.acceptance == () and p.itl is None and p.pods == 0 for p in obs.pools)


def test_400_is_not_retried(fake: FakeProm) -> None:
    fake.override = lambda q, f: httpx.Response(400, text="bad request from proxy")
    with source(fake, attempts=5) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.HTTP_STATUS
    assert len(fake.requests) == 1


def test_500_is_not_retried(fake: FakeProm) -> None:
    fake.override = lambda q, f: httpx.Response(500, text="oops")
    with source(fake, attempts=5) as src:
        obs = observe(src)
    assert obs.source_error is not None and "HTTP 500" in obs.source_error
    assert len(fake.requests) == 1


def test_query_timeout_errortype(fake: FakeProm) -> None:
    body = {
        "status": "error",
        "errorType": "timeout",
        "error": "query timed out in expression evaluation",
    }
    fake.override = lambda q, f: httpx.Response(503, json=body)
    with source(fake, attempts=2) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.TIMEOUT
    # the server gave up on the query's cost: asking the same again costs the same
    assert len(fake.requests) == 1


def test_bad_json(fake: FakeProm) -> None:
    fake.override = lambda q, f: httpx.Response(200, text="<html>login</html>")
    with source(fake) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.BAD_JSON


def test_wrong_shape_is_bad_json(fake: FakeProm) -> None:
    fake.override = lambda q, f: ok("vector", [{"metric": {}, "value": "oops"}])
    with source(fake) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.BAD_JSON


def test_transport_timeout_retried_then_classified(fake: FakeProm) -> None:
    def slow(q: str, f: dict[str, str]) -> httpx.Response | None:
        raise httpx.ReadTimeout("read timed out")

    fake.override = slow
    with source(fake, attempts=3) as src:
        obs = observe(src)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.TIMEOUT
    assert len(fake.requests) == 3


def test_bad_window_is_reported() -> None:
    with source(FakeProm()) as src:
        obs = src.observe(make_spec(), start=10.0, end=10.0, interval_seconds=5.0)
    assert obs.source_error is not None and "empty window" in obs.source_error


# ------------------------------------------------------------------------- auth and headers


def test_bearer_token_file_is_reread_when_it_rotates(fake: FakeProm, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = PrometheusSettings(
        url="http://prom.test:9090/prefix/",
        bearer_token_file=str(token),
        headers={"X-Scope-OrgID": "tenant-a"},
    )
    with source(fake, settings=settings) as src:
        src.query("up", at=END)
        new = tmp_path / "token.new"
        new.write_text("second-longer")
        new.replace(token)  # atomic swap, like the kubelet's symlink flip
        src.query("up", at=END)
    (p1, _, h1), (_, _, h2) = fake.requests
    assert p1 == "/prefix/api/v1/query"
    assert h1["authorization"] == "Bearer first" and h2["authorization"] == "Bearer second-longer"
    assert h1["x-scope-orgid"] == "tenant-a"


def test_missing_token_file_is_classified(fake: FakeProm, tmp_path: Path) -> None:
    settings = PrometheusSettings(
        url="http://prom.test:9090", bearer_token_file=str(tmp_path / "nope")
    )
    with source(fake, settings=settings) as src:
        obs = observe(src)
    assert obs.source_error is not None and "bearer token file" in obs.source_error
    assert fake.requests == []


def test_basic_auth_from_password_file(fake: FakeProm, tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret")
    settings = PrometheusSettings.model_validate(
        {"url": "http://prom.test:9090", "basicAuth": {"username": "ag", "passwordFile": str(pw)}}
    )
    with source(fake, settings=settings) as src:
        src.query("up", at=END)
    assert fake.requests[0][2]["authorization"] == httpx.BasicAuth("ag", "s3cret")._auth_header


def test_bad_ca_bundle_is_reported_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    settings = PrometheusSettings(url="https://prom.test:9090", ca_file=str(bad))
    src = PrometheusSource(settings)
    try:
        obs = src.observe(make_spec(), start=START, end=END, interval_seconds=STEP)
    finally:
        src.close()
    assert obs.source_error is not None and "CA bundle" in obs.source_error


# ------------------------------------------------------------------------- real sockets


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_listening_is_unreachable() -> None:
    settings = PrometheusSettings(url=f"http://127.0.0.1:{_free_port()}", timeout_seconds=2)
    with PrometheusSource(settings, attempts=2, backoff_seconds=0.0) as src:
        obs = src.observe(make_spec(), start=START, end=END, interval_seconds=STEP)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.UNREACHABLE


@pytest.fixture
def slow_server() -> Iterator[tuple[str, threading.Event]]:
    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            release.wait(10)  # bounded: the test sets it on teardown
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
            try:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )  # a short poll: shutdown() waits for it
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", release
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_slow_prometheus_times_out(slow_server: tuple[str, threading.Event]) -> None:
    url, _ = slow_server
    settings = PrometheusSettings(url=url, timeout_seconds=0.3)
    with PrometheusSource(settings, attempts=2, backoff_seconds=0.0) as src:
        obs = src.observe(make_spec(), start=START, end=END, interval_seconds=STEP)
    assert obs.source_error is not None and obs.source_error_kind is SourceErrorKind.TIMEOUT


def test_make_source_builds_the_policy_source() -> None:
    from alphagate.sources import Source, make_source
    from alphagate.sources.endpoints import SourcesConfig
    from alphagate.sources.scrape import ScrapeSource

    src = make_source(make_spec(), endpoints=SourcesConfig.single("http://prom.test:9090"))
    assert isinstance(src, PrometheusSource) and isinstance(src, Source)
    src.close()
    scrape_spec = SpeculativeCanarySpec.model_validate(
        {**make_spec().model_dump(by_alias=True), "source": {"kind": "podScrape"}}
    )
    scraper = make_source(scrape_spec, namespace="llm", core_api=object())
    assert isinstance(scraper, ScrapeSource) and isinstance(scraper, Source)


# ------------------------------------------------------------------------- held pools

TOO_MANY = {
    "status": "error",
    "errorType": "execution",
    "error": "query processing would load too many samples into memory in query execution",
}


def canary_asked(fake: FakeProm) -> int:
    return sum(1 for _, form, _ in fake.requests if "canary" in form["query"])


def test_a_pool_the_server_refuses_for_its_cost_is_held_not_asked_again(fake: FakeProm) -> None:
    """Prometheus refused the canary pool's query (too many samples): the next read answers
    that pool's SERVER_COST error without a query (it loaded the shared server every interval),
    and the baseline pool is read as ever."""
    fake.override = lambda q, f: httpx.Response(422, json=TOO_MANY) if "canary" in q else None
    src = source(fake)
    once = observe(src)
    first = once.pool("chat", Role.CANARY)
    assert first is not None and first.error_kind is SourceErrorKind.QUERY_ERROR
    asked = canary_asked(fake)
    assert asked >= 1
    again = observe(src)
    pool = again.pool("chat", Role.CANARY)
    assert pool is not None and pool.budget is BudgetKind.SERVER_COST
    assert pool.error is not None and "too many samples" in pool.error
    assert canary_asked(fake) == asked  # nothing sent for the held pool
    assert again.pool("chat", Role.BASELINE) == once.pool("chat", Role.BASELINE)
    assert again.source_error is None


def test_a_held_pool_is_asked_again_when_its_hold_ends_and_a_good_read_clears_it(
    fake: FakeProm,
) -> None:
    clock = [0.0]
    holds = Holds(clock=lambda: clock[0])
    key = key_of("http://p", {"role": "canary"})
    refused = StatusError(422, "too many samples", target="q", kind=SourceErrorKind.QUERY_ERROR)
    holds.failed(key, refused, interval=2.0)
    with pytest.raises(BudgetError) as caught:
        holds.check(key, "chat/canary")
    assert caught.value.budget is BudgetKind.SERVER_COST
    clock[0] = 4.0  # two intervals: the first hold is over
    holds.check(key, "chat/canary")
    holds.failed(key, refused, interval=2.0)  # refused again: held twice as long
    clock[0] = 11.9
    with pytest.raises(BudgetError):
        holds.check(key, "chat/canary")
    clock[0] = 12.1
    holds.check(key, "chat/canary")
    holds.succeeded(key)
    holds.failed(key, refused, interval=2.0)  # after a good read: the first hold again
    clock[0] = 16.2
    holds.check(key, "chat/canary")


def test_one_server_timeout_holds_nothing_two_in_a_row_do(fake: FakeProm) -> None:
    """A server timeout may be the server's load (every canary's): one holds nothing, so a
    victim is not held for a stall; its pool timing out again is held."""
    clock = [0.0]
    holds = Holds(clock=lambda: clock[0])
    key = key_of("http://p", {"role": "canary"})
    gave_up = QueryTimeout(503, "timeout", target="q", kind=SourceErrorKind.TIMEOUT)
    holds.failed(key, gave_up, interval=2.0)
    holds.check(key, "chat/canary")  # not held
    holds.failed(key, gave_up, interval=2.0)
    with pytest.raises(BudgetError):
        holds.check(key, "chat/canary")
    other = key_of("http://p", {"role": "baseline"})
    holds.check(other, "chat/baseline")  # no other pool is touched


def test_a_held_pool_joins_no_shared_query(fake: FakeProm) -> None:
    """In a batch (`observe_many`), a held pool is left out of the shared queries: nothing
    sent matches it, and the batch's other pools are answered."""
    fake.override = lambda q, f: httpx.Response(422, json=TOO_MANY) if "canary" in q else None
    src = source(fake)
    (first,) = observe_many(src, [make_spec()], start=START, end=END, interval_seconds=STEP)
    refused = first.pool("chat", Role.CANARY)
    assert refused is not None and refused.error_kind is SourceErrorKind.QUERY_ERROR
    asked = canary_asked(fake)
    (again,) = observe_many(src, [make_spec()], start=START, end=END, interval_seconds=STEP)
    pool = again.pool("chat", Role.CANARY)
    assert pool is not None and pool.budget is BudgetKind.SERVER_COST
    assert again.pool("chat", Role.BASELINE) == first.pool("chat", Role.BASELINE)
    assert canary_asked(fake) == asked


def test_a_batchs_shared_queries_are_asked_side_by_side(fake: FakeProm) -> None:
    """`observe_many` asks a batch's queries at once, not one after another as its pools come
    to need them (a read of ~20 queries lasts about its slowest, not their sum). That the
    answers are those of a read alone is tests/sources/test_sources_prombatch_it.py's, against
    a real Prometheus."""
    lock = threading.Lock()
    flying = [0, 0]  # now, most at once

    def slow(request: httpx.Request) -> httpx.Response:
        with lock:
            flying[0] += 1
            flying[1] = max(flying[1], flying[0])
        try:
            threading.Event().wait(0.02)
            return fake(request)
        finally:
            with lock:
                flying[0] -= 1

    settings = PrometheusSettings(url="http://prom.test:9090")
    src = PrometheusSource(settings, transport=httpx.MockTransport(slow), backoff_seconds=0.0)
    (got,) = observe_many(src, [make_spec()], start=START, end=END, interval_seconds=STEP)
    assert flying[1] > 1
    assert got.source_error is None and len(got.pools) == 2
