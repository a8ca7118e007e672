"""The draft-length benchmark runs small through the bench runner and shows what tuning buys."""

from __future__ import annotations

import pytest

from alphagate_lab.bench import __main__ as runner
from alphagate_lab.bench import draft_length as bench


def test_quick_run_prints_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--quick", "draft_length"]) == 0
    out = capsys.readouterr().out
    for s in bench.SCENARIOS:
        assert s.name in out


def test_tuning_recovers_most_of_the_regret_when_k_is_too_long_all_along() -> None:
    s = next(s for s in bench.SCENARIOS if s.name == "code-from-start")
    r = bench.run(s, seed=0, windows=30, drafts=800, restart_loss=0.5)
    assert r["regret_fixed"] > 0.1
    assert r["regret_tuned"] < r["regret_fixed"] / 3
    assert r["final_k"] == 2 and r["changes"] >= 1


def test_true_speedup_and_best_k() -> None:
    chat = bench.Window(bench.CHAT, 24.0)
    assert bench.true_speedup(chat, 0) == 1.0
    k, s = bench.best(chat)
    assert 1 <= k <= bench.K_MAX and s == max(bench.true_speedup(chat, i) for i in range(6))
    spike = bench.Window(bench.CHAT, 200.0)
    assert bench.best(spike)[0] < k  # a full batch makes positions dearer
