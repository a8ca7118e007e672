"""The status of one SpeculativeCanary (half of the CRD schema): the last decision, the
transition history, per-unit state, the last manual command, and the core's Memory kept so a
restarted controller resumes where it was."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import Field, ValidationError

from alphagate.core.model import Memory, Transition
from alphagate.kube.insights_status import InsightsStatus
from alphagate.kube.status.evidence import LatencyEvidence, SliceEvidence
from alphagate.kube.status.fields import (
    Condition,
    ConditionType,
    StatusModel,
    Time,
    as_text,
    rfc3339,
)

HISTORY_LIMIT: Final = 20


class Decision(StatusModel):
    """The last decision: what, why, and whether it was applied."""

    at: Time = Field(description="When it was decided (RFC 3339).")
    action: str = Field(description="enable, disable or hold.")
    verdict: str = Field(description="The combined verdict that drove it.")
    reason: str = Field(description="The state machine's reason.")
    why: str = Field(default="", description="The checks that decided it, with their numbers.")
    summary: str = Field(default="", description="One short line for kubectl get.")
    state: str = Field(description="The state after the decision.")
    speculation_on: bool = Field(
        default=False, description="What the canary should run after this decision."
    )
    applied: bool = Field(
        default=False,
        description=("The Deployment was patched (false: unchanged, dry-run or refused)."),
    )
    dry_run: bool = Field(
        default=False, description="Decided in dryRun mode: recorded, not applied."
    )
    deployments: list[str] = Field(
        default=[], description="The Deployments this decision is about."
    )
    alerts: list[str] = Field(
        default=[],
        description=(
            "Alert conditions raised with it (flip-budget, probe-stalled,"
            " rollout-timeout, source-errors, verdict-stale)."
        ),
    )


class HistoryEntry(StatusModel):
    from_state: str = Field(description="State before the transition.")
    to_state: str = Field(description="State after the transition.")
    reason: str = Field(description="Why, in words.")
    at: Time = Field(description="When (RFC 3339).")
    cause: str | None = Field(
        default=None,
        description="Why, as a stable kind: policy-fail, policy-pass, probe, manual, refused, ...",
    )
    evidence: dict[str, str] = Field(
        default={}, description=("The numbers behind it (alpha, interval, samples, P99s), as text.")
    )
    forced: bool = Field(
        default=False, description="A manual command carried out with --force past its guards."
    )
    guards: list[str] = Field(
        default=[],
        description=(
            "The guards that refused the command (cause refused) or that --force overrode: "
            "cooldown, min-dwell, flip-budget, promotion-disabled, ..."
        ),
    )


class CommandRecord(StatusModel):
    """The last manual command (annotation) the controller handled, so it acts once."""

    command: str = Field(
        description=("The manual command (pause, resume, enable, disable, promote).")
    )
    id: str = Field(description="The command id from the alphagate.io/command-id annotation.")
    handled_at: Time = Field(description="When the controller handled it (RFC 3339).")
    result: str = Field(default="", description="What came of it.")
    forced: bool = Field(
        default=False, description="Sent with --force (alphagate.io/command-force: true)."
    )


class UnitStatus(StatusModel):
    """perSlice aggregation: one entry per independently flipped Deployment group."""

    name: str = Field(
        description=("The decision unit: the slice (perSlice) or the canary (combined).")
    )
    deployments: list[str] = Field(default=[], description="The Deployments this unit flips.")
    state: str = Field(description="The unit's state.")
    speculation_on: bool | None = Field(
        default=None, description="Whether the unit's Deployments run speculation."
    )
    last_decision: Decision | None = Field(default=None, description="The unit's last decision.")


class CanaryStatus(StatusModel):
    """What the controller reports about one SpeculativeCanary."""

    state: str | None = Field(
        default=None, description="Off, Probing, On, RolledBack, Paused or Promoted."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation last evaluated."
    )
    speculation_on: bool | None = Field(
        default=None, description="Whether the canary runs speculative decoding now."
    )
    mode: str | None = Field(default=None, description="enforce or dryRun, as evaluated.")
    combined_alpha: float | None = Field(
        default=None,
        description=(
            "The pooled alpha across slices in the last window (what a combined canary gates on)."
        ),
    )
    combined_lower: float | None = Field(
        default=None, description="Lower confidence bound of the pooled alpha."
    )
    combined_upper: float | None = Field(
        default=None, description="Upper confidence bound of the pooled alpha."
    )
    p99_ratio: float | None = Field(
        default=None,
        description=("The worst canary-over-baseline latency ratio of the last window."),
    )
    slices: list[SliceEvidence] = Field(
        default=[], description="Per-slice acceptance evidence from the last evaluation."
    )
    latency: list[LatencyEvidence] = Field(
        default=[], description="Latency evidence from the last evaluation."
    )
    last_decision: Decision | None = Field(
        default=None, description="The last decision with its reason."
    )
    last_evaluated: Time | None = Field(
        default=None, description="When the canary was last evaluated (RFC 3339)."
    )
    last_flip: Time | None = Field(
        default=None, description="When speculation was last turned on or off (RFC 3339)."
    )
    conditions: list[Condition] = Field(
        default=[],
        description=("Standard conditions: Ready, SourceHealthy, SpecValid, RolloutComplete."),
    )
    history: list[HistoryEntry] = Field(
        default=[], description="The latest state transitions, newest last."
    )
    units: list[UnitStatus] = Field(
        default=[],
        description=("Per decision unit (perSlice: one per slice) state and last decision."),
    )
    last_command: CommandRecord | None = Field(
        default=None, description="The last manual command handled."
    )
    insights: InsightsStatus | None = Field(
        default=None,
        description=(
            "Beyond on and off: the draft length that pays, the mean-vs-tail diagnosis and "
            "whether outputs are too short (the last evaluation; perSlice: the first unit)."
        ),
    )
    # The core's Memory as JSON: for combined aggregation one Memory, for perSlice an object
    # {unit name: Memory}. Read back with `memories()`.
    memory: str | None = Field(
        default=None,
        description=("The controller's decision memory as JSON (resumes after a restart)."),
    )

    def condition(self, kind: str | ConditionType) -> Condition | None:
        for c in self.conditions:
            if c.type == str(kind):
                return c
        return None

    def memories(self) -> dict[str, Memory]:
        """The stored Memory per unit (`""` for combined); {} if absent or unreadable."""
        return decode_memories(self.memory)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def decode_memories(text: str | None) -> dict[str, Memory]:
    """JSON from `encode_memories` (or a bare Memory) -> {unit: Memory}; {} when unreadable."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return {}
    try:
        if (
            isinstance(raw, dict)
            and "state" in raw
            and not any(isinstance(v, dict) and "state" in v for v in raw.values())
        ):
            return {"": Memory.model_validate(raw)}
        if isinstance(raw, dict):
            return {str(k): Memory.model_validate(v) for k, v in raw.items()}
    except ValidationError:
        return {}
    return {}


def encode_memories(memories: Mapping[str, Memory]) -> str:
    """{"": m} -> a bare Memory JSON; several units -> {unit: Memory}."""
    if set(memories) == {""}:
        return memories[""].model_dump_json()
    return json.dumps(
        {k: json.loads(m.model_dump_json()) for k, m in sorted(memories.items())},
        separators=(",", ":"),
    )


def parse_status(obj: Mapping[str, Any] | None) -> CanaryStatus:
    """An unreadable status block is empty."""
    raw = (obj or {}).get("status") if obj is not None else None
    if not isinstance(raw, dict):
        return CanaryStatus()
    try:
        return CanaryStatus.model_validate(raw)
    except ValidationError:
        return CanaryStatus()


def history_entries(
    transitions: Iterable[Transition], limit: int = HISTORY_LIMIT
) -> list[HistoryEntry]:
    items = [
        HistoryEntry(
            from_state=str(t.from_state),
            to_state=str(t.to_state),
            reason=t.reason,
            at=rfc3339(t.at),
            cause=t.cause.value,
            evidence={k: as_text(v) for k, v in sorted(t.evidence.items())},
            forced=t.forced,
            guards=[g.value for g in t.guards],
        )
        for t in transitions
    ]
    return items[-limit:]
