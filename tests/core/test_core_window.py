"""The window rule (window.read_window): which range a unit reads, and when judging resumes
after a flip. The live reconciler and the backtest both call it; these tests pin it down."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import window
from alphagate.core.model import Memory, Rollout, State

INTERVAL, WINDOW, WARMUP = 30.0, 300.0, 120.0
T0 = 1_000_000.0
OLD = T0 - 100_000


# = the defaults, stated: the window arithmetic below is computed from them
TIMING = {"intervalSeconds": INTERVAL, "windowSeconds": WINDOW, "warmupSeconds": WARMUP}
Spec = SpeculativeCanarySpec


@pytest.fixture
def spec(make_spec: Callable[..., Spec]) -> Spec:
    return make_spec(timing=TIMING)


SETTLED = Rollout(completed_at=OLD, speculation_on=True)


def probing(flip_at: float) -> Memory:
    return Memory(state=State.PROBING, since=flip_at, last_flip_at=flip_at)


@pytest.mark.parametrize("state", [State.OFF, State.ROLLED_BACK, State.PAUSED, State.PROMOTED])
def test_units_that_judge_nothing_read_the_whole_window(state: State, spec: Spec) -> None:
    m = Memory(state=state, since=T0 - 10, last_flip_at=T0 - 10)
    assert window.read_window(spec, SETTLED, T0, memory=m) == (T0 - WINDOW, T0)


def test_no_memory_reads_the_whole_window(spec: Spec) -> None:
    assert window.read_window(spec, SETTLED, T0, memory=None) == (T0 - WINDOW, T0)


def test_a_rollout_in_progress_reads_the_whole_window(spec: Spec) -> None:
    m = probing(T0 - 200)
    assert window.read_window(spec, Rollout(in_progress=True), T0, memory=m) == (T0 - WINDOW, T0)


def test_judging_unit_cuts_after_warmup_but_keeps_two_intervals(spec: Spec) -> None:
    # warm-up ended 150 s ago: the cut keeps those 150 s (more than two intervals)
    assert window.read_window(spec, SETTLED, T0, memory=probing(T0 - 270)) == (T0 - 150, T0)
    # warm-up ended 40 s ago: the cut would leave 40 s, the rule keeps two intervals (60 s)
    assert window.read_window(spec, SETTLED, T0, memory=probing(T0 - 160)) == (T0 - 60, T0)
    # warm-up not over: less than one interval after it, the whole window is read
    assert window.read_window(spec, SETTLED, T0, memory=probing(T0 - 130)) == (T0 - WINDOW, T0)
    # a flip long ago: nothing to cut
    assert window.read_window(spec, SETTLED, T0, memory=probing(OLD)) == (T0 - WINDOW, T0)


def test_a_later_rollout_moves_the_warmup(spec: Spec) -> None:
    rollout = Rollout(completed_at=T0 - 200, speculation_on=True)  # after the flip
    m = probing(T0 - 400)
    assert window.read_window(spec, rollout, T0, memory=m) == (T0 - 80, T0)


def first_judged(spec: Spec, flip_at: float) -> float:
    """The first evaluation time (on the interval grid after the flip) whose window may be
    judged under the rule."""
    rollout = Rollout(completed_at=flip_at, speculation_on=True)
    m = probing(flip_at)
    for i in range(1, 100):
        now = flip_at + i * spec.timing.interval_seconds
        start, _ = window.read_window(spec, rollout, now, memory=m)
        if window.not_judgeable(spec, rollout, m, start) is None:
            return now
    raise AssertionError("never judged within 100 intervals")


def test_judging_resumes_two_intervals_after_the_warmup(spec: Spec) -> None:
    # The boundary: warm-up end + 2 intervals exactly, not one interval earlier.
    assert first_judged(spec, T0) == T0 + WARMUP + 2 * INTERVAL
    rollout = Rollout(completed_at=T0, speculation_on=True)
    m = probing(T0)
    one_early = T0 + WARMUP + INTERVAL
    start, _ = window.read_window(spec, rollout, one_early, memory=m)
    assert start < T0 + WARMUP and window.not_judgeable(spec, rollout, m, start) is not None


def test_short_windows_resume_when_the_window_clears_the_warmup(
    make_spec: Callable[..., Spec],
) -> None:
    # A window of one interval cannot keep two: judging starts once it lies after the warm-up.
    short = make_spec(timing={**TIMING, "windowSeconds": INTERVAL})
    assert first_judged(short, T0) == T0 + WARMUP + INTERVAL


def test_shared_window_takes_the_earliest_start(spec: Spec) -> None:
    units = [(probing(T0 - 270), SETTLED), (probing(OLD), SETTLED)]
    assert window.shared_window(spec, units, T0) == (T0 - WINDOW, T0)
    units = [(probing(T0 - 270), SETTLED), (probing(T0 - 160), SETTLED)]
    assert window.shared_window(spec, units, T0) == (T0 - 150, T0)
    assert window.shared_window(spec, [], T0) == (T0 - WINDOW, T0)


def test_the_first_counted_window_is_the_first_whole_one_after_the_warmup(spec: Spec) -> None:
    """Looks after the warm-up are shown; the first window that counts toward a flip is the
    first whole one that starts after it."""
    rollout = Rollout(completed_at=T0, speculation_on=True)
    m = probing(T0)
    counted = []
    for i in range(1, 40):
        now = T0 + i * INTERVAL
        start, _ = window.read_window(spec, rollout, now, memory=m)
        if window.not_judgeable(spec, rollout, m, start) is None and window.judged(
            spec, m, start, now
        ):
            counted.append(now)
    assert counted[0] == T0 + WARMUP + WINDOW
