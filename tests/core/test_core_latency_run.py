"""The latency guard's quantile Fail test pooled over adjacent disjoint judged windows
(core/latency_run.py): its exact binomial, which windows it pools, its level (false rollbacks
at the null's edge), and end to end through `evaluate` on the benchmark's tail-only case."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from alphagate.config import LatencyMetric
from alphagate.core import checks, latency_run
from alphagate.core.evidence import CheckResult
from alphagate.core.latency import W_QUANTILE
from alphagate.core.latency_evidence import (
    ExceedanceTest,
    LatencyEvidence,
    LatencyUndecided,
    TailGuard,
)
from alphagate.core.latency_run import LatencyRun, TailCount
from alphagate.core.model import CheckKind, Memory, Verdict
from alphagate.core.resolution import Resolution, TailWithin

WINDOW = 300.0
SIG = 0.05  # the shipped latency.significance
LEVEL = W_QUANTILE * SIG**2  # two windows (the shipped latency.consecutiveWindows)


def _check(above: float, total: float, verdict: Verdict = Verdict.INCONCLUSIVE) -> CheckResult:
    """A latency check whose quantile Fail side counted `above` of `total` independent canary
    requests above its edge (1% allowed)."""
    res = Resolution(
        bucket_lo=0.0125,
        bucket_hi=0.0138,
        margin=0.10,
        pass_edge=0.0138,
        fail_edge=0.0151,
        resolvable=True,
    )
    fail = ExceedanceTest(
        edge=0.0151,
        above=above,
        fraction=above / total,
        expected_fraction=0.01,
        p_value=latency_run.p_above(above, total, 0.01),
        total=total,
        effective=total,
    )
    ev = LatencyEvidence(
        metric=LatencyMetric.PER_TOKEN,
        quantile=0.99,
        max_regression_ratio=0.10,
        significance=SIG,
        min_count=100,
        tail=TailGuard(0.99, res, TailWithin.NOT_SHOWN, fail_test=fail),
        undecided=(LatencyUndecided.POSSIBLE_REGRESSION,),
    )
    return CheckResult(CheckKind.LATENCY, verdict, "time per output token: not shown", ev)


def _pool(run: LatencyRun, results: list[CheckResult], start: float) -> Any:
    return latency_run.pool(
        run,
        results,
        start=start,
        end=start + WINDOW,
        window_seconds=WINDOW,
        windows=2,
        significance=SIG,
        weight=W_QUANTILE,
    )


def test_the_pooled_p_is_the_exact_binomial_tail_at_whole_counts() -> None:
    def exact(k: int, n: int, p: float) -> float:
        return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))

    for k, n in ((1, 10), (9, 400), (17, 800), (40, 1000)):
        assert latency_run.p_above(k, n, 0.01) == pytest.approx(exact(k, n, 0.01), rel=1e-9)
    assert latency_run.p_above(0, 400, 0.01) == 1.0
    assert math.isnan(latency_run.p_above(3, 0, 0.01))


def test_two_windows_undecided_alone_fail_on_their_pooled_counts_and_decide() -> None:
    # 2.4% of 400 requests above the P99 Fail edge against 1% allowed: p ~ 0.012 alone, not
    # below the quantile's share of a window's family (0.45 x 0.05 = 0.0225) after Holm with
    # the mean's; pooled, 19.2 of 800: p ~ 5e-4 <= 0.45 x 0.05^2 = 0.0011.
    first, second = _check(9.6, 400), _check(9.6, 400)
    assert first.evidence is not None
    out, run = _pool(LatencyRun(), [first], 0.0)
    assert out[0].verdict is Verdict.INCONCLUSIVE  # nothing to pool with yet
    assert len(run.windows) == 1
    out, run = _pool(run, [second], WINDOW)
    got = out[0]
    assert got.verdict is Verdict.FAIL
    ev = got.evidence
    assert isinstance(ev, LatencyEvidence) and ev.pooled is not None
    assert ev.pooled.windows == 2 and ev.pooled.total == pytest.approx(800)
    assert ev.pooled.p_value <= LEVEL and ev.pooled.rejected
    assert ev.undecided == ()
    assert checks.decisive(got, 2)  # it rolls back on this window
    assert [c.end for c in run.windows] == [2 * WINDOW]  # keeps windows - 1 for the next


def test_a_healthy_window_between_keeps_the_pool_from_failing() -> None:
    out, run = _pool(LatencyRun(), [_check(9.6, 400)], 0.0)
    out, run = _pool(run, [_check(2, 400, Verdict.PASS)], WINDOW)
    assert out[0].verdict is Verdict.PASS
    ev = out[0].evidence
    assert isinstance(ev, LatencyEvidence) and ev.pooled is not None and not ev.pooled.rejected


def test_only_adjacent_disjoint_windows_are_pooled() -> None:
    _, run = _pool(LatencyRun(), [_check(9.6, 400)], 0.0)
    # more than a window of unjudged time between them: the streak starts over
    out, gap = _pool(run, [_check(9.6, 400)], 2 * WINDOW + 10.0)
    assert out[0].verdict is Verdict.INCONCLUSIVE
    assert [c.start for c in gap.windows] == [2 * WINDOW + 10.0]
    # overlapping the last window: not new evidence, not pooled
    out, _ = _pool(run, [_check(9.6, 400)], WINDOW / 2)
    assert out[0].verdict is Verdict.INCONCLUSIVE


def test_a_check_without_counts_starts_its_slice_over_and_others_pass_through() -> None:
    _, run = _pool(LatencyRun(), [_check(9.6, 400)], 0.0)
    bare = CheckResult(CheckKind.LATENCY, Verdict.INCONCLUSIVE, "no data")
    alpha = CheckResult(CheckKind.ACCEPTANCE, Verdict.PASS, "alpha")
    out, after = _pool(run, [alpha, bare], WINDOW)
    assert out == (alpha, bare)
    assert after.windows == ()


def test_slices_pool_their_own_windows() -> None:
    chat = replace(_check(9.6, 400), slice="chat")
    code = replace(_check(9.6, 400), slice="code")
    _, run = _pool(LatencyRun(), [chat], 0.0)
    out, run = _pool(run, [code], WINDOW)
    assert out[0].verdict is Verdict.INCONCLUSIVE  # code has no window before it
    assert {c.slice for c in run.windows} == {"code"}


def test_an_error_stays_an_error() -> None:
    _, run = _pool(LatencyRun(), [_check(20, 400)], 0.0)
    out, _ = _pool(run, [_check(20, 400, Verdict.ERROR)], WINDOW)
    assert out[0].verdict is Verdict.ERROR


def test_false_rollbacks_at_the_nulls_edge_stay_within_the_level() -> None:
    # A canary exactly on the null's edge (1% of its requests above the Fail edge) over
    # 20,000 judged windows of 400 requests: each look pools the last two and rejects at
    # most LEVEL (0.11%) of the time; a tail regression (2.5%) is caught in most looks.
    rng = np.random.default_rng(7)
    for share, lo, hi in ((0.01, 0.0, LEVEL), (0.025, 0.6, 1.0)):
        counts = rng.binomial(400, share, size=20_001)
        looks = [
            latency_run.pooled_test(
                [
                    TailCount(start=0.0, end=1.0, above=a, total=400, expected=0.01),
                    TailCount(start=1.0, end=2.0, above=b, total=400, expected=0.01),
                ],
                significance=SIG,
                weight=W_QUANTILE,
            )
            for a, b in itertools.pairwise(counts)
        ]
        rate = sum(t is not None and t.rejected for t in looks) / len(looks)
        print(f"share {share}: pooled rejection rate {rate:.4%} (level {LEVEL:.4%})")
        assert lo <= rate <= hi


def test_memory_round_trips_the_run() -> None:
    run = LatencyRun(
        windows=(TailCount(slice="", start=0.0, end=300.0, above=9.6, total=400, expected=0.01),)
    )
    m = Memory(latency_run=run)
    assert Memory.model_validate_json(m.model_dump_json()).latency_run == run
    # what a real check leaves (its batch spread included) reads back too
    _, real = _pool(LatencyRun(), [_check(9.6, 400)], 0.0)
    assert Memory.model_validate_json(Memory(latency_run=real).model_dump_json()) == Memory(
        latency_run=real
    )


def _pooled_fails(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Times of latency checks that failed on pooled counts, in benchmark runs after this."""
    from alphagate.core.evaluate import evaluate as real
    from alphagate_lab.bench.decisions import policies

    seen: list[float] = []

    def spy(*args: Any, **kw: Any) -> Any:
        ev = real(*args, **kw)
        for c in ev.checks:
            e = c.evidence
            if isinstance(e, LatencyEvidence) and e.pooled is not None and e.pooled.rejected:
                seen.append(ev.at)
        return ev

    monkeypatch.setattr(policies, "evaluate", spy)
    return seen


def test_end_to_end_a_tail_only_regression_undecided_window_by_window_rolls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The benchmark's tail-only 1.5x on the plan's buckets, the shipped policy as shipped:
    # seeds whose windows alternated Fail and Inconclusive ("possible regression") and so
    # took 31-36 minutes on the fail streak alone roll back within 30 on the pooled counts.
    from alphagate_lab.bench.decisions import loop

    pooled = _pooled_fails(monkeypatch)
    for seed in (5, 13, 20):
        r = loop.run("1c3b-conv-tail-1.5x-geo", seed, "alphagate", 1.0)
        assert r.regression_at is not None
        back = [t for t, kind in r.flips if kind == "disable" and t >= r.regression_at]
        assert back and back[0] - r.regression_at <= 1800.0, (seed, back)
    assert pooled  # at least one of them on the pooled test


def test_end_to_end_a_healthy_canary_never_fails_on_pooled_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from alphagate_lab.bench.decisions import loop

    pooled = _pooled_fails(monkeypatch)
    for case in ("1c3b-conv-a0.7", "1c3b-conv-stalls"):
        r = loop.run(case, 1, "alphagate", 1.0)
        assert not [t for t, kind in r.flips if kind == "disable"], case
    assert pooled == []
