"""Every scrape and query is bounded, and every bad answer fails one pod or one query with a
classified error: slow headers, dripping bodies, bombs, stacked encodings, pages of empty
lines, huge or non-ASCII position labels, JSON where a page belongs, redirects, secrets.

The servers are raw sockets on 127.0.0.1 (tests/sources/hostile.py), each bounded in time.
"""

from __future__ import annotations

import gzip
import os
import ssl
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hostile import drip, serving, slow_body, whole

from alphagate.config import ScrapeSettings, SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import SourceError, SourceErrorKind, redact
from alphagate.sources import http
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.endpoints import PrometheusEndpoint as PrometheusSettings
from alphagate.sources.pageread import read_page
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.promwire import WatchedFile
from alphagate.sources.scrape import ScrapeSource
from specs import SOURCE_SPEC, spec_from

PAGE = b"""# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 25
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9
vllm:generation_tokens_total{engine="0",model_name="m"} 100
"""
OK_HEADERS = {"Content-Type": "text/plain; version=0.0.4"}


def scrape_one(url: str, **settings: Any) -> SourceError | None:
    """Scrape `url` once as the one canary pod; the pod's error (None: it was read)."""
    spec = make_spec(**settings)
    discovery = StaticDiscovery({("chat", Role.CANARY): [Target(url, pod="p0")]})
    with ScrapeSource(discovery, since_start=True) as src:
        src.observe(spec, start=0.0, end=time.time(), interval_seconds=10.0)
        errors = src.failures.get(("chat", Role.CANARY), [])
    return errors[0] if errors else None


def make_spec(**scrape: Any) -> SpeculativeCanarySpec:
    """SOURCE_SPEC's pools told apart by role alone (every pod of the double is `chat`)."""
    return spec_from(
        SOURCE_SPEC,
        slices=[
            {
                "name": "chat",
                "canary": {"matchLabels": {"role": "canary"}},
                "baseline": {"matchLabels": {"role": "baseline"}},
            }
        ],
        source={"kind": "podScrape", "scrape": {"timeoutSeconds": 1.0, **scrape}},
    )


# ------------------------------------------------------------------------- one deadline


def test_a_good_page_is_read() -> None:
    with serving(whole("200 OK", OK_HEADERS, PAGE)) as server:
        assert scrape_one(server.url) is None


def test_headers_sent_a_byte_at_a_time_time_out() -> None:
    # Each byte arrives well inside any per-read timeout; only a deadline ends the exchange.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Padding: " + b"x" * 200
    with serving(drip(head, every=0.1)) as server:
        err = scrape_one(server.url, timeoutSeconds=0.8)
    assert err is not None and err.kind is SourceErrorKind.TIMEOUT


def test_a_dripping_body_times_out() -> None:
    with serving(slow_body(PAGE * 10, every=0.05)) as server:
        err = scrape_one(server.url, timeoutSeconds=0.8)
    assert err is not None and err.kind is SourceErrorKind.TIMEOUT


def test_the_deadline_is_per_thread_and_nests() -> None:
    assert http.remaining() is None
    with http.deadline(10.0):
        outer = http.remaining()
        with http.deadline(1.0):
            inner = http.remaining()
        assert http.remaining() is not None
    assert outer is not None and inner is not None and inner < 1.0 < outer
    assert http.remaining() is None


# ------------------------------------------------------------------------- size and encoding


def test_a_gzip_bomb_is_refused_while_decoding() -> None:
    bomb = gzip.compress(b"#" * (32 << 20), compresslevel=9)  # 32 MiB in ~32 KiB
    headers = {**OK_HEADERS, "Content-Encoding": "gzip"}
    with serving(whole("200 OK", headers, bomb)) as server:
        err = scrape_one(server.url, maxBodyBytes=1 << 20)
    assert err is not None and err.kind is SourceErrorKind.TOO_LARGE


def test_one_gzip_layer_is_decoded() -> None:
    headers = {**OK_HEADERS, "Content-Encoding": "gzip"}
    with serving(whole("200 OK", headers, gzip.compress(PAGE))) as server:
        assert scrape_one(server.url) is None


