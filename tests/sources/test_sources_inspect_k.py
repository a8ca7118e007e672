"""`alphagate inspect`: the draft length K the core's tuner recommends on a page, with its
evidence, on the real capture and on a two-engine page whose tail positions do not pay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.core.draft_length import DraftAdvice

REAL = Path(__file__).resolve().parent / "data" / "vllm-real-metrics.txt"
runner = CliRunner()


def _k(path: Path, *extra: str) -> dict[str, object]:
    result = runner.invoke(app, ["inspect", str(path), "--json", *extra])
    assert result.exit_code == 0, result.output
    draft: dict[str, object] = json.loads(result.output)["draft_length"]["tiny-chat"]
    return draft


def test_real_capture_recommends_k_with_its_evidence() -> None:
    d = _k(REAL, "--method", "ngram")
    # K is the number of per-position counters vLLM created; one engine is one batch, so the
    # tuner keeps K and says why rather than narrowing it on correlated requests
    assert d["configured_k"] == 4
    assert d["advice"] == DraftAdvice.INSUFFICIENT.value
    assert d["recommended_k"] == 4
    assert "one independent batch" in str(d["reason"])
    assert d["drafts"] == 277
    rates = [49 / 277, 17 / 277, 16 / 277, 14 / 277]
    assert d["position_rates"] == pytest.approx(rates)
    # the evidence: tokens per draft step T(K') = 1 + u_0 + ... + u_{K'-1}
    options = d["options"]
    assert isinstance(options, list)
    tokens = [o["tokens_per_step"] for o in options]
    assert tokens == pytest.approx([1 + sum(rates[:k]) for k in range(1, 5)])
    assert "ngram" in str(d["cost_detail"])

    text = runner.invoke(app, ["inspect", str(REAL), "--method", "ngram"]).output
    assert "tiny-chat  draft length K=4: insufficient, recommended K=4" in text
    assert "position rates 0.177, 0.061, 0.058, 0.051" in text
    assert "options (point estimates): K=1 1.18 tok/step" in text


def test_the_method_prices_the_draft() -> None:
    cheap = _k(REAL, "--method", "ngram")
    dear = _k(REAL)  # no --method: vLLM's fallback, a draft model, and the text says so
    assert float(str(cheap["cost_per_position"])) < float(str(dear["cost_per_position"]))
    assert "assumed: give --method" in str(dear["cost_detail"])


def _engine(engine: str, drafts: int, per_pos: tuple[int, ...]) -> list[str]:
    k = len(per_pos)
    labels = f'engine="{engine}",model_name="tiny-chat"'
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafts * k}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(per_pos)}",
        f"vllm:generation_tokens_total{{{labels}}} {drafts + sum(per_pos)}",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}'
        for i, n in enumerate(per_pos)
    ]
    return lines


def test_two_engines_whose_tail_does_not_pay_shorten_k(tmp_path: Path) -> None:
    """Two engines are two batches: with 20,000 drafts each and positions 2-3 almost never
    accepted, a draft model's cost makes the tail confidently unprofitable."""
    page = tmp_path / "two-engines.txt"
    page.write_text(
        "\n".join(
            _engine("0", 20_000, (14_000, 9_000, 200, 20))
            + _engine("1", 20_000, (13_600, 8_800, 180, 30))
        )
        + "\n"
    )
    d = _k(page, "--method", "draft_model")
    assert d["advice"] == DraftAdvice.SHORTEN.value
    assert d["configured_k"] == 4
    assert d["recommended_k"] == 2
    assert "K=2 instead of 4" in str(d["reason"])
