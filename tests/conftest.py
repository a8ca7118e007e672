"""Helpers every test folder shares, as fixtures (no imports between test folders):

wait_for    poll a condition, bounded in time, and fail naming what never happened;
make_spec   a small valid SpeculativeCanary spec, with overrides merged in.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from alphagate.config import SpeculativeCanarySpec


class WaitFor(Protocol):
    def __call__(
        self,
        predicate: Callable[[], Any],
        timeout_seconds: float,
        what: str,
        *,
        poll_seconds: float = 0.05,
    ) -> Any: ...


def _wait_for(
    predicate: Callable[[], Any], timeout_seconds: float, what: str, *, poll_seconds: float = 0.05
) -> Any:
    """Poll `predicate` until it returns something truthy and return that; after
    `timeout_seconds` fail with an AssertionError naming `what`. Always bounded."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_seconds:g} s waiting for {what}")
        time.sleep(poll_seconds)


@pytest.fixture
def wait_for() -> WaitFor:
    return _wait_for


BASE_SPEC: dict[str, Any] = {
    "target": {"name": "canary"},
    "baseline": {"name": "baseline"},
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 5},
    "slices": [
        {
            "name": "chat",
            "canary": {"matchLabels": {"track": "canary"}},
            "baseline": {"matchLabels": {"track": "baseline"}},
        }
    ],
    "source": {"kind": "podScrape"},
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def make_spec() -> Callable[..., SpeculativeCanarySpec]:
    """`make_spec(timing={"intervalSeconds": 10})`: BASE_SPEC with the overrides deep-merged,
    validated (a bad test policy fails at once)."""

    def build(**over: Any) -> SpeculativeCanarySpec:
        return SpeculativeCanarySpec.model_validate(_merge(BASE_SPEC, over))

    return build
