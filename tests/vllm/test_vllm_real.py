"""Real vLLM CPU servers: alpha from real /metrics counters, and what a config flip does to them.

Needs the environment built by tools/vllm/setup.sh; skipped without it, failed without it
when ALPHAGATE_REQUIRE_VLLM=1 (CI). Two server starts (~1-1.5 min each on 2 cores).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alphagate_lab.sandbox.load import Mix, run_load
from alphagate_lab.sandbox.vllm_server import (
    VllmServer,
    free_port,
    vllm_unavailable_reason,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "tiny-chat"
K = 4
TARGET_ALPHA = 0.7
SYNTHETIC_SPEC = {
    "method": "ngram",
    "num_speculative_tokens": K,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
    "rejection_sample_method": "synthetic",
    "synthetic_acceptance_rates": [TARGET_ALPHA] * K,
}
SPEC_FAMILIES = {
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
}
LATENCY_FAMILIES = {
    "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
}
READY_TIMEOUT_S = 360.0
REQUESTS_PER_MIX = 64  # ~2,400 drafts in all: binomial spread ~0.01, so ±0.05 is ~5 sigma


@pytest.fixture(autouse=True)
def _require_vllm() -> None:
    reason = vllm_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("ALPHAGATE_REQUIRE_VLLM") == "1":
        pytest.fail(f"ALPHAGATE_REQUIRE_VLLM=1 but {reason}")
    pytest.skip(reason)


@dataclass(frozen=True)
class Scrape:
    """One /metrics page: family name -> {sample name + sorted labels: value}."""

    families: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]

    def names(self) -> set[str]:
        return set(self.families)

    def total(self, sample_name: str) -> float:
        """Sum of a sample over all label sets (0 when absent)."""
        return sum(
            value
            for fam in self.families.values()
            for (name, _), value in fam.items()
            if name == sample_name
        )


def scrape(server: VllmServer) -> Scrape:
    resp = httpx.get(server.metrics_url, timeout=10.0)
    resp.raise_for_status()
    families: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for fam in text_string_to_metric_families(resp.text):
        samples = families.setdefault(fam.name, {})
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return Scrape(families)


def alpha_between(before: Scrape, after: Scrape) -> tuple[float, float, float]:
    """(alpha, accepted, drafted tokens) from counter increments between two scrapes."""
    accepted = after.total("vllm:spec_decode_num_accepted_tokens_total") - before.total(
        "vllm:spec_decode_num_accepted_tokens_total"
    )
    drafted = after.total("vllm:spec_decode_num_draft_tokens_total") - before.total(
        "vllm:spec_decode_num_draft_tokens_total"
    )
    return (accepted / drafted if drafted else float("nan")), accepted, drafted


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


def _started(server: VllmServer) -> float:
    server.start()
    return server.wait_ready(READY_TIMEOUT_S)


def test_vllm_real_synthetic_alpha_then_restart_without_speculation(port: int) -> None:
    t0 = time.monotonic()
    # --- 1. speculation on: n-gram drafts, synthetic flat acceptance 0.7, K=4 ----------
    on = VllmServer(port, served_model_name=MODEL, speculative_config=SYNTHETIC_SPEC)
    assert "--speculative-config" in on.argv
    try:
        ready_s = _started(on)
        print(f"\n[vllm] spec-on server ready in {ready_s:.1f} s (log {on.log_path})")
        s0 = scrape(on)
        assert s0.names() >= SPEC_FAMILIES, f"spec families missing at start: {s0.names()}"
        assert s0.names() >= LATENCY_FAMILIES

        per_mix: dict[Mix, tuple[float, float, float]] = {}
        prev = s0
        for mix in (Mix.REPETITIVE, Mix.VARIED):
            res = run_load(on.url, model=MODEL, mix=mix, concurrency=4, requests=REQUESTS_PER_MIX)
            assert res.failed == 0, f"{mix}: {res.errors} (log {on.log_path})"
            assert res.ok == REQUESTS_PER_MIX
            cur = scrape(on)
            per_mix[mix] = alpha_between(prev, cur)
            print(
                f"[vllm] {mix}: {res.ok} requests, {res.completion_tokens} tokens in"
                f" {res.elapsed_s:.1f} s; alpha {per_mix[mix][0]:.3f}"
                f" ({per_mix[mix][1]:.0f}/{per_mix[mix][2]:.0f} draft tokens)"
            )
            prev = cur
        s1 = prev

        alpha, _accepted, drafted = alpha_between(s0, s1)
        drafts = s1.total("vllm:spec_decode_num_drafts_total")
        print(f"[vllm] overall alpha {alpha:.3f} over {drafts:.0f} drafts, {drafted:.0f} tokens")
        assert drafted >= 1500, f"too few draft tokens for a precise alpha: {drafted}"
        assert abs(alpha - TARGET_ALPHA) <= 0.05, f"alpha {alpha:.3f} != {TARGET_ALPHA}±0.05"
        # Both CPU rejection paths (greedy for the repetitive mix, random for the varied
        # one, sampled at a low temperature) honour the synthetic rates.
        for mix, (a, _, n) in per_mix.items():
            assert n >= 500, f"{mix}: only {n} draft tokens"
            assert abs(a - TARGET_ALPHA) <= 0.1, f"{mix}: alpha {a:.3f} far from {TARGET_ALPHA}"
        # Per position: flat unconditional rates => position 0 carries the rejections.
        pos0 = sum(
            v
            for (name, labels), v in s1.families[
                "vllm:spec_decode_num_accepted_tokens_per_pos"
            ].items()
            if name.endswith("_total") and dict(labels).get("position") == "0"
        )
        assert abs(pos0 / drafts - TARGET_ALPHA) <= 0.07
        for fam in LATENCY_FAMILIES:
            assert s1.total(f"{fam}_count") > 0, f"{fam} has no observations"
        # Counters the controller relies on are labelled by model and engine.
        labels = {
            dict(lbl).get("model_name") for (_, lbl) in s1.families["vllm:spec_decode_num_drafts"]
        }
        assert labels == {MODEL}
        tokens_before_restart = s1.total("vllm:generation_tokens_total")
        assert tokens_before_restart > 0
    finally:
        stop_t = time.monotonic()
        on.stop()
        print(f"[vllm] stopped in {time.monotonic() - stop_t:.1f} s")
    assert not on.running()

    # --- 2. the same pod restarted without --speculative-config --------------------------
    off = VllmServer(port, served_model_name=MODEL, speculative_config=None)
    assert "--speculative-config" not in off.argv
    try:
        ready_s = _started(off)
        print(f"[vllm] spec-off server ready in {ready_s:.1f} s (log {off.log_path})")
        fresh = scrape(off)
        spec_names = {n for n in fresh.names() if n.startswith("vllm:spec_decode")}
        assert spec_names == set(), f"spec series on a server without speculation: {spec_names}"
        # Counters restarted from zero (a restart resets every counter).
        assert fresh.total("vllm:generation_tokens_total") == 0
        assert fresh.total("vllm:request_success_total") == 0
        assert fresh.names() >= LATENCY_FAMILIES

        res = run_load(off.url, model=MODEL, mix=Mix.REPETITIVE, concurrency=4, requests=8)
        assert res.failed == 0, f"{res.errors} (log {off.log_path})"
        after = scrape(off)
        assert not {n for n in after.names() if n.startswith("vllm:spec_decode")}
        assert after.total("vllm:generation_tokens_total") == res.completion_tokens
        assert after.total("vllm:request_success_total") == 8
        for fam in LATENCY_FAMILIES:
            assert after.total(f"{fam}_count") > 0
    finally:
        off.stop()
    print(f"[vllm] test body took {time.monotonic() - t0:.1f} s")
