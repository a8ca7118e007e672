"""Ship tests: make ship_support importable, and the promtool fixture."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool missing: apt-get install --no-install-recommends prometheus")
    return path
