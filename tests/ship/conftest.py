"""Ship tests: the promtool fixture."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool missing: apt-get install --no-install-recommends prometheus")
    return path
