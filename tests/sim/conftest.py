"""Fixtures for the simulator tests: the shipped scenarios and a real vLLM capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from alphagate_lab.sim.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
REAL_CAPTURE = Path(__file__).resolve().parent / "data" / "vllm-real-metrics.txt"


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    return ROOT / "scenarios"


@pytest.fixture(scope="session")
def steady_chat(scenarios_dir: Path) -> Scenario:
    return load_scenario(scenarios_dir / "steady-chat.yaml")


@pytest.fixture(scope="session")
def real_capture() -> str:
    """A real vLLM /metrics capture (recent V1 build, K = 4, model tiny-chat)."""
    return REAL_CAPTURE.read_text(encoding="utf-8")
