"""Draft memory from architecture numbers: EAGLE heads, draft models, KV cache, GPU share."""

from __future__ import annotations

import pytest

from alphagate_lab.planning.memory import (
    ARCHS,
    GB,
    DraftKind,
    eagle_params,
    footprint,
    kv_bytes_per_token,
    lookup,
    model_params,
    override,
)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        # vLLM docs' EAGLE table: "# EAGLE Parameters"
        ("llama-3-8b", 0.25),
        ("llama-3-70b", 0.99),
        ("qwen2-7b", 0.26),
    ],
)
def test_eagle1_heads_match_vllm_docs(name: str, billions: float) -> None:
    assert eagle_params(ARCHS[name], v3=False) / 1e9 == pytest.approx(billions, abs=0.01)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("llama-3.2-1b", 1.24),
        ("llama-3.2-3b", 3.21),
        ("llama-3.1-8b", 8.03),
        ("llama-3.3-70b", 70.55),
        ("qwen2.5-72b", 72.7),
        ("mistral-7b", 7.25),
        ("qwen3-0.6b", 0.60),
    ],
)
def test_whole_models_match_their_published_sizes(name: str, billions: float) -> None:
    assert model_params(ARCHS[name]) / 1e9 == pytest.approx(billions, rel=0.01)


def test_exercise_5_eagle3_head_for_70b_against_a_1b_draft() -> None:
    target = lookup("meta-llama/Llama-3.3-70B-Instruct")
    head = footprint(target, DraftKind.EAGLE3, context=8192, concurrency=64, gpus=4)
    small = footprint(
        target,
        DraftKind.DRAFT_MODEL,
        draft=lookup("meta-llama/Llama-3.2-1B-Instruct"),
        context=8192,
        concurrency=64,
        gpus=4,
    )
    # Similar weights (1.40B vs 1.24B parameters) ...
    assert head.draft.params / 1e9 == pytest.approx(1.40, abs=0.01)
    assert small.draft.params / 1e9 == pytest.approx(1.24, abs=0.01)
    # ... but one layer of KV against sixteen (head_dim 64 in the 1B): 4 KiB vs 32 KiB a token
    assert head.draft.kv_bytes_per_token == 4096
    assert small.draft.kv_bytes_per_token == 32768
    assert small.draft.kv_bytes == pytest.approx(8 * head.draft.kv_bytes)
    assert head.draft_share_of_gpu < small.draft_share_of_gpu
    assert head.draft.total_bytes / GB == pytest.approx(2.806 + 2.147, abs=0.01)
    # the 70B's KV: 80 layers * 2 * 8 * 128 * 2 bytes
    assert head.target.kv_bytes_per_token == kv_bytes_per_token(80, target, 2.0) == 327680


def test_fp8_weights_halve_and_fit_is_reported() -> None:
    target = ARCHS["llama-3.3-70b"]
    bf16 = footprint(target, DraftKind.EAGLE3, context=8192, concurrency=64, gpus=1)
    fp8 = footprint(
        target, DraftKind.EAGLE3, context=8192, concurrency=64, gpus=4, target_weight_bytes=1.0
    )
    assert fp8.target.weight_bytes == pytest.approx(bf16.target.weight_bytes / 2)
    assert not bf16.fits and fp8.fits


def test_lookup_override_and_errors() -> None:
    assert lookup("Qwen/Qwen3-8B").hidden == 4096
    with pytest.raises(ValueError, match="no built-in architecture"):
        lookup("acme/unknown-9b")
    a = override(ARCHS["llama-3.1-8b"], {"layers": "16", "tied": "true"})
    assert a.layers == 16 and a.tied
    with pytest.raises(ValueError, match="unknown architecture number"):
        override(a, {"depth": "3"})
    with pytest.raises(ValueError, match="layers must be a positive integer"):
        override(a, {"layers": "0"})
    with pytest.raises(ValueError, match="vocabulary"):
        footprint(ARCHS["llama-3.3-70b"], DraftKind.DRAFT_MODEL, draft=ARCHS["qwen3-0.6b"])
