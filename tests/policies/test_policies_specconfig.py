"""The speculative-config table: what vLLM would refuse, with its words and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from alphagate import specconfig as sc
from alphagate.cli import app
from alphagate.specconfig import Code, Severity

K = "num_speculative_tokens"


def codes(cfg: Any, **kw: Any) -> set[Code]:
    return {p.code for p in sc.errors(cfg, **kw)}


GOOD: list[dict[str, Any]] = [
    {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        K: 3,
    },
    {
        "method": "ngram",
        K: 5,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    },
    {"model": "ngram", K: 4},
    {"method": "mtp", K: 1},
    {
        "method": "ngram",
        K: 4,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.6, 0.6, 0.6, 0.6],
    },
    {
        "method": "draft_model",
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        K: 4,
    },
    {"method": "eagle3", "model": "x/eagle3", "num-speculative-tokens": 3},  # dashes as vLLM maps
]


@pytest.mark.parametrize("cfg", GOOD)
def test_configs_vllm_accepts_have_no_errors(cfg: dict[str, Any]) -> None:
    assert sc.errors(cfg) == ()


@pytest.mark.parametrize(
    ("cfg", "code", "field"),
    [
        ({"method": "eagle3", K: 3}, Code.MISSING_MODEL, "model"),
        ({K: 3}, Code.MISSING_MODEL, "model"),  # defaults to draft_model
        ({"method": "medusa2", K: 3}, Code.UNKNOWN_METHOD, "method"),
        ({"method": "ngram", K: 0}, Code.OUT_OF_RANGE, K),
        ({"method": "ngram", K: 500}, Code.ABSURD_K, K),
        ({"method": "ngram", K: "4"}, Code.WRONG_TYPE, K),
        (
            {"method": "ngram", K: 4, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
            Code.LOOKUP_ORDER,
            "prompt_lookup_min",
        ),
        ({"method": "ngram", K: 4, "bogus": 1}, Code.UNKNOWN_FIELD, "bogus"),
        (
            {"method": "eagle3", "model": "m", K: 4, "tensor_parallel_size": 2},
            Code.WRONG_TP_FIELD,
            "tensor_parallel_size",
        ),
        (
            {"method": "ngram", K: 4, "rejection_sample_method": "synthetic"},
            Code.SYNTHETIC,
            "rejection_sample_method",
        ),
        (
            {
                "method": "ngram",
                K: 2,
                "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": [0.5, 0.7],
            },
            Code.SYNTHETIC,
            "synthetic_acceptance_rates",
        ),
        (
            {"method": "eagle3", "model": "m", K: 3, "use_heterogeneous_vocab": True},
            Code.METHOD_ONLY,
            "use_heterogeneous_vocab",
        ),
        (
            {"method": "ngram", K: 3, "draft_sample_method": "sampled"},
            Code.BAD_CHOICE,
            "draft_sample_method",
        ),
    ],
)  # fmt: skip
def test_configs_vllm_refuses_name_the_field_and_the_fix(
    cfg: dict[str, Any], code: Code, field: str
) -> None:
    found = [p for p in sc.errors(cfg) if p.code is code]
    assert found, sc.check(cfg)
    assert found[0].field == field and found[0].fix and found[0].vllm_says
    assert field in found[0].message


def test_eagle3_without_head_quotes_vllm() -> None:
    (p,) = sc.errors({"method": "eagle3", K: 3})
    assert p.vllm_says == "num_speculative_tokens was provided but without speculative model."


def test_unknown_field_suggests_the_near_spelling() -> None:
    (p,) = sc.errors({"method": "ngram", K: 3, "promptlookupmax": 4})
    assert p.code is Code.UNKNOWN_FIELD and "prompt_lookup_max" in p.fix


def test_warnings_do_not_block() -> None:
    cfg = {"method": "deepseek_mtp", K: 12}
    assert sc.errors(cfg) == ()
    warns = {p.code for p in sc.check(cfg) if p.severity is Severity.WARNING}
    assert warns == {Code.DEPRECATED_METHOD, Code.LONG_K}
    assert sc.resolved_method(cfg) == "mtp"


def test_method_inference_follows_vllm() -> None:
    assert sc.resolved_method({"model": "[ngram]"}) == "ngram"
    assert sc.resolved_method({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}) == "eagle3"
    assert sc.resolved_method({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}) == "eagle"
    assert sc.resolved_method({"model": "my_pkg.MyProposer"}) == "custom_class"
    assert sc.resolved_method({"model": "meta-llama/Llama-3.2-1B"}) == "draft_model"


@pytest.mark.parametrize(
    ("version", "chunked", "cfg", "code"),
    [
        ("v0.6.3", True, {"method": "ngram", K: 3}, Code.CHUNKED_PREFILL),
        (
            "vllm/vllm-openai:v0.7.3",
            True,
            {"method": "draft_model", "model": "m", K: 3,
             "draft_tensor_parallel_size": 4},
            Code.CHUNKED_PREFILL,
        ),
        ("0.13.0", None, {"method": "draft_model", "model": "m", K: 3},
         Code.NOT_IN_VERSION),
    ],
)  # fmt: skip
def test_version_rules(version: str, chunked: bool | None, cfg: dict[str, Any], code: Code) -> None:
    assert code in codes(cfg, vllm_version=version, chunked_prefill=chunked)
    assert code not in codes(cfg, vllm_version="0.32.0", chunked_prefill=chunked)
    assert code not in codes(cfg)  # unknown version: no version rule


def test_ngram_with_chunked_prefill_is_fine_from_0_6_4_and_draft_model_warns_mid_versions() -> None:
    ngram = {"method": "ngram", K: 3}
    assert sc.errors(ngram, vllm_version="0.6.4", chunked_prefill=True) == ()
    dm = {"method": "draft_model", "model": "m", K: 3}
    probs = sc.check(dm, vllm_version="0.18.0", chunked_prefill=True)
    assert [p.code for p in probs] == [Code.CHUNKED_PREFILL]
    assert probs[0].severity is Severity.WARNING


def test_draft_tp_against_target() -> None:
    cfg = {
        "method": "eagle3",
        "model": "m",
        K: 3,
        "draft_tensor_parallel_size": 2,
    }
    assert Code.DRAFT_TP in codes(cfg, target_tp=4)
    assert Code.DRAFT_TP not in codes(cfg, target_tp=2)


def test_parse_version_and_chunked_flags() -> None:
    assert sc.parse_version("v0.10.1.post1") == (0, 10, 1)
    assert sc.parse_version("vllm/vllm-openai:v0.9.2") == (0, 9, 2)
    assert sc.parse_version("registry:5000/vllm:latest") is None
    assert sc.parse_version("0.11.0rc2") == (0, 11, 0)
    assert sc.chunked_prefill_from_args(["--model", "m"]) is None
    assert sc.chunked_prefill_from_args(["--enable-chunked-prefill"]) is True
    assert sc.chunked_prefill_from_args(["--enable_chunked_prefill=false"]) is False
    assert (
        sc.chunked_prefill_from_args(["--enable-chunked-prefill", "--no-enable-chunked-prefill"])
        is False
    )


def test_not_an_object() -> None:
    (p,) = sc.errors(["ngram"])
    assert p.code is Code.NOT_AN_OBJECT


def test_crd_schema_fragment_is_structural_and_bounded() -> None:
    s = sc.crd_schema()
    props = s["properties"]
    assert set(props) == set(sc.FIELDS)
    assert props["num_speculative_tokens"]["minimum"] == 1
    assert props["num_speculative_tokens"]["maximum"] == sc.MAX_K
    assert props["rejection_sample_method"]["enum"] == ["standard", "synthetic", "block"]
    assert any("has(self.model)" in r["rule"] for r in s["x-kubernetes-validations"])


POLICY = """\
apiVersion: alphagate.io/v1alpha1
kind: SpeculativeCanary
metadata: {name: t, namespace: llm}
spec:
  target: {name: c}
  baseline: {name: b}
  speculativeConfig: SPEC
  slices: [{name: chat, canary: {matchLabels: {a: b}}, baseline: {matchLabels: {a: c}}}]
  source: {kind: prometheus, prometheus: {endpoint: default}}
"""


def _check(tmp_path: Path, spec: str, *extra: str) -> Any:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.replace("SPEC", spec))
    return CliRunner().invoke(app, ["policy", "check", *extra, str(path)])


def test_policy_check_refuses_what_vllm_refuses_with_its_words(tmp_path: Path) -> None:
    r = _check(tmp_path, "{method: eagle3, num_speculative_tokens: 3}")
    assert r.exit_code == 1
    assert "without speculative model" in r.output and "line 7" in r.output
    r = _check(tmp_path, "{method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 2, "
                         "prompt_lookup_min: 3}")  # fmt: skip
    assert r.exit_code == 1 and "prompt_lookup_min=3 must be <= prompt_lookup_max=2" in r.output


def test_policy_check_warns_and_applies_version_rules(tmp_path: Path) -> None:
    spec = "{method: draft_model, model: meta-llama/Llama-3.2-1B, num_speculative_tokens: 12}"
    r = _check(tmp_path, spec)
    assert r.exit_code == 0 and "warn" in r.output and "K=12" in r.output
    old = _check(tmp_path, spec, "--vllm-version", "0.13.0")
    assert old.exit_code == 1 and "not supported yet" in old.output
