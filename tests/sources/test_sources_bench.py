"""The sources benchmark runs, agrees with prometheus_client, and prints its table."""

from __future__ import annotations

import pytest

from alphagate.bench import sources


def test_bench_prints_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    sources.main(["--repeat", "1", "--pods", "20"])
    out = capsys.readouterr().out
    assert "real vLLM capture" in out
    for name in ("prometheus_client", "prometheus_client+prefilter", "alphagate fast path"):
        assert name in out
    assert "x faster" in out
    assert "pages/s" in out and ", 0 failed scrapes" in out