def test_stacked_encodings_are_refused() -> None:
    twice = gzip.compress(gzip.compress(PAGE))
    headers = {**OK_HEADERS, "Content-Encoding": "gzip, gzip"}
    with serving(whole("200 OK", headers, twice)) as server:
        err = scrape_one(server.url)
    assert err is not None and err.kind is SourceErrorKind.PARSE


def test_an_unknown_encoding_is_refused() -> None:
    headers = {**OK_HEADERS, "Content-Encoding": "br"}
    with serving(whole("200 OK", headers, b"\x00\x01")) as server:
        err = scrape_one(server.url)
    assert err is not None and err.kind is SourceErrorKind.PARSE


def test_truncated_gzip_is_a_parse_error() -> None:
    headers = {**OK_HEADERS, "Content-Encoding": "gzip"}
    with serving(whole("200 OK", headers, gzip.compress(PAGE)[:-12])) as server:
        err = scrape_one(server.url)
    assert err is not None and err.kind is SourceErrorKind.PARSE


def test_a_page_of_empty_lines_is_refused_by_the_line_cap() -> None:
    with serving(whole("200 OK", OK_HEADERS, b"\n" * 5000)) as server:
        err = scrape_one(server.url, maxLines=1000)
        assert err is not None and err.kind is SourceErrorKind.TOO_LARGE
        assert scrape_one(server.url, maxLines=10_000) is None


def test_decoded_bytes_are_capped_without_content_length() -> None:
    deflated = zlib.compress(b"# x\n" * (1 << 18))
    headers = {**OK_HEADERS, "Content-Encoding": "deflate"}
    with serving(whole("200 OK", headers, deflated)) as server:
        err = scrape_one(server.url, maxBodyBytes=64 << 10)
    assert err is not None and err.kind is SourceErrorKind.TOO_LARGE


def test_scrape_memory_budget_is_validated() -> None:
    with pytest.raises(ValueError, match="maxConcurrency"):
        ScrapeSettings(max_concurrency=64, max_body_bytes=4 << 20)


# ------------------------------------------------------------------------- bad pages


@pytest.mark.parametrize(
    "position",
    ["99999", "\u00b2"],  # huge; a superscript two (str.isdigit() says yes, int() says no)
)
def test_odd_position_labels_fail_the_pod_not_the_canary(position: str) -> None:
    line = (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
        f'position="{position}"}} 3\n'
    )
    with serving(whole("200 OK", OK_HEADERS, PAGE + line.encode())) as server:
        err = scrape_one(server.url)
    assert err is not None and err.kind is SourceErrorKind.PARSE


def test_a_json_body_is_not_an_empty_page() -> None:
    body = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
    with serving(whole("200 OK", {"Content-Type": "application/json"}, body)) as server:
        err = scrape_one(server.url)
        assert err is not None and err.kind is SourceErrorKind.PARSE
    with serving(whole("200 OK", OK_HEADERS, body)) as server:  # mislabelled JSON too
        err = scrape_one(server.url)
        assert err is not None and err.kind is SourceErrorKind.PARSE


def test_a_redirect_is_reported_and_not_followed() -> None:
    location = {"Location": "http://user:s3cret@127.0.0.1:1/elsewhere"}
    with serving(whole("302 Found", location, b"")) as server:
        err = scrape_one(server.url)
        assert server.requests == 1  # not followed
    assert err is not None and err.kind is SourceErrorKind.HTTP_STATUS
    assert "s3cret" not in str(err)


