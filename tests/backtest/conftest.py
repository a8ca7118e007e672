"""Fixtures for the backtest tests: recordings of the shipped scenarios, made once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import backtest_support`

from backtest_support import make_recording, scenario


@pytest.fixture(scope="session")
def chat_to_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 min: 80% chat (alpha 0.72) / 20% code (0.42), 30/70 from 20 m to 60 m."""
    path = tmp_path_factory.mktemp("rec") / "chat-to-code.jsonl"
    return make_recording(scenario("chat-to-code"), path)


@pytest.fixture(scope="session")
def steady_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 h of chat at alpha 0.72."""
    path = tmp_path_factory.mktemp("rec") / "steady-chat.jsonl"
    return make_recording(scenario("steady-chat"), path)
