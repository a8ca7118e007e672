"""The demo's inputs: its scenario and policy (package data unless given), the policy scaled to
the demo's speed, the check that they fit together, the Deployments the scenario's pools
become, and where the Prometheus binary is."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from alphagate.config import SpeculativeCanary, SpeculativeCanarySpec, dump, parse
from alphagate.errors import PolicyError, ScenarioError
from alphagate_lab.sandbox.apiserver import DeploymentTemplate

SourceChoice = Literal["auto", "prometheus", "scrape"]

NAMESPACE: Final = "demo"
DEFAULT_SCENARIO: Final = "demo-scenario.yaml"
DEFAULT_POLICY: Final = "demo-policy.yaml"
DEFAULT_OUT: Final = Path("alphagate-demo")
HOST: Final = "127.0.0.1"
MODEL_PORT: Final = 8000
DEBIAN_PROMETHEUS: Final = "/usr/bin/prometheus"

# Policy fields that are durations in scenario seconds (camelCase path under spec): --speed
# divides them all, batch lengths included, so a window holds as many batches at any speed.
_SCALED_SECONDS: Final = (
    ("timing", "intervalSeconds"),
    ("timing", "windowSeconds"),
    ("timing", "warmupSeconds"),
    ("timing", "rolloutTimeoutSeconds"),
    ("timing", "minDwellSeconds"),
    ("timing", "probeSeconds"),
    ("timing", "cooldown", "initialSeconds"),
    ("timing", "cooldown", "maxSeconds"),
    ("acceptance", "batchSeconds"),
    ("latency", "batchSeconds"),
)


def data_text(name: str) -> str:
    """A file shipped in the package's data folder (found on any install)."""
    return resources.files("alphagate_lab").joinpath("data", name).read_text(encoding="utf-8")


def load_scenario_text(path: Path | None) -> tuple[Any, str]:
    """(Scenario, where) from a file or the packaged default."""
    from alphagate_lab.sim import load_scenario, parse_scenario

    if path is None:
        return parse_scenario(data_text(DEFAULT_SCENARIO), f"<default {DEFAULT_SCENARIO}>"), (
            "default"
        )
    return load_scenario(path), str(path)


def load_policy(path: Path | None) -> tuple[dict[str, Any], str]:
    """The SpeculativeCanary as a dict, from a file or the packaged default."""
    where = str(path) if path is not None else f"<default {DEFAULT_POLICY}>"
    try:
        text = path.read_text(encoding="utf-8") if path is not None else data_text(DEFAULT_POLICY)
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror or exc}", where=where) from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid YAML: {exc}", where=where) from exc
    canaries = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SpeculativeCanary"]
    if len(canaries) != 1:
        raise PolicyError(
            f"expected exactly one SpeculativeCanary document, found {len(canaries)}", where=where
        )
    parse(canaries[0], where=where)  # fail early, naming the file and field
    return canaries[0], where


def scaled_policy(
    base: Mapping[str, Any],
    *,
    speed: float,
    namespace: str,
    source: Mapping[str, Any],
    where: str,
) -> SpeculativeCanary:
    """The policy the demo creates: its durations divided by `speed`, the sandbox's source,
    enforce mode, in `namespace`."""
    canary = parse(dict(base), where=where)
    obj = dump(canary)
    obj["metadata"] = {
        "name": canary.metadata.name,
        "namespace": namespace,
        "labels": dict(canary.metadata.labels),
    }
    spec = obj["spec"]
    for path in _SCALED_SECONDS:
        node = spec
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if path[-1] in node:
            node[path[-1]] = float(node[path[-1]]) / speed
    spec["source"] = dict(source)
    spec["mode"] = "enforce"
    return parse(obj, where=f"{where} (scaled for the demo)")


def check_fit(
    spec: SpeculativeCanarySpec, scenario: Any, *, scenario_where: str, policy_where: str
) -> None:
    """The policy must name Deployments and slices the scenario has, or nothing would run."""
    pools = {p.name: p for p in scenario.pools}
    names = {spec.target.name, spec.baseline.name} | {d.name for d in spec.canary_deployments()}
    missing = sorted(n for n in names if n not in pools)
    if missing:
        raise PolicyError(
            f"names Deployments {missing} that {scenario_where} has no pools for "
            f"(pools: {sorted(pools)}); give a matching --policy or --scenario",
            where=policy_where,
        )
    unknown = sorted(s.name for s in spec.slices if s.name not in scenario.slices)
    if unknown:
        raise PolicyError(
            f"slices {unknown} are not in {scenario_where} (slices: {sorted(scenario.slices)})",
            where=policy_where,
        )
    for d in spec.canary_deployments():
        if pools[d.name].role != "canary":
            raise ScenarioError(
                f"{scenario_where}: pool {d.name} is flipped by the policy but has role "
                f"{pools[d.name].role}"
            )


def fleet_scenario(scenario: Any) -> Any:
    """The scenario without its pool changes: in the demo the kubelet runs the pods, so pool
    changes go through the API instead (see `feed.ClusterFeed.pool_events`)."""
    timeline = [ev.model_copy(update={"pools": {}, "restart": []}) for ev in scenario.timeline]
    return scenario.model_copy(update={"timeline": timeline})


def deployment_objects(scenario: Any, namespace: str) -> list[dict[str, Any]]:
    """One Deployment per scenario pool. Canaries use Recreate: a GPU canary has no room to
    surge, and the old pod's readiness then never stands in for the new one's."""
    from alphagate_lab.sim import spec_args

    out = []
    for pool in scenario.pools:
        args = [
            "--model",
            scenario.model_name,
            "--port",
            str(MODEL_PORT),
            *pool.extra_args,
            *spec_args(pool.speculative_config),
        ]
        labels = {"app.kubernetes.io/name": "vllm", "role": pool.role, "slice": pool.slice}
        dep = DeploymentTemplate(
            pool.name, namespace, args=args, replicas=pool.replicas, labels=labels
        ).build()
        dep["spec"]["strategy"] = (
            {"type": "Recreate"}
            if pool.role == "canary"
            else {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        )
        out.append(dep)
    return out


def import_controller() -> None:
    """Load the controller's modules and the API classes it builds (their import is slow)."""
    with contextlib.suppress(ImportError, AttributeError):
        from kubernetes import client

        import alphagate.shell.controller  # noqa: F401

        for name in ("AppsV1Api", "CoreV1Api", "CustomObjectsApi", "CoordinationV1Api"):
            getattr(client, name)


def prometheus_binary() -> str | None:
    """$ALPHAGATE_PROMETHEUS, `prometheus` on PATH, or Debian's /usr/bin/prometheus."""
    from alphagate_lab.testing import prometheus as prom

    found = prom.find_binary()
    if found is None and os.access(DEBIAN_PROMETHEUS, os.X_OK):
        found = DEBIAN_PROMETHEUS
    return found


def free_port() -> int:
    from alphagate_lab.testing.prometheus import free_port

    return free_port()
