"""The reconciler: one evaluation of one SpeculativeCanary, through the core, to the cluster.

`reconcile` reads the resource and its canary Deployment(s); resumes the core's Memory;
observes the pools through a `Source`; calls `core.evaluate`; applies the decision with the
`Actuator` (or, in dry-run, only records it); writes status (`kube.status_builder`); emits an
Event per transition and per refusal; exports metrics through a `Recorder` and logs one
structured line per decision (`shell.reporting`). When to evaluate what is the watch loop's
job (`shell.watch.WatchLoop`, which this class extends).

Resuming: the Deployment's record is the truth (`kube.record`). The Memory comes from this
process's last evaluation when there is one, else from the resource's status, unless a canary
Deployment's record (`alphagate.io/record`) is newer than the generation that Memory continues:
a reply lost after the patch landed, a controller that died before its status write, another
replica. Then the record's Memory wins and the flip is neither lost nor repeated. Every patch
carries the record generation its decision was made from and is refused when the record has
moved since (RecordChangedError), so two replicas never flip twice for one decision. A failed
patch keeps the previous Memory (the decision is recorded with `applied: false` and made again
next interval), so an API error can neither lose nor half-apply a flip.

The steps live beside it: claiming and resuming (`shell.claims`), manual commands
(`shell.manual`), judging, K tuning and the diagnosis Event (`shell.insight`), applying
(`shell.act`), the TimingFits warning (`shell.timing_warnings`). A policy naming a Prometheus
endpoint the admin did not configure is an invalid spec (SpecValid=False `UnknownEndpoint`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from alphagate.config import (
    GROUP,
    PLURAL,
    VERSION,
    Mode,
    SpeculativeCanary,
    SpeculativeCanarySpec,
    parse,
)
from alphagate.core import tuning
from alphagate.core.model import Command, Memory, Observation
from alphagate.errors import ForbiddenError, KubeError, NotFoundError, PolicyError
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube, call
from alphagate.kube.events import (
    EventRecorder,
    ObjectRef,
    Reason,
    decision_events,
)
from alphagate.kube.freshness import verdict_fresh
from alphagate.kube.record import written
from alphagate.kube.status import (
    CanaryStatus,
    ConditionType,
    StatusWriter,
    parse_status,
    set_condition,
)
from alphagate.kube.status_builder import build_status, invalid_status
from alphagate.kube.units import (
    Unit,
    UnitOutcome,
    combined_rollout,
    failure_reason,
    units_of,
)
from alphagate.shell.act import act
from alphagate.shell.claims import prepare
from alphagate.shell.insight import Diagnoses, judge, tell_tuning
from alphagate.shell.manual import manual_command
from alphagate.shell.outcome import Outcome, Prepared, observe_start, source_errors, source_failures
from alphagate.shell.reporting import (
    METRIC_ERRORS,
    NullRecorder,
    Recorder,
    decision_log,
    export,
)
from alphagate.shell.source_cache import SourceCache, SourceFactory
from alphagate.shell.timing_warnings import TimingWarnings
from alphagate.shell.watch import Beat, WatchLoop
from alphagate.sources import FailedSource, Source, make_source

# ---------------------------------------------------------------- the reconciler


class Reconciler(WatchLoop):
    """Reconciles SpeculativeCanary resources. `reconcile(ns, name, now=...)` does one
    evaluation; `run(stop)` watches and evaluates each resource on its interval."""

    def __init__(
        self,
        kube: Kube,
        *,
        source_factory: SourceFactory | None = None,
        recorder: Recorder | None = None,
        events: EventRecorder | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        watch_timeout_seconds: float = 60.0,
        actuator: Actuator | None = None,
        health: Beat | None = None,
        may_act: Callable[[], bool] | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
        owns: Callable[[str, str], bool] | None = None,
    ) -> None:
        super().__init__(
            kube,
            namespace=namespace,
            label_selector=label_selector,
            clock=clock,
            watch_timeout_seconds=watch_timeout_seconds,
            health=health,
            owns=owns,
        )
        self.dry_run = dry_run
        self.events = events if events is not None else EventRecorder(kube.api_client)
        self.actuator = actuator or Actuator(kube.api_client, events=self.events)
        self.status_writer = StatusWriter(kube.api_client)
        self.recorder: Recorder = recorder if recorder is not None else NullRecorder()
        # Checked right before every write to a Deployment: with leader election, "do I still
        # hold a fresh Lease?" (a replica that stalled must not act on an old decision).
        self.may_act = may_act or (lambda: True)
        # Told about every reconcile (the demo's live view, tests); exceptions are swallowed.
        self.on_outcome = on_outcome
        self.sources = SourceCache(source_factory or self._default_source)
        self._memories: dict[tuple[str, str], dict[str, Memory]] = {}
        self.diagnoses = Diagnoses()  # the diagnosis findings last reported
        self._tracked: set[tuple[str, str]] = set()
        self.timing_warnings = TimingWarnings(self.events)  # told once per change
        self.evaluations = 0

    # ------------------------------------------------------------ sources

    def _default_source(self, spec: SpeculativeCanarySpec, namespace: str, name: str) -> Source:
        return make_source(spec, namespace=namespace, core_api=self.kube.core)

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its source, memory and metrics."""
        super().forget(namespace, name)
        with self._lock:
            self._memories.pop((namespace, name), None)
            self._tracked.discard((namespace, name))
        self.timing_warnings.forget(namespace, name)
        self.sources.drop(namespace, name)
        with contextlib.suppress(*METRIC_ERRORS):  # metrics are best effort
            self.recorder.forget(namespace=namespace, canary=name)

    def forget_memories(self) -> None:
        """Leadership changed hands: trust the cluster, not what this process remembers."""
        with self._lock:
            self._memories.clear()

    # ------------------------------------------------------------ one evaluation

    def reconcile(self, namespace: str, name: str, *, now: float | None = None) -> Outcome:
        """Evaluate one resource once and act. Never raises for API or source trouble."""
        started = time.monotonic()
        now = self.clock() if now is None else now
        out = Outcome(namespace, name)
        log = self._log.bind(namespace=namespace, canary=name)
        try:
            obj = call(
                f"read {PLURAL}.{GROUP} {namespace}/{name}",
                lambda: self.kube.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                ),
            )
        except NotFoundError:
            self.forget(namespace, name)
            out.gone = True
            return out
        except KubeError as exc:
            log.error("read_failed", error=str(exc))
            out.spec_error = str(exc)
            return out
        if not isinstance(obj, dict):
            return out
        if (namespace, name) not in self._tracked:
            # counters start at 0 before the first evaluation, so increase() sees its flip
            self._tracked.add((namespace, name))
            self.recorder.track(namespace=namespace, canary=name)
        try:
            self._reconcile(obj, now, out, log)
        except Exception as exc:  # last resort: a bug must cost one evaluation, not the loop
            log.exception("reconcile_crashed", error=repr(exc), error_type=type(exc).__name__)
            out.spec_error = f"internal error: {exc!r}"
        out.duration_seconds = time.monotonic() - started
        self.evaluations += 1
        if self.on_outcome is not None:
            try:
                self.on_outcome(out)
            except Exception as exc:  # last resort: the caller's hook (demo, tests) may be buggy
                log.warning("on_outcome_failed", error=repr(exc), error_type=type(exc).__name__)
        return out

    def _reconcile(self, obj: dict[str, Any], now: float, out: Outcome, log: Any) -> None:
        namespace, name = out.namespace, out.name
        meta = obj.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        previous = parse_status(obj)
        ref = ObjectRef.of(obj)
        conditions = list(previous.conditions)

        # ---- the policy
        try:
            canary: SpeculativeCanary = parse(obj, where=f"{PLURAL}/{namespace}/{name}")
        except PolicyError as exc:
            out.spec_error = str(exc)
            out.spec_invalid = True
            self._spec_invalid(previous, ref, "InvalidSpec", str(exc), generation, now, out)
            return
        spec = canary.spec
        dry_run = self.dry_run or spec.mode is Mode.DRY_RUN
        conditions = set_condition(
            conditions,
            ConditionType.SPEC_VALID,
            True,
            "Valid",
            "policy accepted",
            now=now,
            generation=generation,
        )

        # ---- the source: a policy naming an endpoint nobody configured is wrong, not failing
        source = self.sources.get(spec, namespace, name, generation)
        if isinstance(source, FailedSource) and source.spec_invalid:
            out.spec_error = str(source.error)
            out.spec_invalid = True
            self._spec_invalid(
                previous, ref, "UnknownEndpoint", str(source.error), generation, now, out
            )
            return

        # ---- a manual command, if one is pending
        manual = manual_command(obj, previous, self.events, ref, now)
        command, force = manual.command, manual.force

        # ---- read each unit's Deployments first: the window to query depends on its rollout
        key = (namespace, name)
        with self._lock:
            cached = dict(self._memories.get(key, {}))
        stored = previous.memories()
        prepared = [
            prepare(
                self.kube,
                self.actuator,
                self.events,
                unit,
                ref=ref,
                cached=cached.get(unit.name),
                stored=stored.get(unit.name),
                now=now,
                log=log,
                claim_as="" if dry_run else f"{namespace}/{name}",
            )
            for unit in units_of(spec)
        ]

        # ---- observe once for all units, over the widest window any unit may judge: the
        # configured window cut to start after warm-up (the same cut the backtest makes)
        start = observe_start(spec, prepared, now)
        window = now - start
        try:
            observation: Observation = source.observe(
                spec, start=start, end=now, interval_seconds=spec.timing.interval_seconds
            )
        except Exception as exc:  # last resort: sources report failures as data, never raise;
            # one that does anyway (a bug, a plug-in Discovery) makes this evaluation an Error
            log.error("source_raised", error=repr(exc), error_type=type(exc).__name__)
            observation = Observation(
                at=now, window_seconds=window, pools=(), source_error=f"unknown: {exc!r}"
            )
        failures = source_failures(observation)
        errors = [text for _, text in failures]
        if failures:
            for kind, _ in failures:
                with contextlib.suppress(*METRIC_ERRORS):
                    self.recorder.source_error(kind, namespace=namespace, canary=name)
        conditions = set_condition(
            conditions,
            ConditionType.SOURCE_HEALTHY,
            not errors,
            "SourceErrors" if errors else "Observed",
            "; ".join(errors)[:1024] if errors else f"read {len(observation.pools)} pools",
            now=now,
            generation=generation,
        )
        conditions = self.timing_warnings.check(
            spec, observation, conditions, ref=ref, generation=generation, now=now, log=log
        )

        # ---- each unit: evaluate, act
        memories: dict[str, Memory] = {}
        for prep in prepared:
            uo = self._unit(
                spec,
                prep,
                observation,
                now=now,
                command=command,
                force=force,
                dry_run=dry_run,
                ref=ref,
                owner=f"{namespace}/{name}",
                previous=previous,
                log=log,
            )
            out.units.append(uo)
            if uo.memory is not None:
                memories[uo.unit.name] = uo.memory
        with self._lock:
            self._memories[key] = dict(memories)

        command_record = manual.handled(out.units, now)
        conditions = verdict_fresh(
            conditions,
            spec,
            [u.evaluation for u in out.units if u.evaluation is not None],
            now=now,
            generation=generation,
        )

        if any(u.error_reason == "NotLeader" for u in out.units):
            log.warning("lost_leadership_mid_evaluation")
            return  # the new leader writes status and acts; this replica must not
        if any(u.error_reason == "RecordChanged" for u in out.units):
            # Another writer (a replica, or a reply of ours that was lost) moved the record
            # since this decision's read: its status stands; the next evaluation resumes.
            log.warning("record_moved_mid_evaluation")
            return
        status = build_status(
            spec,
            out.units,
            previous,
            conditions,
            memories,
            command_record,
            generation=generation,
            now=now,
            dry_run=dry_run,
            forced_dry_run=self.dry_run,
        )
        out.status = status
        acted = any(u.applied or u.args_changed for u in out.units)
        if not acted and not self.owns(namespace, name):
            # Its shard moved meanwhile: the new owner evaluates it (a flip made before the
            # move is still recorded, here and in the Deployment's annotation).
            log.info("shard_moved", detail="evaluation dropped, status left to the new owner")
            return
        try:
            self.status_writer.write(namespace, name, status)
            out.status_written = True
        except KubeError as exc:
            log.error("status_write_failed", error=str(exc), status=exc.status)
            reason = Reason.FORBIDDEN if isinstance(exc, ForbiddenError) else Reason.PATCH_FAILED
            self.events.warning(ref, reason, f"could not write status: {exc}")
        export(self.recorder, spec, namespace, name, out.units, out.duration_seconds)

    def _unit(
        self,
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
                self.actuator,
                self.events,
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
                may_act=lambda: self.may_act() and self.owns(ref.namespace, ref.name),
            )
        except KubeError as exc:
            # Not applied: keep the previous memory so the decision is made again next time.
            uo.error, uo.error_reason = exc, failure_reason(exc)
            uo.memory = memory
            uo.speculation_on = all(d.speculation_on for d in deps) if deps else None
            uo.rollout_complete = all(d.rollout_complete for d in deps) if deps else None
            ulog.warning(
                "decision_not_applied",
                action=evaluation.action.value,
                error=str(exc),
                status=exc.status,
            )
            decision_log(ulog, evaluation, uo, dry_run)
            return uo
        uo.memory = written(evaluation.memory, records)
        uo.speculation_on = all(d.speculation_on for d in deps) if deps else None
        uo.rollout_complete = all(d.rollout_complete for d in deps) if deps else None
        decision_events(
            self.events,
            ref,
            spec,
            evaluation,
            dry_run=dry_run,
            unit=unit.name,
            errors=source_errors(observation),
            speculative_config=config,
        )
        tell_tuning(self.events, ref, tuned, dry_run=dry_run, unit=unit.name, log=ulog)
        if unit.name == units_of(spec)[0].name:  # one diagnosis per resource, as in status
            self.diagnoses.report(self.events, ref, uo.insights, previous, unit=unit.name)
        decision_log(ulog, evaluation, uo, dry_run)
        return uo

    # ------------------------------------------------------------ status, events, logs

    def _spec_invalid(
        self,
        previous: CanaryStatus,
        ref: ObjectRef,
        reason: str,
        message: str,
        generation: int,
        now: float,
        out: Outcome,
    ) -> None:
        status = invalid_status(previous, reason, message, generation=generation, now=now)
        out.status = status
        already = previous.condition(ConditionType.SPEC_VALID)
        if already is None or already.status != "False" or already.message != message[:1024]:
            self.events.warning(ref, Reason.INVALID_SPEC, message)
        try:
            self.status_writer.write(out.namespace, out.name, status)
            out.status_written = True
        except KubeError as exc:
            self._log.error("status_write_failed", error=str(exc))

    def hand_over(self, namespace: str, name: str) -> None:
        """Another replica owns this canary now: drop what this process remembers of it (its
        Memory and source state), so taking it back later resumes from the cluster, and its
        series (the owner exports them; two replicas must not)."""
        with self._lock:
            self._memories.pop((namespace, name), None)
        self.sources.drop(namespace, name)
        with contextlib.suppress(Exception):  # metrics are best effort
            self.recorder.forget(namespace=namespace, canary=name)

    def close(self) -> None:
        """The loops stopped: close every source."""
        self.sources.close()


__all__ = [
    "Outcome",
    "Reconciler",
    "SourceFactory",
    "Unit",
    "UnitOutcome",
    "combined_rollout",
    "source_errors",
    "source_failures",
    "units_of",
]
