"""The sources benchmark runs small under --quick, agrees with prometheus_client, and prints
its table."""

from __future__ import annotations

import pytest

from alphagate_lab.bench import __main__ as bench_main
from alphagate_lab.bench import sources


def test_bench_prints_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """Run the way `python -m alphagate_lab.bench --quick sources` does: with its QUICK_ARGS."""
    assert "--pods" in sources.QUICK_ARGS and "--repeat" in sources.QUICK_ARGS
    assert bench_main.main(["--quick", "sources"]) == 0
    out = capsys.readouterr().out
    assert "ScrapeSource over 20 local pods" in out  # QUICK_ARGS reached the module
    assert "sources          ok" in out
    assert "real vLLM capture" in out
    for name in ("prometheus_client", "prometheus_client+prefilter", "alphagate fast path"):
        assert name in out
    assert "x faster" in out
    assert "pages/s" in out and ", 0 failed scrapes" in out
