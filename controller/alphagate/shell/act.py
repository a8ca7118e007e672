"""Applying one unit's decision to its Deployments (the canary's, and the stable on promotion).

Every patch carries the record generation its decision was made from (`expect_record`), and
is made only while this process may act (leader, shard owner). A Deployment running other
than its state needs is patched back and told (`DriftCorrected`). Errors propagate as
`KubeError` (`NotLeaderError` when this process may no longer act): the caller keeps the
previous Memory so the decision is made again next interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alphagate.config import SpeculativeCanarySpec, WorkloadRef
from alphagate.core.model import Action, Evaluation, State
from alphagate.core.tuning import Tuned
from alphagate.errors import NotLeaderError
from alphagate.kube.actuator import Actuator
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.refusals import config_text
from alphagate.kube.units import UnitOutcome
from alphagate.kube.workload import WorkloadState


def act(
    actuator: Actuator,
    events: EventRecorder,
    spec: SpeculativeCanarySpec,
    uo: UnitOutcome,
    deps: list[WorkloadState],
    evaluation: Evaluation,
    tuned: Tuned,
    *,
    want: dict[str, Any] | None,
    expect_record: int,
    ref: ObjectRef,
    owner: str,
    now: float,
    dry_run: bool,
    may_act: Callable[[], bool],
) -> list[int]:
    """Patch what needs it; update `uo` (applied, args_changed) and `deps` in place; return
    the record generations written."""
    unit = uo.unit
    records: list[int] = []
    # A canary alphagate never flipped, held Off (its first reads failed or are not judged
    # yet), keeps the config its owner deployed: missing data never flips anything, and a
    # template that already carries the config is enabled later without a restart.
    untouched = (
        evaluation.action is Action.HOLD
        and evaluation.memory.state is State.OFF
        and evaluation.memory.last_flip_at is None
    )
    for dref, dep in zip(unit.deployments, deps, strict=True):
        if untouched:
            want = dep.speculative_config
        state_now = evaluation.memory.state.value
        record_only = (dep.state is not None and dep.state != state_now) or (
            evaluation.transition is not None
        )
        # an object whose record restarts pods (KServe) gets it only with a flip
        needs = (dep.speculative_config != want) or (record_only and not dep.record_restarts)
        if not needs:
            continue
        if not may_act():
            raise NotLeaderError(
                "not the leader or shard owner any more: decision left to the owner"
            )
        result = actuator.apply(
            ref.namespace,
            dref,
            speculative_config=want,
            state=state_now,
            memory=evaluation.memory,
            now=now,
            dry_run=dry_run,
            owner=owner,
            involved=ref,
            expect_record=expect_record,
        )
        records.append(result.record)
        flip = evaluation.action in (Action.ENABLE, Action.DISABLE) or tuned.restarts
        if result.args_changed and not flip and not dry_run:
            # Someone else changed the flag (or spec.speculativeConfig changed): the
            # Deployment is brought back to what the current state needs.
            events.warning(
                ref,
                Reason.DRIFT_CORRECTED,
                f"{dref.kind} {dref.name} ran {config_text(dep.speculative_config)}; "
                f"state {state_now} needs {config_text(want)}: patched back",
            )
        uo.applied = uo.applied or result.patched
        uo.args_changed = uo.args_changed or result.args_changed
        idx = deps.index(dep)
        deps[idx] = result.deployment
    stable = spec.promotion.stable
    if evaluation.action is Action.PROMOTE and stable is not None:
        promoted = _promote(actuator, spec, stable, ref, owner=owner, now=now, dry_run=dry_run)
        uo.applied = uo.applied or promoted
    return records


def _promote(
    actuator: Actuator,
    spec: SpeculativeCanarySpec,
    stable: WorkloadRef,
    ref: ObjectRef,
    *,
    owner: str,
    now: float,
    dry_run: bool,
) -> bool:
    """Give the stable Deployment the canary's config (a promotion); True when it was patched."""
    result = actuator.apply(
        ref.namespace,
        stable,
        speculative_config=dict(spec.speculative_config),
        state=State.PROMOTED.value,
        memory=None,
        now=now,
        dry_run=dry_run,
        owner=owner,
        involved=ref,
    )
    return result.patched
