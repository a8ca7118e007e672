"""Prometheus rules: promtool checks and unit tests, the PrometheusRule kept equal to the plain
rule files, every alert labelled, annotated and tested, every metric name real."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import ship_support as ship
import yaml


def _rules() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in ship.RULES:
        for group in ship.yaml_load(path.read_text())["groups"]:
            out.extend((path, rule) for rule in group["rules"])
    return out


def _alerts() -> list[dict[str, Any]]:
    return [r for _, r in _rules() if "alert" in r]


@pytest.mark.prometheus
@pytest.mark.parametrize("path", ship.RULES, ids=lambda p: p.name)
def test_promtool_check_rules(promtool: str, path: Path) -> None:
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.prometheus
@pytest.mark.parametrize("path", ship.ALERT_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(promtool: str, path: Path) -> None:
    proc = subprocess.run(
        [promtool, "test", "rules", path.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.prometheus
def test_promtool_check_rules_fails_on_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The check above is not vacuous."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "x:y", "expr": "sum(("}]}]})
    )
    proc = subprocess.run([promtool, "check", "rules", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0


def _builder() -> Any:
    path = ship.DEPLOY / "monitoring" / "build-prometheusrule.py"
    spec = importlib.util.spec_from_file_location("alphagate_build_prometheusrule", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prometheusrule_equals_the_plain_rule_files() -> None:
    """deploy/monitoring/prometheusrule.yaml is generated; rerun the script after an edit."""
    committed = (ship.DEPLOY / "monitoring" / "prometheusrule.yaml").read_text()
    builder = _builder()
    assert ship.yaml_load(committed) == builder.resource(), (
        "prometheusrule.yaml drifted from rules/*.yaml: "
        "run python deploy/monitoring/build-prometheusrule.py"
    )
    assert committed == builder.render()


def test_every_alert_has_severity_summary_and_description() -> None:
    alerts = _alerts()
    assert len(alerts) >= 7
    for alert in alerts:
        assert alert["labels"]["severity"] in ("info", "warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"], alert["alert"]
        assert alert["annotations"]["description"], alert["alert"]


def _anchors() -> set[str]:
    """GitHub-style anchors of docs/runbooks.md's second-level headings."""
    text = (ship.ROOT / "docs" / "runbooks.md").read_text()
    return {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", text, flags=re.M)
    }


def test_every_alert_has_a_runbook_section() -> None:
    """runbook_url points at docs/runbooks.md#<alert> (the settings component swaps the
    prefix), and that section exists; every section belongs to an alert."""
    anchors = _anchors()
    names = set()
    for alert in [*_alerts(), *ship.grafana_alert_rules()]:
        name = alert.get("alert") or alert["title"]
        names.add(name.lower())
        url = alert["annotations"]["runbook_url"]
        assert url == f"docs/runbooks.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/runbooks.md has no section ## {name}"
    assert anchors == names


def test_runbook_base_comes_from_the_settings(tmp_path: Path) -> None:
    objs = ship.kustomize("deploy/monitoring")
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    urls = [
        r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert urls and all(u.startswith("docs/runbooks.md#") for u in urls)
    settings = ship.yaml_load((ship.DEPLOY / "settings" / "settings.yaml").read_text())
    assert settings["spec"]["runbookBaseURL"] == "docs/runbooks.md"


def test_the_issue_s_alerts_exist() -> None:
    names = {a["alert"] for a in _alerts()}
    assert {
        "AlphagateAlphaBelowGate",  # alpha below the gate, sustained
        "AlphagateP99LatencyRegression",  # P99 ITL regression canary vs baseline
        "AlphagateRollback",  # a rollback happened
        "AlphagateFlapping",  # too many flips per hour
        "AlphagateSourceFailing",  # the controller's source failing
        "AlphagateControllerDown",  # the controller down
        "AlphagateEvaluationStale",  # evaluation stale
        "AlphagatePatchFailing",  # failed patches
        "AlphagateForbidden",  # permission errors
        "AlphagateSpecInvalid",  # invalid specs
        "AlphagateLeaderElection",  # one leader per install
    } <= names


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in ship.ALERT_TESTS:
        for test in ship.yaml_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fired == set(), "alerts never shown firing"
    assert names - silent == set(), "alerts never shown silent"


def test_every_recording_rule_is_used_or_unit_tested() -> None:
    """A recording rule nobody reads is dead weight: it must feed an alert, a dashboard or a
    promtool expression test."""
    used: set[str] = set()
    for rule in _alerts():
        used |= ship.metric_names(rule["expr"])
    for _, rule in _rules():
        if "record" in rule:
            used |= ship.metric_names(rule["expr"])
    for path in ship.ALERT_TESTS:
        for test in ship.yaml_load(path.read_text())["tests"]:
            for case in test.get("promql_expr_test", []):
                used |= ship.metric_names(case["expr"])
    for path in sorted(ship.DASHBOARDS.glob("*.json")):
        text = path.read_text()
        used |= {name for name in ship.recorded_names() if name in text}
    assert ship.recorded_names() - used == set()


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r[1].get("alert") or r[1].get("record"))
def test_rule_metric_names_exist(rule: tuple[Path, dict[str, Any]]) -> None:
    _, body = rule
    unknown = ship.metric_names(body["expr"]) - ship.known_names()
    assert not unknown, f"{body.get('alert') or body.get('record')}: unknown metrics {unknown}"
