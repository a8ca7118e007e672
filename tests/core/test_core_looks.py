"""Early looks at a probe's first window (core/looks.py): a look may fail a probe at its
O'Brien-Fleming-type spent level, never pass it, and the looks together spend no more than
the first window's pooled share, so the stated false rollbacks a day are unchanged. Each
machine test here held (no rollback) on the machine before the looks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import looks, machine, pace
from alphagate.core.model import Action, AlphaWindow, Memory, Rollout, State, Verdict
from specs import MACHINE_SPEC, merge

T0 = 1_000_000.0
OLD = T0 - 100_000
BASE: dict[str, Any] = merge(
    MACHINE_SPEC,
    {
        # the shipped gate, streak and timing (= the defaults), stated
        "acceptance": {"disableBelow": 0.55, "enableAbove": 0.60, "consecutiveWindows": 2},
        "timing": {"intervalSeconds": 30, "windowSeconds": 300, "warmupSeconds": 120},
    },
)
SPEC = SpeculativeCanarySpec.model_validate(BASE)
SETTLED = Rollout(completed_at=OLD, speculation_on=True)
L = 2 * 0.025**2  # the pooled share of one window: a^2 + a^2 at 95%, two windows


def probe(**kw: Any) -> Memory:
    """A probe enabled at T0 whose pods already ran the config (no flip, no warm-up)."""
    return Memory(state=State.PROBING, since=T0, streak_end=T0, probe_deadline=T0 + 3600, **kw)


def alpha(value: float, se: float = 0.01, dof: float = 10.0) -> AlphaWindow:
    return AlphaWindow(end=T0, value=value, tokens=5000.0, se=se, dof=dof)


def look(memory: Memory, a: AlphaWindow | None, at: float, v: Verdict = Verdict.FAIL) -> Any:
    return machine.step(machine.StepInput(memory, v, now=at, spec=SPEC, rollout=SETTLED, alpha=a))


def test_the_looks_spend_the_first_windows_pooled_share_and_no_more() -> None:
    assert looks.total(0.95, 2) == pytest.approx(L)
    assert looks.spent(1.0, L) == pytest.approx(L)
    grid = [i / 10 for i in range(11)]
    spent = [looks.spent(f, L) for f in grid]
    assert all(b >= a for a, b in itertools.pairwise(spent))
    assert spent[3] < L / 1000  # O'Brien-Fleming: next to nothing early
    # the looks of one first window (every interval, 0.1 of it) add up to at most L
    assert sum(b - a for a, b in itertools.pairwise(spent[:-1])) <= L


def test_the_stated_bound_a_day_is_unchanged() -> None:
    # the bound the evidence states is the streak's, decisive windows' and pooled runs'; the
    # looks spend the first window's pooled share, which that window never spends itself
    assert pace.budget(SPEC).pooled_level == pytest.approx(L)


def test_a_look_well_below_the_gate_rolls_the_probe_back_before_its_first_window() -> None:
    d = look(probe(), alpha(0.40), T0 + 180)
    assert d.action is Action.DISABLE and d.memory.state is State.ROLLED_BACK
    assert d.transition is not None
    ev = d.transition.evidence
    assert ev["look_fraction"] == pytest.approx(0.6)
    assert 0 < float(ev["look_level"]) < L
    assert float(ev["look_upper"]) < 0.55
    assert float(ev["false_rollbacks_per_day_at_gate"]) == pytest.approx(pace.budget(SPEC).per_day)


@pytest.mark.parametrize(
    ("why", "memory", "a", "at"),
    [
        ("near the gate", probe(), alpha(0.52), T0 + 180),
        ("too early to spend enough", probe(), alpha(0.40), T0 + 30),
        ("too few dof", probe(), alpha(0.40, dof=2.0), T0 + 180),
        ("no alpha", probe(), None, T0 + 180),
        (
            "a window judged already",
            probe().model_copy(update={"streak_end": T0 + 1}),
            alpha(0.4),
            T0 + 180,
        ),
        ("on, not probing", probe().model_copy(update={"state": State.ON}), alpha(0.4), T0 + 180),
    ],
)
def test_a_look_fails_only_a_probes_first_window_on_strong_evidence(
    why: str, memory: Memory, a: AlphaWindow | None, at: float
) -> None:
    d = look(memory, a, at)
    assert d.action is Action.HOLD, why


def test_a_look_never_passes() -> None:
    d = look(probe(), alpha(0.90), T0 + 270, Verdict.PASS)
    assert d.action is Action.HOLD and d.memory.state is State.PROBING
    assert d.memory.pass_streak == 0
