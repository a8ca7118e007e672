"""The false-rollback budget the window rule allows by construction (core/pace.py), checked
against a simulation of the rule on independent windows and against the decisive rule."""

from __future__ import annotations

import random
from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import checks, pace
from alphagate.core.model import (
    AcceptanceEvidence,
    CheckKind,
    CheckResult,
    Estimate,
    EstimateMethod,
    Verdict,
)
from specs import MACHINE_SPEC, merge


def spec(**acceptance: Any) -> SpeculativeCanarySpec:
    return SpeculativeCanarySpec.model_validate(merge(MACHINE_SPEC, {"acceptance": acceptance}))


def test_the_shipped_rule_allows_under_six_tenths_of_a_rollback_a_day_at_the_gate() -> None:
    # two failing windows in a row (0.18), one decisive window (0.05) and the pooled run of
    # its last two and three windows, each at the joint level of two (core.streak: 0.36)
    b = pace.budget(spec(confidence=0.95, consecutiveWindows=2))
    assert b.windows_per_day == 288 and b.window_level == pytest.approx(0.025)
    assert b.decisive_level == pytest.approx(0.025**2 / 4)
    assert b.pooled_level == pytest.approx(2 * 0.025**2)
    assert 0.56 < b.per_day < 0.60
    three = pace.budget(spec(confidence=0.95, consecutiveWindows=3))
    assert three.pooled_level == pytest.approx(0.025**2 + 2 * 0.025**3)
    # a floor per slice is one more check that can fail a window: the level adds up
    assert pace.budget(spec(), checks=3).window_level == pytest.approx(0.075)
    assert pace.budget(spec(), checks=3).per_day > 3 * b.per_day
    # one window is a rollback: every failing window at the gate
    one = pace.budget(spec(consecutiveWindows=1))
    assert one.per_day == pytest.approx(288 * 0.025)


def test_the_streak_rate_matches_a_simulation_of_the_rule() -> None:
    """n failures in a row, the count restarting after each rollback, at p per window."""
    rng = random.Random(7)
    p, n, windows = 0.2, 2, 200_000
    run = rollbacks = 0
    for _ in range(windows):
        run = run + 1 if rng.random() < p else 0
        if run >= n:
            rollbacks += 1
            run = 0
    b = pace.budget(spec(confidence=1 - 2 * p, consecutiveWindows=n))
    streak_per_window = (b.per_day / b.windows_per_day) - b.decisive_level - b.pooled_level
    assert rollbacks / windows == pytest.approx(streak_per_window, rel=0.05)


def _failing(value: float, se: float, dof: float) -> CheckResult:
    e = Estimate(
        value=value,
        lower=value - 2 * se,
        upper=value + 2 * se,
        confidence=0.95,
        drafts=10_000,
        draft_tokens=30_000,
        accepted_tokens=value * 30_000,
        batches=int(dof) + 1,
        method=EstimateMethod.BATCH_MEANS,
        std_error=se,
        dof=dof,
    )
    ev = AcceptanceEvidence(disable_below=0.55, enable_above=0.60, min_drafts=500, estimate=e)
    return CheckResult(CheckKind.ACCEPTANCE, Verdict.FAIL, "below", ev)


def test_decisive_is_held_to_its_share_of_the_budget() -> None:
    # z at a^2 / 4 = 1.5625e-4 is 3.60 on many dof (3.23 at a^2): 0.55 - 3.4 se is not enough
    assert not checks.decisive(_failing(0.55 - 3.4 * 0.01, 0.01, 1000.0), windows=2)
    assert checks.decisive(_failing(0.55 - 3.7 * 0.01, 0.01, 1000.0), windows=2)


def test_few_degrees_of_freedom_are_never_decisive() -> None:
    """Two pods whose ratios agree to the fourth decimal by chance (measured on the code
    trace: 0.45407 and 0.45406) give a standard error near zero; their window still needs its
    disjoint successor."""
    assert not checks.decisive(_failing(0.454, 1e-6, 1.0), windows=2)
    assert not checks.decisive(_failing(0.454, 1e-6, 2.0), windows=2)
    assert checks.decisive(_failing(0.454, 1e-6, 3.0), windows=2)
