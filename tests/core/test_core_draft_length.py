"""Draft-length tuning: per-position rates, tokens per step for K' <= K, and the recommendation."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from alphagate.core.draft_length import (
    CostSource,
    DraftAdvice,
    DraftCost,
    measured_cost,
    policy_cost,
    position_rates,
    recommend,
)
from alphagate.core.model import AcceptanceSample, Buckets
from alphagate.sources.exposition import parse
from alphagate.sources.page import Counter, Hist

REAL = Path(__file__).resolve().parents[1] / "sources" / "data" / "vllm-real-metrics.txt"


def _capture_sample() -> tuple[AcceptanceSample, Buckets]:
    (s,) = parse(REAL.read_text()).matching({"model_name": "tiny-chat"})
    per = tuple(s.per_position[i] for i in range(len(s.per_position)))
    sample = AcceptanceSample(
        drafts=s.counters[Counter.DRAFTS],
        draft_tokens=s.counters[Counter.DRAFT_TOKENS],
        accepted_tokens=s.counters[Counter.ACCEPTED],
        per_position=per,
        pod="capture",
    )
    return sample, s.histograms[Hist.ITL].to_buckets()


def _simulate(
    rng: random.Random, cond: tuple[float, ...], drafts_per_batch: int, batches: int
) -> list[AcceptanceSample]:
    """Full-length drafts; position i accepted with probability cond[i] given i-1 was."""
    out = []
    k = len(cond)
    for b in range(batches):
        per = [0] * k
        acc = 0
        for _ in range(drafts_per_batch):
            for i in range(k):
                if rng.random() >= cond[i]:
                    break
                per[i] += 1
                acc += 1
        out.append(
            AcceptanceSample(
                drafts=drafts_per_batch,
                draft_tokens=k * drafts_per_batch,
                accepted_tokens=acc,
                per_position=tuple(float(v) for v in per),
                pod=f"p{b}",  # independent draws: each its own batch
                start=float(b),
                end=float(b + 1),
            )
        )
    return out


def test_real_capture_position_rates_and_tokens_per_step() -> None:
    sample, _ = _capture_sample()
    rates = position_rates([sample], k=4, confidence=0.95)
    assert [round(p.unconditional, 3) for p in rates] == [0.177, 0.061, 0.058, 0.051]
    # conditional: 17/49, 16/17, 14/16 (variable-length n-gram drafts inflate the later ones)
    assert rates[1].conditional == pytest.approx(17 / 49)
    assert rates[2].conditional == pytest.approx(16 / 17)
    for p in rates:
        assert p.unconditional_lower < p.unconditional < p.unconditional_upper
    report = recommend([sample], k=4, cost=DraftCost(0.02, CostSource.POLICY), min_drafts=100)
    t4 = report.option(4)
    assert t4 is not None
    # T(4) = 1 + accepted/drafts: vLLM's mean acceptance length on the capture
    assert t4.tokens_per_step == pytest.approx(1 + 96 / 277)
    assert report.full_length_share == pytest.approx(666 / (4 * 277))


def test_one_capture_of_one_pod_is_insufficient() -> None:
    # One pod in one window is one batch: its requests share their acceptance, so the draft
    # count overstates the evidence and no interval is honest.
    sample, _ = _capture_sample()
    r = recommend([sample], k=4, cost=DraftCost(0.12, CostSource.POLICY), min_drafts=100)
    assert r.advice is DraftAdvice.INSUFFICIENT and r.recommended_k == 4


def test_real_capture_cheap_draft_keeps_k_dear_draft_shortens() -> None:
    # The capture's counters seen on three pods (the rates of the real capture, three batches
    # with a little spread), so the intervals have degrees of freedom.
    base, _ = _capture_sample()
    pods = [
        AcceptanceSample(
            drafts=base.drafts,
            draft_tokens=base.draft_tokens,
            accepted_tokens=base.accepted_tokens + d,
            per_position=(base.per_position[0] + d, *base.per_position[1:]),
            pod=f"p{i}",
        )
        for i, d in enumerate((-2.0, 0.0, 2.0))
    ]
    cheap = recommend(pods, k=4, cost=DraftCost(0.01, CostSource.POLICY), min_drafts=100)
    assert cheap.advice is DraftAdvice.KEEP and cheap.recommended_k == 4
    dear = recommend(pods, k=4, cost=DraftCost(0.12, CostSource.POLICY), min_drafts=100)
    assert dear.advice is DraftAdvice.SHORTEN
    assert dear.recommended_k < 4 and dear.best_k == 1
    assert dear.option(1).speedup > dear.option(4).speedup  # type: ignore[union-attr]
    assert dear.evidence()["recommended_k"] == 1.0


def test_too_few_drafts_is_insufficient_and_keeps_k() -> None:
    sample, _ = _capture_sample()
    r = recommend([sample], k=4, cost=DraftCost(0.5, CostSource.POLICY), min_drafts=1000)
    assert r.advice is DraftAdvice.INSUFFICIENT and r.recommended_k == 4
    bare = AcceptanceSample(drafts=500, draft_tokens=2000, accepted_tokens=900)
    r2 = recommend([bare], k=4, cost=DraftCost(0.5, CostSource.POLICY))
    assert r2.advice is DraftAdvice.INSUFFICIENT and r2.positions == ()


def test_nothing_pays_when_first_position_is_below_its_cost() -> None:
    rng = random.Random(3)
    samples = _simulate(rng, (0.05, 0.5, 0.5), 200, 10)
    r = recommend(samples, k=3, cost=DraftCost(0.3, CostSource.POLICY))
    assert r.advice is DraftAdvice.NONE_PAYS


def test_strong_last_position_says_longer_may_pay() -> None:
    rng = random.Random(4)
    samples = _simulate(rng, (0.9, 0.9, 0.9), 200, 12)
    r = recommend(samples, k=3, cost=DraftCost(0.05, CostSource.POLICY))
    assert r.advice is DraftAdvice.LONGER_MAY_PAY and r.recommended_k == 3


def test_recommendation_recovers_the_best_k_from_simulated_traffic() -> None:
    # Conditional rates fall fast: positions beyond 2 are rarely accepted.
    cond = (0.8, 0.6, 0.1, 0.1, 0.1)
    d = 0.1
    # True T(k) and speed-up
    u, acc = [], 1.0
    for c in cond:
        acc *= c
        u.append(acc)
    true = [(1 + sum(u[:k])) / (1 + k * d) for k in range(1, 6)]
    true_best = 1 + max(range(5), key=lambda i: true[i])
    hits = 0
    runs = 20
    for seed in range(runs):
        samples = _simulate(random.Random(seed), cond, 150, 10)
        r = recommend(samples, k=5, cost=DraftCost(d, CostSource.POLICY))
        assert r.recommended_k >= true_best  # conservative: never shorter than the truth
        hits += r.recommended_k == true_best
    assert true_best == 2
    assert hits >= runs * 0.8


def test_intervals_cover_the_true_position_rate() -> None:
    cond = (0.7, 0.5)
    runs, covered = 60, 0
    for seed in range(runs):
        samples = _simulate(random.Random(100 + seed), cond, 80, 10)
        (_p0, p1) = position_rates(samples, k=2, confidence=0.95)
        covered += p1.unconditional_lower <= 0.35 <= p1.unconditional_upper
    assert covered >= runs * 0.88


def test_policy_cost_rises_with_batch_toward_a_full_pass() -> None:
    low = policy_cost(0.05, concurrency=1)
    high = policy_cost(0.05, concurrency=256)
    assert low.source is CostSource.POLICY
    assert low.per_position == pytest.approx((0.05 + 1 / 256) / (1 + 1 / 256))
    assert high.per_position == pytest.approx(0.525)
    with pytest.raises(ValueError, match="draft cost"):
        policy_cost(-1.0)


def test_measured_cost_from_per_step_latency() -> None:
    inf = math.inf
    # Baseline 10 ms a step; canary 13 ms with 1.5 draft tokens per step -> d = 0.2
    base = Buckets((inf,), (1000.0,), 10.0)
    canary = Buckets((inf,), (1000.0,), 13.0)
    c = measured_cost(canary, base, draft_tokens=1500.0)
    assert c is not None and c.source is CostSource.MEASURED
    assert c.per_position == pytest.approx(0.2)
    faster = Buckets((inf,), (1000.0,), 9.0)
    fast = measured_cost(faster, base, draft_tokens=1500.0)
    assert fast is not None and fast.per_position == 0.0
    assert measured_cost(None, base, draft_tokens=1.0) is None
    assert measured_cost(canary, Buckets((inf,), (0.0,), 0.0), draft_tokens=1.0) is None


def test_bad_k_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        recommend([], k=0, cost=DraftCost(0.1, CostSource.POLICY))


def test_longer_may_pay_reads_the_next_positions_floor_against_its_break_even() -> None:
    """The unseen position K gets at most u_{K-1} x the last conditional rate; with both lower
    bounds above d * S(K), a longer draft may pay. At a dear cost (a full batch) only a strong
    chain qualifies."""
    rng = random.Random(7)
    strong = recommend(_simulate(rng, (0.9,), 400, 10), k=1, cost=DraftCost(0.5, CostSource.POLICY))
    assert strong.advice is DraftAdvice.LONGER_MAY_PAY  # >= ~0.78 next, needs 0.5 x 1.27
    weak = recommend(
        _simulate(rng, (0.9, 0.6), 400, 10), k=2, cost=DraftCost(0.5, CostSource.POLICY)
    )
    assert weak.advice is not DraftAdvice.LONGER_MAY_PAY  # ~0.3 next, needs ~0.7
    cheap = recommend(
        _simulate(rng, (0.9, 0.6), 400, 10), k=2, cost=DraftCost(0.02, CostSource.POLICY)
    )
    assert cheap.advice is DraftAdvice.LONGER_MAY_PAY  # the same chain pays at a low cost
