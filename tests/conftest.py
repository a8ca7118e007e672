"""Helpers every test folder shares, as fixtures (no imports between test folders):

wait_for      poll a condition, bounded in time, and fail naming what never happened;
make_spec     a small valid SpeculativeCanary spec, with overrides merged in;
shipped_rbac  what the shipped Roles grant the controller's ServiceAccount (deploy/): the API
              double refuses everything else to the controller (403), so a permission the
              code needs and the Roles lack fails the tests that exercise it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from alphagate.config import SpeculativeCanarySpec
from alphagate.sandbox.apiserver import Rbac

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import specs` in every folder
from specs import BASE_SPEC, spec_from

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


SHARDED_ROLE = DEPLOY / "overlays" / "sharded" / "role-shards.yaml"  # `run --shards`: its Leases
BUILT_IN_ROLES = {  # Kubernetes' own ClusterRoles the shipped bindings name (not in deploy/)
    "system:auth-delegator": {
        ("create", "authentication.k8s.io", "tokenreviews"),
        ("create", "authorization.k8s.io", "subjectaccessreviews"),
    },
}


def shipped_rules(*extra: Path) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) the shipped Roles grant, plus an overlay's `extra` Roles
    (namespaces aside: tests use many; tests/ship/test_ship_rbac.py checks the namespaced Roles
    namespace by namespace)."""
    out: set[tuple[str, str, str]] = set()
    for binding in DEPLOY.glob("base/clusterrolebinding-*.yaml"):  # built-in roles bound
        out |= BUILT_IN_ROLES[yaml.safe_load(binding.read_text())["roleRef"]["name"]]
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
