"""The state machine: one-step table tests, a full Off -> Probing -> On -> RolledBack -> Probing
-> On cycle on an explicit clock, manual commands, and hypothesis properties (never flips on
Inconclusive or Error, never judges warm-up or rollout data, never exceeds the flip cap, streaks
are consecutive)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import machine, moves, reprobe, window
from alphagate.core.model import (
    Action,
    Alert,
    Cause,
    CheckKind,
    Command,
    Memory,
    Rollout,
    State,
    Verdict,
)
from specs import MACHINE_SPEC, merge, spec_from

P, F, INC, E = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.ERROR

BASE: dict[str, Any] = merge(MACHINE_SPEC, {"timing": {"reprobeMixShift": 0.15}})


def make_spec(**over: Any) -> SpeculativeCanarySpec:
    return spec_from(BASE, **over)


SPEC = make_spec()
T0 = 1_000_000.0
SETTLED = Rollout(completed_at=T0 - 10_000, speculation_on=True)


def mem(**kw: Any) -> Memory:
    return Memory(**kw)


def step(
    m: Memory, v: Verdict, now: float = T0, spec: SpeculativeCanarySpec = SPEC, **kw: Any
) -> moves.Decision:
    kw.setdefault("rollout", SETTLED)
    return machine.step(machine.StepInput(m, v, now=now, spec=spec, **kw))


# A memory that flipped long ago (dwell, warm-up and cap all clear).
OLD = T0 - 10_000

STEPS = [
    # id, memory, verdict, extra kwargs, expected state, action, reason needle
    ("new-canary-probes-at-once", mem(), INC, {}, State.PROBING, Action.ENABLE, "new canary"),
    ("new-canary-error-holds", mem(), E, {}, State.OFF, Action.HOLD, "source error"),
    (
        "new-canary-paused",
        mem(),
        INC,
        {"spec": make_spec(paused=True)},
        State.PAUSED,
        Action.HOLD,
        "spec.paused",
    ),
    (
        "probing-one-pass-holds",
        mem(state=State.PROBING, since=OLD, last_flip_at=OLD, probe_deadline=T0 + 100),
        P,
        {},
        State.PROBING,
        Action.HOLD,
        "pass streak 1/2",
    ),
    (
        "probing-second-pass-confirms",
        mem(
            state=State.PROBING,
            since=OLD,
            last_flip_at=OLD,
            pass_streak=1,
            streak_end=T0 - 300,  # the last judged window ended where this one starts
            cooldown_index=3,
            probe_deadline=T0 + 100,
        ),
        P,
        {},
        State.ON,
        Action.HOLD,
        "confirmed: 2 consecutive passing windows",
    ),
    (
        "probing-second-fail-rolls-back",
        mem(
            state=State.PROBING,
            since=OLD,
            last_flip_at=OLD,
            fail_streak=1,
            streak_end=T0 - 300,
            probe_deadline=T0 + 100,
        ),
        F,
        {},
        State.ROLLED_BACK,
        Action.DISABLE,
        "probe failed: 2 consecutive failing windows",
    ),
    (
        "probing-fail-after-inconclusive-is-not-a-streak",
        mem(
            state=State.PROBING, since=OLD, last_flip_at=OLD, fail_streak=0, probe_deadline=T0 + 100
        ),
        F,
        {},
        State.PROBING,
        Action.HOLD,
        "fail streak 1/2",
    ),
    (
        "probing-latency-fail-uses-latency-windows",
        mem(state=State.PROBING, since=OLD, last_flip_at=OLD, probe_deadline=T0 + 100),
        F,
        {"spec": make_spec(latency={"consecutiveWindows": 1}), "fail_kinds": [CheckKind.LATENCY]},
        State.ROLLED_BACK,
        Action.DISABLE,
        "1 consecutive failing windows",
    ),
    (
        "probing-deadline-passed-keeps-probing",
        mem(state=State.PROBING, since=OLD, last_flip_at=OLD, probe_deadline=T0 - 1),
        INC,
        {},
        State.PROBING,
        Action.HOLD,
        "still probing",
    ),
    (
        "probing-error-holds",
        mem(
            state=State.PROBING,
            since=OLD,
            last_flip_at=OLD,
            error_streak=50,
            probe_deadline=T0 + 100,
        ),
        E,
        {},
        State.PROBING,
        Action.HOLD,
        "window Error",
    ),
    (
        "probing-fail-safe-disables",
        mem(
            state=State.PROBING,
            since=OLD,
            last_flip_at=OLD,
            error_streak=9,
            probe_deadline=T0 + 100,
        ),
        E,
        {"spec": make_spec(errors={"failSafe": "disable", "failSafeAfter": 10})},
        State.ROLLED_BACK,
        Action.DISABLE,
        "fail-safe: 10 consecutive source errors",
    ),
    (
        "on-inconclusive-holds",
        mem(state=State.ON, since=OLD, last_flip_at=OLD, fail_streak=1),
        INC,
        {},
        State.ON,
        Action.HOLD,
        "on: window Inconclusive",
    ),
    (
        "on-fail-streak-rolls-back",
        mem(state=State.ON, since=OLD, last_flip_at=OLD, fail_streak=1, streak_end=T0 - 300),
        F,
        {},
        State.ROLLED_BACK,
        Action.DISABLE,
        "rolled back: 2 consecutive failing windows; next probe after 900 s",
    ),
    (
        "on-fail-inside-warmup-not-judged",
        mem(state=State.ON, since=OLD, last_flip_at=OLD, fail_streak=1),
        F,
        {"rollout": Rollout(completed_at=T0 - 200, speculation_on=True)},
        State.ON,
        Action.HOLD,
        "warm-up",
    ),
    (
        "on-fail-during-rollout-not-judged",
        mem(state=State.ON, since=OLD, last_flip_at=OLD, fail_streak=1),
        F,
        {"rollout": Rollout(in_progress=True, completed_at=OLD)},
        State.ON,
        Action.HOLD,
        "rollout in progress",
    ),
    (
        "on-bake-done-promotes",
        mem(state=State.ON, since=OLD, last_flip_at=OLD),
        P,
        {
            "spec": make_spec(
                promotion={"enabled": True, "bakeSeconds": 3600, "stable": {"name": "stable"}}
            )
        },
        State.PROMOTED,
        Action.PROMOTE,
        "promote",
    ),
    (
        "on-bake-not-done-holds",
        mem(state=State.ON, since=T0 - 100, last_flip_at=OLD),
        P,
        {
            "spec": make_spec(
                promotion={"enabled": True, "bakeSeconds": 3600, "stable": {"name": "stable"}}
            )
        },
        State.ON,
        Action.HOLD,
        "on:",
    ),
    (
        "promoted-is-terminal",
        mem(state=State.PROMOTED, since=OLD, last_flip_at=OLD, fail_streak=5),
        F,
        {},
        State.PROMOTED,
        Action.HOLD,
        "no longer gated",
    ),
    (
        "rolled-back-cooling-down",
        mem(
            state=State.ROLLED_BACK, since=T0 - 100, last_flip_at=T0 - 100, cooldown_until=T0 + 800
        ),
        INC,
        {},
        State.ROLLED_BACK,
        Action.HOLD,
        "cooling down, next probe in 800 s",
    ),
    (
        "rolled-back-cooldown-over-probes",
        mem(state=State.ROLLED_BACK, since=OLD, last_flip_at=OLD, cooldown_until=T0 - 1),
        INC,
        {},
        State.PROBING,
        Action.ENABLE,
        "cooldown over",
    ),
    (
        "rolled-back-error-never-probes",
        mem(state=State.ROLLED_BACK, since=OLD, last_flip_at=OLD, cooldown_until=T0 - 1),
        E,
        {},
        State.ROLLED_BACK,
        Action.HOLD,
        "source error",
    ),
    (
        "rolled-back-min-dwell",
        mem(state=State.ROLLED_BACK, since=T0 - 300, last_flip_at=T0 - 300, cooldown_until=T0 - 1),
        INC,
        {},
        State.ROLLED_BACK,
        Action.HOLD,
        "minimum dwell",
    ),
    (
        "rolled-back-flip-budget",
        mem(
            state=State.ROLLED_BACK,
            since=T0 - 700,
            last_flip_at=T0 - 700,
            cooldown_until=T0 - 1,
            flip_times=(T0 - 3000, T0 - 700, T0 - 2000),
        ),
        INC,
        {},
        State.ROLLED_BACK,
        Action.HOLD,
        "flip budget, 3 flips in the last hour",
    ),
    (
        "rolled-back-budget-frees-after-an-hour",
        mem(
            state=State.ROLLED_BACK,
            since=T0 - 700,
            last_flip_at=T0 - 700,
            cooldown_until=T0 - 1,
            flip_times=(T0 - 3700, T0 - 700, T0 - 2000),
        ),
        INC,
        {},
        State.PROBING,
        Action.ENABLE,
        "cooldown over",
    ),
    (
        "rolled-back-early-reprobe-on-mix-shift",
        mem(
            state=State.ROLLED_BACK,
            since=T0 - 700,
            last_flip_at=T0 - 700,
            cooldown_until=T0 + 3000,
            good_share_at_rollback=0.3,
        ),
        INC,
        {"good_share": 0.5},
        State.PROBING,
        Action.ENABLE,
        "early re-probe",
    ),
    (
        "rolled-back-small-mix-shift-waits",
        mem(
            state=State.ROLLED_BACK,
            since=T0 - 700,
            last_flip_at=T0 - 700,
            cooldown_until=T0 + 3000,
            good_share_at_rollback=0.3,
        ),
        INC,
        {"good_share": 0.4},
        State.ROLLED_BACK,
        Action.HOLD,
        "cooling down",
    ),
    (
        "cap-of-two-allows-enable-only-with-an-empty-hour",
        mem(
            state=State.ROLLED_BACK,
            since=OLD,
            last_flip_at=T0 - 1000,
            cooldown_until=T0 - 1,
            flip_times=(T0 - 1000,),
        ),
        INC,
        {"spec": make_spec(timing={"maxFlipsPerHour": 2})},
        State.ROLLED_BACK,
        Action.HOLD,
        "flip budget",
    ),
]


# The typed cause of each row's transition (rows without one hold) and the alerts it raises.
CAUSES: dict[str, Cause] = {
    "new-canary-probes-at-once": Cause.PROBE,
    "new-canary-paused": Cause.SPEC_PAUSE,
    "probing-second-pass-confirms": Cause.POLICY_PASS,
    "probing-second-fail-rolls-back": Cause.POLICY_FAIL,
    "probing-latency-fail-uses-latency-windows": Cause.POLICY_FAIL,
    "probing-fail-safe-disables": Cause.FAIL_SAFE,
    "on-fail-streak-rolls-back": Cause.POLICY_FAIL,
    "on-bake-done-promotes": Cause.BAKED,
    "rolled-back-cooldown-over-probes": Cause.PROBE,
    "rolled-back-budget-frees-after-an-hour": Cause.PROBE,
    "rolled-back-early-reprobe-on-mix-shift": Cause.EARLY_REPROBE,
}
ALERTS: dict[str, Alert] = {
    "probing-deadline-passed-keeps-probing": Alert.PROBE_STALLED,
    "rolled-back-flip-budget": Alert.FLIP_BUDGET,
    "cap-of-two-allows-enable-only-with-an-empty-hour": Alert.FLIP_BUDGET,
}


@pytest.mark.parametrize(
    ("memory", "verdict", "kwargs", "state", "action", "needle"),
    [c[1:] for c in STEPS],
    ids=[c[0] for c in STEPS],
)
def test_step(
    memory: Memory,
    verdict: Verdict,
    kwargs: dict[str, Any],
    state: State,
    action: Action,
    needle: str,
    request: pytest.FixtureRequest,
) -> None:
    row = request.node.callspec.id
    d = step(memory, verdict, **kwargs)
    assert d.memory.state is state, d.reason
    assert d.action is action, d.reason
    assert needle in d.reason  # the sentence a person reads (code reads the fields below)
    if row in CAUSES:
        assert d.transition is not None and d.transition.cause is CAUSES[row]
        assert (d.transition.from_state, d.transition.to_state) == (memory.state, state)
        assert d.transition.reason == d.reason and d.transition.at == T0
        assert d.transition.command is None
        assert d.memory.history[-1] == d.transition
    else:
        assert d.transition is None and d.memory.state is memory.state
    if row in ALERTS:
        assert ALERTS[row] in d.alerts
    else:
        assert Alert.FLIP_BUDGET not in d.alerts and Alert.PROBE_STALLED not in d.alerts


def test_rollback_backoff_grows_and_caps() -> None:
    m = mem(
        state=State.PROBING,
        since=OLD,
        last_flip_at=OLD,
        fail_streak=1,
        streak_end=T0 - 300,
        probe_deadline=T0 + 100,
    )
    cooldowns = []
    for index in range(5):
        d = step(m.model_copy(update={"cooldown_index": index}), F)
        cooldowns.append(d.memory.cooldown_until - T0)
        assert d.memory.cooldown_index == index + 1
    assert cooldowns == [900, 1800, 3600, 3600, 3600]


def test_flip_records_time_and_alerts_on_budget() -> None:
    # an enable that patches the pods (their template runs without the config) is a flip
    d = step(mem(), INC, rollout=Rollout(completed_at=OLD, speculation_on=False))
    assert d.memory.flip_times == (T0,) and d.memory.last_flip_at == T0
    assert d.memory.probe_deadline == T0 + 900
    blocked = step(
        mem(
            state=State.ROLLED_BACK,
            since=OLD,
            last_flip_at=T0 - 700,
            flip_times=(T0 - 700, T0 - 800, T0 - 900),
        ),
        INC,
    )
    assert Alert.FLIP_BUDGET in blocked.alerts


def test_error_streak_alerts_after_threshold() -> None:
    m = mem(state=State.ON, since=OLD, last_flip_at=OLD)
    alerts = []
    for i in range(4):
        d = step(m, E, now=T0 + 30 * i)
        m = d.memory
        alerts.append(Alert.SOURCE_ERRORS in d.alerts)
    assert alerts == [False, False, True, True]
    assert m.state is State.ON


def test_rollout_timeout_alerts_without_flipping() -> None:
    d = step(
        mem(state=State.PROBING, since=T0 - 2000, last_flip_at=T0 - 2000),
        F,
        rollout=Rollout(in_progress=True),
    )
    assert d.action is Action.HOLD and Alert.ROLLOUT_TIMEOUT in d.alerts


def test_data_from_before_the_last_flip_is_not_judged_even_if_rollout_lags() -> None:
    # The shell has not seen the new rollout yet (completed_at is old); the flip time guards.
    m = mem(
        state=State.PROBING,
        since=T0 - 60,
        last_flip_at=T0 - 60,
        pass_streak=1,
        probe_deadline=T0 + 900,
    )
    d = step(m, P)
    assert d.memory.state is State.PROBING and d.memory.pass_streak == 1  # not extended
    assert d.transition is None and d.memory.fail_streak == 0


def test_windows_needed() -> None:
    spec = make_spec(acceptance={"consecutiveWindows": 3}, latency={"consecutiveWindows": 1})
    assert window.windows_needed(spec) == (3, 3)
    assert window.windows_needed(spec, [CheckKind.LATENCY]) == (3, 1)
    assert window.windows_needed(spec, [CheckKind.ACCEPTANCE, CheckKind.LATENCY]) == (3, 1)
    assert window.windows_needed(spec, [CheckKind.FLOOR]) == (3, 3)


# ---------------------------------------------------------------- manual commands and pause

MANUAL = [
    (
        "pause-on",
        mem(state=State.ON, since=OLD),
        Command.PAUSE,
        State.PAUSED,
        Action.HOLD,
        "manual: pause",
    ),
    (
        "resume",
        mem(state=State.PAUSED, state_before_pause=State.ON, paused_by="manual"),
        Command.RESUME,
        State.ON,
        Action.HOLD,
        "manual: resume: back to On",
    ),
    ("resume-not-paused", mem(state=State.ON), Command.RESUME, State.ON, Action.HOLD, "not paused"),
    (
        "enable-off",
        mem(state=State.ROLLED_BACK, cooldown_until=T0 - 1, last_flip_at=OLD),
        Command.ENABLE,
        State.PROBING,
        Action.ENABLE,
        "manual: enable",
    ),
    (  # the guards hold a manual enable too (tests/core/test_core_guards.py: --force)
        "enable-in-cooldown-refused",
        mem(
            state=State.ROLLED_BACK,
            cooldown_until=T0 + 5000,
            last_flip_at=T0 - 10,
            flip_times=(T0 - 10,) * 10,
        ),
        Command.ENABLE,
        State.ROLLED_BACK,
        Action.HOLD,
        "refused",
    ),
    ("enable-already-on", mem(state=State.ON), Command.ENABLE, State.ON, Action.HOLD, "already on"),
    (
        "disable-on",
        mem(state=State.ON, since=OLD),
        Command.DISABLE,
        State.ROLLED_BACK,
        Action.DISABLE,
        "manual: disable",
    ),
    (
        "disable-paused-on",
        mem(state=State.PAUSED, state_before_pause=State.ON, paused_by="manual"),
        Command.DISABLE,
        State.ROLLED_BACK,
        Action.DISABLE,
        "manual: disable",
    ),
    (
        "disable-already-off",
        mem(state=State.OFF),
        Command.DISABLE,
        State.OFF,
        Action.HOLD,
        "already off",
    ),
    (  # promotion is not configured in SPEC: refused (with it, or --force: test_core_guards)
        "promote-on-unconfigured",
        mem(state=State.ON, since=T0 - 10),
        Command.PROMOTE,
        State.ON,
        Action.HOLD,
        "refused",
    ),
    (
        "promote-off-refused",
        mem(state=State.ROLLED_BACK),
        Command.PROMOTE,
        State.ROLLED_BACK,
        Action.HOLD,
        "refused",
    ),
]


@pytest.mark.parametrize(
    ("memory", "command", "state", "action", "needle"),
    [c[1:] for c in MANUAL],
    ids=[c[0] for c in MANUAL],
)
def test_manual_commands(
    memory: Memory, command: Command, state: State, action: Action, needle: str
) -> None:
    d = step(memory, E, command=command)
    assert (d.memory.state, d.action) == (state, action), d.reason
    assert needle in d.reason  # for people
    assert d.transition is not None and d.transition.reason == d.reason  # always recorded
    refused = needle == "refused"
    assert d.transition.cause is (Cause.REFUSED if refused else Cause.MANUAL)
    assert d.transition.command is command


def test_manual_resume_refused_while_spec_paused() -> None:
    m = mem(state=State.PAUSED, state_before_pause=State.ON, paused_by="spec")
    d = step(m, P, spec=make_spec(paused=True), command=Command.RESUME)
    assert d.memory.state is State.PAUSED
    assert d.transition is not None and d.transition.cause is Cause.REFUSED
    assert d.transition.command is Command.RESUME


def test_spec_pause_holds_everything_and_resume_returns() -> None:
    paused = make_spec(paused=True)
    m = mem(state=State.ON, since=OLD, last_flip_at=OLD, fail_streak=1)
    d = step(m, F, spec=paused)
    assert d.memory.state is State.PAUSED and d.memory.state_before_pause is State.ON
    m = d.memory
    for i in range(5):  # fails galore: nothing happens while paused
        d = step(m, F, now=T0 + 30 * (i + 1), spec=paused)
        assert d.action is Action.HOLD and d.memory.state is State.PAUSED
        m = d.memory
    assert window.speculation_on(m)  # the config stays as it was
    d = step(m, INC, now=T0 + 300)
    assert d.memory.state is State.ON and d.action is Action.HOLD
    assert d.transition is not None and d.transition.cause is Cause.SPEC_RESUME


def test_manual_pause_survives_spec_unpause() -> None:
    d = step(mem(state=State.ON, since=OLD), P, command=Command.PAUSE)
    d = step(d.memory, F, now=T0 + 30)
    assert d.memory.state is State.PAUSED and d.memory.paused_by == "manual"
    assert d.transition is None  # holds until a person resumes


def test_history_keeps_last_20() -> None:
    m = mem(state=State.ON, since=OLD)
    for i in range(30):
        m = step(m, P, now=T0 + i, command=Command.PAUSE if i % 2 == 0 else Command.RESUME).memory
    assert len(m.history) == moves.HISTORY_LIMIT
    assert m.history[-1].at == T0 + 29


# ---------------------------------------------------------------- the full cycle


def test_full_cycle_on_fail_rollback_cooldown_probe_on() -> None:
    """Explicit clock, 30 s windows, rollouts completing 60 s after each flip."""
    spec = SPEC
    t = T0
    m = Memory()
    rollout = Rollout(completed_at=None, speculation_on=False)
    log: list[tuple[float, State, Action]] = []

    def tick(v: Verdict) -> moves.Decision:
        nonlocal m, t, rollout
        d = machine.step(machine.StepInput(m, v, now=t, spec=spec, rollout=rollout))
        if d.action in (Action.ENABLE, Action.DISABLE):
            rollout = Rollout(completed_at=t + 60, speculation_on=d.action is Action.ENABLE)
        m = d.memory
        log.append((t, m.state, d.action))
        t += 30
        return d

    assert tick(INC).action is Action.ENABLE  # new canary: measure alpha first
    # the first windows overlap the rollout's warm-up: PASS is not judged yet
    while t < m.last_flip_at + 60 + 120 + 300:  # type: ignore[operator]
        assert tick(P).memory.state is State.PROBING
    # consecutive windows are disjoint: the second pass counts a whole window after the first
    first = t
    for _ in range(20):
        if tick(P).memory.state is State.ON:
            break
    assert m.state is State.ON and t - 30 - first >= spec.timing.window_seconds
    assert m.cooldown_index == 0
    # traffic changes: alpha collapses
    first = t
    for _ in range(20):
        d = tick(F)
        if d.action is Action.DISABLE:
            break
    assert d.action is Action.DISABLE and m.state is State.ROLLED_BACK
    assert t - 30 - first >= spec.timing.window_seconds
    rolled_back_at = t - 30
    assert m.cooldown_until == rolled_back_at + 900 and m.cooldown_index == 1
    # cooldown: nothing happens for 900 s whatever the verdicts say
    while t < m.cooldown_until:
        assert tick(INC).action is Action.HOLD
    d = tick(INC)
    assert d.action is Action.ENABLE and m.state is State.PROBING
    assert d.transition is not None and d.transition.cause is Cause.PROBE
    # the second probe fails: longer cooldown
    while t < m.last_flip_at + 60 + 120 + 300:  # type: ignore[operator]
        tick(F)
    for _ in range(20):
        d = tick(F)
        if d.action is Action.DISABLE:
            break
    assert d.action is Action.DISABLE and m.cooldown_until - (t - 30) == 1800
    # four flips in the last hour now: the cap holds the third probe past its cooldown
    reasons = []
    for _ in range(200):
        d = tick(INC)
        reasons.append(d.reason)
        if d.action is Action.ENABLE:
            break
    assert d.action is Action.ENABLE
    assert any("flip budget" in r for r in reasons)
    while t < m.last_flip_at + 60 + 120 + 300:  # type: ignore[operator]
        tick(P)
    for _ in range(20):
        if tick(P).memory.state is State.ON:
            break
    # confirmed again, but the backoff stays: it decays only with sustained time On
    assert m.state is State.ON and m.cooldown_index == 2
    states = [s for _, s, a in log if a is not Action.HOLD]
    assert states == [
        State.PROBING,
        State.ROLLED_BACK,
        State.PROBING,
        State.ROLLED_BACK,
        State.PROBING,
    ]
    assert [h.to_state for h in m.history] == [
        State.PROBING, State.ON, State.ROLLED_BACK, State.PROBING, State.ROLLED_BACK,
        State.PROBING, State.ON,
    ]  # fmt: skip


# ---------------------------------------------------------------- properties


@dataclass(frozen=True)
class Tick:
    dt: float
    verdict: Verdict
    in_progress: bool
    completed_ago: float | None
    good_share: float | None
    fail_kinds: tuple[CheckKind, ...]
    decisive: bool = False
    shortfall: float = 0.0
    spec_on: bool = False  # the running template already carries the config


ticks = st.builds(
    Tick,
    dt=st.sampled_from([1.0, 10.0, 30.0, 30.0, 30.0, 60.0, 300.0, 900.0, 2000.0]),
    verdict=st.sampled_from(list(Verdict)),
    in_progress=st.sampled_from([False, False, False, True]),
    completed_ago=st.none() | st.floats(0, 2000),
    good_share=st.none() | st.floats(0, 1),
    fail_kinds=st.sampled_from(
        [
            (),
            (CheckKind.ACCEPTANCE,),
            (CheckKind.LATENCY,),
            (CheckKind.FLOOR, CheckKind.LATENCY),
        ]
    ),
    decisive=st.booleans(),
    shortfall=st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0, math.inf, math.nan]),
    spec_on=st.booleans(),
)

specs = st.builds(
    lambda cap, acc, lat, fs, fsa, warm, dwell, cd: make_spec(
        acceptance={"consecutiveWindows": acc},
        latency={"consecutiveWindows": lat},
        errors={"failSafe": fs, "failSafeAfter": fsa},
        timing={
            "maxFlipsPerHour": cap,
            "warmupSeconds": warm,
            "minDwellSeconds": dwell,
            "cooldown": {"initialSeconds": cd, "factor": 2, "maxSeconds": max(cd, 3600)},
        },
    ),
    cap=st.integers(2, 6),
    acc=st.integers(1, 3),
    lat=st.integers(1, 3),
    fs=st.sampled_from(["hold", "disable"]),
    fsa=st.integers(1, 5),
    warm=st.sampled_from([0.0, 60.0, 120.0, 600.0]),
    dwell=st.sampled_from([0.0, 30.0, 600.0]),
    cd=st.sampled_from([1.0, 60.0, 900.0]),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, seq=st.lists(ticks, min_size=1, max_size=60))
def test_machine_properties(spec: SpeculativeCanarySpec, seq: list[Tick]) -> None:
    m = Memory()
    now = T0
    flips: list[float] = []
    for tick in seq:
        now += tick.dt
        rollout = Rollout(
            in_progress=tick.in_progress,
            completed_at=None if tick.completed_ago is None else now - tick.completed_ago,
            speculation_on=tick.spec_on,
        )
        before = m
        d = machine.step(
            machine.StepInput(
                m,
                tick.verdict,
                now=now,
                spec=spec,
                rollout=rollout,
                good_share=tick.good_share,
                fail_kinds=tick.fail_kinds,
                decisive=tick.decisive,
                shortfall=tick.shortfall,
            )
        )
        m = d.memory
        start = now - spec.timing.window_seconds
        unjudged = window.not_judgeable(spec, rollout, before, start) is not None
        effective = INC if unjudged and tick.verdict in (P, F) else tick.verdict
        flipped = d.action in (Action.ENABLE, Action.DISABLE)
        # A flip restarts the pods: every disable, and an enable unless the running template
        # already carries the config (then nothing restarts and no flip is counted).
        restarts = d.action is Action.DISABLE or (
            d.action is Action.ENABLE and not (tick.spec_on and not tick.in_progress)
        )
        if restarts:
            flips.append(now)
            assert m.last_flip_at == now and m.flip_times[-1] == now
        elif flipped:
            assert m.last_flip_at == before.last_flip_at and now not in m.flip_times
        # A rollback's cooldown never exceeds maxSeconds, however decisive the rejection.
        if d.action is Action.DISABLE:
            assert 0 <= m.cooldown_until - now <= spec.timing.cooldown.max_seconds

        # Nothing flips during a rollout.
        if tick.in_progress:
            assert not flipped and m.state is before.state
        # Only FAIL (judged) turns speculation off; ERROR only through the configured fail-safe.
        if d.action is Action.DISABLE:
            assert before.state in (State.PROBING, State.ON)
            if effective is E:
                assert spec.errors.fail_safe.value == "disable"
                assert m.error_streak >= spec.errors.fail_safe_after
                assert d.transition is not None and d.transition.cause is Cause.FAIL_SAFE
            else:
                assert effective is F and not unjudged
                # on a judged window: whole and disjoint from the last one judged
                assert start >= before.streak_end
                needed = window.windows_needed(spec, tick.fail_kinds)[1]
                # a probe an early re-probe started ends on its first judged failing window
                assert (
                    tick.decisive
                    or before.fail_streak + 1 >= needed
                    or reprobe.failed_early(before)
                )
        # INCONCLUSIVE never moves a speculating canary; data in warm-up is never judged.
        if before.state in (State.PROBING, State.ON, State.PROMOTED) and effective is INC:
            assert m.state is before.state and d.action is Action.HOLD
        # Confirming needs PASS windows, consecutively, all judged.
        if m.state is State.ON and before.state is State.PROBING:
            assert effective is P and start >= before.streak_end
            assert before.pass_streak + 1 >= window.windows_needed(spec)[0]
        # An enable never happens on ERROR and only from Off/RolledBack.
        if d.action is Action.ENABLE:
            assert effective is not E and before.state in (State.OFF, State.ROLLED_BACK)
        # Streaks count JUDGED windows only (whole, disjoint from the last judged one). A fail
        # streak is back to back: a judged INCONCLUSIVE or a gap of a window starts it over;
        # only a judged FAIL clears a pass streak. Looks between judged windows, ERROR and
        # warm-up windows leave both as they were.
        if d.transition is None and m.state is not State.PAUSED:
            assert m.error_streak == (before.error_streak + 1 if effective is E else 0)
            counted = not unjudged and effective is not E and start >= before.streak_end
            after = before.streak_end if not counted else now
            assert m.streak_end == after
            near = start - before.streak_end <= spec.timing.window_seconds
            if not counted:
                assert (m.pass_streak, m.fail_streak) == (before.pass_streak, before.fail_streak)
            elif effective is P:
                assert m.pass_streak == before.pass_streak + 1 and m.fail_streak == 0
            elif effective is F:
                grown = before.fail_streak + 1 if near and before.fail_streak else 1
                assert m.fail_streak == grown and m.pass_streak == 0
            else:  # a judged window that decides nothing breaks a fail streak only
                assert (m.pass_streak, m.fail_streak) == (before.pass_streak, 0)
        # The flip cap holds in every sliding hour.
        recent = [f for f in flips if now - window.HOUR < f <= now]
        assert len(recent) <= spec.timing.max_flips_per_hour
        # Reasons are never empty.
        assert d.reason
    # Check every sliding hour once more over the whole run.
    for i, f in enumerate(flips):
        assert sum(1 for g in flips[i:] if g - f < window.HOUR) <= spec.timing.max_flips_per_hour


def test_only_disjoint_whole_windows_are_judged() -> None:
    """Two FAIL windows 30 s apart over 300 s share 90% of their data: one observation, not
    two. Evaluations between judged windows are looks that count nothing, whatever they show,
    so a failing window is never picked among overlapping ones."""
    spec = SPEC
    m = mem(state=State.ON, since=OLD, last_flip_at=OLD)
    d = machine.step(
        machine.StepInput(m, F, now=T0, spec=spec, rollout=Rollout(), window_start=T0 - 300)
    )
    assert d.memory.fail_streak == 1 and d.memory.streak_end == T0 and d.action is Action.HOLD
    # overlapping windows, failing, passing or inconclusive: looks, counting nothing
    for i, v in enumerate((F, INC, P, F), start=1):
        now = T0 + 30 * i
        d = machine.step(
            machine.StepInput(
                d.memory, v, now=now, spec=spec, rollout=Rollout(), window_start=now - 300
            )
        )
        assert (d.memory.fail_streak, d.memory.pass_streak) == (1, 0)
        assert d.action is Action.HOLD and "look" in d.reason
    # a window that starts where the last judged one ended but is not whole is a look too
    d = machine.step(
        machine.StepInput(d.memory, F, now=T0 + 150, spec=spec, rollout=Rollout(), window_start=T0)
    )
    assert d.memory.fail_streak == 1 and d.action is Action.HOLD
    # the next whole disjoint failing window rolls back
    d = machine.step(
        machine.StepInput(d.memory, F, now=T0 + 300, spec=spec, rollout=Rollout(), window_start=T0)
    )
    assert d.action is Action.DISABLE


def test_an_undecided_judged_window_breaks_a_fail_streak() -> None:
    """Consecutive means back to back: a judged INCONCLUSIVE window between two failing ones
    starts the count over, and so does a gap of a whole window without a judged one. A pass
    streak (confirming restarts nothing) only a judged FAIL clears."""
    m = mem(state=State.ON, since=OLD, last_flip_at=OLD)
    d = machine.step(machine.StepInput(m, F, now=T0, spec=SPEC, rollout=Rollout()))
    d = machine.step(machine.StepInput(d.memory, INC, now=T0 + 300, spec=SPEC, rollout=Rollout()))
    assert (d.memory.fail_streak, d.memory.streak_end) == (0, T0 + 300)
    d = machine.step(machine.StepInput(d.memory, F, now=T0 + 600, spec=SPEC, rollout=Rollout()))
    assert d.memory.fail_streak == 1 and d.action is Action.HOLD
    # an ERROR window is no verdict on the traffic: the next evaluation is judged instead,
    # and a window starting less than one window after the last judged one continues it
    d = machine.step(machine.StepInput(d.memory, E, now=T0 + 900, spec=SPEC, rollout=Rollout()))
    assert d.memory.streak_end == T0 + 600 and d.memory.fail_streak == 1
    cont = machine.step(machine.StepInput(d.memory, F, now=T0 + 930, spec=SPEC, rollout=Rollout()))
    assert cont.action is Action.DISABLE
    # one window lost between two judged ones (a crash, an unwritten status) is no break ...
    lost = machine.step(machine.StepInput(d.memory, F, now=T0 + 1200, spec=SPEC, rollout=Rollout()))
    assert lost.action is Action.DISABLE
    # ... more than a window is: a new streak
    late = machine.step(machine.StepInput(d.memory, F, now=T0 + 1230, spec=SPEC, rollout=Rollout()))
    assert late.action is Action.HOLD and late.memory.fail_streak == 1
    # passes: an undecided window between two passing ones leaves the pass streak
    probing = mem(state=State.PROBING, since=OLD, last_flip_at=OLD, probe_deadline=T0 + 9000)
    d = machine.step(machine.StepInput(probing, P, now=T0, spec=SPEC, rollout=Rollout()))
    d = machine.step(machine.StepInput(d.memory, INC, now=T0 + 300, spec=SPEC, rollout=Rollout()))
    assert d.memory.pass_streak == 1
    on = machine.step(machine.StepInput(d.memory, P, now=T0 + 600, spec=SPEC, rollout=Rollout()))
    assert on.memory.state is State.ON
    # ... and a judged FAIL clears it
    d = machine.step(machine.StepInput(d.memory, F, now=T0 + 600, spec=SPEC, rollout=Rollout()))
    assert (d.memory.pass_streak, d.memory.fail_streak) == (0, 1)


def test_a_decisive_look_is_not_judged() -> None:
    """The decisive single window is a judged window too: a look between judged windows does
    not roll back however strong, so the per-day budget of decisive windows holds."""
    m = mem(state=State.ON, since=OLD, last_flip_at=OLD, streak_end=T0 - 100)
    d = machine.step(machine.StepInput(m, F, now=T0, spec=SPEC, rollout=Rollout(), decisive=True))
    assert d.action is Action.HOLD and d.memory.fail_streak == 0
    d = machine.step(
        machine.StepInput(d.memory, F, now=T0 + 200, spec=SPEC, rollout=Rollout(), decisive=True)
    )
    assert d.action is Action.DISABLE and d.transition is not None


def test_backoff_decays_only_after_sustained_time_on() -> None:
    spec = SPEC
    decay = spec.timing.cooldown.decay_after_seconds
    # confirmed a minute ago after three rollbacks: a rollback now backs off further
    short = mem(
        state=State.ON,
        since=T0 - 60,
        last_flip_at=OLD,
        cooldown_index=3,
        fail_streak=1,
        streak_end=T0 - 300,
    )
    d = machine.step(machine.StepInput(short, F, now=T0, spec=spec, rollout=Rollout()))
    assert d.action is Action.DISABLE and d.memory.cooldown_index == 4
    assert d.memory.cooldown_until - T0 == window.cooldown_seconds(spec, 3)
    # On for two decay periods: two steps down before this rollback's step up
    long = short.model_copy(update={"since": T0 - 2 * decay - 1})
    d = machine.step(machine.StepInput(long, F, now=T0, spec=spec, rollout=Rollout()))
    assert d.action is Action.DISABLE and d.memory.cooldown_index == 2
    assert d.memory.cooldown_until - T0 == window.cooldown_seconds(spec, 1)
