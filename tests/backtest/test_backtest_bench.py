"""The core benchmark runs end to end and prints its numbers and ratios (no speed asserted)."""

from __future__ import annotations

import pytest

from alphagate_lab.bench import __main__ as bench_main
from alphagate_lab.bench import core


@pytest.mark.slow
def test_core_bench_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    core.main(["--quick"])
    out = capsys.readouterr().out
    for variant in (
        "combined, On (judged)",
        "combined + per-slice floors, On",
        "perSlice, On (2 calls)",
        "combined, RolledBack (not judged)",
    ):
        assert variant in out
    assert "decisions/s" in out and "x combined" in out
    assert "render + parse text" in out and "x direct" in out
    assert "backtest of a 0.5 h chat-to-code recording" in out
    for row in ("read only", "backtest combined", "backtest perSlice", "streaming backtest"):
        assert row in out
    assert "load whole recording" in out and "x streaming" in out


def test_bench_runner_lists_modules_and_refuses_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert {"core", "sources"} <= set(bench_main.modules())
    with pytest.raises(SystemExit) as info:
        bench_main.main(["no-such-bench"])
    assert info.value.code == 2
    assert "unknown benchmark modules ['no-such-bench']" in capsys.readouterr().err
