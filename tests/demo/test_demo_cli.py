"""`alphagate demo` inputs and parts that need no long run: package data, the scaled policy,
the Deployments, clear errors for bad input, and a short real run that writes a report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from alphagate.config import parse
from alphagate_lab.commands import demo as demo_command
from alphagate_lab.sandbox import demo as sandbox_demo
from alphagate_lab.sim import parse_scenario

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    demo_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `demo` a subcommand."""

    return app


def test_the_default_scenario_and_policy_ship_as_package_data() -> None:
    scenario = parse_scenario(sandbox_demo.data_text(sandbox_demo.DEFAULT_SCENARIO))
    policy, _ = sandbox_demo.load_policy(None)
    spec = parse(policy).spec
    pools = {p.name for p in scenario.pools}
    assert {d.name for d in spec.canary_deployments()} == {"chat-canary", "code-canary"}
    assert {d.name for d in spec.canary_deployments()} <= pools
    assert {s.name for s in spec.slices} == set(scenario.slices) == {"chat", "code"}
    assert spec.aggregation.value == "combined" and spec.mode.value == "enforce"
    # The canaries start off: the controller turns speculation on.
    assert all(p.speculative_config is None for p in scenario.pools)


def test_scaled_policy_compresses_every_duration_and_sets_the_source() -> None:
    policy, where = sandbox_demo.load_policy(None)
    base = parse(policy).spec.timing
    source = {"kind": "prometheus", "prometheus": {}}
    canary = sandbox_demo.scaled_policy(
        policy, speed=4, namespace="ns1", source=source, where=where
    )
    t = canary.spec.timing
    assert t.interval_seconds == base.interval_seconds / 4
    assert t.window_seconds == base.window_seconds / 4
    assert t.warmup_seconds == base.warmup_seconds / 4
    assert t.min_dwell_seconds == base.min_dwell_seconds / 4
    assert t.cooldown.initial_seconds == base.cooldown.initial_seconds / 4
    assert t.cooldown.factor == base.cooldown.factor
    assert canary.metadata.namespace == "ns1"
    assert canary.spec.source.prometheus is not None
    assert canary.spec.source.prometheus.endpoint == "default"  # the URL is the controller's


def test_deployments_carry_slice_and_role_labels_and_canaries_recreate() -> None:
    scenario = parse_scenario(sandbox_demo.data_text(sandbox_demo.DEFAULT_SCENARIO))
    deps = {d["metadata"]["name"]: d for d in sandbox_demo.deployment_objects(scenario, "demo")}
    assert set(deps) == {"chat-baseline", "chat-canary", "code-baseline", "code-canary"}
    canary = deps["chat-canary"]
    labels = canary["spec"]["template"]["metadata"]["labels"]
    assert labels["role"] == "canary" and labels["slice"] == "chat"
    assert canary["spec"]["strategy"]["type"] == "Recreate"
    assert "--speculative-config" not in canary["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deps["chat-baseline"]["spec"]["replicas"] == 2


def test_a_missing_scenario_file_is_a_clear_error(app: typer.Typer, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["demo", "--scenario", str(missing), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert str(missing) in result.output and "cannot read" in result.output


def test_a_policy_that_names_other_deployments_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    policy, _ = sandbox_demo.load_policy(None)
    policy["spec"]["slices"][1]["deployment"]["name"] = "llama-code-canary"
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    result = runner.invoke(app, ["demo", "--policy", str(path), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "llama-code-canary" in result.output and str(path) in result.output


def test_bad_options_are_usage_errors(app: typer.Typer, tmp_path: Path) -> None:
    assert runner.invoke(app, ["demo", "--source", "carrier-pigeon"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--duration", "soon"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--speed", "0"]).exit_code == 2


def test_a_short_run_enables_speculation_and_writes_the_report(
    app: typer.Typer, tmp_path: Path
) -> None:
    """40 scenario seconds at 8x with pod scraping: the first decision and the report."""
    out = tmp_path / "report"
    result = runner.invoke(
        app,
        ["demo", "--duration", "40s", "--speed", "8", "--source", "scrape", "--no-live",
         "--json", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["source"] == "podScrape"
    first = summary["transitions"][0]
    assert first["transition"] == "Off -> Probing" and first["action"] == "enable"
    assert (out / "report.md").read_text().startswith("# alphagate demo")
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "controller.log").stat().st_size > 0
    lines = [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines()]
    assert len(lines) == summary["evaluations"] > 5
    # The script-friendly lines went to stderr, one per decision.
    assert result.stderr.count("t=") >= summary["evaluations"]
