"""A decision unit (slices flipped together, with their Deployments) and what one evaluation
did to it: combined aggregation makes one unit of every slice, perSlice one per slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.config import Aggregation, DeploymentRef, SpeculativeCanarySpec
from alphagate.core.insights import Insights
from alphagate.core.model import Evaluation, Memory, Rollout
from alphagate.core.tuning import Tuned
from alphagate.errors import (
    AlphagateError,
    ApiBudgetError,
    ClaimedError,
    ConflictError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    NotLeaderError,
    RecordChangedError,
)
from alphagate.kube.actuator import Actuator
from alphagate.kube.args import ArgsError
from alphagate.kube.events import Reason
from alphagate.kube.workload import WorkloadState

COMBINED_UNIT: Final = ""


@dataclass(frozen=True, slots=True)
class Unit:
    """Slices flipped together, with the Deployments they flip (one for perSlice)."""

    name: str  # "" for combined aggregation, the slice name for perSlice
    slices: tuple[str, ...] | None  # None: every slice (combined)
    deployments: tuple[DeploymentRef, ...]


def units_of(spec: SpeculativeCanarySpec) -> list[Unit]:
    if spec.aggregation is Aggregation.PER_SLICE:
        return [
            Unit(s.name, (s.name,), tuple(spec.canary_deployments(s.name))) for s in spec.slices
        ]
    return [Unit(COMBINED_UNIT, None, tuple(spec.canary_deployments()))]


def combined_rollout(actuator: Actuator, deps: Sequence[WorkloadState], now: float) -> Rollout:
    """In progress if any is, done when all are."""
    rollouts = [actuator.rollout(d, now=now) for d in deps]
    if not rollouts:
        return Rollout()
    in_progress = any(r.in_progress for r in rollouts)
    done = [r.completed_at for r in rollouts if r.completed_at is not None]
    return Rollout(
        in_progress=in_progress,
        completed_at=None if in_progress or not done else max(done),
        speculation_on=all(r.speculation_on for r in rollouts),
    )


@dataclass(slots=True)
class UnitOutcome:
    unit: Unit
    evaluation: Evaluation | None = None
    insights: Insights | None = None  # draft length, diagnosis, short outputs (core.insights)
    tuned: Tuned | None = None  # the draft-length tuner's decision (core.tuning)
    memory: Memory | None = None  # what was persisted
    memory_origin: str = ""
    applied: bool = False  # a patch changed the Deployment(s)
    args_changed: bool = False
    speculation_on: bool | None = None
    rollout_complete: bool | None = None
    error: KubeError | None = None
    error_reason: FailureReason | None = None


class FailureReason(StrEnum):
    """Why a unit's decision was not applied: the Ready condition's reason (API text, so keep
    the values stable)."""

    NOT_LEADER = "NotLeader"
    CONFLICT_RETRIES_EXHAUSTED = "ConflictRetriesExhausted"
    FORBIDDEN = "Forbidden"
    TARGET_NOT_FOUND = "TargetNotFound"
    ARGS_UNEDITABLE = "ArgsUneditable"
    TARGET_CLAIMED = "TargetClaimed"
    RECORD_CHANGED = "RecordChanged"
    CANARY_API_BUDGET_EXCEEDED = "CanaryApiBudgetExceeded"
    NAMESPACE_API_BUDGET_EXCEEDED = "NamespaceApiBudgetExceeded"
    OVERALL_API_BUDGET_EXCEEDED = "OverallApiBudgetExceeded"
    PATCH_FAILED = "PatchFailed"


# The first class an error is an instance of names its reason (subclasses before bases).
_REASONS: Final[tuple[tuple[type[AlphagateError], FailureReason], ...]] = (
    (NotLeaderError, FailureReason.NOT_LEADER),
    (ConflictError, FailureReason.CONFLICT_RETRIES_EXHAUSTED),
    (ForbiddenError, FailureReason.FORBIDDEN),
    (NotFoundError, FailureReason.TARGET_NOT_FOUND),
    (ArgsError, FailureReason.ARGS_UNEDITABLE),
    (ClaimedError, FailureReason.TARGET_CLAIMED),
    (RecordChangedError, FailureReason.RECORD_CHANGED),
)

_EVENT_REASONS: Final[dict[FailureReason, Reason]] = {
    FailureReason.CONFLICT_RETRIES_EXHAUSTED: Reason.CONFLICT_RETRIES_EXHAUSTED,
    FailureReason.FORBIDDEN: Reason.FORBIDDEN,
    FailureReason.TARGET_NOT_FOUND: Reason.NOT_FOUND,
    FailureReason.ARGS_UNEDITABLE: Reason.ARGS_UNEDITABLE,
    FailureReason.TARGET_CLAIMED: Reason.TARGET_CLAIMED,
    FailureReason.CANARY_API_BUDGET_EXCEEDED: Reason.API_BUDGET_EXCEEDED,
    FailureReason.NAMESPACE_API_BUDGET_EXCEEDED: Reason.API_BUDGET_EXCEEDED,
    FailureReason.OVERALL_API_BUDGET_EXCEEDED: Reason.API_BUDGET_EXCEEDED,
}


def failure_reason(exc: AlphagateError) -> FailureReason:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, ApiBudgetError):
        # the budget's scope (kube.apibudget.BudgetScope) names which one was spent
        return FailureReason(exc.reason)
    return FailureReason.PATCH_FAILED


def event_reason(exc: AlphagateError) -> Reason:
    return _EVENT_REASONS.get(failure_reason(exc), Reason.PATCH_FAILED)