def test_one_bad_pod_in_a_pool_is_one_failed_sample() -> None:
    bad = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="\u00b2"} 1\n'
    with (
        serving(whole("200 OK", OK_HEADERS, PAGE)) as good,
        serving(whole("200 OK", OK_HEADERS, PAGE + bad.encode())) as broken,
    ):
        targets = [Target(good.url, pod=f"g{i}") for i in range(9)]
        targets += [Target(broken.url + "?x", pod="bad")]
        spec = make_spec(timeoutSeconds=10.0)  # no page hangs here: room for a loaded machine
        with ScrapeSource(
            StaticDiscovery({("chat", Role.CANARY): targets}), since_start=True
        ) as src:
            obs = src.observe(spec, start=0.0, end=time.time(), interval_seconds=10.0)
            failed = src.failures[("chat", Role.CANARY)]
    canary = next(p for p in obs.pools if p.role is Role.CANARY)
    assert canary.error is None and canary.pods == 9
    assert [e.kind for e in failed] == [SourceErrorKind.PARSE]


def test_read_page_refuses_json_files_and_bad_timeouts(tmp_path: Path) -> None:
    f = tmp_path / "page.json"
    f.write_text('{"a": [1, 2]}')
    with pytest.raises(SourceError) as caught:
        read_page(str(f))
    assert caught.value.kind is SourceErrorKind.PARSE
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SourceError) as caught:
            read_page("http://127.0.0.1:1/metrics", timeout_seconds=bad)
        assert caught.value.kind is SourceErrorKind.TIMEOUT


# ------------------------------------------------------------------------- Prometheus


def prom(url: str, **kw: Any) -> PrometheusSource:
    settings = PrometheusSettings(url=url, timeout_seconds=kw.pop("timeout", 1.0))
    return PrometheusSource(settings, backoff_seconds=0.0, **kw)


def test_transports_share_one_system_trust_store_and_keep_a_callers_own() -> None:
    """Loading the trust store costs tens of milliseconds: every source used to load it again."""
    shared = http.tls_context(True)
    assert http.tls_context(True) is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    own = ssl.create_default_context()
    assert http.tls_context(own) is own
    off = http.tls_context(False)
    assert off is not shared and off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    assert shared.verify_mode == ssl.CERT_REQUIRED  # never changed by one that checks nothing
    assert http.DeadlineTransport()._pool._ssl_context is shared


def test_prometheus_slow_headers_cost_one_deadline_for_all_retries() -> None:
    head = b"HTTP/1.1 503 Service Unavailable\r\nX-Padding: " + b"x" * 200
    with serving(drip(head, every=0.1)) as server, prom(server.base, attempts=5) as src:
        with pytest.raises(SourceError) as caught:
            src.query("up")
        requests = server.requests
    assert caught.value.kind is SourceErrorKind.TIMEOUT
    assert requests == 1  # the deadline covers retries: no second attempt after it passed


def test_prometheus_redirect_is_a_redirect_not_bad_json() -> None:
    answer = whole("301 Moved Permanently", {"Location": "https://prom.example/"}, b"")
    with (
        serving(answer) as server,
        prom(server.base) as src,
        pytest.raises(SourceError) as caught,
    ):
        src.query("up")
    assert caught.value.kind is SourceErrorKind.HTTP_STATUS
    assert "redirect" in str(caught.value)  # the operator must see what happened


def test_prometheus_answer_is_capped() -> None:
    big = b'{"status":"success","data":{"resultType":"vector","result":[]},"x":"' + b"y" * 5000
    answer = whole("200 OK", {"Content-Type": "application/json"}, big + b'"}')
    with (
        serving(answer) as server,
        prom(server.base, max_response_bytes=1024) as src,
        pytest.raises(SourceError) as caught,
    ):
        src.query("up")
    assert caught.value.kind is SourceErrorKind.TOO_LARGE


def test_prometheus_huge_position_label_fails_the_query() -> None:
    points = ",".join(
        f'{{"metric":{{"pod":"p","position":"{pos}"}},"values":[[1060,"1"]]}}'
        for pos in ("0", "100000000")
    )
    body = f'{{"status":"success","data":{{"resultType":"matrix","result":[{points}]}}}}'
    answer = whole("200 OK", {"Content-Type": "application/json"}, body.encode())
    with serving(answer) as server, prom(server.base) as src:
        from alphagate.sources.promanswers import acceptance
        from alphagate.sources.promql import pool_queries

        q = pool_queries({"a": "b"}, window_seconds=60, interval_seconds=20)
        with pytest.raises(SourceError) as caught:
            acceptance(src, q, 1000.0, 1060.0, 20.0)
    assert caught.value.kind in (SourceErrorKind.QUERY_ERROR, SourceErrorKind.PARSE)


