"""Issue 12's shell-side defects, in the core: staleness, manual guards, idle canaries.

* While Probing or On, no conclusive verdict for staleness.afterSeconds raises VERDICT_STALE
  (endless Inconclusive and endless Error alike); the rollback on it is opt-in.
* A manual enable obeys the cooldown, the minimum dwell and the flip budget unless forced;
  a promote needs promotion enabled unless forced; both record the guards as typed fields.
* A speculating canary with no traffic (spec-decode series at zero) is Inconclusive with a
  typed NoData cause, never "speculation off".
"""

from __future__ import annotations

from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import machine, manual, window
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    AcceptanceEvidence,
    AcceptanceSample,
    Action,
    Alert,
    Cause,
    CheckKind,
    Command,
    Guard,
    Memory,
    NoData,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
    Verdict,
)
from specs import MACHINE_SPEC, merge, spec_from

P, F, INC, E = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.ERROR
T0 = 1_000_000.0
OLD = T0 - 10_000
SETTLED = Rollout(completed_at=OLD, speculation_on=True)
SETTLED_OFF = Rollout(completed_at=OLD, speculation_on=False)

BASE: dict[str, Any] = merge(MACHINE_SPEC, {"latency": {"enabled": False}})


def make_spec(**over: Any) -> SpeculativeCanarySpec:
    return spec_from(BASE, **over)


SPEC = make_spec()


def step(m: Memory, v: Verdict, now: float, spec: SpeculativeCanarySpec = SPEC, **kw: Any):  # type: ignore[no-untyped-def]
    # the pods run what the memory's state says (an enable from RolledBack patches them)
    kw.setdefault("rollout", SETTLED if window.speculation_on(m) else SETTLED_OFF)
    kw.setdefault("window_start", now - 60)
    return machine.step(machine.StepInput(m, v, now=now, spec=spec, **kw))


# ---------------------------------------------------------------- staleness


def test_staleness_defaults_are_documented_and_opt_in() -> None:
    assert SPEC.staleness.after_seconds == 1800
    assert SPEC.staleness.fail_safe.value == "hold"
    field = SpeculativeCanarySpec.model_fields["staleness"]
    assert field.description


@pytest.mark.parametrize("verdict", [INC, E], ids=["inconclusive", "error"])
@pytest.mark.parametrize("state", [State.ON, State.PROBING])
def test_no_conclusive_verdict_raises_verdict_stale(verdict: Verdict, state: State) -> None:
    m = Memory(
        state=state, since=OLD, last_flip_at=OLD, last_conclusive_at=T0, probe_deadline=T0 + 1e6
    )
    after = SPEC.staleness.after_seconds
    # each window inconclusive (or an error), one every 60 s: fresh until afterSeconds
    seen: list[tuple[float, bool]] = []
    for i in range(1, 40):
        now = T0 + 60 * i
        d = step(m, verdict, now)
        assert d.action is Action.HOLD and d.memory.state is state  # hold is the default
        seen.append((now - T0, Alert.VERDICT_STALE in d.alerts))
        m = d.memory
    assert all(stale == (age >= after) for age, stale in seen), seen
    assert window.verdict_age(m, T0 + 60 * 39) == pytest.approx(60 * 39)


def test_a_conclusive_window_clears_staleness() -> None:
    m = Memory(state=State.ON, since=OLD, last_flip_at=OLD, last_conclusive_at=OLD)
    d = step(m, INC, T0)
    assert Alert.VERDICT_STALE in d.alerts
    d = step(d.memory, P, T0 + 60)
    assert Alert.VERDICT_STALE not in d.alerts
    assert d.memory.last_conclusive_at == T0 + 60
    assert window.verdict_age(d.memory, T0 + 90) == pytest.approx(30)


def test_staleness_counts_from_the_enable_and_not_while_off() -> None:
    # a probe that just began is not stale however old its last verdict
    m = Memory(state=State.PROBING, since=T0 - 100, last_flip_at=T0 - 100, probe_deadline=T0 + 1e6)
    assert window.verdict_age(m, T0) == pytest.approx(100)
    assert Alert.VERDICT_STALE not in step(m, INC, T0).alerts
    for state in (State.OFF, State.ROLLED_BACK, State.PROMOTED, State.PAUSED):
        assert window.verdict_age(Memory(state=state, since=OLD), T0) is None


