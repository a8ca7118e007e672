"""A SpeculativeCanary's status built from one evaluation's `UnitOutcome`s: the conditions
worded, and what an evaluation that did not run leaves alone kept. It writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alphagate.config import Aggregation, Mode, SpeculativeCanarySpec
from alphagate.core import tuning
from alphagate.core.model import Memory
from alphagate.core.suitability import Finding
from alphagate.errors import ClaimedError
from alphagate.kube.args import ArgsError
from alphagate.kube.insights_status import DraftTuningStatus, insights_status, tuning_status
from alphagate.kube.status.evidence import latency_evidence, p99_ratio, slice_evidence, summary, why
from alphagate.kube.status.fields import Condition, ConditionType, rfc3339, rounded, set_condition
from alphagate.kube.status.resource import (
    CanaryStatus,
    CommandRecord,
    Decision,
    UnitStatus,
    encode_memories,
    history_entries,
)
from alphagate.kube.units import UnitOutcome


def invalid_status(
    previous: CanaryStatus, reason: str, message: str, *, generation: int, now: float
) -> CanaryStatus:
    """The status of a canary whose policy is wrong: SpecValid and Ready False, nothing else
    changed (the last decision and evidence stay as they were)."""
    conditions = set_condition(
        previous.conditions,
        ConditionType.SPEC_VALID,
        False,
        reason,
        message,
        now=now,
        generation=generation,
    )
    conditions = set_condition(
        conditions,
        ConditionType.READY,
        False,
        reason,
        "fix the spec; nothing is changed",
        now=now,
        generation=generation,
    )
    status = previous.model_copy(
        update={
            "conditions": conditions,
            "observed_generation": generation,
            "last_evaluated": rfc3339(now),
        }
    )
    return status


def build_status(
    spec: SpeculativeCanarySpec,
    units: Sequence[UnitOutcome],
    previous: CanaryStatus,
    conditions: list[Condition],
    memories: Mapping[str, Memory],
    command_record: CommandRecord | None,
    *,
    generation: int,
    now: float,
    dry_run: bool,
    forced_dry_run: bool = False,
) -> CanaryStatus:
    """The status after one evaluation: conditions, evidence, the decision, history and the
    Memory of every unit. `dry_run`: this evaluation patched nothing; `forced_dry_run`: the
    controller runs with --dry-run, whatever the policy's mode says."""
    first = units[0] if units else None
    evs = [u.evaluation for u in units if u.evaluation is not None]

    failed = [u for u in units if u.error is not None]
    if failed:
        u = failed[0]
        conditions = set_condition(
            conditions,
            ConditionType.READY,
            False,
            str(u.error_reason or ""),
            str(u.error),
            now=now,
            generation=generation,
        )
    else:
        msg = "dry-run: decisions recorded, nothing patched" if dry_run else "decision applied"
        conditions = set_condition(
            conditions,
            ConditionType.READY,
            True,
            "Evaluated",
            msg,
            now=now,
            generation=generation,
        )
    complete = [u.rollout_complete for u in units if u.rollout_complete is not None]
    if complete:
        done = all(complete)
        conditions = set_condition(
            conditions,
            ConditionType.ROLLOUT_COMPLETE,
            done,
            "RolloutComplete" if done else "RolloutInProgress",
            "all canary pods run the current template"
            if done
            else "canary pods are restarting; their data is not judged",
            now=now,
            generation=generation,
        )
    outputs = first.insights.outputs if first is not None and first.insights else None
    if outputs is not None and outputs.finding is not Finding.UNKNOWN:
        conditions = set_condition(
            conditions,
            ConditionType.OUTPUTS_LONG_ENOUGH,
            not outputs.holds,
            "ShortOutputs" if outputs.holds else "LongEnough",
            outputs.reason,
            now=now,
            generation=generation,
        )
    # A target whose args cannot be edited, or one another canary owns (one canary per
    # Deployment), makes the spec invalid: the first unit with that error says why.
    refusals: tuple[tuple[type[Exception], str], ...] = (
        (ArgsError, "ArgsUneditable"),
        (ClaimedError, "TargetClaimed"),
    )
    for error_type, reason in refusals:
        refused = next((u for u in units if isinstance(u.error, error_type)), None)
        if refused is not None:
            conditions = set_condition(
                conditions,
                ConditionType.SPEC_VALID,
                False,
                reason,
                str(refused.error),
                now=now,
                generation=generation,
            )

    # combined: one evaluation; perSlice: merged across units
    slices = [s for e in evs for s in slice_evidence(e)]
    latency = [c for e in evs for c in latency_evidence(e.checks)]
    combined = evs[0].combined if len(evs) == 1 else None
    decision = None
    if first is not None and first.evaluation is not None:
        decision = decision_record(first, now, dry_run)
    history = sorted((t for m in memories.values() for t in m.history), key=lambda t: t.at)
    flips = [m.last_flip_at for m in memories.values() if m.last_flip_at is not None]
    unit_status = []
    if spec.aggregation is Aggregation.PER_SLICE:
        for u in units:
            mem = u.memory
            unit_status.append(
                UnitStatus(
                    name=u.unit.name,
                    deployments=[d.name for d in u.unit.deployments],
                    state=(mem.state.value if mem is not None else "Unknown"),
                    speculation_on=u.speculation_on,
                    last_decision=decision_record(u, now, dry_run) if u.evaluation else None,
                )
            )
    states = {m.state.value for m in memories.values()}
    state = states.pop() if len(states) == 1 else ("Mixed" if states else previous.state)
    spec_on = [u.speculation_on for u in units if u.speculation_on is not None]
    return CanaryStatus(
        state=state,
        observed_generation=generation,
        speculation_on=(all(spec_on) if spec_on else previous.speculation_on),
        mode=spec.mode.value if not forced_dry_run else Mode.DRY_RUN.value,
        combined_alpha=rounded(combined.value) if combined else None,
        combined_lower=rounded(combined.lower) if combined else None,
        combined_upper=rounded(combined.upper) if combined else None,
        p99_ratio=p99_ratio(latency),
        slices=slices,
        latency=latency,
        last_decision=decision or previous.last_decision,
        last_evaluated=rfc3339(now),
        last_flip=rfc3339(max(flips)) if flips else previous.last_flip,
        conditions=conditions,
        history=history_entries(history),
        units=unit_status,
        last_command=command_record,
        insights=(
            insights_status(first.insights, _tuning(spec, first))
            if first is not None and first.insights is not None
            else previous.insights
        ),
        memory=encode_memories(memories) if memories else previous.memory,
    )


def _tuning(spec: SpeculativeCanarySpec, u: UnitOutcome) -> DraftTuningStatus | None:
    if not spec.draft_length.tuning.enabled or u.memory is None:
        return None
    return tuning_status(u.memory.draft, tuning.current_k(spec, u.memory), spec.k)


def decision_record(u: UnitOutcome, now: float, dry_run: bool) -> Decision:
    e = u.evaluation
    assert e is not None
    reason = e.reason
    if u.error is not None:
        reason = f"{reason} — NOT APPLIED: {u.error}"
    return Decision(
        at=rfc3339(now),
        action=e.action.value,
        verdict=e.verdict.value,
        reason=reason,
        why=why(e),
        summary=summary(e, dry_run=dry_run)
        if u.error is None
        else f"{e.action.value}: not applied ({u.error_reason})",
        state=(u.memory or e.memory).state.value,
        speculation_on=e.target_speculation_on,
        applied=u.applied and u.error is None,
        dry_run=dry_run,
        deployments=[d.name for d in u.unit.deployments],
        alerts=[a.value for a in e.alerts],
    )
