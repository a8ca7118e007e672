"""A fail streak judged on the pooled evidence of its disjoint windows (core/streak.py).

One canary pod on the bursty code-completion trace gives windows of a few thousand drafts in a
few bursts, 3-8 degrees of freedom: a window at a true 0.45 often reads 0.48 with an upper
bound just above 0.55, Inconclusive, and two failing windows in a row never come. Pooled, the
run's windows are one longer window: its bound at the joint level of two windows clears the
gate. Each test here failed before the run was pooled (`Memory.run`)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from test_core_one_canary_pod import _run  # the shipped policy on one canary pod

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import machine, pace, streak
from alphagate.core.model import (
    Action,
    AlphaWindow,
    Cause,
    CheckKind,
    Estimate,
    EstimateMethod,
    Memory,
    Rollout,
    State,
    Verdict,
)
from specs import MACHINE_SPEC, merge

T0 = 1_000_000.0
OLD = T0 - 100_000
BASE: dict[str, Any] = merge(
    MACHINE_SPEC,
    {"acceptance": {"disableBelow": 0.55, "enableAbove": 0.60, "consecutiveWindows": 2}},
)
SPEC = SpeculativeCanarySpec.model_validate(BASE)
SETTLED = Rollout(completed_at=OLD, speculation_on=True)
W = SPEC.timing.window_seconds


def on() -> Memory:
    return Memory(state=State.ON, since=OLD, last_flip_at=OLD)


def window(value: float, se: float, dof: float, tokens: float, end: float) -> AlphaWindow:
    return AlphaWindow(end=end, value=value, tokens=tokens, se=se, dof=dof)


def step(memory: Memory, verdict: Verdict, alpha: AlphaWindow | None, at: float) -> Any:
    kinds = (CheckKind.ACCEPTANCE,) if verdict is Verdict.FAIL else ()
    return machine.step(
        machine.StepInput(
            memory, verdict, now=at, spec=SPEC, rollout=SETTLED, fail_kinds=kinds, alpha=alpha
        )
    )


# Two judged windows of one canary pod at a true 0.45 on the code trace (the decision
# benchmark's 1c3b-code-a0.45, seed 2): the first reads 0.484 on 5 dof, upper bound 0.57
# (Inconclusive); the second 0.447 on 8 dof fails alone. Two failing windows in a row: no.
FIRST = window(0.484, 0.033, 5.0, 7_800.0, T0 + W)
SECOND = window(0.447, 0.023, 8.0, 10_400.0, T0 + 2 * W)


def test_two_bursty_windows_pooled_roll_back_where_the_streak_cannot() -> None:
    d1 = step(on(), Verdict.INCONCLUSIVE, FIRST, T0 + W)
    assert d1.action is Action.HOLD and d1.memory.run == (FIRST,)
    d2 = step(d1.memory, Verdict.FAIL, SECOND, T0 + 2 * W)
    assert d2.memory.fail_streak == 0  # a rollback clears the streaks; this was 1 of 2
    assert d2.action is Action.DISABLE
    assert d2.transition is not None and d2.transition.cause is Cause.POLICY_FAIL
    ev = d2.transition.evidence
    assert ev["pooled_windows"] == 2.0 and float(ev["pooled_upper"]) < 0.55
    assert ev["pooled_level"] == pytest.approx(0.025**2)
    assert ev["pooled_alpha"] == pytest.approx((0.484 * 7_800 + 0.447 * 10_400) / 18_200)
    assert d2.memory.run == ()  # a move ends the run


def test_the_pooled_bound_is_at_the_joint_level_of_the_windows() -> None:
    p = streak.pool((FIRST, SECOND), level=pace.joint_level(0.95, 2), gate=0.55)
    assert p is not None and p.fails
    w1, w2 = 7_800 / 18_200, 10_400 / 18_200
    var = (w1 * 0.033) ** 2 + (w2 * 0.023) ** 2
    assert p.std_error == pytest.approx(math.sqrt(var))
    dof = var**2 / ((w1 * 0.033) ** 4 / 5 + (w2 * 0.023) ** 4 / 8)
    assert p.dof == pytest.approx(dof)
    # at a single window's level the same pair is far below the gate; at the joint level of
    # three windows it would not clear it
    three = streak.pool((FIRST, SECOND), level=pace.joint_level(0.95, 3), gate=0.55)
    assert three is not None and not three.fails


def test_a_pass_ends_the_run_and_a_gap_starts_it_over() -> None:
    d1 = step(on(), Verdict.INCONCLUSIVE, FIRST, T0 + W)
    passed = step(d1.memory, Verdict.PASS, window(0.62, 0.01, 9, 9_000, T0 + 2 * W), T0 + 2 * W)
    assert passed.memory.run == ()
    # a judged window an hour later does not continue the run
    late = T0 + 3600
    gap = step(d1.memory, Verdict.FAIL, window(0.447, 0.023, 8, 10_400, late), late)
    assert gap.action is Action.HOLD and len(gap.memory.run) == 1


def test_a_window_without_evidence_neither_adds_nor_breaks_the_run() -> None:
    d1 = step(on(), Verdict.INCONCLUSIVE, FIRST, T0 + W)
    thin = step(d1.memory, Verdict.INCONCLUSIVE, None, T0 + 2 * W)  # 300 drafts: no interval
    assert thin.action is Action.HOLD and thin.memory.run == (FIRST,)
    third = window(0.447, 0.023, 8.0, 10_400.0, T0 + 3 * W)
    d3 = step(thin.memory, Verdict.FAIL, third, T0 + 3 * W)
    assert d3.action is Action.DISABLE and d3.transition is not None
    assert d3.transition.evidence["pooled_windows"] == 2.0
    # an Error (the source, not the traffic) leaves the run as it was
    err = step(d1.memory, Verdict.ERROR, None, T0 + 2 * W)
    assert err.memory.run == (FIRST,)


def test_a_run_keeps_only_the_windows_the_rule_needs() -> None:
    # consecutiveWindows (2) and one more: the window an undecided one could not carry
    m = on()
    for i in range(5):
        w = window(0.58, 0.03, 5.0, 5_000.0, T0 + (i + 1) * W)
        m = step(m, Verdict.INCONCLUSIVE, w, T0 + (i + 1) * W).memory
    assert [w.end for w in m.run] == [T0 + 3 * W, T0 + 4 * W, T0 + 5 * W]


def blocks(value: float, se: float, dof: float, tokens: float, end: float) -> AlphaWindow:
    return AlphaWindow(end=end, value=value, tokens=tokens, se=se, dof=dof, blocks=True)


# One canary pod at a true 0.45 on the code trace (tests/core/tracetraffic.py, seed 0): three
# windows of 5, 1 (210 drafts: under minDrafts, not in the run) and 2 block dof.
BURSTY = (
    blocks(0.474, 0.031, 5.0, 5_961.0, T0 + W),
    blocks(0.467, 0.019, 2.0, 2_901.0, T0 + 3 * W),
)


def test_one_pods_block_windows_share_one_dispersion_and_add_their_dof() -> None:
    p = streak.pool(BURSTY, level=0.025**2, gate=0.55)
    assert p is not None and p.dof == pytest.approx(7.0)  # 5 + 2 blocks' dof
    # each window's dispersion se^2 T, weighed by its dof, over the run's tokens
    dispersion = (5 * 0.031**2 * 5_961 + 2 * 0.019**2 * 2_901) / 7
    welch = math.fsum((t / 8_862 * se) ** 2 for t, se in ((5_961, 0.031), (2_901, 0.019)))
    assert p.std_error == pytest.approx(math.sqrt(max(welch, dispersion / 8_862)))
    # the same windows across pods (no common dispersion) stay on Welch's dof, under 7
    pods = tuple(w.model_copy(update={"blocks": False}) for w in BURSTY)
    q = streak.pool(pods, level=0.025**2, gate=0.55)
    assert q is not None and q.dof < 6.0
    # a learned prior inside each window's dof counts once
    prior = tuple(w.model_copy(update={"dof": w.dof + 6.0, "prior_dof": 6.0}) for w in BURSTY)
    r = streak.pool(prior, level=0.025**2, gate=0.55)
    assert r is not None and r.dof == pytest.approx(13.0)


def test_a_run_pools_one_window_more_than_the_streak_needs() -> None:
    # a failing window, an undecided one and a failing one: the last two pooled do not clear
    # the gate at a^2, the three do (at the same level: the evidence of two failing windows)
    first = blocks(0.455, 0.035, 6.0, 6_000.0, T0 + W)
    second = blocks(0.488, 0.031, 2.0, 4_000.0, T0 + 2 * W)
    third = blocks(0.440, 0.030, 6.0, 6_000.0, T0 + 3 * W)
    assert [j for j, _ in pace.pooled_levels(0.95, 2)] == [2, 3]
    assert [level for _, level in pace.pooled_levels(0.95, 2)] == pytest.approx([0.025**2] * 2)
    two = streak.pool((second, third), level=0.025**2, gate=0.55)
    assert two is not None and not two.fails
    got = streak.test((first, second, third), confidence=0.95, windows=2, gate=0.55)
    assert got is not None and got.fails and got.windows == 3


def _estimate(value: float, se: float, dof: float, drafts: float) -> Estimate:
    return Estimate(
        value=value, lower=value - 2 * se, upper=value + 2 * se, confidence=0.95, drafts=drafts,
        draft_tokens=3 * drafts, accepted_tokens=3 * drafts * value, batches=9,
        method=EstimateMethod.BATCH_MEANS, std_error=se, dof=dof,
    )  # fmt: skip


def test_a_window_keeps_the_variance_its_upper_bound_used() -> None:
    e = _estimate(0.47, 0.02, 2.0, 2_000)
    one_pod = Estimate(**{**{f: getattr(e, f) for f in e.__slots__}, "fail_std_error": 0.03,
                          "fail_dof": 8.0})  # fmt: skip
    got = streak.window_of(one_pod, end=T0, min_drafts=500)
    assert got is not None and (got.se, got.dof, got.tokens) == (0.03, 8.0, 6_000)
    assert got.blocks  # one pod's time blocks: its windows share one dispersion
    across = streak.window_of(e, end=T0, min_drafts=500)
    assert across is not None and not across.blocks
    assert streak.window_of(e, end=T0, min_drafts=5_000) is None  # under minDrafts: none
    bad = Estimate(**{**{f: getattr(e, f) for f in e.__slots__},
                      "method": EstimateMethod.INSUFFICIENT})  # fmt: skip
    assert streak.window_of(bad, end=T0, min_drafts=500) is None


def test_at_a_truth_on_the_gate_pooled_pairs_fail_at_their_joint_level() -> None:
    # independent windows with honest standard errors on 8 dof each, the truth on the gate:
    # the pooled pair fails at most a^2 (6.25e-4) of the time
    rng = random.Random(3)
    pairs, fails = 40_000, 0
    for _ in range(pairs):
        ws = []
        for _ in range(2):
            se = 0.03 * math.sqrt(rng.gammavariate(4.0, 0.25))  # chi2_8 / 8
            ws.append(window(0.55 + rng.gauss(0.0, 0.03), se, 8.0, 5_000.0, T0))
        p = streak.pool(tuple(ws), level=0.025**2, gate=0.55)
        fails += bool(p is not None and p.fails)
    assert fails / pairs < 2 * 0.025**2, fails


def test_one_canary_pod_on_the_code_trace_rolls_back_on_pooled_windows() -> None:
    # the shipped policy on the real code trace at 0.45 (tests/core/tracetraffic.py): seed 30
    # reads Inconclusive then Fail, seeds 15 and 23 Fail, Inconclusive, Fail. Two failing
    # windows in a row never come; their pooled windows roll back.
    for seed, windows in ((30, 2), (15, 3), (23, 3)):
        evs = _run(0.45, seed, 3, trace="code")
        assert len(evs) == windows, seed
        verdicts = [e.checks[0].verdict for e in evs]
        assert Verdict.INCONCLUSIVE in verdicts, (seed, verdicts)
        last = evs[-1]
        assert last.action is Action.DISABLE and last.transition is not None
        assert last.transition.cause is Cause.POLICY_FAIL
        assert last.transition.evidence["pooled_windows"] == 2.0
        upper = last.transition.evidence["pooled_upper"]
        assert isinstance(upper, float) and upper < 0.55
