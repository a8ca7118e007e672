"""`alphagate inspect` on the real capture, a live multi-engine page, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.core import resolution

REAL = Path(__file__).resolve().parent / "data" / "vllm-real-metrics.txt"
runner = CliRunner()


def test_inspect_real_capture_text() -> None:
    result = runner.invoke(app, ["inspect", str(REAL)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "tiny-chat  engine 0" in out
    assert "96/666 = 0.144" in out
    assert "1 + 96/277 = 1.347" in out
    assert "0:0.177  1:0.061  2:0.058  3:0.051" in out
    assert "1181 observations" in out  # ITL: one observation per engine step


def test_inspect_real_capture_json() -> None:
    result = runner.invoke(app, ["inspect", str(REAL), "--json"])
    assert result.exit_code == 0, result.output
    (model,) = json.loads(result.output)["models"]
    agg = model["all_engines"]
    assert model["model_name"] == "tiny-chat" and agg["engines"] == ["0"]
    assert agg["alpha"] == pytest.approx(96 / 666)
    assert agg["mean_acceptance_length"] == pytest.approx(1 + 96 / 277)
    assert agg["per_position_accepted"] == [49, 17, 16, 14]
    itl = agg["itl"]
    assert itl["count"] == 1181
    # P99 rank 1169.19 falls in (0.01, 0.025]: linear interpolation as histogram_quantile does
    assert itl["p99"] == pytest.approx(0.01 + 0.015 * (0.99 * 1181 - 1096) / (1177 - 1096))
    assert itl["p99_bucket"] == [0.01, 0.025]


def test_inspect_says_what_the_real_capture_buckets_can_resolve() -> None:
    # The capture's 31 per-token observations all sit in vLLM's first bucket (0, 10 ms]: a P99
    # guard at +10% could fail only above 25 ms (+150% at best, surely at no size) and can
    # never show "within"; the layout printed resolves +10% around the page's own latencies.
    text = runner.invoke(app, ["inspect", str(REAL)])
    assert text.exit_code == 0, text.output
    assert "P99 guard fails from +150% at best, surely at no size" in text.output
    assert "P99 guard fails from +100% at best, surely from +400% (10.00 ms..25.00 ms" in (
        text.output
    )  # ITL, per step
    assert "to resolve +10% (" in text.output and "--custom-histogram-buckets '{" in text.output
    result = runner.invoke(app, ["inspect", str(REAL), "--json"])
    (model,) = json.loads(result.output)["models"]
    agg = model["all_engines"]
    p99 = agg["tpot"]["resolution"]["p99"]
    assert p99["bucket"] == [0.0, 0.01] and p99["fail_edge"] == 0.025
    assert p99["least_margin"] == pytest.approx(1.5) and p99["effective_margin"] == "+Inf"
    assert p99["resolvable"] is False and agg["tpot"]["resolution"]["p95"]["resolvable"] is False
    flag, value = agg["resolving_layout"]["args"]
    assert flag == "--custom-histogram-buckets"
    bounds = json.loads(value)["inter_token_latency"]
    assert value in text.output and bounds == agg["resolving_layout"]["bounds"]
    assert bounds[0] <= 0.5 * agg["tpot"]["p50"] and bounds[-1] >= 5 * agg["tpot"]["p99"] * 0.99
    # at those bounds the page's P99 per token (9.9 ms) sits in a bucket that resolves +10%
    lo = max(b for b in bounds if b < agg["tpot"]["p99"])
    hi = min(b for b in bounds if b >= agg["tpot"]["p99"])
    assert resolution.relative(bounds, lo, hi, 0.10).resolvable


TWO_ENGINES = "\n".join(
    [
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30',
        'vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 120',
        'vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 30',
        'vllm:generation_tokens_total{engine="0",model_name="plain"} 9',
        "",
    ]
)


@pytest.fixture
def page_url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = TWO_ENGINES.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_inspect_url_aggregates_engines(page_url: str) -> None:
    result = runner.invoke(app, ["inspect", page_url])
    assert result.exit_code == 0, result.output
    assert "m  engine 0" in result.output and "m  engine 1" in result.output
    assert "m  all engines (2)" in result.output
    assert "60/160 = 0.375" in result.output  # (30+30)/(40+120), not the mean of 0.75 and 0.25
    assert "1 + 60/40 = 2.500" in result.output
    assert "speculation              off" in result.output  # model "plain"


def test_inspect_malformed_file_exits_1_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text('vllm:generation_tokens_total{engine="0"} 1\nvllm:x{a="1" 2\n')
    proc = subprocess.run(
        [sys.executable, "-m", "alphagate", "inspect", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "parse" in proc.stderr and "line 2" in proc.stderr and str(bad) in proc.stderr
