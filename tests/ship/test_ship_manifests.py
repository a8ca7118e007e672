"""deploy/: every manifest validates (kubernetes-validate --strict, the CRD's schema for our own
resources), every kustomization builds, and the pieces agree with each other."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import ship_support as ship
import yaml

from alphagate import config

K8S_VERSIONS = ("1.29.0", "1.37.0")  # oldest and newest Kubernetes we claim to support

CONTROLLER = {"app.kubernetes.io/name": "alphagate", "app.kubernetes.io/component": "controller"}

# The fields of the prometheus-operator objects we use (no schema ships offline): a typo in
# one of them is silently ignored by the operator, so it is checked here.
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        k: {}
        for k in (
            "sourceLabels",
            "separator",
            "targetLabel",
            "regex",
            "replacement",
            "action",
            "modulus",
        )
    },
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "honorLabels": {"type": "boolean"},
        "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": {"type": "object"}, "matchExpressions": {"type": "array"}},
}
_META = {"type": "object", "required": ["name"]}
MONITORING_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": {"type": "object"},
                    "jobLabel": {"type": "string"},
                    "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                },
            },
        },
    },
    "PodMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "podMetricsEndpoints"],
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array"}},
                    },
                    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                    "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {"groups": {"type": "array", "minItems": 1}},
            },
        },
    },
}


def _validate(obj: dict[str, Any], where: str) -> None:
    """Validate one object by what it is: ours against the CRD, the operator's against the
    fields above, everything else with kubernetes-validate in strict mode."""
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    if group == config.GROUP:
        try:
            ship.validate_cr(obj)
        except jsonschema.ValidationError as exc:
            pytest.fail(
                f"{where}: {obj['kind']} does not match the CRD: {exc.message} "
                f"at {'.'.join(map(str, exc.absolute_path))}"
            )
        config.parse(obj, where=where)
        return
    if group == "monitoring.coreos.com":
        jsonschema.validate(obj, MONITORING_SCHEMAS[obj["kind"]])
        return
    for version in K8S_VERSIONS:
        try:
            ship.k8s_validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{where}: {obj['kind']}/{obj['metadata'].get('name')} is invalid for "
                f"Kubernetes {version}: {exc}"
            )


@pytest.mark.parametrize("path", ship.manifest_files(), ids=lambda p: str(p.relative_to(ship.ROOT)))
def test_every_manifest_file_validates_strictly(path: Path) -> None:
    docs = ship.load_all(path)
    assert docs, f"{path} holds no object"
    for i, obj in enumerate(docs):
        _validate(obj, f"{path.relative_to(ship.ROOT)}#{i}")


@pytest.mark.parametrize("directory", sorted(ship.KUSTOMIZATIONS))
def test_every_kustomization_builds_and_validates(directory: str) -> None:
    objs = ship.kustomize(directory)
    assert objs
    for obj in objs:
        _validate(obj, f"kubectl kustomize {directory}: {obj['kind']}/{obj['metadata']['name']}")
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), f"duplicate objects in {directory}"


def test_strict_validation_rejects_what_it_should() -> None:
    """The checks above are not vacuous: an unknown field, a wrong type and an out-of-range
    alpha each fail."""
    (dep,) = [d for d in ship.load_all(ship.DEPLOY / "base" / "deployment.yaml")]
    bad = json.loads(json.dumps(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["bogusField"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        ship.k8s_validate(bad, "1.37.0", strict=True)
    bad = json.loads(json.dumps(dep))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        ship.k8s_validate(bad, "1.37.0", strict=True)
    (cr,) = ship.load_all(ship.DEPLOY / "examples" / "speculativecanary.yaml")
    cr["metadata"]["namespace"] = "llm"
    bad = json.loads(json.dumps(cr))
    bad["spec"]["acceptance"]["disableBelow"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        ship.validate_cr(bad)
    bad = json.loads(json.dumps(cr))
    bad["spec"]["acceptance"]["disableBelw"] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        ship.validate_cr(bad)


def _policy_files() -> list[Path]:
    return [
        *sorted((ship.ROOT / "policies").glob("*.yaml")),
        ship.DEPLOY / "examples" / "speculativecanary.yaml",
    ]


@pytest.mark.parametrize("path", _policy_files(), ids=lambda p: str(p.relative_to(ship.ROOT)))
def test_speculativecanary_examples_match_the_crd_schema(path: Path) -> None:
    for obj in ship.load_all(path):
        if obj.get("kind") != config.KIND:
            continue
        ship.validate_cr(obj)
        config.parse(obj, where=str(path))


# ---------------------------------------------------------------- the controller Deployment


def _controller(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [
        o
        for o in objs
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "alphagate-controller"
    ]
    return dep


def test_controller_deployment_is_hardened() -> None:
    dep = _controller(ship.kustomize("deploy"))
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == "alphagate"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "metrics" in ports
    args = c["args"]
    assert args[0] == "run"
    assert "--leader-elect" in args
    # a read-only root needs a writable /tmp
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("directory", ["deploy", "deploy/overlays/prod"])
def test_selectors_find_the_controller_pods(directory: str) -> None:
    objs = ship.kustomize(directory)
    dep = _controller(objs)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(dep["spec"]["selector"]["matchLabels"], pod_labels)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    svc = by_kind[("Service", "alphagate-metrics")]
    assert _labels_match(svc["spec"]["selector"], pod_labels)
    pdb = by_kind[("PodDisruptionBudget", "alphagate-controller")]
    assert _labels_match(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert pdb["spec"]["minAvailable"] < dep["spec"]["replicas"]
    netpol = by_kind[("NetworkPolicy", "alphagate-controller")]
    assert _labels_match(netpol["spec"]["podSelector"]["matchLabels"], pod_labels)
    if ("ServiceMonitor", "alphagate-controller") in by_kind:
        sm = by_kind[("ServiceMonitor", "alphagate-controller")]
        assert _labels_match(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
        assert {e["port"] for e in sm["spec"]["endpoints"]} <= {
            p["name"] for p in svc["spec"]["ports"]
        }


def test_rbac_binds_the_controller_service_account() -> None:
    for directory, binding_kind in (
        ("deploy", "RoleBinding"),
        ("deploy/overlays/cluster-wide", "ClusterRoleBinding"),
    ):
        objs = ship.kustomize(directory)
        (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
        bindings = [
            o
            for o in objs
            if o["kind"] == binding_kind and o["metadata"]["name"] == "alphagate-controller"
        ]
        assert len(bindings) == 1, directory
        (subject,) = bindings[0]["subjects"]
        assert (subject["name"], subject["namespace"]) == (
            sa["metadata"]["name"],
            sa["metadata"]["namespace"],
        )
        role_kind = bindings[0]["roleRef"]["kind"]
        assert [
            o
            for o in objs
            if o["kind"] == role_kind and o["metadata"]["name"] == bindings[0]["roleRef"]["name"]
        ], directory


def test_namespaced_and_cluster_rules_are_the_same() -> None:
    (role,) = ship.load_all(ship.DEPLOY / "rbac" / "namespaced" / "role.yaml")
    (cluster,) = ship.load_all(ship.DEPLOY / "rbac" / "cluster" / "clusterrole.yaml")
    assert role["rules"] == cluster["rules"]


def test_cluster_wide_overlay_watches_all_namespaces() -> None:
    args = _controller(ship.kustomize("deploy/overlays/cluster-wide"))["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert not [a for a in args if a.startswith(("--namespace", "-n"))]


def test_dev_overlay_has_one_replica_and_no_pdb() -> None:
    objs = ship.kustomize("deploy/overlays/dev")
    assert _controller(objs)["spec"]["replicas"] == 1
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]


# ---------------------------------------------------------------- the example pair


def test_example_speculativecanary_fits_its_deployments() -> None:
    objs = ship.kustomize("deploy/examples")
    deps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    (cr,) = [o for o in objs if o["kind"] == config.KIND]
    canary = config.parse(cr)
    target = deps[canary.spec.target.name]
    baseline = deps[canary.spec.baseline.name]

    def container(dep: dict[str, Any], name: str) -> dict[str, Any]:
        (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name]
        return c

    flags = [
        a
        for a in container(target, canary.spec.target.container)["args"]
        if a.startswith("--speculative-config")
    ]
    assert len(flags) == 1
    assert json.loads(flags[0].split("=", 1)[1]) == canary.spec.speculative_config
    assert canary.spec.speculative_config["method"] == "eagle3"
    assert not [
        a for a in container(baseline, canary.spec.baseline.container)["args"] if "speculative" in a
    ]
    for sl in canary.spec.slices:
        assert _labels_match(
            sl.canary.match_labels, target["spec"]["template"]["metadata"]["labels"]
        )
        assert _labels_match(
            sl.baseline.match_labels, baseline["spec"]["template"]["metadata"]["labels"]
        )
        assert not _labels_match(
            sl.canary.match_labels, baseline["spec"]["template"]["metadata"]["labels"]
        )
    # what the PodMonitor scrapes and the recording rules group by
    (pm,) = ship.load_all(ship.DEPLOY / "monitoring" / "podmonitor-vllm.yaml")
    for dep in (target, baseline):
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert _labels_match(pm["spec"]["selector"]["matchLabels"], labels)
        assert {"slice", "role"} <= set(labels)
        ports = {
            p["name"]
            for c in dep["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports


@pytest.mark.parametrize("directory", sorted(ship.KUSTOMIZATIONS))
def test_controller_args_are_accepted_by_alphagate_run(directory: str) -> None:
    """The Deployment's args go through the real `alphagate` command line parser (parsed,
    not run): a renamed or removed flag fails here, not in a crash-looping pod."""
    deps = [
        o
        for o in ship.kustomize(directory)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "alphagate-controller"
    ]
    for dep in deps:
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        for arg in args:
            assert shlex.split(arg) == [arg]  # one word each: no shell in between
        ship.parse_cli(args)


def test_no_machine_paths_in_deploy() -> None:
    # paths of the machine the tests run on: its home and this checkout
    local = (str(Path.home()) + "/", str(ship.DEPLOY.parent) + "/")
    for path in ship.DEPLOY.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not any(p in text for p in local), path
    assert yaml  # imported for load_all's documents


def test_cli_parse_check_rejects_an_unknown_flag() -> None:
    with pytest.raises(Exception, match="--no-such-flag"):
        ship.parse_cli(["run", "--no-such-flag"])


# ---------------------------------------------------------------- deploy/README.md


def _readme_commands() -> list[str]:
    text = (ship.DEPLOY / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    lines = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def test_readme_kustomize_paths_exist_and_build() -> None:
    paths = set()
    for line in _readme_commands():
        m = re.search(r"kubectl (?:apply|delete)(?: --\S+)* -k (\S+)", line)
        if m and not m.group(1).startswith("my-"):
            paths.add(m.group(1).rstrip("/"))
    assert {
        "deploy",
        "deploy/monitoring",
        "deploy/examples",
        "dashboards",
        "deploy/overlays/prod",
    } <= paths
    for path in paths:
        assert ship.kustomize(path), path


def test_readme_alphagate_commands_parse() -> None:
    commands = [line.split()[1:] for line in _readme_commands() if line.startswith("alphagate ")]
    assert commands
    for args in commands:
        ship.parse_cli(args)
