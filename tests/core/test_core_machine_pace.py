"""The state machine's pace (issue 12): how soon a rollback may come, how far apart the next
probes are, and what is not a flip. Each test here failed on the machine before these rules:

* a decisive window (its bound at the joint level of every window the rule needs clears the
  gate) rolls back alone; a plain failing window still needs its disjoint successor;
* only whole windows disjoint from the last one judged count (one verdict per window);
* the cooldown after a rejection far below the gate is longer (one backoff step per band);
* enabling a canary whose pods already run the config restarts nothing: no flip is counted
  and no warm-up starts.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import checks, machine, window
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    CheckKind,
    CheckResult,
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
    {
        # the shipped gate and streak (= the defaults), stated: the bounds are computed from them
        "acceptance": {"disableBelow": 0.55, "enableAbove": 0.60, "consecutiveWindows": 2},
        # day-scale backoff like the shipped policies' (1 h first, so a day shows several)
        "timing": {"cooldown": {"initialSeconds": 3600, "factor": 2, "maxSeconds": 86400}},
    },
)
SPEC = SpeculativeCanarySpec.model_validate(BASE)
SETTLED = Rollout(completed_at=OLD, speculation_on=True)
F = Verdict.FAIL


def on(**kw: Any) -> Memory:
    return Memory(state=State.ON, since=OLD, last_flip_at=OLD, **kw)


def est(value: float, se: float, dof: float, batches: int = 2) -> Estimate:
    t = 12.706 if dof == 1 else 1.96
    return Estimate(
        value=value,
        lower=value - t * se,
        upper=value + t * se,
        confidence=0.95,
        drafts=100_000,
        draft_tokens=300_000,
        accepted_tokens=150_000,
        batches=batches,
        method=EstimateMethod.BATCH_MEANS,
        std_error=se,
        dof=dof,
    )


def failing(e: Estimate) -> CheckResult:
    evidence = AcceptanceEvidence(disable_below=0.55, enable_above=0.60, min_drafts=500, estimate=e)
    return CheckResult(CheckKind.ACCEPTANCE, Verdict.FAIL, "upper bound below", evidence)


# ---------------------------------------------------------------- decisive windows


def test_decisive_needs_the_joint_level_of_all_windows() -> None:
    # 16 pods (dof 15): alpha 0.45 +- 0.005 is far below 0.55 even at the joint level
    assert checks.decisive(failing(est(0.45, 0.005, 15.0, 16)), windows=2)
    # the same window just below the gate: its 95% bound clears it, the joint one does not
    near = est(0.535, 0.005, 15.0, 16)
    assert near.upper < 0.55 and not checks.decisive(failing(near), windows=2)
    # two pods (dof 1): heavy t tails, two windows are still needed
    assert not checks.decisive(failing(est(0.45, 0.002, 1.0)), windows=2)
    # a rule of one window: every failing window is decisive
    assert checks.decisive(failing(near), windows=1)
    # no standard error, or not a failing alpha check: never decisive
    assert not checks.decisive(failing(est(0.45, math.nan, 15.0, 16)), windows=2)
    passing = CheckResult(CheckKind.ACCEPTANCE, Verdict.PASS, "ok", failing(near).evidence)
    assert not checks.decisive(passing, windows=2)
    assert not checks.decisive(CheckResult(CheckKind.LATENCY, F, "slower"), windows=2)


def test_a_decisive_window_rolls_back_alone() -> None:
    d = machine.step(machine.StepInput(on(), F, now=T0, spec=SPEC, rollout=SETTLED, decisive=True))
    assert d.action is Action.DISABLE and d.memory.state is State.ROLLED_BACK
    # a plain failing window only opens the streak
    d = machine.step(machine.StepInput(on(), F, now=T0, spec=SPEC, rollout=SETTLED))
    assert d.action is Action.HOLD and d.memory.fail_streak == 1


def test_decisive_never_acts_on_data_in_warm_up() -> None:
    m = on().model_copy(update={"last_flip_at": T0 - 60, "since": T0 - 60})
    d = machine.step(machine.StepInput(m, F, now=T0, spec=SPEC, rollout=SETTLED, decisive=True))
    assert d.action is Action.HOLD and d.memory.state is State.ON


# ---------------------------------------------------------------- the next judged window


def test_an_open_failing_streak_waits_for_the_next_whole_window() -> None:
    opened = machine.step(machine.StepInput(on(), F, now=T0, spec=SPEC, rollout=SETTLED)).memory
    assert opened.fail_streak == 1 and opened.streak_end == T0
    # a judging unit reads whole windows; those overlapping the last judged one are looks
    assert window.read_window(SPEC, SETTLED, T0 + 60, memory=opened) == (T0 - 240, T0 + 60)
    assert not window.judged(SPEC, opened, T0 - 240, T0 + 60)
    d = machine.step(
        machine.StepInput(opened, F, now=T0 + 60, spec=SPEC, rollout=SETTLED, window_start=T0 - 240)
    )
    assert d.action is Action.HOLD and d.memory == opened.model_copy(
        update={"last_conclusive_at": T0 + 60}
    )
    # the whole window after it is judged: the streak completes
    start, end = window.read_window(SPEC, SETTLED, T0 + 300, memory=opened)
    assert (start, end) == (T0, T0 + 300) and window.judged(SPEC, opened, start, end)
    d = machine.step(
        machine.StepInput(opened, F, now=end, spec=SPEC, rollout=SETTLED, window_start=start)
    )
    assert d.action is Action.DISABLE


# ---------------------------------------------------------------- cooldown depth


@pytest.mark.parametrize(
    ("shortfall", "depth"), [(0.0, 0), (0.9, 0), (1.0, 1), (1.96, 1), (2.0, 2), (40.0, 4)]
)
def test_rejection_depth(shortfall: float, depth: int) -> None:
    assert machine.rejection_depth(shortfall) == depth


def test_a_rejection_far_below_the_gate_backs_off_longer() -> None:
    streak = on(fail_streak=1, streak_end=T0 - 300)
    near = machine.step(
        machine.StepInput(streak, F, now=T0, spec=SPEC, rollout=SETTLED, shortfall=0.3)
    )
    far = machine.step(
        machine.StepInput(streak, F, now=T0, spec=SPEC, rollout=SETTLED, shortfall=2.0)
    )
    assert near.action is far.action is Action.DISABLE
    assert near.memory.cooldown_until - T0 == 3600
    assert far.memory.cooldown_until - T0 == 4 * 3600
    # depth deepens this cooldown only: the index still counts rollbacks in a row
    assert near.memory.cooldown_index == far.memory.cooldown_index == 1
    # and maxSeconds caps it (On for a minute only: the index has not decayed)
    recent = streak.model_copy(update={"since": T0 - 60, "cooldown_index": 3})
    capped = machine.step(
        machine.StepInput(recent, F, now=T0, spec=SPEC, rollout=SETTLED, shortfall=4)
    )
    assert capped.memory.cooldown_until - T0 == 86400


def test_shortfall_in_bands() -> None:
    assert checks.shortfall(failing(est(0.45, 0.01, 1.0)), 0.05) == pytest.approx(2.0)
    assert checks.shortfall(failing(est(0.56, 0.001, 1.0)), 0.05) == 0.0
    assert checks.shortfall(CheckResult(CheckKind.LATENCY, F, "slower"), 0.05) == 0.0
    assert checks.shortfall(failing(est(0.45, 0.01, 1.0)), 0.0) == 0.0


# ---------------------------------------------------------------- a no-op enable


def test_enabling_a_canary_that_already_speculates_is_no_flip() -> None:
    d = machine.step(
        machine.StepInput(Memory(), Verdict.INCONCLUSIVE, now=T0, spec=SPEC, rollout=SETTLED)
    )
    assert d.action is Action.ENABLE and d.memory.state is State.PROBING
    assert d.memory.flip_times == () and d.memory.last_flip_at is None
    # its data is judged at once (no warm-up from a restart that did not happen) ...
    assert window.not_judgeable(SPEC, SETTLED, d.memory, T0) is None
    # ... while an enable that patches the pods is a flip and starts a warm-up
    off = Rollout(completed_at=OLD, speculation_on=False)
    d = machine.step(
        machine.StepInput(Memory(), Verdict.INCONCLUSIVE, now=T0, spec=SPEC, rollout=off)
    )
    assert d.memory.flip_times == (T0,) and d.memory.last_flip_at == T0
    assert window.not_judgeable(SPEC, off, d.memory, T0) is not None


def test_a_partial_window_neither_confirms_nor_clears() -> None:
    opened = machine.step(machine.StepInput(on(), F, now=T0, spec=SPEC, rollout=SETTLED)).memory
    # 60 s after the last window judged: a look, PASS or FAIL, leaves the streak as it is
    for v in (Verdict.PASS, F):
        p = machine.step(
            machine.StepInput(opened, v, now=T0 + 60, spec=SPEC, rollout=SETTLED, window_start=T0)
        )
        assert (p.memory.fail_streak, p.memory.pass_streak) == (1, 0)
        assert p.action is Action.HOLD
    # a whole window that passes clears it
    p = machine.step(
        machine.StepInput(
            opened, Verdict.PASS, now=T0 + 300, spec=SPEC, rollout=SETTLED, window_start=T0
        )
    )
    assert p.memory.fail_streak == 0 and p.memory.pass_streak == 1
