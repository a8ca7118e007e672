"""What every part of the status shares: Kubernetes times, numbers rounded for people, the
camelCase base model, and the conditions (metav1.Condition) with their one setter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def rfc3339(ts: float) -> str:
    """Unix seconds -> `2026-11-30T01:02:03Z` (Kubernetes Time, second precision)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (with or without fraction, `Z` or offset) -> Unix seconds; None if absent/bad."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rounded(x: float | None) -> float | None:
    """Finite and rounded to 6 significant digits (status is read by people), else None."""
    return float(f"{x:.6g}") if x is not None and math.isfinite(x) else None


def as_text(value: float | str) -> str:
    """A number or label as status text (6 significant digits)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class StatusModel(BaseModel):
    """camelCase like Kubernetes; unknown fields ignored so an older controller can read a
    newer status."""

    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
    )


class ConditionType(StrEnum):
    READY = "Ready"
    SOURCE_HEALTHY = "SourceHealthy"
    SPEC_VALID = "SpecValid"
    ROLLOUT_COMPLETE = "RolloutComplete"
    VERDICT_FRESH = "VerdictFresh"  # these three: kube.freshness
    TIMING_FITS = "TimingFits"
    CANARY_JUDGEABLE = "CanaryJudgeable"
    # False (ShortOutputs) while outputs are too short to pay: no probe; absent until measured
    OUTPUTS_LONG_ENOUGH = "OutputsLongEnough"
    # False (reason: the budget's scope) while evaluations are deferred (kube.apibudget);
    # absent until the first deferral
    WITHIN_API_BUDGET = "WithinApiBudget"
    # False (reason: the budget's scope) while reads wait for a Prometheus query budget
    # (sources.querybudget); absent until the first deferral
    WITHIN_QUERY_BUDGET = "WithinQueryBudget"


class Condition(StatusModel):
    """A Kubernetes-style condition (metav1.Condition shape)."""

    type: str = Field(
        description=(
            "Condition type: Ready, SourceHealthy, SpecValid, RolloutComplete, VerdictFresh, "
            "TimingFits, CanaryJudgeable, OutputsLongEnough, WithinApiBudget or "
            "WithinQueryBudget."
        )
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="A short CamelCase machine reason.",
    )
    message: str = Field(
        default="", description="What people read: why the condition has this status."
    )
    last_transition_time: Time = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The spec generation this condition was computed from."
    )


def set_condition(
    conditions: Sequence[Condition],
    kind: str | ConditionType,
    status: bool | None,
    reason: str,
    message: str = "",
    *,
    now: float,
    generation: int | None = None,
) -> list[Condition]:
    """Replace one condition; lastTransitionTime moves only when the status flips."""
    text: Literal["True", "False", "Unknown"] = (
        "Unknown" if status is None else ("True" if status else "False")
    )

    def condition(stamp: str) -> Condition:
        return Condition(
            type=str(kind),
            status=text,
            reason=reason,
            message=message[:1024],
            last_transition_time=stamp,
            observed_generation=generation,
        )

    out = [
        condition(c.last_transition_time if c.status == text else rfc3339(now))
        if c.type == str(kind)
        else c
        for c in conditions
    ]
    if not any(c.type == str(kind) for c in conditions):
        out.append(condition(rfc3339(now)))
    order = [t.value for t in ConditionType]
    out.sort(key=lambda c: (order.index(c.type) if c.type in order else len(order), c.type))
    return out
