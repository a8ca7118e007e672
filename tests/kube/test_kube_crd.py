"""The CRD: generated from the pydantic models, identical to deploy/, structural, and the
policies in policies/ validate against its schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from alphagate.config import parse
from alphagate.kube.crd import DEPLOY_PATH, build_crd, render_crd

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))


def schema() -> dict[str, Any]:
    s: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return s


def test_deploy_file_matches_the_models() -> None:
    on_disk = (ROOT / DEPLOY_PATH).read_text()
    assert on_disk == render_crd(), (
        f"{DEPLOY_PATH} drifted from the models: run `alphagate crd > {DEPLOY_PATH}`"
    )


def test_crd_is_a_valid_apiextensions_object() -> None:
    crd = yaml.safe_load((ROOT / DEPLOY_PATH).read_text())
    kubernetes_validate.validate(crd, "1.33.0", strict=True)
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["State"] == ".status.state"
    assert columns["Alpha"] == ".status.combinedAlpha"
    assert columns["P99 Ratio"] == ".status.p99Ratio"
    assert columns["Last Decision"] == ".status.lastDecision.summary"
    assert columns["Age"] == ".metadata.creationTimestamp"


def _walk(node: Any, path: str = "") -> list[str]:
    """Structural-schema rule violations (the subset the API server enforces)."""
    problems: list[str] = []
    if not isinstance(node, dict):
        return problems
    for key in ("$ref", "anyOf", "oneOf", "allOf", "const", "prefixItems", "$defs", "definitions"):
        if key in node:
            problems.append(f"{path}: {key}")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties false")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties")
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    for k, v in (node.get("properties") or {}).items():
        problems += _walk(v, f"{path}.{k}")
    if isinstance(node.get("items"), dict):
        problems += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}.*")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node and not isinstance(node[bound], bool):
            problems.append(f"{path}: {bound} must be boolean in OpenAPI v3.0")
    return problems


def test_schema_is_structural() -> None:
    assert _walk(schema()) == []


def test_schema_keeps_the_models_constraints() -> None:
    spec = schema()["properties"]["spec"]
    assert set(spec["required"]) >= {"target", "baseline", "speculativeConfig", "slices", "source"}
    gate = spec["properties"]["acceptance"]["properties"]
    assert {k: v for k, v in gate["disableBelow"].items() if k != "description"} == {
        "default": 0.55,
        "maximum": 1.0,
        "minimum": 0.0,
        "type": "number",
    }
    assert "upper confidence bound" in gate["disableBelow"]["description"]
    assert spec["properties"]["mode"]["enum"] == ["enforce", "dryRun"]
    assert spec["properties"]["speculativeConfig"]["x-kubernetes-preserve-unknown-fields"] is True
    status = schema()["properties"]["status"]["properties"]
    assert {"state", "conditions", "slices", "latency", "lastDecision", "history", "memory"} <= set(
        status
    )
    assert status["observedGeneration"]["type"] == "integer"


@pytest.mark.skipif(not POLICIES, reason="no policies/ yet")
@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_policies_validate_against_the_crd_schema(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    validator = jsonschema.Draft4Validator(schema())
    for doc in docs:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], f"{path.name}: {errors}"
        parse(doc, where=str(path))  # and pydantic agrees


def test_schema_rejects_what_pydantic_rejects() -> None:
    doc = yaml.safe_load(POLICIES[0].read_text()) if POLICIES else None
    if doc is None:
        pytest.skip("no policies/ yet")
    doc["spec"]["acceptance"]["disableBelow"] = 1.5
    doc["spec"]["mode"] = "yolo"
    errors = list(jsonschema.Draft4Validator(schema()).iter_errors(doc))
    paths = sorted(".".join(str(p) for p in e.absolute_path) for e in errors)
    assert paths == ["spec.acceptance.disableBelow", "spec.mode"]
