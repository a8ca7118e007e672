"""`alphagate plan`: the staged plan names the real vLLM metrics, and its manifest is valid."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alphagate import config, vllm
from alphagate.cli import app
from alphagate.core import resolution
from alphagate.errors import PolicyError
from alphagate_lab.planning.plan import PlanInput, build, slug
from alphagate_lab.planning.queries import queries
from alphagate_lab.planning.render import render
from alphagate_lab.planning.slices import SliceSpec

runner = CliRunner()
BASE = [
    "plan", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--slice", "chat:0.7:0.7",
    "--slice", "code:0.3:0.45", "--concurrency", "64", "--k", "5",
]  # fmt: skip


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_plan_markdown_has_the_stages_queries_and_manifest() -> None:
    result = _run(*BASE)
    assert result.exit_code == 0, result.output
    md = result.stdout
    for heading in (
        "Stage 1: measure the baseline",
        "Stage 2: enable the draft on a canary",
        "Stage 3: measure alpha",
        "Stage 4: gate at the threshold",
        "Stage 5: watch P99 latency per token, not per step",
        "When to stay off",
    ):
        assert heading in md
    names = [vllm.SPEC_ACCEPTED, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_DRAFTS, vllm.SPEC_PER_POS]
    names += [vllm.TPOT + vllm.BUCKET, vllm.ITL + vllm.BUCKET, vllm.GENERATION_TOKENS]
    for name in names:
        assert name in md
    assert (
        "alphagate policy check" in md and "alphagate whatif --mix chat=0.7:0.7,code=0.3:0.45" in md
    )
    # the combined alpha of the mix, and the domain without its own head flagged
    assert "0.62" in md
    assert re.search(r"own draft head \| \*\*yes\*\* \(below the gate 0.55: code\)", md)
    section = md.split("## The SpeculativeCanary", 1)[1]
    manifest = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])
    # no --draft-model: vLLM would refuse eagle3 without its head, and so does the policy
    with pytest.raises(PolicyError, match="without speculative model"):
        config.parse(manifest)
    assert "needs a draft" in md
    manifest["spec"]["speculativeConfig"]["model"] = "org/eagle3-head"
    res = config.parse(manifest)
    assert res.spec.mode is config.Mode.DRY_RUN
    assert [s.name for s in res.spec.slices] == ["chat", "code"]
    assert res.spec.k == 5


def test_plan_out_dir_writes_files_that_pass_policy_check(tmp_path: Path) -> None:
    result = _run(*BASE, "--out", str(tmp_path), "--draft-model", "org/eagle3-head")
    assert result.exit_code == 0, result.output
    md = tmp_path / "llama-3-3-70b-instruct-speculative.md"
    manifest = tmp_path / "llama-3-3-70b-instruct-speculative.yaml"
    assert md.is_file() and manifest.is_file()
    check = _run("policy", "check", str(manifest))
    assert check.exit_code == 0, check.output
    assert "1 valid, 0 invalid" in check.output
    spec = yaml.safe_load(manifest.read_text())["spec"]
    assert spec["speculativeConfig"]["model"] == "org/eagle3-head"
    assert "needs a draft" not in md.read_text()


def test_plan_json_numbers() -> None:
    result = _run(*BASE, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["combined_alpha"] == pytest.approx(0.7 * 0.7 + 0.3 * 0.45)
    assert data["breakeven_alpha"] == pytest.approx(0.03)
    assert data["recommended"] is True
    assert data["aggregation"] == "combined"
    assert data["manifest_valid"] is False
    assert [p["code"] for p in data["spec_problems"]] == ["missingModel"]
    # exercise 5 rides along: the EAGLE-3 head's memory for the 70B target
    assert data["memory"]["draft"]["params"] == pytest.approx(1.403e9, rel=1e-3)
    data["manifest"]["spec"]["speculativeConfig"]["model"] = "org/eagle3-head"
    assert config.parse(data["manifest"]).metadata.name == data["name"]


def test_mix_below_gate_goes_per_slice_and_is_not_recommended() -> None:
    plan = build(
        PlanInput(
            model="org/Big-Model",
            slices=(SliceSpec("chat", 0.4, 0.7), SliceSpec("legal", 0.6, 0.35)),
            concurrency=256,
            k=5,
            draft_model="org/big-model-eagle3",
        )
    )
    assert plan.manifest_valid
    assert plan.combined_alpha < 0.55
    assert plan.aggregation is config.Aggregation.PER_SLICE
    assert not plan.recommended
    res = config.parse(plan.manifest)
    assert {d.name for d in res.spec.canary_deployments()} == {
        "big-model-chat-canary",
        "big-model-legal-canary",
    }
    applies = {s.case: s.applies for s in plan.stay_off}
    assert applies["A specialised domain without its own draft head"]


def test_stay_off_cases_follow_the_inputs() -> None:
    plan = build(
        PlanInput(
            model="m",
            slices=(SliceSpec("chat", 1.0, 0.7),),
            concurrency=1,
            output_tokens=30,
            offline_batch1=True,
            method="draft_model",
            draft_model="org/small",
        )
    )
    applies = {s.case: s.applies for s in plan.stay_off}
    assert applies["Offline batch-1 generation"]
    assert applies["Very short outputs (under 50 tokens)"]
    assert applies["vLLM v0.18.0 with a draft model and --enable-chunked-prefill"]
    assert not applies["Concurrency past the break-even"]
    md = render(plan)
    assert "expected mean output 30 tokens" in md


def test_gate_is_never_below_the_modelled_breakeven() -> None:
    plan = build(PlanInput(model="m", slices=(SliceSpec("chat", 1.0, 0.8),), concurrency=400))
    acc = plan.manifest["spec"]["acceptance"]
    assert acc["disableBelow"] >= plan.breakeven_alpha_at_concurrency
    assert acc["enableAbove"] >= acc["disableBelow"]
    assert any("gates at" in w for w in plan.warnings)


def test_queries_use_exact_names_and_selector() -> None:
    q = queries('{app="a",track="canary"}', "10m")
    assert q.alpha == (
        'sum(increase(vllm:spec_decode_num_accepted_tokens_total{app="a",track="canary"}[10m]))'
        ' / (sum(increase(vllm:spec_decode_num_draft_tokens_total{app="a",track="canary"}[10m]))'
        " > 0)"
    )
    assert q.p99_per_token.startswith("histogram_quantile(0.99, sum by (le) (rate(")
    assert "vllm:request_time_per_output_token_seconds_bucket{" in q.p99_per_token


def test_slug() -> None:
    assert slug("meta-llama/Llama-3.3-70B-Instruct") == "llama-3-3-70b-instruct"
    assert slug("///") == "model"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--slice", "chat:0.7"], "expected name:share:alpha"),
        (["--slice", "chat:0.7:0.7", "--slice", "code:0.2:0.4"], "sum to 1"),
        (["--slice", "chat:1:0.7", "--aggregation", "sideways"], "not one of"),
        (["--slice", "chat:1:0.7", "--k", "0"], "--k"),
        (["--slice", "chat:1:0.7", "--overhead", "-1"], "--overhead"),
    ],
)
def test_plan_bad_input(args: list[str], needle: str) -> None:
    result = _run("plan", "--model", "m", "--concurrency", "8", *args)
    assert result.exit_code == 2, result.output
    assert needle in _flat(result.output)


def test_every_promql_block_in_the_plan_parses() -> None:
    promql_parser = pytest.importorskip("promql_parser")
    md = _run(*BASE).stdout
    blocks = [b.split("```", 1)[0] for b in md.split("```promql\n")[1:]]
    exprs = [
        line
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(exprs) >= 20
    for expr in exprs:
        promql_parser.parse(expr)


def test_plan_refuses_a_method_vllm_does_not_know_and_checks_versions() -> None:
    with pytest.raises(ValueError, match="Input should be"):
        build(PlanInput(model="m", slices=(SliceSpec("chat", 1.0, 0.7),), concurrency=8,
                        method="medusa2"))  # fmt: skip
    old = build(
        PlanInput(
            model="m",
            slices=(SliceSpec("chat", 1.0, 0.7),),
            concurrency=8,
            method="draft_model",
            draft_model="org/small",
            vllm_version="0.13.0",
        )
    )
    assert not old.manifest_valid
    assert any("not supported yet" in p.vllm_says for p in old.spec_problems)
    result = _run(*BASE, "--vllm-version", "0.12.0", "--method", "draft_model",
                  "--draft-model", "meta-llama/Llama-3.2-1B-Instruct", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["manifest_valid"] is False
    # the 1B draft's memory: 16 layers of KV at head_dim 64
    assert data["memory"]["draft"]["kv_bytes_per_token"] == 32768


def test_plan_writes_ten_percent_latency_buckets_into_the_shared_pod_template() -> None:
    result = _run(*BASE, "--tpot-median-ms", "20", "--tpot-p99-ms", "31", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    hb = data["histogram_buckets"]
    flag, value = hb["args"]
    assert flag == "--custom-histogram-buckets"  # vLLM 0.32's flag
    (family,) = json.loads(value)  # one family: it sets the ITL and the per-token histograms
    bounds = json.loads(value)[family]
    assert family == "inter_token_latency" and bounds == hb["bounds"]
    assert bounds[0] <= 0.5 * 0.020 and bounds[-1] >= 5 * 0.031  # half the median, 5x the P99
    assert all(b / a <= 1.1 + 1e-12 for a, b in itertools.pairwise(bounds))
    # a baseline P99 anywhere in range sits in a bucket that resolves +10%, with a Fail edge
    for lo, hi in itertools.pairwise(bounds[:-2]):  # the top two have no Fail edge above
        r = resolution.relative(bounds, lo, hi, 0.10)
        assert r.resolvable and r.effective_margin <= 0.34, (lo, hi, r)
    assert hb["series_per_pod"] == 2 * (len(bounds) + 3)
    assert hb["extra_series_per_pod"] == 2 * (len(bounds) - len(vllm.ITL_BUCKETS))
    # the speculative config stays the canary's own; the buckets are in the shared template
    assert "custom-histogram-buckets" not in json.dumps(data["manifest"])
    md = data["markdown"]
    assert "- --custom-histogram-buckets" in md and f"- '{value}'" in md
    assert "the template both Deployments share" in md
    # vLLM's default layout cannot resolve +10% anywhere a chat model's P99 sits
    for lo, hi in itertools.pairwise(vllm.TPOT_BUCKETS[:5]):
        assert not resolution.relative(vllm.TPOT_BUCKETS, lo, hi, 0.10).resolvable


def test_plan_buckets_default_to_chat_models_and_refuse_nonsense() -> None:
    plan = build(PlanInput(model="m", slices=(SliceSpec("chat", 1.0, 0.7),), concurrency=8))
    b = plan.buckets.bounds
    assert b[0] == 0.004 and 0.3 <= b[-1] < 0.35 and 40 <= len(b) <= 50
    with pytest.raises(ValueError, match="time per token"):
        PlanInput(
            model="m", slices=(SliceSpec("chat", 1.0, 0.7),), concurrency=8, tpot_p99_seconds=0.0
        )