def test_stale_fail_safe_rolls_back_only_when_opted_in() -> None:
    m = Memory(state=State.ON, since=OLD, last_flip_at=OLD, last_conclusive_at=OLD)
    held = step(m, INC, T0)
    assert held.action is Action.HOLD and Alert.VERDICT_STALE in held.alerts
    spec = make_spec(staleness={"afterSeconds": 1800, "failSafe": "disable"})
    d = step(m, INC, T0, spec=spec)
    assert d.action is Action.DISABLE and d.memory.state is State.ROLLED_BACK
    assert d.transition is not None and d.transition.cause is Cause.STALE_FAIL_SAFE
    assert d.memory.cooldown_index == m.cooldown_index  # not the traffic's fault: no backoff


# ---------------------------------------------------------------- manual guards


def _rolled_back(**kw: Any) -> Memory:
    base: dict[str, Any] = {
        "state": State.ROLLED_BACK,
        "since": T0 - 100,
        "last_flip_at": T0 - 100,
        "cooldown_until": T0 + 800,
        "flip_times": (T0 - 300, T0 - 100),
    }
    return Memory(**{**base, **kw})


GUARDED = [
    ("cooldown", _rolled_back(last_flip_at=OLD, flip_times=()), (Guard.COOLDOWN,)),
    (
        "min-dwell",
        _rolled_back(cooldown_until=T0 - 1, flip_times=(T0 - 100,)),
        (Guard.MIN_DWELL,),
    ),
    (
        "flip-budget",
        _rolled_back(cooldown_until=T0 - 1, last_flip_at=OLD, flip_times=(T0 - 900,) * 3),
        (Guard.FLIP_BUDGET,),
    ),
    (
        "all",
        _rolled_back(flip_times=(T0 - 100,) * 3),
        (Guard.COOLDOWN, Guard.MIN_DWELL, Guard.FLIP_BUDGET),
    ),
]


@pytest.mark.parametrize(
    ("memory", "guards"), [g[1:] for g in GUARDED], ids=[g[0] for g in GUARDED]
)
def test_manual_enable_obeys_the_guards(memory: Memory, guards: tuple[Guard, ...]) -> None:
    d = step(memory, INC, T0, command=Command.ENABLE)
    assert d.action is Action.HOLD and d.memory.state is State.ROLLED_BACK
    t = d.transition
    assert t is not None and t.cause is Cause.REFUSED and t.command is Command.ENABLE
    assert t.guards == guards and not t.forced
    assert d.memory.flip_times == memory.flip_times  # no flip spent
    assert (Alert.FLIP_BUDGET in d.alerts) == (Guard.FLIP_BUDGET in guards)


@pytest.mark.parametrize(
    ("memory", "guards"), [g[1:] for g in GUARDED], ids=[g[0] for g in GUARDED]
)
def test_forced_enable_goes_past_the_guards_and_says_so(
    memory: Memory, guards: tuple[Guard, ...]
) -> None:
    d = step(memory, INC, T0, command=Command.ENABLE, force=True)
    assert d.action is Action.ENABLE and d.memory.state is State.PROBING
    t = d.transition
    assert t is not None and t.cause is Cause.MANUAL and t.forced and t.guards == guards
    assert d.memory.flip_times[-1] == T0


def test_unguarded_enable_is_not_marked_forced() -> None:
    m = _rolled_back(cooldown_until=T0 - 1, last_flip_at=OLD, flip_times=())
    for force in (False, True):
        d = step(m, INC, T0, command=Command.ENABLE, force=force)
        assert d.action is Action.ENABLE
        assert d.transition is not None and d.transition.guards == ()
        assert d.transition.forced is force


def test_automatic_probe_and_manual_enable_share_the_guards() -> None:
    for _, memory, guards in GUARDED:
        assert manual.enable_guards(memory, SPEC, T0) == guards
        auto = step(memory, INC, T0)
        assert auto.action is Action.HOLD  # the automatic probe waits as well


