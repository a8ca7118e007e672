"""One unit of one SpeculativeCanary, once its observation is in: judge it through the core,
act on the decision, tell people (Events, the diagnosis, K tuning, one log line).

Judging (`judge`) runs the core's evaluation, its insights over the same window (at the K that
ran), and the opt-in draft-length tuner after the state machine (`core.tuning`). Acting
(`act`) patches what needs it: every patch carries the record generation its decision was made
from (`expect_record`) and is made only while this process may act (leader, shard owner); a
Deployment running other than its state needs is patched back and told (`DriftCorrected`).
A patch that fails (`KubeError`; `NotLeaderError` when this process may no longer act) keeps
the previous Memory, so the decision is made again next interval (an API error can neither
lose nor half-apply a flip). Telling: `tell_tuning` reports a K change; `Diagnoses` emits the
diagnosis Event once per change of findings.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from alphagate.config import SpeculativeCanarySpec, WorkloadRef
from alphagate.core import tuning
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import Insights, analyse
from alphagate.core.model import Action, Command, Evaluation, Memory, Observation, Rollout, State
from alphagate.errors import KubeError, NotLeaderError
from alphagate.kube.actuator import Actuator
from alphagate.kube.events import (
    EventRecorder,
    ObjectRef,
    Reason,
    decision_events,
    diagnosis_event,
    draft_length_event,
)
from alphagate.kube.record import written
from alphagate.kube.refusals import config_text
from alphagate.kube.status.resource import CanaryStatus
from alphagate.kube.units import UnitOutcome, failure_reason, units_of
from alphagate.kube.workload import WorkloadState
from alphagate.shell.outcome import Prepared, source_errors
from alphagate.shell.reporting import decision_log


class Deciders(Protocol):
    """What deciding a unit needs of the reconciler."""

    actuator: Actuator
    events: EventRecorder
    diagnoses: Diagnoses
    may_act: Callable[[], bool]

    def owns(self, namespace: str, name: str) -> bool:
        """Is this canary this replica's now?"""
        ...


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


# ---------------------------------------------------------------- judging and telling


def judge(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    memory: Memory,
    rollout: Rollout,
    *,
    now: float,
    command: Command | None,
    slices: Sequence[str] | None,
    force: bool = False,
) -> tuple[Evaluation, Insights, tuning.Tuned]:
    """The state machine's evaluation, the window's insights, and the tuner's step; the
    evaluation carries the tuner's memory."""
    evaluation = evaluate(
        spec,
        observation,
        memory,
        rollout,
        now=now,
        command=command,
        slices=slices,
        force=force,
    )
    insights = analyse(
        spec,
        observation,
        estimates=evaluation.estimates,
        combined=evaluation.combined,
        slices=slices,
        cost_per_position=spec.draft_length.cost_per_position,
        k=tuning.current_k(spec, memory),  # the K that ran in this window
    )
    tuned = tuning.retune(
        spec,
        evaluation,
        insights.draft,
        now=now,
        rollout=rollout,
        window_start=observation.at - observation.window_seconds,
    )
    if tuned.memory is not evaluation.memory:
        evaluation = dataclasses.replace(evaluation, memory=tuned.memory)
    return evaluation, insights, tuned


def tell_tuning(
    events: EventRecorder,
    ref: ObjectRef,
    tuned: tuning.Tuned,
    *,
    dry_run: bool,
    unit: str,
    log: Any,
) -> None:
    """An Event and a log line when the tuner changed or confirmed K."""
    if tuned.change is None:
        return
    draft_length_event(events, ref, tuned.change, dry_run=dry_run, unit=unit)
    log.info(
        "draft_length",
        cause=tuned.change.cause.value,
        from_k=tuned.change.from_k,
        to_k=tuned.change.to_k,
        reason=tuned.change.reason,
    )


class Diagnoses:
    """The diagnosis findings last reported per resource, so each change is told once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reported: dict[tuple[str, str], list[str]] = {}

    def report(
        self,
        events: EventRecorder,
        ref: ObjectRef,
        insights: Insights,
        previous: CanaryStatus,
        *,
        unit: str,
    ) -> None:
        """Emit the diagnosis Event when the findings changed. The last set this process
        reported (a window without findings does not reset it, so causes that come and go are
        told once); after a restart, the status's."""
        key = (ref.namespace, ref.name)
        with self._lock:
            reported = self._reported.get(key)
            known = reported is not None
        if reported is None:
            reported = list(previous.insights.findings) if previous.insights else []
        found = [c.value for c in insights.findings()]
        if (
            diagnosis_event(events, ref, found, reported, insights.explain(), unit=unit)
            or not known
        ):
            with self._lock:
                self._reported[key] = found or reported


# ---------------------------------------------------------------- acting


def act(
    actuator: Actuator,
    events: EventRecorder,
    spec: SpeculativeCanarySpec,
    uo: UnitOutcome,
    deps: list[WorkloadState],
    evaluation: Evaluation,
    tuned: tuning.Tuned,
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
