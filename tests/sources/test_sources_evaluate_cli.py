"""`alphagate evaluate`: one evaluation against simulated pods, a dead Prometheus, bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from evaluate_support import POLICY, chat_scenario, scrape_target_args
from typer.testing import CliRunner

from alphagate import cli
from alphagate.commands.evaluate import load_policy
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer

runner = CliRunner()
app = cli.build("evaluate")  # as `alphagate evaluate` builds it: the one command's module alone


def scenario(alpha: float) -> Scenario:
    # Alike requests of one length: two pods over one minute must agree on alpha for this test
    # of the command (realistic spread is the simulator's own test).
    chat = {"alpha": alpha, "output_tokens": 64, "output_sigma": 0, "request_spread": 1e4}
    return chat_scenario("evaluate-cli", seed=5, rate=30, chat=chat)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def low_alpha_fleet() -> Iterator[SimServer]:
    fleet = Fleet(scenario(0.3))
    fleet.advance_to(60.0)  # a minute of traffic already counted when we scrape
    with SimServer(fleet) as sim:
        yield sim


def test_evaluate_scrape_targets_json(policy: Path, low_alpha_fleet: SimServer) -> None:
    result = runner.invoke(
        app, ["evaluate", "--policy", str(policy), *scrape_target_args(low_alpha_fleet), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["acted"] is False and data["assumed_state"] == "On"
    assert data["policy"] == {"name": "chat", "namespace": "llm"}
    canary = next(p for p in data["pools"] if p["role"] == "canary")
    baseline = next(p for p in data["pools"] if p["role"] == "baseline")
    assert canary["pods"] == 2 and canary["batches"] == 2 and canary["error"] is None
    assert canary["alpha"] == pytest.approx(0.3, abs=0.05)
    assert baseline["batches"] == 0 and baseline["pods"] == 1  # speculation off: no error
    (acc,) = [c for c in data["checks"] if c["check"] == "acceptance"]
    assert acc["verdict"] == "Fail"  # upper bound far below disableBelow 0.55
    assert data["verdict"] == "Fail"
    # A minute of counters is not a whole window: a look, which no rollback counts.
    assert data["action"] == "hold" and "look Fail" in data["reason"]
    assert "not a whole" in data["reason"] and "fail streak 0/2" in data["reason"]


def test_evaluate_text_says_it_never_acts(policy: Path, low_alpha_fleet: SimServer) -> None:
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--policy",
            str(policy),
            *scrape_target_args(low_alpha_fleet),
            "--state",
            "On",
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "counters since pod start" in out and "slice chat" in out
    assert "canary   pods 2" in out and "no spec-decode series" in out
    assert "acceptance" in out and "Fail" in out
    assert "nothing was patched" in out


def test_evaluate_reports_the_draft_length_and_outputs(
    policy: Path, low_alpha_fleet: SimServer
) -> None:
    result = runner.invoke(
        app, ["evaluate", "--policy", str(policy), *scrape_target_args(low_alpha_fleet), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    draft = data["insights"]["draftLength"]
    k = load_policy(policy, None).spec.k
    assert draft["configuredK"] == k and len(draft["positionRates"]) == k
    assert draft["advice"] in {"keep", "shorten", "nonePays", "longerMayPay", "insufficient"}
    assert 1 <= draft["recommendedK"] <= k
    # vllm:request_generation_tokens, read live: every request of this scenario has 64 tokens
    outputs = data["insights"]["outputs"]
    assert outputs["finding"] == "clear" and outputs["meanOutputTokens"] == pytest.approx(64.0)
    text = runner.invoke(
        app,
        [
            "evaluate",
            "--policy",
            str(policy),
            *scrape_target_args(low_alpha_fleet),
            "--state",
            "On",
        ],
    )
    assert f"draft length K={k}:" in text.output


def one_canary_pod(alpha: float) -> Scenario:
    """Realistic traffic (each request its own acceptance, long-tailed outputs) on one
    canary pod: its counters are one batch, however many drafts they hold."""
    raw = scenario(alpha).model_dump()
    raw["slices"]["chat"] = {"alpha": alpha, "output_tokens": 256}
    raw["pools"][0]["replicas"] = 1
    return Scenario.model_validate(raw)


@pytest.mark.parametrize("sample_seconds", [0, 1])
def test_one_shot_of_one_canary_pod_is_inconclusive_with_a_typed_cause(
    policy: Path, sample_seconds: int
) -> None:
    # Since pod start (one snapshot) or over a live sample (two): one pod is one batch, so
    # no interval is honest; the check says so in its evidence, never a tight interval.
    fleet = Fleet(one_canary_pod(0.3))
    fleet.advance_to(120.0)
    with SimServer(fleet, speed=30.0) as sim:
        args = ["evaluate", "--policy", str(policy), *scrape_target_args(sim), "--json"]
        result = runner.invoke(app, [*args, "--scrape-seconds", str(sample_seconds)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    canary = next(p for p in data["pools"] if p["role"] == "canary")
    assert canary["pods"] == 1 and canary["batches"] == 1
    (acc,) = [c for c in data["checks"] if c["check"] == "acceptance"]
    assert acc["verdict"] == "Inconclusive"
    evidence = acc["evidence"]
    assert evidence["undecided"] == "few-batches" and evidence["method"] == "insufficient-batches"
    assert (evidence["lower"], evidence["upper"]) == (0.0, 1.0)
    assert evidence["drafts"] >= 50  # plenty of drafts: the cause is the batches, not the count
    assert data["action"] == "hold"
    # and what would make it judgeable: one sample of one pod is one block, so a window of two
    # samples, or a second canary pod
    assert evidence["unjudgeable"] == "window-too-short"
    assert evidence["needed_window_seconds"] >= 2 * evidence["needed_block_seconds"] > 0
    assert evidence["needed_pods"] == 2


def test_evaluate_against_dead_prometheus_is_an_error_verdict(policy: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = runner.invoke(
        app,
        ["evaluate", "--policy", str(policy), "--prometheus", f"http://127.0.0.1:{port}", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source_error"].startswith("unreachable:")
    assert data["verdict"] == "Error" and data["action"] == "hold"
    assert data["source"] == f"prometheus http://127.0.0.1:{port}"


def test_bad_scrape_target_is_a_usage_error(policy: Path) -> None:
    result = runner.invoke(app, ["evaluate", "--policy", str(policy), "--scrape-target", "chat=x"])
    assert result.exit_code == 2
    assert "slice:role=http" in result.output
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--policy",
            str(policy),
            "--scrape-target",
            "code:canary=http://127.0.0.1:1/m",
        ],
    )
    assert result.exit_code == 2 and "not in the policy" in result.output


def test_invalid_policy_exits_1_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICY.replace("num_speculative_tokens: 4", "num_speculative_tokens: 0"))
    proc = subprocess.run(
        [sys.executable, "-m", "alphagate", "evaluate", "--policy", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert str(bad) in proc.stderr and "speculativeConfig" in proc.stderr


def test_several_resources_need_a_name(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text(
        POLICY + "---\n" + POLICY.replace("name: chat, namespace", "name: other, namespace")
    )
    result = runner.invoke(
        app, ["evaluate", "--policy", str(two), "--prometheus", "http://127.0.0.1:1"]
    )
    assert result.exit_code != 0
    assert "--name" in str(result.exception)


def test_evaluate_prints_the_latency_guards_effective_margin(
    policy: Path, low_alpha_fleet: SimServer
) -> None:
    # The simulated pods export vLLM's default buckets: the P99 guard's effective margin (the
    # regression it is sure to see) is wider than the policy's +10%, and said so.
    args = ["evaluate", "--policy", str(policy), *scrape_target_args(low_alpha_fleet)]
    data = json.loads(runner.invoke(app, [*args, "--json"]).output)
    (lat,) = [c for c in data["checks"] if c["kind"] == "latency"]
    ev = lat["evidence"]
    assert ev["tail_within"] == "unresolvable" and ev["resolvable"] == "false"
    # baseline P99 in (10, 25] ms: a Fail needs the canary above 50 ms, +400% of 10 ms
    assert (ev["reference_bucket_lo"], ev["reference_bucket_hi"]) == (0.01, 0.025)
    assert ev["fail_edge"] == 0.05 and ev["effective_margin"] == pytest.approx(4.0)
    text = runner.invoke(app, [*args, "--state", "On"]).output
    assert "P99 fails above 50 ms, effective margin +400%" in text
