"""The decode model: acceptance maths, step-time physics, and the latency effects it must show."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alphagate import vllm
from alphagate_lab.sim.acceptance import AcceptanceTable
from alphagate_lab.sim.counters import EngineCounters
from alphagate_lab.sim.decode import DecodeParams, Load, step_time
from alphagate_lab.sim.fleet import Fleet, FleetSnapshot
from alphagate_lab.sim.model import Engine
from alphagate_lab.sim.scenario import load_scenario


@pytest.mark.parametrize("k", [1, 3, 5, 8])
@pytest.mark.parametrize("decay", [0.0, 0.15, 0.5])
def test_acceptance_distribution_has_the_asked_mean(k: int, decay: float) -> None:
    table = AcceptanceTable(k, decay)
    for alpha in (0.0, 0.05, 0.3, 0.55, 0.72, 0.95, 1.0):
        probs = table.probs(alpha)
        assert probs.shape == (k + 1,)
        assert probs.sum() == pytest.approx(1.0)
        assert (probs >= 0).all()
        assert probs @ np.arange(k + 1) / k == pytest.approx(alpha, abs=1e-3)


def test_acceptance_decays_with_position() -> None:
    probs = AcceptanceTable(5, 0.3).probs(0.6)
    at_least = np.cumsum(probs[::-1])[::-1][1:]  # P(A >= i + 1), i.e. per_pos / drafts
    conditional = at_least[1:] / at_least[:-1]
    assert (np.diff(conditional) < 0).all()  # later positions are accepted less often


def test_step_time_grows_with_batch_and_k_and_splits_past_the_budget() -> None:
    p = DecodeParams(token_budget=512)
    assert step_time(8, 0, p)[0] < step_time(64, 0, p)[0]
    assert step_time(8, 0, p)[0] < step_time(8, 3, p)[0] < step_time(8, 5, p)[0]
    assert step_time(64, 5, p)[1] == 1  # 384 tokens fit
    t2, passes = step_time(128, 5, p)  # 768 tokens: two passes
    assert passes == 2
    assert t2 > 2 * step_time(64, 5, p)[0] - p.t_token * 384  # pays t_base twice
    assert step_time(0, 5, p) == (0.0, 0)


def _run_engine(k: int, load: Load, seconds: int, seed: int = 1, dt: float = 1.0) -> EngineCounters:
    counters = EngineCounters(k=k)
    engine = Engine(DecodeParams(), np.random.default_rng(seed), k=k)
    for _ in range(round(seconds / dt)):
        engine.tick(dt, load, counters)
    return counters


def _mean(c: EngineCounters, family: str) -> float:
    buckets, total = c.histograms.read()[family]
    return total / buckets[-1]


def test_good_alpha_lowers_time_per_token_but_raises_per_step_itl() -> None:
    load = Load(alpha=0.7, arrival_rate=5.0, alpha_noise=0.0)
    spec, plain = _run_engine(5, load, 120), _run_engine(0, load, 120)
    assert _mean(spec, vllm.TPOT) < 0.6 * _mean(plain, vllm.TPOT)
    assert _mean(spec, vllm.ITL) > 1.2 * _mean(plain, vllm.ITL)
    # One ITL observation per step per request: tokens per observation = 1 + accepted/drafts.
    itl_count = spec.histograms.read()[vllm.ITL][0][-1]
    assert spec.drafts == itl_count
    assert spec.generation_tokens > itl_count * (1 + 5 * 0.7 * 0.9)


def test_counters_follow_alpha_and_reset_is_a_fresh_object() -> None:
    # Ten minutes: requests keep their own acceptance, so a minute is a handful of requests.
    c = _run_engine(4, Load(alpha=0.35, arrival_rate=8.0), 600, dt=15.0)
    assert c.accepted / c.draft_tokens == pytest.approx(0.35, abs=0.02)
    assert c.per_pos() == sorted(c.per_pos(), reverse=True)
    assert sum(c.per_pos()) == c.accepted


def _tail_fraction(a: FleetSnapshot, b: FleetSnapshot, role: str, bound: float) -> float:
    """Fraction of the window's TPOT observations above ``bound`` (a bucket bound)."""
    i = vllm.TPOT_BUCKETS.index(bound)
    above = total = 0
    for pb in b.pods:
        if pb.labels["role"] != role:
            continue
        pa = a.pod(pb.name)
        ha, hb = pa.histograms[vllm.TPOT], pb.histograms[vllm.TPOT]
        n = hb.count - ha.count
        total += n
        above += n - (hb.buckets[i] - ha.buckets[i])
    return above / total


def test_p99_per_token_latency_regresses_under_load_with_good_alpha(scenarios_dir: Path) -> None:
    fleet = Fleet(load_scenario(scenarios_dir / "p99-regression.yaml"), tick=15.0)
    snaps = {round(s.t): s for s in fleet.run(40 * 60, every=300)}
    before, spike = (snaps[300], snaps[900]), (snaps[1500], snaps[2100])
    for _, b in (before, spike):
        assert b.truth.pods["chat-canary-0"].expected_alpha == pytest.approx(0.70)
    # Before the spike the canary's slow-token tail is no worse than the baseline's.
    assert _tail_fraction(*before, "canary", 0.025) <= 0.005
    # In the spike, well over 1% of the canary's requests are slower than the bucket that
    # holds the baseline's P99, while the baseline stays under it.
    assert _tail_fraction(*spike, "baseline", 0.025) < 0.01
    assert _tail_fraction(*spike, "canary", 0.025) > 0.02
    # ... although its mean time per token is still lower: only the tail regresses.
    assert _mean_tpot(*spike, "canary") < _mean_tpot(*spike, "baseline")


def _mean_tpot(a: FleetSnapshot, b: FleetSnapshot, role: str) -> float:
    total = count = 0.0
    for pb in b.pods:
        if pb.labels["role"] == role:
            ha, hb = a.pod(pb.name).histograms[vllm.TPOT], pb.histograms[vllm.TPOT]
            total += hb.sum - ha.sum
            count += hb.count - ha.count
    return total / count
