"""Helpers every test folder shares, as fixtures (no imports between test folders):

wait_for      poll a condition, bounded in time, and fail naming what never happened;
fleet_prometheus  one real Prometheus for the session, over one simulated fleet (fleets.py):
              started once for every module that reads it (each start costs ~20 s);
make_spec     a small valid SpeculativeCanary spec, with overrides merged in;
shipped_rbac  what the shipped Roles grant the controller's ServiceAccount (deploy/): the API
              double refuses everything else to the controller (403), so a permission the
              code needs and the Roles lack fails the tests that exercise it.

Hypothesis runs the `fast` profile (100 examples a property) unless HYPOTHESIS_PROFILE names
another: `HYPOTHESIS_PROFILE=thorough` runs 1,000 (before a change to the parser, the
statistics or the state machine). Neither has a deadline: these 2 cores are shared.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from hypothesis import settings

from alphagate.config import SpeculativeCanarySpec
from alphagate.sources.promql import recorded_name
from alphagate_lab.sandbox.apiserver import Rbac
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer
from fleets import BATCH_FLEET, BATCH_INTERVAL
from specs import BASE_SPEC, spec_from

settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SHIPPED_ROLES = (
    DEPLOY / "rbac" / "cluster" / "clusterrole.yaml",  # the cluster-wide overlay's grants
    DEPLOY / "base" / "role-leader-election.yaml",  # the Lease, in the controller's namespace
)


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


@pytest.fixture
def make_spec() -> Callable[..., SpeculativeCanarySpec]:
    """`make_spec(timing={"intervalSeconds": 10})`: BASE_SPEC with the overrides deep-merged,
    validated (a bad test policy fails at once); tests/specs.py builds it."""

    def build(**over: Any) -> SpeculativeCanarySpec:
        return spec_from(BASE_SPEC, **over)

    return build


BATCH_RULES = DEPLOY / "monitoring" / "rules" / "alphagate-batches.yaml"


@pytest.fixture(scope="session")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A real Prometheus (1 s scrapes) over BATCH_FLEET's simulated pods, with the shipped
    batch recording rules scaled to 1 s scrapes (group interval 1 s, rate range 3 s), and a
    window's worth of history (four intervals) before the first test reads it. Modules that
    use it share an xdist group, so one worker starts it once."""
    fast = tmp_path_factory.mktemp("rules") / "alphagate-batches.yaml"
    fast.write_text(
        BATCH_RULES.read_text().replace("interval: 30s", "interval: 1s").replace("[1m]", "[3s]")
    )
    prom = PrometheusServer(scrape_interval=1.0, evaluation_interval=1.0, rule_files=[fast])
    sim = SimServer(Fleet(BATCH_FLEET), file_sd=prom.targets_path)
    try:
        sim.start()
        prom.start()
        prom.wait_for_targets(9, timeout=40)
        prom.wait_for(
            f"count({recorded_name('vllm:spec_decode_num_drafts_total')}) >= 6", timeout=30
        )
        time.sleep(4 * BATCH_INTERVAL + 1)  # a window's worth of history
        yield prom
    finally:
        prom.close()
        sim.close()


SHARDED_ROLE = DEPLOY / "overlays" / "sharded" / "role-shards.yaml"  # `run --shards`: its Leases


def shipped_rules(*extra: Path) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) the shipped Roles grant, plus an overlay's `extra` Roles
    (namespaces aside: tests use many; tests/ship/test_ship_rbac.py checks the namespaced Roles
    namespace by namespace)."""
    out: set[tuple[str, str, str]] = set()
    for path in (*SHIPPED_ROLES, *extra):
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in (doc or {}).get("rules", []):
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            out.add((verb, group, resource))
    return out


@pytest.fixture
def shipped_rbac() -> Rbac:
    return Rbac(shipped_rules())


@pytest.fixture
def sharded_rbac() -> Rbac:
    """The shipped Roles with the sharded overlay's (deploy/overlays/sharded)."""
    return Rbac(shipped_rules(SHARDED_ROLE))
