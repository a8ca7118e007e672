"""The decode-loop simulation: seeded, consistent with the closed form, and honest about tails."""

from __future__ import annotations

import pytest

from alphagate_lab.planning.decode_sim import SimConfig, compare, run, stops_paying_at, sweep
from alphagate_lab.planning.speedup import alpha_from_position_rate, speedup_at


def test_same_seed_same_numbers() -> None:
    cfg = SimConfig(alpha=0.7, concurrency=16, steps=200, seed=11)
    assert compare(cfg) == compare(cfg)
    assert run(cfg, speculative=True) != run(SimConfig(alpha=0.7, concurrency=16, steps=200,
                                                        seed=12), speculative=True)  # fmt: skip


def test_measured_alpha_is_what_vllm_would_report() -> None:
    on = run(SimConfig(alpha=0.8, k=5, concurrency=32, steps=400, seed=2), speculative=True)
    assert on.measured_alpha == pytest.approx(alpha_from_position_rate(0.8, 5), abs=0.02)
    # vLLM's mean acceptance length is 1 + K*alpha: the tokens a request gets per pass.
    assert on.tokens_per_pass == pytest.approx(1 + 5 * on.measured_alpha, abs=0.05)


def test_throughput_matches_the_closed_form() -> None:
    for c in (1, 64, 512):
        r = compare(SimConfig(alpha=0.75, k=4, overhead=0.1, concurrency=c, steps=300, seed=5))
        assert r.on.measured_alpha is not None
        expected = speedup_at(r.on.measured_alpha, 4, 0.1, c)
        assert r.speedup == pytest.approx(expected, rel=0.03)


def test_per_token_time_falls_but_the_tail_rises_at_low_concurrency() -> None:
    r = compare(SimConfig(alpha=0.8, k=5, overhead=0.1, concurrency=1, steps=2000, seed=4))
    assert r.on.mean_ms_per_token < 0.5 * r.off.mean_ms_per_token
    # One observation per step: per-step ITL gets worse while per-token latency improves.
    assert r.on.mean_ms_per_step > r.off.mean_ms_per_step
    # A step whose draft is rejected early costs a whole verify pass for one token.
    assert r.on.p99_ms_per_token > r.off.p99_ms_per_token


def test_speculation_stops_paying_as_the_batch_fills() -> None:
    results = sweep(SimConfig(alpha=0.8, k=5, overhead=0.1, steps=100, seed=9))
    speedups = [r.speedup for r in results]
    assert speedups[0] > 2.5
    assert speedups[-1] < 1.0
    stop = stops_paying_at(results)
    assert stop is not None and 128 < stop <= 768


def test_zero_and_full_acceptance() -> None:
    none = run(SimConfig(alpha=0.0, k=3, concurrency=4, steps=50), speculative=True)
    full = run(SimConfig(alpha=1.0, k=3, concurrency=4, steps=50, output_tokens=10_000),
               speculative=True)  # fmt: skip
    assert none.measured_alpha == 0.0 and none.tokens_per_pass == 1.0
    assert full.measured_alpha == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"alpha": 1.1}, "alpha"),
        ({"k": 0}, "K"),
        ({"overhead": -0.1}, "overhead"),
        ({"concurrency": 0}, "concurrency"),
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_config(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        SimConfig(**kwargs)  # type: ignore[arg-type]
