"""The state machine: one window's verdict plus the clock the caller gives -> the next state.

    Off ──enable──> Probing ──PASS×n──> On ──(bake, PASS)──> Promoted
     ^                │  ^               │
     │           FAIL×n  └──cooldown─┐   FAIL×n (or fail-safe)
     │                v              │   v
     └── (start) ─ RolledBack <──────┴───┘          Paused: holds any state

Rules (design.md §4):
* Only FAIL flips, and only after `consecutiveWindows` CONSECUTIVE failing windows; any other
  verdict breaks a streak. INCONCLUSIVE and ERROR hold. The one exception is the configured
  fail-safe: `errors.failSafeAfter` consecutive ERROR windows with `failSafe: disable`.
* Data from a rollout in progress, or from before the warm-up after the last rollout or flip
  ended, is never judged: PASS/FAIL there count as INCONCLUSIVE("warm-up").
* Off/RolledBack -> Probing (ENABLE) once the cooldown has passed (or early, on evidence that
  the traffic it failed on is gone: `core.reprobe`), the minimum dwell since the last flip has
  passed, no source error is pending, and the flip budget has room for the enable AND its
  possible rollback. Disables are always allowed, so no sliding hour ever holds more than
  maxFlipsPerHour automatic flips.
* Rollback cooldown = initial * factor**(index + depth) (capped): index counts rollbacks in a
  row and steps down by one per cooldown.decayAfterSeconds spent On (sustained stability), not
  on a mere confirmation; depth is how decisive this rejection was: one step per full band
  (enableAbove - disableBelow) the failing alpha lies below its threshold (`shortfall`). An
  alpha far below the gate needs a large change of traffic to come back, so it is probed
  rarely; one just below it, sooner.
* Consecutive windows are disjoint: a window overlapping the last one counted is no new
  evidence (see `_streaks`). Once a failing streak is open, the next window is read from
  the end of the last one counted (`read_window`), so the next disjoint window is judged
  READ_MIN_INTERVALS intervals later, not a whole window later.
* A decisive FAIL (its bound at the joint level of all the windows the rule needs clears the
  gate: `checks.decisive`) rolls back on its own window: it carries the evidence of them all.
* An enable while the running pod template already carries the config (a new canary created
  speculating) restarts nothing: it is not a flip (no flip budget, no warm-up from it).
* Manual commands override the policy's verdicts but obey its guards: an enable waits for the
  cooldown, the minimum dwell and room in the flip budget, and a promote needs promotion
  enabled, unless forced (`--force`: the transition records `forced` and the `Guard`s it
  overrode). They are recorded as transitions with cause MANUAL (REFUSED, with the guards,
  when the machine refuses them). A disable is always allowed.
* Staleness: Probing or On with no conclusive verdict (PASS or FAIL) for staleness.afterSeconds
  raises VERDICT_STALE; with staleness.failSafe disable it rolls back (cause STALE_FAIL_SAFE).
* Every transition carries its `Cause` and every decision its `Alert`s: the shell branches on
  those, never on the reason text.

`step` is a pure function: memory, verdict and `now` in; new memory, action and reason out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple

from alphagate.config import FailSafe, SpeculativeCanarySpec
from alphagate.core import reprobe
from alphagate.core.model import (
    Action,
    Alert,
    Cause,
    CheckKind,
    Command,
    Guard,
    Memory,
    Rollout,
    State,
    TrafficShape,
    Transition,
    Verdict,
)
from alphagate.core.window import (
    HOUR,
    JUDGING,
    READ_MIN_INTERVALS,
    SPECULATING,
    cooldown_seconds,
    effective_state,
    flip_room,
    not_judgeable,
    read_window,
    recent_flips,
    shared_window,
    speculation_on,
    verdict_age,
    wall_time,
    warmup_end,
    windows_needed,
)

# The window rule and the memory queries live in core.window; callers reach them here too.
__all__ = [
    "HOUR",
    "JUDGING",
    "READ_MIN_INTERVALS",
    "SPECULATING",
    "cooldown_seconds",
    "effective_state",
    "flip_room",
    "not_judgeable",
    "read_window",
    "recent_flips",
    "shared_window",
    "speculation_on",
    "verdict_age",
    "wall_time",
    "warmup_end",
    "windows_needed",
]

_EPS: Final = 1e-9  # times within this of each other are equal (float sums of intervals)
HISTORY_LIMIT: Final = 20
MAX_DEPTH: Final = 4  # rejection_depth's cap: the cooldown's maxSeconds caps it anyway


class Decision(NamedTuple):
    """What `step` returns: the memory to persist, what the shell must do, and why."""

    memory: Memory
    action: Action
    reason: str
    transition: Transition | None
    alerts: tuple[Alert, ...] = ()


# ---------------------------------------------------------------- the step


@dataclass(frozen=True, slots=True)
class _Ctx:
    memory: Memory
    verdict: Verdict  # after the warm-up rule
    unjudged: str | None
    now: float
    spec: SpeculativeCanarySpec
    good_share: float | None
    fail_kinds: Collection[CheckKind]
    evidence: Mapping[str, float | str]
    alerts: tuple[Alert, ...]
    command: Command | None = None  # the person's command being carried out, if any
    rollout: Rollout = field(default_factory=Rollout)
    decisive: bool = False  # a failing check carries the evidence of every window needed
    shortfall: float = 0.0  # the failing alpha's distance below its threshold, in bands
    shape: TrafficShape | None = None  # the window's traffic shape (early re-probe evidence)

    def hold(self, reason: str, *extra_alerts: Alert, memory: Memory | None = None) -> Decision:
        return Decision(
            memory or self.memory, Action.HOLD, reason, None, (*self.alerts, *extra_alerts)
        )

    def go(
        self,
        to: State,
        action: Action,
        reason: str,
        cause: Cause,
        *,
        forced: tuple[Guard, ...] | None = None,
        **update: Any,
    ) -> Decision:
        memory, transition = _move(
            self.memory,
            to,
            reason,
            cause=cause,
            command=self.command,
            now=self.now,
            evidence=self.evidence,
            forced=forced,
            **update,
        )
        return Decision(memory, action, reason, transition, self.alerts)


def _move(
    memory: Memory,
    to: State,
    reason: str,
    *,
    cause: Cause,
    command: Command | None = None,
    now: float,
    evidence: Mapping[str, float | str],
    forced: tuple[Guard, ...] | None = None,
    refused: tuple[Guard, ...] = (),
    **update: Any,
) -> tuple[Memory, Transition]:
    transition = Transition(
        from_state=memory.state,
        to_state=to,
        reason=reason,
        at=now,
        evidence=dict(evidence),
        cause=cause,
        command=command,
        forced=forced is not None,
        guards=forced if forced is not None else refused,
    )
    fields: dict[str, object] = {
        "state": to,
        "since": now if to is not memory.state else memory.since,
        "pass_streak": 0,
        "fail_streak": 0,
        "history": (*memory.history, transition)[-HISTORY_LIMIT:],
    }
    fields.update(update)
    return memory.model_copy(update=fields), transition


def _flip(memory: Memory, now: float) -> dict[str, Any]:
    return {"flip_times": (*memory.flip_times, now), "last_flip_at": now}


def _streaks(
    memory: Memory, verdict: Verdict, *, start: float, now: float, window: float
) -> Memory:
    """Consecutive DISJOINT decisive windows. A window [start, now] that overlaps the last one
    counted shares most of its data, so it is no new evidence: the same verdict leaves the
    streak as it is. Inconclusive (and Error) windows are no evidence either way and leave
    both streaks as they are; only the opposite decisive verdict breaks a streak, and a PASS
    breaks an open failing streak only on a whole window (`window` seconds): the partial
    windows read after the last one counted (`read_window`) may confirm a regression early,
    but a few seconds without a significant one do not clear it. Errors count per evaluation
    (they are about the source, not the traffic)."""
    errors = memory.error_streak + 1 if verdict is Verdict.ERROR else 0
    if verdict not in (Verdict.PASS, Verdict.FAIL):
        return memory.model_copy(update={"error_streak": errors})
    passed = verdict is Verdict.PASS
    if passed and memory.fail_streak > 0 and now - start < window - _EPS:
        return memory.model_copy(update={"error_streak": errors, "last_conclusive_at": now})
    own = memory.pass_streak if passed else memory.fail_streak
    overlaps = start < memory.streak_end - _EPS
    if overlaps and own > 0:
        return memory.model_copy(update={"error_streak": errors, "last_conclusive_at": now})
    count = own + 1 if own > 0 else 1
    return memory.model_copy(
        update={
            "pass_streak": count if passed else 0,
            "fail_streak": 0 if passed else count,
            "error_streak": errors,
            "streak_end": now,
            "last_conclusive_at": now,
        }
    )


def _enable_update(ctx: _Ctx) -> dict[str, Any]:
    """An enable's memory. When the running pod template already carries the config (a new
    canary created speculating), the patch changes nothing and restarts no pod: it is no flip,
    so it neither spends the flip budget nor starts a warm-up (the rollout's own completion
    does)."""
    noop = ctx.rollout.speculation_on and not ctx.rollout.in_progress
    return {
        **({} if noop else _flip(ctx.memory, ctx.now)),
        "probe_deadline": ctx.now + ctx.spec.timing.probe_seconds,
        "state_before_pause": None,
        "paused_by": None,
    }


def decayed_index(memory: Memory, spec: SpeculativeCanarySpec, now: float) -> int:
    """The backoff exponent after time On: one step down per cooldown.decayAfterSeconds spent
    On (sustained stability), never on a mere confirmation."""
    if effective_state(memory) is not State.ON or memory.cooldown_index <= 0:
        return memory.cooldown_index
    steps = int(max(0.0, now - memory.since) // spec.timing.cooldown.decay_after_seconds)
    return max(0, memory.cooldown_index - steps)


def rejection_depth(shortfall: float) -> int:
    """Extra backoff steps for a rejection `shortfall` bands below its threshold: one per full
    band (0 just below the gate), at most MAX_DEPTH."""
    if not math.isfinite(shortfall) or shortfall < 1.0:
        return 0
    return min(int(shortfall + _EPS), MAX_DEPTH)


def _rollback(ctx: _Ctx, reason: str, cause: Cause, *, advance: bool) -> Decision:
    m = ctx.memory
    index = decayed_index(m, ctx.spec, ctx.now)
    m = m.model_copy(update={"cooldown_index": index})
    depth = rejection_depth(ctx.shortfall) if advance else 0
    cooldown = cooldown_seconds(ctx.spec, m.cooldown_index + depth)
    until = ctx.now + cooldown
    deep = f", {depth} step(s) deeper: alpha {ctx.shortfall:.1f} bands below" if depth else ""
    text = f"{reason}; next probe after {cooldown:.0f} s cooldown{deep} (at {wall_time(until)})"
    return ctx.go(
        State.ROLLED_BACK,
        Action.DISABLE,
        text,
        cause,
        **_flip(m, ctx.now),
        cooldown_until=until,
        cooldown_index=m.cooldown_index + 1 if advance else m.cooldown_index,
        good_share_at_rollback=ctx.good_share if ctx.good_share is not None else 0.0,
        shape_failed=ctx.shape,
        state_before_pause=None,
        paused_by=None,
    )


def _fail_safe(ctx: _Ctx) -> Decision | None:
    e = ctx.spec.errors
    if (
        ctx.verdict is Verdict.ERROR
        and e.fail_safe is FailSafe.DISABLE
        and ctx.memory.error_streak >= e.fail_safe_after
    ):
        return _rollback(
            ctx,
            f"fail-safe: {ctx.memory.error_streak} consecutive source errors "
            f"(failSafeAfter {e.fail_safe_after}, failSafe disable)",
            Cause.FAIL_SAFE,
            advance=False,
        )
    return None


def _stale_safe(ctx: _Ctx) -> Decision | None:
    """The opt-in staleness fail-safe: roll back once VERDICT_STALE is raised."""
    st = ctx.spec.staleness
    if Alert.VERDICT_STALE in ctx.alerts and st.fail_safe is FailSafe.DISABLE:
        age = verdict_age(ctx.memory, ctx.now) or 0.0
        return _rollback(
            ctx,
            f"fail-safe: no conclusive verdict for {age:.0f} s (staleness.afterSeconds "
            f"{st.after_seconds:.0f}, failSafe disable)",
            Cause.STALE_FAIL_SAFE,
            advance=False,
        )
    return None


def _fail_text(ctx: _Ctx, to_fail: int) -> str:
    m = ctx.memory
    if m.fail_streak >= to_fail:
        return f"{m.fail_streak} consecutive failing windows"
    return (
        f"one decisive failing window (its bound at the joint level of {to_fail} windows clears "
        f"the gate; fail streak {m.fail_streak}/{to_fail})"
    )


def _judged_text(ctx: _Ctx) -> str:
    if ctx.unjudged is not None:
        return f"not judged ({ctx.unjudged})"
    return f"window {ctx.verdict.value}"


def _off(ctx: _Ctx) -> Decision:
    """Off / RolledBack: speculation is off, so alpha cannot be measured; probe on timers."""
    m, t, now = ctx.memory, ctx.spec.timing, ctx.now
    state = m.state.value
    if ctx.verdict is Verdict.ERROR:
        return ctx.hold(f"{state}: source error; no probe while the source fails")
    cooldown_over = now >= m.cooldown_until - _EPS
    early = reprobe.early(m, ctx.spec, now=now, good_share=ctx.good_share, shape=ctx.shape)
    if not cooldown_over and early is None:
        return ctx.hold(
            f"{state}: cooling down, next probe in {m.cooldown_until - now:.0f} s "
            f"(at {wall_time(m.cooldown_until)})"
        )
    if m.last_flip_at is not None and now < m.last_flip_at + t.min_dwell_seconds - _EPS:
        return ctx.hold(
            f"{state}: minimum dwell, no flip before {m.last_flip_at + t.min_dwell_seconds:.0f} "
            f"(minDwellSeconds {t.min_dwell_seconds:.0f})"
        )
    if not flip_room(m, ctx.spec, now):
        n = len(recent_flips(m, now))
        return ctx.hold(
            f"{state}: flip budget, {n} flips in the last hour; maxFlipsPerHour "
            f"{t.max_flips_per_hour} leaves no room for an enable and its possible rollback",
            Alert.FLIP_BUDGET,
        )
    probe = f"probe up to {t.probe_seconds:.0f} s"
    cause = Cause.PROBE
    if early is not None:
        cause = Cause.EARLY_REPROBE
        why = f"early re-probe: {early.why}"
        ctx = replace(ctx, evidence={**ctx.evidence, **early.evidence})
    elif m.last_flip_at is None:
        why = "new canary: enabling speculation to measure alpha first"
    else:
        why = "cooldown over: probing again"
    return ctx.go(State.PROBING, Action.ENABLE, f"{why} ({probe})", cause, **_enable_update(ctx))


def _probing(ctx: _Ctx) -> Decision:
    m, now = ctx.memory, ctx.now
    safe = _fail_safe(ctx) or _stale_safe(ctx)
    if safe is not None:
        return safe
    to_pass, to_fail = windows_needed(ctx.spec, ctx.fail_kinds)
    if ctx.verdict is Verdict.FAIL and (m.fail_streak >= to_fail or ctx.decisive):
        return _rollback(
            ctx, f"probe failed: {_fail_text(ctx, to_fail)}", Cause.POLICY_FAIL, advance=True
        )
    if ctx.verdict is Verdict.PASS and m.pass_streak >= to_pass:
        return ctx.go(
            State.ON,
            Action.HOLD,
            f"confirmed: {m.pass_streak} consecutive passing windows (disjoint); the backoff "
            f"decays only with time On",
            Cause.POLICY_PASS,
        )
    status = (
        f"probing: {_judged_text(ctx)}; pass streak {m.pass_streak}/{to_pass}, "
        f"fail streak {m.fail_streak}/{to_fail}"
    )
    if now >= m.probe_deadline - _EPS:
        return ctx.hold(
            f"{status}; probe deadline {m.probe_deadline:.0f} passed without a verdict "
            f"(insufficient data): still probing, insufficient data never flips",
            Alert.PROBE_STALLED,
        )
    return ctx.hold(status)


def _on(ctx: _Ctx) -> Decision:
    m, now, promo = ctx.memory, ctx.now, ctx.spec.promotion
    safe = _fail_safe(ctx) or _stale_safe(ctx)
    if safe is not None:
        return safe
    _, to_fail = windows_needed(ctx.spec, ctx.fail_kinds)
    if ctx.verdict is Verdict.FAIL and (m.fail_streak >= to_fail or ctx.decisive):
        return _rollback(
            ctx, f"rolled back: {_fail_text(ctx, to_fail)}", Cause.POLICY_FAIL, advance=True
        )
    if promo.enabled and ctx.verdict is Verdict.PASS and now >= m.since + promo.bake_seconds - _EPS:
        return ctx.go(
            State.PROMOTED,
            Action.PROMOTE,
            f"promote: on for {now - m.since:.0f} s >= bakeSeconds {promo.bake_seconds:.0f} "
            f"and the last window passed",
            Cause.BAKED,
        )
    return ctx.hold(f"on: {_judged_text(ctx)}; fail streak {m.fail_streak}/{to_fail}")


def _promoted(ctx: _Ctx) -> Decision:
    return ctx.hold(
        f"promoted at {ctx.memory.since:.0f}: the canary is no longer gated ({_judged_text(ctx)})"
    )


def _paused(ctx: _Ctx) -> Decision:
    m = ctx.memory
    if m.paused_by == "manual":
        return ctx.hold("paused by a person: holding everything until a manual resume")
    before = m.state_before_pause or State.OFF
    return ctx.go(
        before,
        Action.HOLD,
        f"resumed: spec.paused is false; back to {before.value}",
        Cause.SPEC_RESUME,
        state_before_pause=None,
        paused_by=None,
    )


HANDLERS: Final[dict[State, Callable[[_Ctx], Decision]]] = {
    State.OFF: _off,
    State.ROLLED_BACK: _off,
    State.PROBING: _probing,
    State.ON: _on,
    State.PROMOTED: _promoted,
    State.PAUSED: _paused,
}


def enable_guards(memory: Memory, spec: SpeculativeCanarySpec, now: float) -> tuple[Guard, ...]:
    """The guards an enable must pass now (empty: it may go): the cooldown after a rollback,
    the minimum dwell since the last flip, and room in the flip budget for the enable and its
    possible rollback. The automatic probe obeys the same ones (`_off`)."""
    t = spec.timing
    out: list[Guard] = []
    if memory.state is State.ROLLED_BACK and now < memory.cooldown_until - _EPS:
        out.append(Guard.COOLDOWN)
    if memory.last_flip_at is not None and now < memory.last_flip_at + t.min_dwell_seconds - _EPS:
        out.append(Guard.MIN_DWELL)
    if not flip_room(memory, spec, now):
        out.append(Guard.FLIP_BUDGET)
    return tuple(out)


def _guard_text(guards: Collection[Guard], memory: Memory, spec: SpeculativeCanarySpec) -> str:
    t = spec.timing
    texts = {
        Guard.COOLDOWN: f"cooldown until {wall_time(memory.cooldown_until)}",
        Guard.MIN_DWELL: (
            f"minimum dwell until {wall_time((memory.last_flip_at or 0.0) + t.min_dwell_seconds)}"
            f" (minDwellSeconds {t.min_dwell_seconds:.0f})"
        ),
        Guard.FLIP_BUDGET: (
            f"flip budget (maxFlipsPerHour {t.max_flips_per_hour} leaves no room for an enable "
            f"and its rollback)"
        ),
        Guard.PROMOTION_DISABLED: "promotion is not enabled in the policy",
        Guard.SPECULATION_OFF: "speculation is off on the canary; enable it first",
        Guard.SPEC_PAUSED: "spec.paused is true; set it to false to resume",
    }
    return ", ".join(texts[g] for g in guards)


def _manual(ctx: _Ctx, command: Command, force: bool) -> Decision:
    m = ctx.memory
    on = speculation_on(m)

    def note(text: str, cause: Cause = Cause.MANUAL, refused: tuple[Guard, ...] = ()) -> Decision:
        """A command that changes nothing is still recorded (same state in and out)."""
        memory, transition = _move(
            m,
            m.state,
            f"manual: {command.value}: {text}",
            cause=cause,
            command=command,
            now=ctx.now,
            evidence=ctx.evidence,
            refused=refused,
            pass_streak=m.pass_streak,
            fail_streak=m.fail_streak,
        )
        alerts = ctx.alerts
        if Guard.FLIP_BUDGET in refused:
            alerts = (*alerts, Alert.FLIP_BUDGET)
        return Decision(memory, Action.HOLD, transition.reason, transition, alerts)

    def refuse(guards: tuple[Guard, ...]) -> Decision:
        hatch = " (--force overrides)" if Guard.SPECULATION_OFF not in guards else ""
        return note(f"refused: {_guard_text(guards, m, ctx.spec)}{hatch}", Cause.REFUSED, guards)

    def forced_text(guards: tuple[Guard, ...]) -> str:
        return f" (forced past {_guard_text(guards, m, ctx.spec)})" if guards else ""

    if command is Command.PAUSE:
        if m.state is State.PAUSED:
            return note("already paused")
        return ctx.go(
            State.PAUSED,
            Action.HOLD,
            "manual: pause: holding everything until resumed",
            Cause.MANUAL,
            state_before_pause=m.state,
            paused_by="manual",
        )
    if command is Command.RESUME:
        if m.state is not State.PAUSED:
            return note("not paused")
        if ctx.spec.paused:
            return refuse((Guard.SPEC_PAUSED,))
        before = m.state_before_pause or State.OFF
        return ctx.go(
            before,
            Action.HOLD,
            f"manual: resume: back to {before.value}",
            Cause.MANUAL,
            state_before_pause=None,
            paused_by=None,
        )
    if command is Command.ENABLE:
        if on:
            return note("speculation is already on")
        guards = enable_guards(m, ctx.spec, ctx.now)
        if guards and not force:
            return refuse(guards)
        return ctx.go(
            State.PROBING,
            Action.ENABLE,
            f"manual: enable: probing with speculation on{forced_text(guards)}",
            Cause.MANUAL,
            forced=guards if force else None,
            **_enable_update(ctx),
        )
    if command is Command.DISABLE:
        if not on:
            return note("speculation is already off")
        cooldown = cooldown_seconds(ctx.spec, m.cooldown_index)
        return ctx.go(
            State.ROLLED_BACK,
            Action.DISABLE,
            f"manual: disable: next probe after {cooldown:.0f} s cooldown (pause to keep it off)",
            Cause.MANUAL,
            **_flip(m, ctx.now),
            cooldown_until=ctx.now + cooldown,
            state_before_pause=None,
            paused_by=None,
        )
    # PROMOTE
    if not on:
        return refuse((Guard.SPECULATION_OFF,))
    promo_guards: tuple[Guard, ...] = (
        () if ctx.spec.promotion.enabled else (Guard.PROMOTION_DISABLED,)
    )
    if promo_guards and not force:
        return refuse(promo_guards)
    copy = (
        "copy the speculative config to the stable fleet"
        if ctx.spec.promotion.stable is not None
        else "the canary is no longer gated (no promotion.stable to copy to)"
    )
    return ctx.go(
        State.PROMOTED,
        Action.PROMOTE,
        f"manual: promote: {copy}{forced_text(promo_guards)}",
        Cause.MANUAL,
        forced=promo_guards if force else None,
        state_before_pause=None,
        paused_by=None,
    )


def step(
    memory: Memory,
    verdict: Verdict,
    *,
    now: float,
    spec: SpeculativeCanarySpec,
    rollout: Rollout,
    command: Command | None = None,
    good_share: float | None = None,
    window_start: float | None = None,
    fail_kinds: Collection[CheckKind] = (),
    evidence: Mapping[str, float | str] | None = None,
    force: bool = False,
    decisive: bool = False,
    shortfall: float = 0.0,
    shape: TrafficShape | None = None,
) -> Decision:
    """Advance the machine by one evaluation window.

    `verdict` is the window's overall verdict; `window_start` when its data begins (default
    now - windowSeconds); `good_share` the current traffic share of slices whose last known
    alpha cleared enableAbove (for the early re-probe); `fail_kinds` the kinds of the failing
    checks (ACCEPTANCE, FLOOR, LATENCY); `evidence` is copied into any transition; `force`
    carries a manual `command` past the guards it would obey (`--force`); `decisive` says a
    failing check carries the evidence of all the windows a rollback needs (it rolls back
    alone); `shortfall` how many bands (enableAbove - disableBelow) the failing alpha lies
    below its threshold (deepens the cooldown); `shape` the window's traffic shape with its
    alpha (`core.shape`: the evidence of a shape re-probe).
    """
    memory = memory.model_copy(update={"flip_times": recent_flips(memory, now)})
    start = window_start if window_start is not None else now - spec.timing.window_seconds
    unjudged = not_judgeable(spec, rollout, memory, start)
    effective = verdict
    if unjudged is not None and verdict in (Verdict.PASS, Verdict.FAIL):
        effective = Verdict.INCONCLUSIVE
    ctx = _Ctx(
        memory=memory,
        verdict=effective,
        unjudged=unjudged,
        now=now,
        spec=spec,
        good_share=good_share,
        fail_kinds=tuple(fail_kinds),
        evidence=dict(evidence or {}),
        alerts=(),
        command=command,
        rollout=rollout,
        decisive=decisive and effective is Verdict.FAIL,
        shortfall=shortfall,
        shape=shape,
    )
    if command is not None:
        return _manual(ctx, command, force)
    if spec.paused and memory.state is not State.PAUSED:
        return ctx.go(
            State.PAUSED,
            Action.HOLD,
            "paused: spec.paused is true; holding everything",
            Cause.SPEC_PAUSE,
            state_before_pause=memory.state,
            paused_by="spec",
        )

    memory = _streaks(memory, effective, start=start, now=now, window=spec.timing.window_seconds)
    alerts: tuple[Alert, ...] = ()
    if memory.error_streak >= spec.errors.alert_after:
        alerts = (Alert.SOURCE_ERRORS,)
    age = verdict_age(memory, now)
    if age is not None and age >= spec.staleness.after_seconds - _EPS:
        alerts = (*alerts, Alert.VERDICT_STALE)
    ctx = replace(ctx, memory=memory, alerts=alerts)
    if memory.state is State.PAUSED:
        if spec.paused:
            return ctx.hold(f"paused by spec ({_judged_text(ctx)})")
        return _paused(ctx)
    if rollout.in_progress:
        extra: tuple[Alert, ...] = ()
        if (
            memory.last_flip_at is not None
            and now - memory.last_flip_at > spec.timing.rollout_timeout_seconds
        ):
            extra = (Alert.ROLLOUT_TIMEOUT,)
        return ctx.hold(
            f"{memory.state.value}: rollout in progress; its data is never judged", *extra
        )
    return HANDLERS[memory.state](ctx)
