"""Helpers every test folder shares, as fixtures (no imports between test folders):

wait_for      poll a condition, bounded in time, and fail naming what never happened;
fleet_prometheus  one real Prometheus for the session, over one simulated fleet (fleets.py):
              started once for every module that reads it (each start costs ~20 s);
make_spec     a small valid SpeculativeCanary spec, with overrides merged in;
shipped_rbac  what the shipped Roles grant the controller's ServiceAccount (deploy/): the API
              double refuses everything else to the controller (403), so a permission the
              code needs and the Roles lack fails the tests that exercise it.

`make test` runs the suite on pytest-xdist workers (`--dist loadgroup`): every module's tests
share a worker (its fixtures are built once), XDIST_GROUPS below puts together what must share
one more widely, and the longest groups start first.

Every test starts with no Prometheus pool held (`sources/promhold.py` is process-wide: a
pool one test's fake refused would otherwise be held in the next).

Hypothesis runs the `fast` profile (100 examples a property) unless HYPOTHESIS_PROFILE names
another: `HYPOTHESIS_PROFILE=thorough` runs 1,000 (before a change to the parser, the
statistics or the state machine); a module that sets its own count sets it as a multiple of
the profile's. Neither has a deadline: these 2 cores are shared.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from hypothesis import settings

from alphagate.config import SpeculativeCanarySpec
from alphagate.sources.promhold import HOLDS
from alphagate.sources.promql import recorded_name
from alphagate_lab.sandbox.apiserver import Rbac
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer
from fleets import BATCH_FLEET, BATCH_INTERVAL
from specs import BASE_SPEC, spec_from


@pytest.fixture(autouse=True)
def _no_held_pools() -> Iterator[None]:
    """No pool held from another test (the holds are the process's)."""
    HOLDS.clear()
    yield
    HOLDS.clear()


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


# pytest-xdist (`make test` runs `-n 4 --dist loadgroup`): a module's tests share a worker, so
# its fixtures are built once. Beyond that, these share one: the modules that read the backtest
# folder's session recordings, the modules that read the session's one Prometheus, and those whose
# replicas, Leases and schedules run on the wall clock (one after another, they never starve
# each other). Groups are named by path because xdist's own `xdist_group` mark does not reach
# the scheduler under pytest 9 (it rewrites `item._nodeid`, which pytest 9 no longer reads).
XDIST_GROUPS = {
    "tests/backtest/test_backtest_cli.py": "backtest-recordings",
    "tests/backtest/test_backtest_recording.py": "backtest-recordings",
    "tests/sources/test_sources_prombatch_it.py": "fleet-prometheus",
    "tests/kube/test_kube_prometheus_batch.py": "fleet-prometheus",
    "tests/kube/test_kube_lease.py": "wall-clock-replicas",
    "tests/kube/test_kube_run.py": "wall-clock-replicas",
    "tests/kube/test_kube_shards.py": "wall-clock-replicas",
    "tests/kube/test_kube_sharding.py": "wall-clock-replicas",
    "tests/kube/test_kube_sim_loop.py": "wall-clock-replicas",
}
# Handed out first, in this order (xdist gives the next group to whichever worker frees up).
# Four long ones start together: two mostly waiting on real time while the demo's story and
# lint keep the cores busy, two working. The backtest modules that read no session recording
# are groups of their own: in the recordings' group the Prometheus one (waits) came out beside
# the wall-clock group's own waits, and a core idled for about 20 s. After them, groups that
# mostly wait (on Prometheus's scrapes: "waits") alternate with groups that compute, so at most
# one or two of the four workers wait at once: listed together, the Prometheus modules came out
# together and both cores idled for half a minute. Seconds: wall / CPU of one worker in a
# `make test` run.
LONGEST_FIRST = (
    "wall-clock-replicas",  # 90 / 45
    "tests/sources/test_sources_fleet_bench.py",  # 88 / 17, waits
    "tests/bench/test_bench_tenants.py",  # 93 / 14, waits
    "backtest-recordings",  # 55 / 33
    "tests/policies/test_policies_as_shipped.py",  # 58 / 29
    "tests/core/test_core_latency_regressions.py",  # 50 / 25
    "tests/core/test_core_coverage_sim.py",  # 53 / 26
    "tests/backtest/test_backtest_prometheus.py",  # 38 / 6, waits
    "tests/ship/test_ship_release.py",  # 30 / 17
    "fleet-prometheus",  # 32 / 7, waits
    "tests/sim/test_sim_fleet.py",  # 37 / 19
    "tests/backtest/test_backtest_bench.py",  # 19 / 12
    "tests/sources/test_sources_namespace_it.py",  # 21 / 2, waits
    "tests/core/test_core_acceptance.py",  # 23 / 12
    "tests/core/test_core_coverage_traces.py",  # 24 / 13
    "tests/sources/test_sources_prometheus_it.py",  # 21 / 1, waits
    "tests/core/test_core_props.py",  # 19 / 12
    "tests/bench/test_bench_decisions.py",  # 19 / 12
    "tests/sources/test_sources_recorded_it.py",  # 19 / 3, waits
    "tests/sim/test_sim_traffic.py",  # 17 / 11
    "tests/core/test_core_latency_run.py",  # 11 / 9
    "tests/ship/test_ship_prometheus.py",  # 15 / 2, waits
    "tests/core/test_core_latency_props.py",  # 12 / 8
    "tests/kube/test_kube_ownership.py",  # 11 / 7
    "tests/sources/test_sources_idle.py",  # 14 / 1, waits
    "tests/ship/test_ship_rules.py",  # 11 / 6
    "tests/policies/test_policies_hostile.py",  # 9 / 5
    "tests/ship/test_ship_rbac.py",  # 11-42 / 6, waits
    # Then modules of one or a few long tests, which the count of tests would hand out last
    # (a run ended on them, one worker each, the other cores idle).
    "tests/sources/test_sources_vllm_compat_prometheus.py",  # 8 / 1 and a Prometheus's 7
    "tests/kube/test_kube_tenants.py",  # 9 / 1, waits
    "tests/kube/test_kube_schedule.py",  # 9 / 1, waits
    "tests/sources/test_sources_scrapebatch.py",  # 9 / 1, waits
)


def xdist_group(nodeid: str) -> str:
    """The worker group of a test: its XDIST_GROUPS entry, else its module."""
    path = nodeid.split("::", 1)[0]
    return next((g for prefix, g in XDIST_GROUPS.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` hands each group (`xdist_group`) whole to one worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist would reorder the groups by their number of tests; hand them out in collection
    # order instead, which pytest_collection_modifyitems made longest first.
    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, LONGEST_FIRST first, then the groups with more tests (the scheduler
    hands groups out in collection order; every worker sorts alike, as xdist requires). A plain
    run keeps the usual order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    sizes = Counter(xdist_group(item.nodeid) for item in items)

    def order(item: pytest.Item) -> tuple[int, int]:
        group = xdist_group(item.nodeid)
        return rank.get(group, len(rank)), -sizes[group]

    items.sort(key=order)


BATCH_RULES = DEPLOY / "monitoring" / "rules" / "alphagate-batches.yaml"


@pytest.fixture(scope="session")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A real Prometheus (1 s scrapes) over BATCH_FLEET's simulated pods, with the shipped
    batch recording rules scaled to 1 s scrapes (group interval 1 s, rate range 3 s), and a
    window's worth of history (four intervals) before the first test reads it. Modules that
    use it share an xdist group, so one worker starts it once."""
    fast = tmp_path_factory.mktemp("rules") / "alphagate-batches.yaml"
    fast.write_text(
        BATCH_RULES.read_text().replace("interval: 30s", "interval: 1s").replace("[90s]", "[3s]")
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
