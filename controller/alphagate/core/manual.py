"""A person's commands (enable, disable, promote, pause, resume) carried out by the state
machine: they override the policy's verdicts but obey its guards (cooldown, minimum dwell, the
flip budget, promotion configured) unless forced, and every one is recorded as a transition
with cause MANUAL, or REFUSED with the guards that refused it. Pure."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import (
    Action,
    Alert,
    Cause,
    Command,
    Guard,
    Memory,
    State,
)
from alphagate.core.moves import Ctx, Decision, enable_update, flip, move
from alphagate.core.window import (
    EPS,
    cooldown_seconds,
    flip_room,
    speculation_on,
    wall_time,
)


def enable_guards(memory: Memory, spec: SpeculativeCanarySpec, now: float) -> tuple[Guard, ...]:
    """The guards an enable must pass now (empty: it may go): the cooldown after a rollback,
    the minimum dwell since the last flip, and room in the flip budget for the enable and its
    possible rollback. The automatic probe obeys the same ones (the Off handler in
    `core.machine`)."""
    t = spec.timing
    out: list[Guard] = []
    if memory.state is State.ROLLED_BACK and now < memory.cooldown_until - EPS:
        out.append(Guard.COOLDOWN)
    if memory.last_flip_at is not None and now < memory.last_flip_at + t.min_dwell_seconds - EPS:
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


@dataclass(frozen=True, slots=True)
class _Asked:
    """One command with the machine's context: how it is recorded, refused or forced."""

    ctx: Ctx
    command: Command
    force: bool

    def note(
        self, text: str, cause: Cause = Cause.MANUAL, refused: tuple[Guard, ...] = ()
    ) -> Decision:
        """A command that changes nothing is still recorded (same state in and out)."""
        ctx, m = self.ctx, self.ctx.memory
        memory, transition = move(
            m,
            m.state,
            f"manual: {self.command.value}: {text}",
            cause=cause,
            command=self.command,
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

    def refuse(self, guards: tuple[Guard, ...]) -> Decision:
        hatch = " (--force overrides)" if Guard.SPECULATION_OFF not in guards else ""
        why = _guard_text(guards, self.ctx.memory, self.ctx.spec)
        return self.note(f"refused: {why}{hatch}", Cause.REFUSED, guards)

    def forced_text(self, guards: tuple[Guard, ...]) -> str:
        if not guards:
            return ""
        return f" (forced past {_guard_text(guards, self.ctx.memory, self.ctx.spec)})"


def manual(ctx: Ctx, command: Command, force: bool) -> Decision:
    """Carry out a person's command: one handler per command (`_COMMANDS`)."""
    return _COMMANDS[command](_Asked(ctx, command, force))


def _pause(a: _Asked) -> Decision:
    m = a.ctx.memory
    if m.state is State.PAUSED:
        return a.note("already paused")
    return a.ctx.go(
        State.PAUSED,
        Action.HOLD,
        "manual: pause: holding everything until resumed",
        Cause.MANUAL,
        state_before_pause=m.state,
        paused_by="manual",
    )


def _resume(a: _Asked) -> Decision:
    m = a.ctx.memory
    if m.state is not State.PAUSED:
        return a.note("not paused")
    if a.ctx.spec.paused:
        return a.refuse((Guard.SPEC_PAUSED,))
    before = m.state_before_pause or State.OFF
    return a.ctx.go(
        before,
        Action.HOLD,
        f"manual: resume: back to {before.value}",
        Cause.MANUAL,
        state_before_pause=None,
        paused_by=None,
    )


def _enable(a: _Asked) -> Decision:
    ctx, m = a.ctx, a.ctx.memory
    if speculation_on(m):
        return a.note("speculation is already on")
    guards = enable_guards(m, ctx.spec, ctx.now)
    if guards and not a.force:
        return a.refuse(guards)
    return ctx.go(
        State.PROBING,
        Action.ENABLE,
        f"manual: enable: probing with speculation on{a.forced_text(guards)}",
        Cause.MANUAL,
        forced=guards if a.force else None,
        **enable_update(ctx),
    )


def _disable(a: _Asked) -> Decision:
    ctx, m = a.ctx, a.ctx.memory
    if not speculation_on(m):
        return a.note("speculation is already off")
    cooldown = cooldown_seconds(ctx.spec, m.cooldown_index)
    return ctx.go(
        State.ROLLED_BACK,
        Action.DISABLE,
        f"manual: disable: next probe after {cooldown:.0f} s cooldown (pause to keep it off)",
        Cause.MANUAL,
        **flip(m, ctx.now),
        cooldown_until=ctx.now + cooldown,
        state_before_pause=None,
        paused_by=None,
    )


def _promote(a: _Asked) -> Decision:
    ctx = a.ctx
    if not speculation_on(ctx.memory):
        return a.refuse((Guard.SPECULATION_OFF,))
    guards: tuple[Guard, ...] = () if ctx.spec.promotion.enabled else (Guard.PROMOTION_DISABLED,)
    if guards and not a.force:
        return a.refuse(guards)
    copy = (
        "copy the speculative config to the stable fleet"
        if ctx.spec.promotion.stable is not None
        else "the canary is no longer gated (no promotion.stable to copy to)"
    )
    return ctx.go(
        State.PROMOTED,
        Action.PROMOTE,
        f"manual: promote: {copy}{a.forced_text(guards)}",
        Cause.MANUAL,
        forced=guards if a.force else None,
        state_before_pause=None,
        paused_by=None,
    )


_COMMANDS: Final[dict[Command, Callable[[_Asked], Decision]]] = {
    Command.PAUSE: _pause,
    Command.RESUME: _resume,
    Command.ENABLE: _enable,
    Command.DISABLE: _disable,
    Command.PROMOTE: _promote,
}
