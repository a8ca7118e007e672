"""Fixtures for the backtest tests: recordings of the shipped scenarios, made once."""

from __future__ import annotations

from pathlib import Path

import pytest
from backtest_support import make_recording, scenario


@pytest.fixture(scope="session")
def chat_to_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 min: 80% chat (alpha 0.88) / 20% code (0.35), 30/70 from 20 m to 60 m.

    The shipped scenario's alphas (0.72/0.42) put the pooled, token-weighted alpha the gate
    judges at ~0.60 before the shift (code's answers are longer), on the edge of the tests'
    0.55-0.60 band; these put it clearly above before (~0.67 pooled: chat at 0.80 gave ~0.61,
    whose lower bound sat on enableAbove, so confirming was a coin toss per judged window) and
    clearly below during the shift (~0.47).
    """
    base = scenario("chat-to-code")
    slices = {
        "chat": base.slices["chat"].model_copy(update={"alpha": 0.88}),
        "code": base.slices["code"].model_copy(update={"alpha": 0.35}),
    }
    path = tmp_path_factory.mktemp("rec") / "chat-to-code.jsonl"
    return make_recording(base.model_copy(update={"slices": slices}), path)


@pytest.fixture(scope="session")
def steady_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 h of chat at alpha 0.72."""
    path = tmp_path_factory.mktemp("rec") / "steady-chat.jsonl"
    return make_recording(scenario("steady-chat"), path)
