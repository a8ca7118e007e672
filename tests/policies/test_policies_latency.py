"""`policy check` warns where vLLM's default latency buckets cannot resolve the latency guard's
margin, naming the smallest regression the guard could show (exit status unchanged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alphagate.cli import app

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted(p for p in (ROOT / "policies").glob("*.yaml"))
CHAT = ROOT / "policies" / "general-chat-eagle3.yaml"
runner = CliRunner()


def _with(tmp_path: Path, **latency: Any) -> Path:
    doc = yaml.safe_load(CHAT.read_text())
    doc["spec"]["latency"] = {**doc["spec"].get("latency", {}), **latency}
    out = tmp_path / "p.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def _check(path: Path) -> tuple[int, dict[str, Any] | None, list[str]]:
    result = runner.invoke(app, ["policy", "check", str(path), "--json"])
    (doc,) = json.loads(result.stdout)
    return result.exit_code, doc["latency"], doc["warnings"]


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_shipped_policies_are_told_the_default_buckets_cannot_resolve_p99_10(path: Path) -> None:
    code, latency, warnings = _check(path)
    assert code == 0 and latency is not None and not latency["resolvable"]
    assert latency["least_margin"] == pytest.approx(1 / 3)  # 100 ms over 75 ms: +33%
    by_bucket = {(b["lo"], b["hi"]): b for b in latency["buckets"]}
    assert by_bucket[(0.025, 0.05)]["fail_edge"] == 0.075
    assert by_bucket[(0.025, 0.05)]["effective_margin"] == pytest.approx(2.0)
    (text,) = [w for w in warnings if w.startswith("spec.latency:")]
    assert "smallest P99 regression it could show is +33%" in text
    assert "--custom-histogram-buckets" in text and "confirmOn mean" in text


def test_a_margin_the_default_buckets_resolve_is_not_warned(tmp_path: Path) -> None:
    code, latency, warnings = _check(_with(tmp_path, maxRegressionRatio=0.5))
    assert code == 0 and latency is None
    assert not [w for w in warnings if w.startswith("spec.latency")]


def test_confirming_on_the_quantile_is_told_it_never_passes(tmp_path: Path) -> None:
    _, latency, warnings = _check(_with(tmp_path, confirmOn="meanAndQuantile"))
    assert latency is not None
    assert any("can never pass there" in w for w in warnings)


def test_an_absolute_limit_between_bounds_is_warned(tmp_path: Path) -> None:
    over = {"metric": "perStepAbsolute", "maxStepSeconds": 0.12}
    _, latency, warnings = _check(_with(tmp_path, **over))
    assert latency is not None and (latency["pass_edge"], latency["fail_edge"]) == (0.1, 0.15)
    assert any("0.12 s is not a bound" in w for w in warnings)
    _, latency, _ = _check(_with(tmp_path, metric="perStepAbsolute", maxStepSeconds=0.1))
    assert latency is None
