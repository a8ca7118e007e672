"""Per-pod time blocks sized from the requests' decode times (core/blocksize.py), and what an
undecidable window says it needs (`Judgeability`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tracetraffic as tt

from alphagate import vllm
from alphagate.core import acceptance, blocksize
from alphagate.core.blocksize import BlockBasis
from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    EstimateMethod,
    RequestLives,
    Unjudgeable,
)

BOUNDS = (*vllm.DECODE_TIME_BUCKETS, math.inf)


def lives(decode_seconds: list[float]) -> RequestLives:
    """The decode-time histogram vLLM would export for these requests."""
    d = np.array(decode_seconds)
    counts = tuple(float(np.sum(d <= b)) for b in BOUNDS)
    return RequestLives(histogram=Buckets(BOUNDS, counts, float(d.sum())))


def one_pod(intervals: int = 10, step: float = 30.0, pod: str = "p") -> list[AcceptanceSample]:
    return [
        AcceptanceSample(
            drafts=1000 + 7 * (i % 3),
            draft_tokens=3000 + 21 * (i % 3),
            accepted_tokens=1900 + 40 * (i % 4),
            pod=pod,
            start=step * i,
            end=step * (i + 1),
        )
        for i in range(intervals)
    ]


def test_short_requests_give_blocks_of_one_range_step() -> None:
    # chat requests decoding for a few seconds: adjacent 30 s blocks share almost nothing
    plan = blocksize.plan(
        one_pod(), lives([2.0, 3.0, 4.0] * 50), configured=None, scrape_interval=15.0,
        confidence=0.95,
    )  # fmt: skip
    assert plan.basis is BlockBasis.LIVES
    assert plan.seconds == 30.0
    assert 1.0 < plan.inflation < 1.05
    # Kish over decode times: the exact sum squared over the squares at the bucket midpoints
    # (2 s in (1.5, 2], 3 and 4 s in (2.5, 5])
    assert plan.requests == pytest.approx(450.0**2 / (50 * (1.75**2 + 2 * 3.75**2)))
    e = acceptance.estimate(one_pod(), confidence=0.95, batch_seconds=plan.seconds)
    assert e is not None and e.batches == 10 and e.method is EstimateMethod.BATCH_MEANS


def test_inflation_is_one_third_of_life_over_block_for_short_requests() -> None:
    # one request class of life L: sum L^3 / sum L^2 = L, so a share L / (3 B) of the variance
    # lies across each inner boundary, counted M / (M - 1) times by M batches' spread
    points = [(6.0, 10.0)]
    lost = 6 / 90
    assert blocksize.inflation(points, 30.0, 1.0, 10) == pytest.approx(1 / (1 - lost * 10 / 9))
    assert blocksize.inflation(points, 30.0, 0.5, 2) == pytest.approx(1 / (1 - 0.5 * lost * 2))
    assert blocksize.inflation(points, 30.0, 0.0, 4) == 1.0  # pods that are one block each
    assert blocksize.inflation(points, 30.0, 1.0, 1) == 1.0  # one batch: no spread at all
    # longer than the block: 1 / u - 1 / (3 u^2) of its weight stays inside blocks
    long_lost = 1 - (0.5 - 1 / 12)
    assert blocksize.inflation([(60.0, 1.0)], 30.0, 1.0, 100) == pytest.approx(
        1 / (1 - long_lost * 100 / 99)
    )
    shorter = [blocksize.inflation(points, b, 1.0, 10) for b in (10.0, 30.0, 90.0, 300.0)]
    assert shorter == sorted(shorter, reverse=True)


def test_the_inflation_matches_the_variance_blocks_miss_on_replayed_traffic() -> None:
    # 30 s blocks of two pods on the conversation trace with 5% hard requests (they decode
    # longest and carry the largest residuals): the spread of the estimates over the mean
    # squared standard error before the correction, against the model's inflation.
    s = tt.Setup(mix=tt.Mix(bad_share=0.05), shares=(0.25, 0.25))
    truth = tt.true_alpha(s.mix)
    errors, variances, modelled = [], [], []
    for seed in range(12):
        for w in tt.run(seed, s, windows=12):
            e = acceptance.estimate(w.samples, confidence=0.95, batch_seconds=30.0)
            assert e is not None and e.conclusive
            errors.append(e.value - truth)
            variances.append(e.std_error**2)
            c = blocksize._candidate(blocksize._by_pod(w.samples), 30.0)
            points = blocksize._usable(w.lives)
            modelled.append(blocksize.inflation(points, 30.0, c.inner, c.batches))
    measured = float(np.var(errors) / np.mean(variances))
    # 144 windows: the variance ratio is known to about +-12%
    assert 1.0 < float(np.median(modelled)) < 1.2
    assert measured == pytest.approx(float(np.median(modelled)), abs=0.2)


def test_requests_longer_than_half_the_window_make_one_pod_unjudgeable() -> None:
    # long outputs on a busy engine: requests decode for two minutes (median), some for ten
    decode = list(np.random.default_rng(1).lognormal(math.log(120.0), 1.0, 400))
    plan = blocksize.plan(
        one_pod(), lives(decode), configured=None, scrape_interval=15.0, confidence=0.95
    )
    assert plan.seconds == 300.0  # the whole window: the pod is its only batch
    e = acceptance.estimate(one_pod(), confidence=0.95, batch_seconds=plan.seconds)
    assert e is not None and not e.conclusive
    why = blocksize.judgeable(plan, e, lives(decode), window_seconds=300.0)
    assert why is not None and why.cause is Unjudgeable.REQUESTS_OUTLIVE_WINDOW
    assert why.window_seconds == 2 * why.block_seconds > 300.0
    assert why.pods == 2
    # that window would do: two blocks of the needed length keep the inflation in bounds
    points = blocksize._usable(lives(decode))
    assert blocksize.inflation(points, why.block_seconds, 0.5, 2) <= blocksize.MAX_INFLATION
    assert blocksize.inflation(points, why.block_seconds - 30, 0.5, 2) > blocksize.MAX_INFLATION
    # and two pods are two batches whatever the lives
    two = one_pod() + one_pod(pod="q")
    e2 = acceptance.estimate(two, confidence=0.95, batch_seconds=plan.seconds)
    assert e2 is not None and e2.conclusive and e2.batches == 2


def test_without_decode_times_auto_falls_back_and_says_so() -> None:
    plan = blocksize.plan(one_pod(), None, configured=None, scrape_interval=None, confidence=0.95)
    assert (plan.seconds, plan.basis) == (blocksize.FALLBACK_SECONDS, BlockBasis.LIVES_UNKNOWN)
    e = acceptance.estimate(one_pod(), confidence=0.95, batch_seconds=plan.seconds)
    why = blocksize.judgeable(plan, e, None, window_seconds=300.0)
    assert why is not None and why.cause is Unjudgeable.DECODE_TIMES_UNKNOWN
    assert why.window_seconds == 1800.0


def test_a_configured_block_is_used_as_given() -> None:
    plan = blocksize.plan(
        one_pod(), lives([2.0] * 99), configured=600.0, scrape_interval=15.0, confidence=0.95
    )
    assert (plan.seconds, plan.basis, plan.inflation) == (600.0, BlockBasis.CONFIGURED, 1.0)
    e = acceptance.estimate(one_pod(), confidence=0.95, batch_seconds=plan.seconds)
    why = blocksize.judgeable(plan, e, None, window_seconds=300.0)
    assert why is not None and why.cause is Unjudgeable.BLOCKS_TOO_LONG
    assert (why.block_seconds, why.window_seconds) == (600.0, 1200.0)


def test_a_burst_inside_one_block_is_named_as_such() -> None:
    # code-completion traffic: every draft of the window arrived in one 30 s burst
    burst = one_pod(intervals=1)
    plan = blocksize.plan(
        burst, lives([0.2] * 40), configured=None, scrape_interval=15.0, confidence=0.95
    )
    e = acceptance.estimate(burst, confidence=0.95, batch_seconds=plan.seconds)
    why = blocksize.judgeable(plan, e, lives([0.2] * 40), window_seconds=300.0)
    assert why is not None and why.cause is Unjudgeable.DRAFTS_IN_ONE_BLOCK
    assert why.block_seconds == 30.0


def test_the_scrape_interval_is_the_shortest_block() -> None:
    # pods scraped every 60 s behind 30 s range steps: a 30 s block would hold no scrape of
    # its own half the time
    plan = blocksize.plan(
        one_pod(), lives([2.0] * 99), configured=None, scrape_interval=60.0, confidence=0.95
    )
    assert plan.seconds == 60.0 and plan.spacing_seconds == 60.0


def test_broken_histograms_are_no_lives() -> None:
    bad = [
        RequestLives(Buckets((1.0, 2.0), (3.0, 4.0), 5.0)),  # no +Inf bucket
        RequestLives(Buckets((1.0, math.inf), (math.nan, 4.0), 5.0)),
        RequestLives(Buckets((math.inf,), (0.0,), 0.0)),  # nothing finished
    ]
    for b in bad:
        plan = blocksize.plan(one_pod(), b, configured=None, scrape_interval=15, confidence=0.95)
        assert plan.basis is BlockBasis.LIVES_UNKNOWN
        assert math.isnan(blocksize.effective_requests(b))


def test_block_weights_are_cut_as_the_estimate_cuts_them() -> None:
    # the planner cuts blocks itself (cheaply, once per length tried): it must cut exactly as
    # batching.blocks does for the estimate, gaps, uneven spans and tails included
    rng = np.random.default_rng(3)
    for _ in range(200):
        samples = []
        for pod in range(int(rng.integers(1, 4))):
            t = 0.0
            for _ in range(int(rng.integers(1, 14))):
                t += float(rng.choice([0.0, 0.0, 30.0, 60.0]))
                span = float(rng.choice([15.0, 30.0, 45.0]))
                samples.append(
                    AcceptanceSample(10, float(rng.integers(1, 500)), 5, pod=f"p{pod}",
                                     start=t, end=t + span)
                )  # fmt: skip
                t += span
        for seconds in (15.0, 30.0, 60.0, 90.0, 1e9):
            cut = acceptance.batches(samples, seconds)
            c = blocksize._candidate(blocksize._by_pod(samples), seconds)
            assert c.batches == len(cut)
            tokens = [t for _, t in cut]
            kish = sum(tokens) ** 2 / sum(t * t for t in tokens) - 1
            assert c.dof == pytest.approx(kish)
