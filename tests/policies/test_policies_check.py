"""`alphagate policy check|show` and the shipped policies/: every file valid, every break named."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_cases import CASES, Case
from typer.testing import CliRunner

from alphagate import config
from alphagate.cli import app

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))
CHAT = ROOT / "policies" / "general-chat-eagle3.yaml"
runner = CliRunner()


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _broken(tmp_path: Path, old: str, new: str, src: Path = CHAT) -> Path:
    text = src.read_text()
    assert old in text, f"{old!r} not in {src.name}"
    out = tmp_path / f"broken-{src.name}"
    out.write_text(text.replace(old, new, 1))
    return out


def test_the_expected_policies_ship() -> None:
    names = {p.stem for p in POLICIES}
    assert {"general-chat-eagle3", "code-slice", "mixed-fleet", "dry-run-first"} <= names


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_every_shipped_policy_passes(path: Path) -> None:
    result = _run("policy", "check", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok  ")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1
    res = config.parse(docs[0], where=path.name)
    assert res.metadata.name == path.stem  # each file is named after its resource
    assert path.read_text().lstrip().startswith("#")  # and explains itself


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_every_shipped_policy_backs_off_on_the_scale_of_a_day(path: Path) -> None:
    # docs/decisions.md ("Cooldowns that fit a day"): with speculation off only a probe sees
    # alpha recover, and each restarts every canary pod, so no shipped policy probes again
    # within 12 h of a rejection, and none waits more than a day (the config default is 15 min
    # to 4 h, for a canary that is cheap to restart).
    backoff = config.parse(yaml.safe_load(path.read_text())).spec.timing.cooldown
    assert backoff.initial_seconds >= 12 * 3600
    assert backoff.max_seconds <= 24 * 3600


def test_all_policies_together_do_not_collide() -> None:
    result = _run("policy", "check", *map(str, POLICIES))
    assert result.exit_code == 0, result.output
    assert f"{len(POLICIES)} valid, 0 invalid" in result.output


def test_policies_cover_the_cases() -> None:
    parsed = {p.stem: config.parse(yaml.safe_load(p.read_text())) for p in POLICIES}
    assert parsed["dry-run-first"].spec.mode is config.Mode.DRY_RUN
    mixed = parsed["mixed-fleet"].spec
    assert mixed.aggregation is config.Aggregation.COMBINED
    assert len(mixed.slices) == 2 and all(s.min_alpha is not None for s in mixed.slices)
    assert len(mixed.canary_deployments()) == 2
    kinds = {res.spec.source.kind for res in parsed.values()}
    assert kinds == {config.SourceKind.PROMETHEUS, config.SourceKind.POD_SCRAPE}
    for res in parsed.values():
        if res.spec.source.prometheus is not None:
            assert res.spec.source.prometheus.endpoint == "default"  # never a URL
        assert res.spec.latency.metric is config.LatencyMetric.PER_TOKEN


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_broken_copies_fail_naming_the_field(tmp_path: Path, case: Case) -> None:
    path = tmp_path / f"broken-{case.source.name}"
    path.write_text(case.text())
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    first = result.output.splitlines()[0]
    assert first.startswith(f"{path}: document 1: line ")
    assert f": {case.field}: " in first
    assert case.reason in first


def test_error_line_points_at_the_field(tmp_path: Path) -> None:
    path = _broken(tmp_path, "disableBelow: 0.55", "disableBelow: 1.55")
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "1.55" in t)
    result = _run("policy", "check", str(path))
    assert f"line {line}: spec.acceptance.disableBelow" in result.output


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _broken(tmp_path, "  mode: enforce", "  mode: [enforce")
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    assert re.search(rf"^{re.escape(str(path))}: line \d+: malformed YAML", result.output, re.M)
    assert "Traceback" not in result.output


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = _broken(tmp_path, "  mode: enforce\n", "  mode: enforce\n  mode: dryRun\n")
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    assert "duplicate key 'mode'" in result.output


def test_several_documents_in_one_file(tmp_path: Path) -> None:
    good = CHAT.read_text()
    other = good.replace("name: general-chat-eagle3", "name: chat-two").replace(
        "llama-3-1-8b-chat-canary", "llama-other-canary"
    )
    same_target = good.replace("name: general-chat-eagle3", "name: chat-three")
    bad = good.replace("name: general-chat-eagle3", "name: chat-four").replace(
        "disableBelow: 0.55", "disableBelow: 2"
    )
    path = tmp_path / "many.yaml"
    path.write_text("\n---\n".join([good, other, same_target, bad]) + "\n---\n")
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    assert result.stdout.count("ok  ") == 2
    # the third flips the same Deployment as the first: two canaries would fight over it
    assert re.search(
        rf"{re.escape(str(path))}: document 3: spec.target: .*already flipped by .*document 1",
        result.output,
    )
    assert f"{path}: document 4: line" in result.output
    data = json.loads(_run("policy", "check", "--json", str(path)).stdout)
    assert [d["ok"] for d in data] == [True, True, False, False]
    assert data[3]["errors"][0]["path"] == "spec.acceptance.disableBelow"
    assert data[3]["line"] is not None and data[3]["errors"][0]["line"] > data[3]["line"]


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text(CHAT.read_text())
    result = _run("policy", "check", str(CHAT), str(copy))
    assert result.exit_code == 1
    assert "llm/general-chat-eagle3 is already defined in" in result.output


@pytest.mark.parametrize(
    ("content", "needle"),
    [("", "no resources in this file"), ("- a\n- b\n", "expected a mapping")],
)
def test_empty_or_non_mapping(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(content)
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    assert needle in result.output


def test_missing_file(tmp_path: Path) -> None:
    result = _run("policy", "check", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 1
    assert "nope.yaml: cannot read" in result.output


def test_show_fills_in_defaults() -> None:
    result = _run("policy", "show", str(ROOT / "policies" / "dry-run-first.yaml"))
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    spec = shown["spec"]
    assert spec["mode"] == "dryRun"
    assert spec["aggregation"] == "combined"  # default
    assert spec["acceptance"]["confidence"] == 0.95  # default
    assert spec["timing"]["cooldown"]["factor"] == 2.0  # nested default
    assert spec["timing"]["windowSeconds"] == 900  # from the file
    assert config.parse(shown) == config.parse(yaml.safe_load(
        (ROOT / "policies" / "dry-run-first.yaml").read_text()))  # fmt: skip
    as_json = json.loads(_run("policy", "show", "--json", str(CHAT)).stdout)
    assert as_json["metadata"]["name"] == "general-chat-eagle3"


def test_show_refuses_an_invalid_file(tmp_path: Path) -> None:
    path = _broken(tmp_path, "disableBelow: 0.55", "disableBelow: 1.55")
    result = _run("policy", "show", str(path))
    assert result.exit_code == 1
    assert "spec.acceptance.disableBelow" in result.output


def test_metadata_typo_is_refused(tmp_path: Path) -> None:
    # config.ObjectMeta allows extra keys; without this check the resource lands in "default".
    path = _broken(tmp_path, "  namespace: llm", "  namepsace: llm")
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1
    assert re.search(
        r"document 1: line \d+: metadata.namepsace: not a Kubernetes ObjectMeta", result.output
    )
