"""One unit of one SpeculativeCanary, once its observation is in: judge it through the core,
act on the decision, tell people (Events, the diagnosis, K tuning, one log line).

A patch that fails keeps the previous Memory, so the decision is made again next interval
(an API error can neither lose nor half-apply a flip).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import tuning
from alphagate.core.model import Command, Observation
from alphagate.errors import KubeError
from alphagate.kube.actuator import Actuator
from alphagate.kube.events import EventRecorder, ObjectRef, decision_events
from alphagate.kube.record import written
from alphagate.kube.status import CanaryStatus
from alphagate.kube.units import UnitOutcome, failure_reason, units_of
from alphagate.kube.workload import WorkloadState
from alphagate.shell.act import act
from alphagate.shell.insight import Diagnoses, judge, tell_tuning
from alphagate.shell.outcome import Prepared, source_errors
from alphagate.shell.reporting import decision_log


class Deciders(Protocol):
    """What deciding a unit needs of the reconciler."""

    actuator: Actuator
    events: EventRecorder
    diagnoses: Diagnoses
    may_act: Callable[[], bool]
    owns: Callable[[str, str], bool]


def _running(uo: UnitOutcome, deps: Sequence[WorkloadState]) -> None:
    """Record what the unit's Deployments run now (None without any)."""
    uo.speculation_on = all(d.speculation_on for d in deps) if deps else None
    uo.rollout_complete = all(d.rollout_complete for d in deps) if deps else None


def decide_unit(
    rec: Deciders,
    spec: SpeculativeCanarySpec,
    prep: Prepared,
    observation: Observation,
    *,
    now: float,
    command: Command | None,
    force: bool = False,
    dry_run: bool,
    ref: ObjectRef,
    owner: str,
    previous: CanaryStatus,
    log: Any,
) -> UnitOutcome:
    """Judge one unit's window, act on the decision, tell people (the module docstring)."""
    uo, ulog, unit = prep.outcome, prep.log, prep.outcome.unit
    if prep.memory is None or prep.rollout is None:
        return uo  # the Deployment read failed; already reported
    deps, memory, rollout = prep.deps, prep.memory, prep.rollout
    evaluation, uo.insights, tuned = judge(
        spec,
        observation,
        memory,
        rollout,
        now=now,
        command=command,
        slices=unit.slices,
        force=force,
    )
    uo.evaluation, uo.tuned = evaluation, tuned
    config = tuning.speculative_config(spec, evaluation.memory)
    want = config if evaluation.target_speculation_on else None

    # ---- act
    try:
        records = act(
            rec.actuator,
            rec.events,
            spec,
            uo,
            deps,
            evaluation,
            tuned,
            want=want,
            expect_record=memory.record,
            ref=ref,
            owner=owner,
            now=now,
            dry_run=dry_run,
            may_act=lambda: rec.may_act() and rec.owns(ref.namespace, ref.name),
        )
    except KubeError as exc:
        # Not applied: keep the previous memory so the decision is made again next time.
        uo.error, uo.error_reason = exc, failure_reason(exc)
        uo.memory = memory
        _running(uo, deps)
        what = {"action": evaluation.action.value, "error": str(exc), "status": exc.status}
        ulog.warning("decision_not_applied", **what)
        decision_log(ulog, evaluation, uo, dry_run)
        return uo
    uo.memory = written(evaluation.memory, records)
    _running(uo, deps)
    decision_events(
        rec.events,
        ref,
        spec,
        evaluation,
        dry_run=dry_run,
        unit=unit.name,
        errors=source_errors(observation),
        speculative_config=config,
    )
    tell_tuning(rec.events, ref, tuned, dry_run=dry_run, unit=unit.name, log=ulog)
    if unit.name == units_of(spec)[0].name:  # one diagnosis per resource, as in status
        rec.diagnoses.report(rec.events, ref, uo.insights, previous, unit=unit.name)
    decision_log(ulog, evaluation, uo, dry_run)
    return uo
