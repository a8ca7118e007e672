"""How the state machine moves: the `Decision` it returns, the context one step decides in
(`Ctx`: memory, verdict, `now`, the policy and the window's evidence), and the one way a
state changes (`move`: a `Transition` with its cause and evidence, appended to a bounded
history; streaks reset). The policy's handlers (`core.machine`) and a person's commands
(`core.manual`) both move through here. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from alphagate.config import SpeculativeCanarySpec
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
from alphagate.core.streak import Pooled

HISTORY_LIMIT: Final = 20


class Decision(NamedTuple):
    """What `step` returns: the memory to persist, what the shell must do, and why."""

    memory: Memory
    action: Action
    reason: str
    transition: Transition | None
    alerts: tuple[Alert, ...] = ()


@dataclass(frozen=True, slots=True)
class Ctx:
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
    judged: bool = False  # a whole window disjoint from the last judged one: it counts
    shortfall: float = 0.0  # the failing alpha's distance below its threshold, in bands
    shape: TrafficShape | None = None  # the window's traffic shape (early re-probe evidence)
    pooled: Pooled | None = None  # the fail run's pooled test, when it failed (core.streak)

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
        memory, transition = move(
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


def move(
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
        "run": (),
        "history": (*memory.history, transition)[-HISTORY_LIMIT:],
    }
    fields.update(update)
    return memory.model_copy(update=fields), transition


def flip(memory: Memory, now: float) -> dict[str, Any]:
    return {"flip_times": (*memory.flip_times, now), "last_flip_at": now}


def enable_update(ctx: Ctx) -> dict[str, Any]:
    """An enable's memory. When the running pod template already carries the config (a new
    canary created speculating), the patch changes nothing and restarts no pod: it is no flip,
    so it neither spends the flip budget nor starts a warm-up (the rollout's own completion
    does)."""
    noop = ctx.rollout.speculation_on and not ctx.rollout.in_progress
    return {
        **({} if noop else flip(ctx.memory, ctx.now)),
        "probe_deadline": ctx.now + ctx.spec.timing.probe_seconds,
        "state_before_pause": None,
        "paused_by": None,
    }