def test_promote_needs_promotion_or_force() -> None:
    on = Memory(state=State.ON, since=T0 - 10, last_flip_at=OLD)
    d = step(on, P, T0, command=Command.PROMOTE)
    assert d.action is Action.HOLD and d.memory.state is State.ON
    assert d.transition is not None and d.transition.cause is Cause.REFUSED
    assert d.transition.guards == (Guard.PROMOTION_DISABLED,)

    forced = step(on, P, T0, command=Command.PROMOTE, force=True)
    assert forced.action is Action.PROMOTE and forced.memory.state is State.PROMOTED
    assert forced.transition is not None and forced.transition.forced
    assert forced.transition.guards == (Guard.PROMOTION_DISABLED,)

    spec = make_spec(promotion={"enabled": True, "stable": {"name": "stable"}})
    ok = step(on, P, T0, spec=spec, command=Command.PROMOTE)
    assert ok.action is Action.PROMOTE and ok.transition is not None
    assert ok.transition.cause is Cause.MANUAL and not ok.transition.forced


def test_promote_while_off_is_refused_even_forced() -> None:
    off = Memory(state=State.ROLLED_BACK, since=OLD)
    d = step(off, INC, T0, command=Command.PROMOTE, force=True)
    assert d.action is Action.HOLD and d.transition is not None
    assert d.transition.cause is Cause.REFUSED
    assert d.transition.guards == (Guard.SPECULATION_OFF,)


def test_disable_is_never_guarded() -> None:
    m = Memory(state=State.ON, since=T0 - 10, last_flip_at=T0 - 10, flip_times=(T0 - 10,) * 5)
    d = step(m, INC, T0, command=Command.DISABLE)
    assert d.action is Action.DISABLE and d.transition is not None
    assert d.transition.cause is Cause.MANUAL and d.transition.guards == ()


# ---------------------------------------------------------------- idle canary


def _idle_observation(*, spec_series: bool | None, no_data: NoData | None) -> Observation:
    canary = PoolObservation(
        "chat", Role.CANARY, generation_tokens=0.0, pods=2, spec_series=spec_series, no_data=no_data
    )
    baseline = PoolObservation("chat", Role.BASELINE, generation_tokens=0.0, pods=2)
    return Observation(at=T0, window_seconds=300, pools=(canary, baseline))


@pytest.mark.parametrize(
    ("spec_series", "given", "expected"),
    [
        (True, NoData.NO_TRAFFIC, NoData.NO_TRAFFIC),
        (True, NoData.SPARSE_SCRAPES, NoData.SPARSE_SCRAPES),
        (False, None, NoData.NO_SPEC_SERIES),
        (None, None, NoData.UNKNOWN),
    ],
)
def test_no_drafts_is_inconclusive_with_a_typed_cause(
    spec_series: bool | None, given: NoData | None, expected: NoData
) -> None:
    o = _idle_observation(spec_series=spec_series, no_data=given)
    m = Memory(state=State.ON, since=OLD, last_flip_at=OLD, last_conclusive_at=T0 - 60)
    ev = evaluate(SPEC, o, m, SETTLED, now=T0)
    acc = [c for c in ev.checks if c.kind is CheckKind.ACCEPTANCE]
    assert len(acc) == 1 and acc[0].verdict is Verdict.INCONCLUSIVE
    assert isinstance(acc[0].evidence, AcceptanceEvidence)
    assert acc[0].evidence.no_data is expected
    assert acc[0].flat_evidence()["no_data"] == expected.value
    assert ev.action is Action.HOLD and ev.memory.state is State.ON
    assert ev.verdict_age_seconds == pytest.approx(60)


def test_an_idle_speculating_pool_is_speculating() -> None:
    idle = PoolObservation("chat", Role.CANARY, spec_series=True, no_data=NoData.NO_TRAFFIC)
    off = PoolObservation("chat", Role.CANARY, spec_series=False)
    busy = PoolObservation(
        "chat",
        Role.CANARY,
        acceptance=(AcceptanceSample(drafts=10, draft_tokens=50, accepted_tokens=30),),
    )
    assert idle.speculating and busy.speculating and not off.speculating
