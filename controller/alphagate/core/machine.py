"""The state machine: one window's verdict plus the clock the caller gives -> the next state.

    Off ──enable──> Probing ──PASS×n──> On ──(bake, PASS)──> Promoted
     ^                │  ^               │
     │           FAIL×n  └──cooldown─┐   FAIL×n (or fail-safe)
     │                v              │   v
     └── (start) ─ RolledBack <──────┴───┘          Paused: holds any state

Rules:
* Only FAIL flips: `consecutiveWindows` CONSECUTIVE failing JUDGED windows (or the decisive
  rules below). A judged window is whole and shares no data with the last one judged
  (`window.judged`): one verdict per windowSeconds, so no failing window is picked among
  overlapping ones. A judged INCONCLUSIVE or PASS window, or a gap of more than a window,
  breaks a fail streak; looks and ERROR windows count nothing. Confirming needs
  `consecutiveWindows` judged PASS windows with no judged FAIL between them. At a one-sided
  level a = (1 - confidence) / 2 a window, n in a row fail on noise about N a^n times a day
  (N = 86,400 / windowSeconds) at a truth on the gate (`core.pace`). The one exception is the
  fail-safe: `errors.failSafeAfter` consecutive ERROR windows with `failSafe: disable`.
* Data from a rollout in progress, or from before the warm-up after the last rollout or flip
  ended, is never judged: PASS/FAIL there count as INCONCLUSIVE("warm-up").
* Off/RolledBack -> Probing (ENABLE) once the cooldown has passed (or early, on evidence that
  the traffic it failed on is gone: `core.reprobe`), after the minimum dwell, with no source
  error pending and room in the flip budget for the enable AND its possible rollback.
  Disables are always allowed, so no sliding hour holds more than maxFlipsPerHour flips.
* Rollback cooldown = initial * factor**(index + depth) (capped): index counts rollbacks in a
  row, one step down per cooldown.decayAfterSeconds spent On; depth is one step per full band
  (enableAbove - disableBelow) the failing alpha lies below its threshold (`shortfall`): an
  alpha far below the gate is probed rarely, one just below it sooner.
* A decisive FAIL (its bound at a quarter of the joint level a^n of the windows the rule needs
  clears the gate: `checks.decisive`) rolls back on its own judged window, and so does a fail
  run whose last j = 2..n + 1 judged windows, pooled, clear it at the joint level a^min(j, n)
  (`core.streak`, `Memory.run`), whatever the last window shows alone. `pace.budget` states
  the bound (0.58 a day at the gate, shipped chat policy); every policy rollback carries it.
  An early re-probe's probe ends on its first judged failing window (`ShapeMemory.spent`).
* An enable while the running pod template already carries the config restarts nothing: it
  is not a flip (no flip budget, no warm-up from it).
* Manual commands override the policy's verdicts but obey its guards (cooldown, minimum
  dwell, flip budget; a promote needs promotion enabled) unless forced (`--force`: recorded
  with the `Guard`s it overrode); cause MANUAL, or REFUSED with the guards. A disable is
  always allowed.
* Staleness: no conclusive verdict while Probing or On for staleness.afterSeconds raises
  VERDICT_STALE; with staleness.failSafe disable it rolls back (cause STALE_FAIL_SAFE).
* Transitions carry a `Cause`, decisions their `Alert`s: the shell branches on those.

`step` is a pure function: memory, verdict and `now` in; new memory, action and reason out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Final

from alphagate.config import FailSafe, SpeculativeCanarySpec
from alphagate.core import looks, pace, reprobe, streak
from alphagate.core.manual import manual
from alphagate.core.model import (
    Action,
    Alert,
    AlphaWindow,
    Cause,
    CheckKind,
    Command,
    Memory,
    Rollout,
    State,
    TrafficShape,
    Verdict,
)
from alphagate.core.moves import Ctx, Decision, enable_update, flip
from alphagate.core.window import (
    EPS,
    adjacent,
    cooldown_seconds,
    effective_state,
    flip_room,
    judged,
    not_judgeable,
    recent_flips,
    verdict_age,
    wall_time,
    warmup_end,
    windows_needed,
)

MAX_DEPTH: Final = 4  # rejection_depth's cap: the cooldown's maxSeconds caps it anyway


# ---------------------------------------------------------------- the step


def _streaks(
    memory: Memory, verdict: Verdict, *, counts: bool, adjacent: bool, now: float
) -> Memory:
    """Judged windows (`window.judged`: whole, disjoint, one per windowSeconds) in a row.

    A judged FAIL extends the fail streak when it follows the last judged window (`adjacent`)
    and starts it over otherwise; a judged INCONCLUSIVE or PASS window clears it. "Consecutive"
    means back to back: two failing windows hours apart with undecided ones between never add
    up to a rollback, whose rate a day is what the rule controls (`core.pace`). A judged PASS
    extends the pass streak, which only a judged FAIL clears: confirming restarts nothing, and
    a latency guard undecided now and then must not keep a healthy probe from it. Looks
    between judged windows, ERROR windows (about the source, not the traffic: the next
    evaluation is judged instead) and windows in a warm-up count nothing. Errors count per
    evaluation."""
    errors = memory.error_streak + 1 if verdict is Verdict.ERROR else 0
    update: dict[str, object] = {"error_streak": errors}
    if verdict in (Verdict.PASS, Verdict.FAIL):
        update["last_conclusive_at"] = now
    if not counts or verdict is Verdict.ERROR:
        return memory.model_copy(update=update)
    passes, fails = memory.pass_streak, 0
    if verdict is Verdict.PASS:
        passes += 1
    elif verdict is Verdict.FAIL:
        passes = 0
        fails = memory.fail_streak + 1 if adjacent and memory.fail_streak > 0 else 1
    update |= {"pass_streak": passes, "fail_streak": fails, "streak_end": now}
    return memory.model_copy(update=update)


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
    return min(int(shortfall + EPS), MAX_DEPTH)


def _next_probe(ctx: Ctx, advance: bool) -> tuple[float, int, str]:
    """(cooldown end, cooldown index, text) of a rollback. A probe an early re-probe started
    that fails keeps the cooldown it interrupted (it was a look the traffic's evidence
    allowed, not a rollback in a row); any other policy rollback backs off a step further."""
    m, now = ctx.memory, ctx.now
    index = decayed_index(m, ctx.spec, now)
    if advance and reprobe.failed_early(m):
        until = m.cooldown_until
        if until <= now + EPS:
            until = now + cooldown_seconds(ctx.spec, max(0, index - 1))
        at = wall_time(until)
        text = f"the early re-probe failed; the cooldown it interrupted stands (until {at})"
        return until, index, text
    depth = rejection_depth(ctx.shortfall) if advance else 0
    cooldown = cooldown_seconds(ctx.spec, index + depth)
    until = now + cooldown
    deep = f", {depth} step(s) deeper: alpha {ctx.shortfall:.1f} bands below" if depth else ""
    text = f"next probe after {cooldown:.0f} s cooldown{deep} (at {wall_time(until)})"
    return until, index + 1 if advance else index, text


def _rollback(ctx: Ctx, reason: str, cause: Cause, *, advance: bool) -> Decision:
    m = ctx.memory
    until, index, when = _next_probe(ctx, advance)
    track = reprobe.at_rollback(m, ctx.fail_kinds if cause is Cause.POLICY_FAIL else ())
    if advance and reprobe.failed_early(m):
        track = track.model_copy(update={"spent": True, "axis": None})
    if cause is Cause.POLICY_FAIL:  # the rule's false-rollback rate, stated with its evidence
        bound = pace.budget(ctx.spec, pace.alpha_checks(ctx.spec))
        ctx = replace(ctx, evidence={**ctx.evidence, **bound.fields()})
    return ctx.go(
        State.ROLLED_BACK,
        Action.DISABLE,
        f"{reason}; {when}",
        cause,
        **flip(m, ctx.now),
        cooldown_until=until,
        cooldown_index=index,
        good_share_at_rollback=ctx.good_share if ctx.good_share is not None else 0.0,
        shape=track,
        state_before_pause=None,
        paused_by=None,
    )


def _fail_safe(ctx: Ctx) -> Decision | None:
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


def _stale_safe(ctx: Ctx) -> Decision | None:
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


def _fail_text(ctx: Ctx, to_fail: int) -> str:
    m, p = ctx.memory, ctx.pooled
    if m.fail_streak >= to_fail:
        return f"{m.fail_streak} consecutive failing windows"
    if p is not None:
        return p.text(to_fail)
    return (
        f"one decisive failing window (its bound at the joint level of {to_fail} windows clears "
        f"the gate; fail streak {m.fail_streak}/{to_fail})"
    )


def _fails(ctx: Ctx, to_fail: int) -> bool:
    """A judged failing window that completes the streak, or carries its evidence alone."""
    if not ctx.judged:
        return False
    if ctx.pooled is not None:  # the run's pooled windows fail, whatever this one alone shows
        return True
    if ctx.verdict is not Verdict.FAIL:
        return False
    return ctx.memory.fail_streak >= to_fail or ctx.decisive


def _judged_text(ctx: Ctx) -> str:
    if ctx.unjudged is not None:
        return f"not judged ({ctx.unjudged})"
    if not ctx.judged and ctx.verdict is not Verdict.ERROR:
        window = ctx.spec.timing.window_seconds
        after = max(ctx.memory.streak_end, warmup_end(ctx.spec, ctx.rollout, ctx.memory) or 0.0)
        if after + window <= ctx.now + EPS:  # the window read is shorter than windowSeconds
            return f"look {ctx.verdict.value} (counts nothing: not a whole {window:.0f} s window)"
        when = wall_time(after + window)
        return f"look {ctx.verdict.value} (counts nothing: the next judged window ends at {when})"
    return f"window {ctx.verdict.value}"


def _off(ctx: Ctx) -> Decision:
    """Off / RolledBack: speculation is off, so alpha cannot be measured; probe on timers."""
    m, t, now = ctx.memory, ctx.spec.timing, ctx.now
    state = m.state.value
    if ctx.verdict is Verdict.ERROR:
        return ctx.hold(f"{state}: source error; no probe while the source fails")
    cooldown_over = now >= m.cooldown_until - EPS
    early = reprobe.early(m, ctx.spec, now=now, good_share=ctx.good_share, shape=ctx.shape)
    if not cooldown_over and early is None:
        return ctx.hold(
            f"{state}: cooling down, next probe in {m.cooldown_until - now:.0f} s "
            f"(at {wall_time(m.cooldown_until)})"
        )
    if m.last_flip_at is not None and now < m.last_flip_at + t.min_dwell_seconds - EPS:
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
    return ctx.go(State.PROBING, Action.ENABLE, f"{why} ({probe})", cause, **enable_update(ctx))


def _probing(ctx: Ctx) -> Decision:
    m, now = ctx.memory, ctx.now
    safe = _fail_safe(ctx) or _stale_safe(ctx)
    if safe is not None:
        return safe
    to_pass, to_fail = windows_needed(ctx.spec, ctx.fail_kinds)
    if _fails(ctx, to_fail):
        return _rollback(
            ctx, f"probe failed: {_fail_text(ctx, to_fail)}", Cause.POLICY_FAIL, advance=True
        )
    if reprobe.failed_early(m) and ctx.judged and ctx.verdict is Verdict.FAIL:
        # An early re-probe is a bet on the shape's evidence, at most one per confirmation
        # (`ShapeMemory.spent`): one judged failing window ends it, back to its cooldown.
        why = f"early re-probe failed: one failing window (fail streak {m.fail_streak}/{to_fail})"
        return _rollback(ctx, why, Cause.POLICY_FAIL, advance=True)
    if ctx.judged and ctx.verdict is Verdict.PASS and m.pass_streak >= to_pass:
        return ctx.go(
            State.ON,
            Action.HOLD,
            f"confirmed: {m.pass_streak} consecutive passing windows (disjoint); the backoff "
            f"decays only with time On",
            Cause.POLICY_PASS,
            shape=m.shape.model_copy(update={"spent": False}),
        )
    status = (
        f"probing: {_judged_text(ctx)}; pass streak {m.pass_streak}/{to_pass}, "
        f"fail streak {m.fail_streak}/{to_fail}"
    )
    if now >= m.probe_deadline - EPS:
        return ctx.hold(
            f"{status}; probe deadline {m.probe_deadline:.0f} passed without a verdict "
            f"(insufficient data): still probing, insufficient data never flips",
            Alert.PROBE_STALLED,
        )
    return ctx.hold(status)


def _on(ctx: Ctx) -> Decision:
    m, now, promo = ctx.memory, ctx.now, ctx.spec.promotion
    safe = _fail_safe(ctx) or _stale_safe(ctx)
    if safe is not None:
        return safe
    _, to_fail = windows_needed(ctx.spec, ctx.fail_kinds)
    if _fails(ctx, to_fail):
        return _rollback(
            ctx, f"rolled back: {_fail_text(ctx, to_fail)}", Cause.POLICY_FAIL, advance=True
        )
    if promo.enabled and ctx.verdict is Verdict.PASS and now >= m.since + promo.bake_seconds - EPS:
        return ctx.go(
            State.PROMOTED,
            Action.PROMOTE,
            f"promote: on for {now - m.since:.0f} s >= bakeSeconds {promo.bake_seconds:.0f} "
            f"and the last window passed",
            Cause.BAKED,
        )
    return ctx.hold(f"on: {_judged_text(ctx)}; fail streak {m.fail_streak}/{to_fail}")


def _promoted(ctx: Ctx) -> Decision:
    return ctx.hold(
        f"promoted at {ctx.memory.since:.0f}: the canary is no longer gated ({_judged_text(ctx)})"
    )


def _paused(ctx: Ctx) -> Decision:
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


HANDLERS: Final[dict[State, Callable[[Ctx], Decision]]] = {
    State.OFF: _off,
    State.ROLLED_BACK: _off,
    State.PROBING: _probing,
    State.ON: _on,
    State.PROMOTED: _promoted,
    State.PAUSED: _paused,
}


@dataclass(frozen=True, slots=True)
class StepInput:
    """One evaluation window as the machine sees it: what it remembers, what the window showed
    and what was asked of it.

    `verdict` is the window's overall verdict; `window_start` when its data begins (default
    now - windowSeconds); `good_share` the current traffic share of slices whose last known
    alpha cleared enableAbove (for the early re-probe); `fail_kinds` the kinds of the failing
    checks (ACCEPTANCE, FLOOR, LATENCY); `evidence` is copied into any transition; `force`
    carries a manual `command` past the guards it would obey (`--force`); `decisive` says a
    failing check carries the evidence of all the windows a rollback needs (it rolls back
    alone); `shortfall` how many bands (enableAbove - disableBelow) the failing alpha lies
    below its threshold (deepens the cooldown); `shape` the window's traffic shape with its
    alpha (`core.shape`: the evidence of a shape re-probe)."""

    memory: Memory
    verdict: Verdict
    now: float
    spec: SpeculativeCanarySpec
    rollout: Rollout
    command: Command | None = None
    good_share: float | None = None
    window_start: float | None = None
    fail_kinds: Collection[CheckKind] = ()
    evidence: Mapping[str, float | str] | None = None
    force: bool = False
    decisive: bool = False
    shortfall: float = 0.0
    shape: TrafficShape | None = None
    alpha: AlphaWindow | None = None


def step(given: StepInput) -> Decision:
    """Advance the machine by one evaluation window."""
    verdict, now, spec = given.verdict, given.now, given.spec
    rollout, command = given.rollout, given.command
    memory = given.memory.model_copy(update={"flip_times": recent_flips(given.memory, now)})
    start = given.window_start
    if start is None:
        start = now - spec.timing.window_seconds
    unjudged = not_judgeable(spec, rollout, memory, start)
    effective = verdict
    if unjudged is not None and verdict in (Verdict.PASS, Verdict.FAIL):
        effective = Verdict.INCONCLUSIVE
    counts = unjudged is None and judged(spec, memory, start, now)
    ctx = Ctx(
        memory=memory,
        verdict=effective,
        unjudged=unjudged,
        now=now,
        spec=spec,
        good_share=given.good_share,
        fail_kinds=tuple(given.fail_kinds),
        evidence=dict(given.evidence or {}),
        alerts=(),
        command=command,
        rollout=rollout,
        decisive=given.decisive and effective is Verdict.FAIL and counts,
        shortfall=given.shortfall,
        shape=given.shape,
    )
    if command is not None:
        return manual(ctx, command, given.force)
    if spec.paused and memory.state is not State.PAUSED:
        return ctx.go(
            State.PAUSED,
            Action.HOLD,
            "paused: spec.paused is true; holding everything",
            Cause.SPEC_PAUSE,
            state_before_pause=memory.state,
            paused_by="spec",
        )

    follows = adjacent(spec, memory, start)
    memory = _streaks(memory, effective, counts=counts, adjacent=follows, now=now)
    ctx = replace(ctx, memory=memory, alerts=_alerts(memory, spec, now), judged=counts)
    ctx = _pooled(ctx, given.alpha, follows) if counts else looks.apply(ctx, given.alpha)
    if memory.state is State.PAUSED:
        if spec.paused:
            return ctx.hold(f"paused by spec ({_judged_text(ctx)})")
        return _paused(ctx)
    if rollout.in_progress:
        return _rolling(ctx)
    return HANDLERS[memory.state](ctx)


def _pooled(ctx: Ctx, alpha: AlphaWindow | None, follows: bool) -> Ctx:
    """The fail run after this judged window (`core.streak`): its pooled windows may fail."""
    run, pooled = streak.after(ctx.memory.run, ctx.verdict, alpha, follows, ctx.spec.acceptance)
    ctx = replace(ctx, memory=ctx.memory.model_copy(update={"run": run}))
    if pooled is None:
        return ctx
    evidence = {**ctx.evidence, **pooled.fields()}
    deeper = max(ctx.shortfall, pooled.shortfall)
    return replace(ctx, pooled=pooled, shortfall=deeper, evidence=evidence)


def _alerts(memory: Memory, spec: SpeculativeCanarySpec, now: float) -> tuple[Alert, ...]:
    """Repeated source errors and a stale verdict, after this window's streaks."""
    alerts: tuple[Alert, ...] = ()
    if memory.error_streak >= spec.errors.alert_after:
        alerts = (Alert.SOURCE_ERRORS,)
    age = verdict_age(memory, now)
    if age is not None and age >= spec.staleness.after_seconds - EPS:
        alerts = (*alerts, Alert.VERDICT_STALE)
    return alerts


def _rolling(ctx: Ctx) -> Decision:
    """A rollout runs: hold (its data is never judged), and say when it takes too long."""
    m = ctx.memory
    extra: tuple[Alert, ...] = ()
    late = m.last_flip_at is not None
    if late and ctx.now - (m.last_flip_at or 0.0) > ctx.spec.timing.rollout_timeout_seconds:
        extra = (Alert.ROLLOUT_TIMEOUT,)
    return ctx.hold(f"{m.state.value}: rollout in progress; its data is never judged", *extra)
