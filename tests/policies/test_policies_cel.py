"""Admission-time validation: the CRD's CEL rules (`x-kubernetes-validations`), evaluated with
cel-python on the documents `policy check` is tested with, after the schema's defaults are
applied as the API server does. Good documents pass every rule; each cross-field break fails a
rule at the field `policy check` names; every rule is exercised; every field is described."""

from __future__ import annotations

from functools import cache
from typing import Any

import celpy
import pytest
import yaml
from policy_cases import CASES, POLICIES, ROOT, Case

from alphagate import config
from alphagate.kube.crd import VALIDATIONS, apply_defaults, build_crd, node_at


@cache
def _schema() -> dict[str, Any]:
    """The CRD's schema, built once (about 0.1 s from the models each time; every `failures`
    call read it anew): nothing here changes it (`apply_defaults` copies what it fills in)."""
    out: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _at(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def failures(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(schema path + fieldPath, message) of every rule that rejects `doc`, as admission would
    evaluate them: on each node present, after defaulting."""
    defaulted = apply_defaults(_schema(), doc)
    out = []
    for path, rules in VALIDATIONS.items():
        node = _at(defaulted, path)
        if node is None:  # rules run only on nodes that exist
            continue
        for rule in rules:
            result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(node)})
            assert isinstance(result, celpy.celtypes.BoolType), (rule, result)
            if not result:
                out.append((path + rule.get("fieldPath", ""), rule["message"]))
    return out


def _good_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = [(p.name, yaml.safe_load(p.read_text())) for p in POLICIES]
    for path in (ROOT / "deploy" / "examples").glob("*.yaml"):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d.get("kind") == config.KIND:
                docs.append((path.name, d))
    return docs


@pytest.mark.parametrize(("name", "doc"), _good_documents(), ids=lambda x: str(x)[:30])
def test_good_documents_pass_every_rule(name: str, doc: dict[str, Any]) -> None:
    config.parse(doc)  # the models accept it too
    assert failures(doc) == [], name


CROSS = [c for c in CASES if c.cross_field]


@pytest.mark.parametrize("case", CROSS, ids=lambda c: c.id)
def test_cross_field_breaks_fail_a_rule_at_the_named_field(case: Case) -> None:
    doc = yaml.safe_load(case.text())
    with pytest.raises(Exception, match=r"."):
        config.parse(doc)
    failed = failures(doc)
    assert failed, f"admission would accept {case.id}"
    assert any(where.startswith(case.field) for where, _ in failed), failed


def test_every_rule_is_exercised_by_a_case() -> None:
    hit = {where for c in CROSS for where, _ in failures(yaml.safe_load(c.text()))}
    declared = {path + r.get("fieldPath", "") for path, rules in VALIDATIONS.items() for r in rules}
    assert declared == hit


def test_rules_sit_in_the_crd_with_messages() -> None:
    schema = _schema()
    for path, rules in VALIDATIONS.items():
        node = node_at(schema, path)
        assert node["x-kubernetes-validations"] == rules
        for rule in rules:
            assert rule["message"] and rule["fieldPath"].startswith(".")
            field = rule["fieldPath"][1:]
            assert field in node["properties"], (path, field)
    # the CEL cost estimate needs bounded lists: slices are iterated twice (uniqueness)
    assert node_at(schema, "spec.slices")["maxItems"] <= 64


def test_defaults_are_applied_like_the_api_server() -> None:
    doc = yaml.safe_load((ROOT / "policies" / "dry-run-first.yaml").read_text())
    doc["spec"]["timing"].pop("cooldown", None)  # as a policy that leaves it out
    assert "aggregation" not in doc["spec"] and "cooldown" not in doc["spec"]["timing"]
    out = apply_defaults(_schema(), doc)
    assert out["spec"]["aggregation"] == "combined"  # scalar default filled
    assert out["spec"]["timing"]["maxFlipsPerHour"] == 4  # inside a present object
    assert "cooldown" not in out["spec"]["timing"]  # objects have no default: rules skip them
    assert "promotion" not in out["spec"]


def test_every_field_has_a_description() -> None:
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for key, prop in (node.get("properties") or {}).items():
            if not prop.get("description"):
                missing.append(f"{path}.{key}")
            walk(prop, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(_schema(), "")
    assert missing == [], (
        "add Field(description=...) in config/ (spec) or kube/status/ (status) for: "
        + ", ".join(missing)
    )