@pytest.mark.parametrize(
    "value",
    ['"\u0661\u0662"', '"1_000"', "12"],  # Arabic-Indic 12; an underscore; a bare JSON number
)
def test_prometheus_values_that_are_not_prometheus_numbers_fail_the_query(value: str) -> None:
    body = (
        '{"status":"success","data":{"resultType":"vector",'
        f'"result":[{{"metric":{{"pod":"p"}},"value":[1060,{value}]}}]}}}}'
    )
    answer = whole("200 OK", {"Content-Type": "application/json"}, body.encode())
    with serving(answer) as server, prom(server.base) as src, pytest.raises(SourceError) as caught:
        src.query("up")
    assert caught.value.kind is SourceErrorKind.BAD_JSON


def test_credentials_in_the_url_never_reach_an_error() -> None:
    with prom("http://alice:s3cret@127.0.0.1:1/", attempts=1) as src:
        obs = src.observe(make_spec().model_copy(), start=1000.0, end=1060.0, interval_seconds=20.0)
    assert obs.source_error is not None and "s3cret" not in obs.source_error


def test_secret_files_are_read_with_a_cap(tmp_path: Path) -> None:
    big = tmp_path / "token"
    big.write_bytes(b"t" * (1 << 20))
    with pytest.raises(SourceError, match="larger than"):
        WatchedFile(str(big), "bearer token file").read()
    small = tmp_path / "small"
    small.write_text("abc\n")
    assert WatchedFile(str(small), "bearer token file").read() == "abc"
    if os.path.exists("/dev/zero"):  # a file that never ends
        with pytest.raises(SourceError, match="not a regular file"):
            WatchedFile("/dev/zero", "bearer token file").read()


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("GET https://user:pa55@host:9090/api failed", "pa55"),
        ("Authorization: Bearer abc.defghijk", "abc.defghijk"),
        ("password=hunter22", "hunter22"),
        ('{"token": "eyJhbGciOi"}', "eyJhbGciOi"),
    ],
)
def test_redact_removes_secrets(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert secret not in str(SourceError(SourceErrorKind.UNREACHABLE, text, target=text))


def test_redact_leaves_ordinary_words() -> None:
    text = "no spec_decode series: 0 draft tokens in 2 pods; basic check"
    assert redact(text) == text


# ------------------------------------------------------------------------- inspect


@pytest.mark.parametrize(
    ("accepted", "problem"),
    [("60", "alpha"), ("NaN", "nan"), ("-5", "accepted_tokens")],
)
def test_inspect_impossible_numbers_exit_nonzero(
    tmp_path: Path, accepted: str, problem: str
) -> None:
    from typer.testing import CliRunner

    from alphagate.cli import app

    page = PAGE.replace(
        b'accepted_tokens_total{engine="0",model_name="m"} 25',
        b'accepted_tokens_total{engine="0",model_name="m"} ' + accepted.encode(),
    )
    assert page != PAGE
    f = tmp_path / "page.txt"
    f.write_bytes(page)
    result = CliRunner().invoke(app, ["inspect", str(f)])
    assert result.exit_code != 0
    good = tmp_path / "good.txt"
    good.write_bytes(PAGE)
    assert CliRunner().invoke(app, ["inspect", str(good)]).exit_code == 0


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_inspect_refuses_a_useless_timeout(timeout: str) -> None:
    from typer.testing import CliRunner

    from alphagate.cli import app

    result = CliRunner().invoke(app, ["inspect", "--timeout", timeout, "http://127.0.0.1:1/m"])
    assert result.exit_code == 2  # a usage error, before any connection
