"""The plan's PromQL evaluated by the real `promtool test rules` over synthetic vLLM series:
the alpha, acceptance-length and P99-per-token queries give the numbers they claim to."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alphagate import vllm
from alphagate_lab.planning.queries import queries

pytestmark = pytest.mark.prometheus
LABELS = 'namespace="llm",app="m",slice="chat",track="canary"'


def _expect(expr: str, value: float) -> dict[str, object]:
    return {"expr": expr, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": value}]}


def test_plan_queries_evaluate_to_the_expected_values(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    q = queries("{" + LABELS + "}")
    other = 'namespace="llm",app="m",slice="code",track="canary"'  # must not leak in
    series = [
        (vllm.SPEC_ACCEPTED, LABELS, "0+60x10"),
        (vllm.SPEC_DRAFT_TOKENS, LABELS, "0+100x10"),
        (vllm.SPEC_DRAFTS, LABELS, "0+20x10"),
        (vllm.SPEC_ACCEPTED, other, "0+1x10"),
        (vllm.SPEC_DRAFT_TOKENS, other, "0+100x10"),
    ]
    bucket = vllm.TPOT + vllm.BUCKET
    for le, values in (("0.025", "0+0x10"), ("0.05", "0+10x10"), ("+Inf", "0+10x10")):
        series.append((bucket, f'{LABELS},le="{le}"', values))
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"{name}{{{labels}}}", "values": values}
                    for name, labels, values in series
                ],
                "promql_expr_test": [
                    _expect(q.alpha, 0.6),
                    _expect(q.acceptance_length, 4.0),
                    # all observations in (0.025, 0.05]: linear interpolation inside the bucket
                    _expect(q.p99_per_token, 0.025 + 0.025 * 0.99),
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "plan-queries-test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    proc = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
