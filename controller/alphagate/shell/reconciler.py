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

One canary per Deployment: before any flip a canary claims its Deployments
(`Actuator.claim`); a second canary on a claimed Deployment gets SpecValid=False
`TargetClaimed` and an Event, and never touches it. A policy naming a Prometheus endpoint the
admin did not configure is an invalid spec (SpecValid=False `UnknownEndpoint`), not a source
error.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from alphagate.core import timing, tuning
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import analyse
from alphagate.core.model import Action, Command, Memory, Observation, State
from alphagate.errors import ClaimedError, ForbiddenError, KubeError, NotFoundError, PolicyError
from alphagate.kube.actuator import Actuator, DeploymentState, config_text
from alphagate.kube.client import Kube, call
from alphagate.kube.events import (
    EventRecorder,
    ObjectRef,
    Reason,
    decision_events,
    diagnosis_event,
    draft_length_event,
    timing_events,
)
from alphagate.kube.freshness import timing_fits, verdict_fresh
from alphagate.kube.record import Origin, resume, written
from alphagate.kube.status import (
    COMMANDS,
    CanaryStatus,
    CommandRecord,
    ConditionType,
    StatusWriter,
    command_forced,
    parse_status,
    pending_command,
    rfc3339,
    set_condition,
)
from alphagate.kube.status_builder import build_status, invalid_status
from alphagate.kube.units import (
    Unit,
    UnitOutcome,
    combined_rollout,
    event_reason,
    failure_reason,
    units_of,
)
from alphagate.shell.outcome import Outcome, Prepared, observe_start, source_errors, source_failures
from alphagate.shell.reporting import (
    METRIC_ERRORS,
    NullRecorder,
    Recorder,
    decision_log,
    export,
)
from alphagate.shell.watch import Beat, WatchLoop
from alphagate.sources import FailedSource, Source, make_source

SourceFactory = Callable[[SpeculativeCanarySpec, str, str], Source]


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
        self._source_factory = source_factory or self._default_source
        self._sources: dict[tuple[str, str], tuple[int, Source]] = {}
        self._memories: dict[tuple[str, str], dict[str, Memory]] = {}
        self._diagnosed: dict[tuple[str, str], list[str]] = {}  # findings last reported
        self._tracked: set[tuple[str, str]] = set()
        # the timing problems last warned about per resource (generation, scrape interval,
        # problems): an Event and a log line once, not every interval
        self._timing_warned: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.evaluations = 0

    # ------------------------------------------------------------ sources

    def _default_source(self, spec: SpeculativeCanarySpec, namespace: str, name: str) -> Source:
        return make_source(spec, namespace=namespace, core_api=self.kube.core)

    def _source(
        self, spec: SpeculativeCanarySpec, namespace: str, name: str, generation: int
    ) -> Source:
        key = (namespace, name)
        with self._lock:
            held = self._sources.get(key)
        if held is not None and held[0] == generation:
            return held[1]
        if held is not None:
            self._close_source(held[1])
        source = self._source_factory(spec, namespace, name)
        with self._lock:
            self._sources[key] = (generation, source)
        return source

    @staticmethod
    def _close_source(source: Source) -> None:
        close = getattr(source, "close", None)
        if callable(close):
            with contextlib.suppress(OSError, RuntimeError):  # sockets, a pool already shut
                close()

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its source, memory and metrics."""
        super().forget(namespace, name)
        with self._lock:
            held = self._sources.pop((namespace, name), None)
            self._memories.pop((namespace, name), None)
            self._tracked.discard((namespace, name))
            self._timing_warned.pop((namespace, name), None)
        if held is not None:
            self._close_source(held[1])
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
        source = self._source(spec, namespace, name, generation)
        if isinstance(source, FailedSource) and source.spec_invalid:
            out.spec_error = str(source.error)
            out.spec_invalid = True
            self._spec_invalid(
                previous, ref, "UnknownEndpoint", str(source.error), generation, now, out
            )
            return

        # ---- a manual command, if one is pending
        command: Command | None = None
        command_record: CommandRecord | None = previous.last_command
        pending = pending_command(obj, previous)
        force = False
        if pending is not None:
            text, ident = pending
            if text in COMMANDS:
                command = Command(text)
                force = command_forced(obj)
            else:
                command_record = CommandRecord(
                    command=text,
                    id=ident,
                    handled_at=rfc3339(now),
                    result=f"refused: unknown command; one of {', '.join(COMMANDS)}",
                )
                self.events.warning(ref, Reason.FLIP_REFUSED, f"unknown command {text!r}")

        # ---- read each unit's Deployments first: the window to query depends on its rollout
        key = (namespace, name)
        with self._lock:
            cached = dict(self._memories.get(key, {}))
        stored = previous.memories()
        prepared = [
            self._prepare(
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
        conditions = self._timing(
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

        if command is not None and pending is not None:
            results = [u.evaluation.reason for u in out.units if u.evaluation is not None]
            failed = [str(u.error) for u in out.units if u.error is not None]
            command_record = CommandRecord(
                command=pending[0],
                id=pending[1],
                handled_at=rfc3339(now),
                result="; ".join(failed) if failed else ("; ".join(results) or "no change"),
                forced=force,
            )
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

    def _timing(
        self,
        spec: SpeculativeCanarySpec,
        observation: Observation,
        conditions: list[Any],
        *,
        ref: ObjectRef,
        generation: int,
        now: float,
        log: Any,
    ) -> list[Any]:
        """TimingFits from core/timing against the scrape interval the source saw; a Warning
        Event and a log line once per policy generation, scrape interval and problems."""
        scrape = timing.scrape_interval(spec, observation.scrape_interval_seconds)
        advice = timing.advise(spec, scrape)
        key = (ref.namespace, ref.name)
        seen = (generation, scrape, tuple(w.problem for w in advice))
        with self._lock:
            new = bool(advice) and self._timing_warned.get(key) != seen
            self._timing_warned[key] = seen
        if new:
            log.warning(
                "timing_too_short",
                problems=[w.problem.value for w in advice],
                fields=[w.field for w in advice],
                scrape_interval_seconds=scrape,
            )
            timing_events(self.events, ref, advice)
        return timing_fits(conditions, advice, scrape, now=now, generation=generation)

    def _prepare(
        self,
        unit: Unit,
        *,
        ref: ObjectRef,
        cached: Memory | None,
        stored: Memory | None,
        now: float,
        log: Any,
        claim_as: str = "",
    ) -> Prepared:
        """Read (and, with `claim_as`, claim) the unit's Deployments and resume its memory
        from the newest record (never judge without knowing what runs); a failed read or a
        Deployment another canary owns is kept as the unit's outcome."""
        uo = UnitOutcome(unit)
        ulog = log.bind(unit=unit.name) if unit.name else log
        deps: list[DeploymentState] = []
        try:
            for dref in unit.deployments:
                if not claim_as:  # dry-run: nothing is written, nothing claimed
                    deps.append(self.actuator.read(ref.namespace, dref))
                    continue
                try:
                    dep, stale = self.actuator.claim(
                        ref.namespace, dref, owner=claim_as, owner_exists=self._canary_exists
                    )
                except ClaimedError:
                    raise
                except KubeError as exc:  # API trouble: the patch claims it (ANN_OWNER) later
                    ulog.warning("claim_failed", deployment=dref.name, error=str(exc))
                    dep, stale = self.actuator.read(ref.namespace, dref), ""
                deps.append(dep)
                if stale:
                    self.events.normal(
                        ref,
                        Reason.CLAIM_TAKEN_OVER,
                        f"{dep.what} was claimed by SpeculativeCanary {stale}, which no longer "
                        f"exists; {claim_as} owns it now",
                    )
        except KubeError as exc:
            uo.error, uo.error_reason = exc, failure_reason(exc)
            uo.memory = cached or stored
            self.events.warning(ref, event_reason(exc), str(exc))
            ulog.warning("deployment_read_failed", error=str(exc))
            return Prepared(uo, ulog)
        resumed = resume(cached, stored, deps)
        memory = resumed.memory
        uo.memory_origin = resumed.text
        known = cached or stored
        if resumed.origin is Origin.RECORD and known is not None:
            ulog.info(
                "resumed_from_record",
                origin=resumed.text,
                state=memory.state.value,
                record=memory.record,
                known=known.record,
            )
            self.events.normal(
                ref,
                Reason.RESUMED_FROM_RECORD,
                f"Deployment {resumed.deployment}'s record (generation {memory.record}, state "
                f"{memory.state.value}) is newer than this controller's memory (generation "
                f"{known.record}, state {known.state.value}): a reply was lost or a controller "
                "stopped mid-flip; continuing from the record, nothing is flipped again",
            )
        if resumed.unreadable:
            ulog.warning("record_unreadable", deployment=resumed.unreadable, record=memory.record)
        rollout = combined_rollout(self.actuator, deps, now)
        return Prepared(uo, ulog, deps, memory, rollout)

    def _canary_exists(self, owner: str) -> bool:
        """Whether the SpeculativeCanary `namespace/name` that claimed a Deployment still
        exists (any answer but 404 counts as yes: a claim is only taken from the gone)."""
        namespace, _, name = owner.partition("/")
        try:
            call(
                f"read {PLURAL}.{GROUP} {owner}",
                lambda: self.kube.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                ),
            )
        except NotFoundError:
            return False
        except KubeError:
            return True
        return True

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
        evaluation = evaluate(
            spec,
            observation,
            memory,
            rollout,
            now=now,
            command=command,
            slices=unit.slices,
            force=force,
        )
        uo.insights = analyse(
            spec,
            observation,
            estimates=evaluation.estimates,
            combined=evaluation.combined,
            slices=unit.slices,
            cost_per_position=spec.draft_length.cost_per_position,
            k=tuning.current_k(spec, memory),  # the K that ran in this window
        )
        # the opt-in draft-length tuner, after the state machine (core/tuning.py)
        tuned = tuning.retune(
            spec,
            evaluation,
            uo.insights.draft,
            now=now,
            rollout=rollout,
            window_start=observation.at - observation.window_seconds,
        )
        if tuned.memory is not evaluation.memory:
            evaluation = dataclasses.replace(evaluation, memory=tuned.memory)
        uo.evaluation, uo.tuned = evaluation, tuned
        config = tuning.speculative_config(spec, evaluation.memory)
        want = config if evaluation.target_speculation_on else None

        # ---- act
        changed = False
        records: list[int] = []
        try:
            for dref, dep in zip(unit.deployments, deps, strict=True):
                state_now = evaluation.memory.state.value
                needs = (
                    (dep.speculative_config != want)
                    or (dep.state is not None and dep.state != state_now)
                    or evaluation.transition is not None
                )
                if not needs:
                    continue
                if not self.may_act() or not self.owns(ref.namespace, ref.name):
                    raise KubeError(
                        "not the leader or shard owner any more: decision left to the owner",
                        reason="NotLeader",
                    )
                result = self.actuator.apply(
                    ref.namespace,
                    dref,
                    speculative_config=want,
                    state=state_now,
                    memory=evaluation.memory,
                    now=now,
                    dry_run=dry_run,
                    owner=owner,
                    involved=ref,
                    expect_record=memory.record,
                )
                records.append(result.record)
                changed = changed or result.args_changed
                flip = evaluation.action in (Action.ENABLE, Action.DISABLE) or tuned.restarts
                if result.args_changed and not flip and not dry_run:
                    # Someone else changed the flag (or spec.speculativeConfig changed): the
                    # Deployment is brought back to what the current state needs.
                    self.events.warning(
                        ref,
                        Reason.DRIFT_CORRECTED,
                        f"{dref.kind} {dref.name} ran {config_text(dep.speculative_config)}; "
                        f"state {state_now} needs {config_text(want)}: patched back",
                    )
                uo.applied = uo.applied or result.patched
                uo.args_changed = uo.args_changed or result.args_changed
                idx = deps.index(dep)
                deps[idx] = result.deployment
            if evaluation.action is Action.PROMOTE and spec.promotion.stable is not None:
                result = self.actuator.apply(
                    ref.namespace,
                    spec.promotion.stable,
                    speculative_config=dict(spec.speculative_config),
                    state=State.PROMOTED.value,
                    memory=None,
                    now=now,
                    dry_run=dry_run,
                    owner=owner,
                    involved=ref,
                )
                uo.applied = uo.applied or result.patched
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
        if tuned.change is not None:
            draft_length_event(self.events, ref, tuned.change, dry_run=dry_run, unit=unit.name)
            ulog.info(
                "draft_length",
                cause=tuned.change.cause.value,
                from_k=tuned.change.from_k,
                to_k=tuned.change.to_k,
                reason=tuned.change.reason,
            )
        if unit.name == units_of(spec)[0].name:  # one diagnosis per resource, as in status
            # The last set this process reported (a window without findings does not reset it,
            # so causes that come and go are told once); after a restart, the status's.
            key = (ref.namespace, ref.name)
            reported = self._diagnosed.get(key)
            if reported is None:
                reported = list(previous.insights.findings) if previous.insights else []
            found = [c.value for c in uo.insights.findings()]
            if (
                diagnosis_event(
                    self.events, ref, found, reported, uo.insights.explain(), unit=unit.name
                )
                or key not in self._diagnosed
            ):
                self._diagnosed[key] = found or reported
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
            held = self._sources.pop((namespace, name), None)
            self._memories.pop((namespace, name), None)
        if held is not None:
            self._close_source(held[1])
        with contextlib.suppress(Exception):  # metrics are best effort
            self.recorder.forget(namespace=namespace, canary=name)

    def close(self) -> None:
        """The loops stopped: close every source."""
        with self._lock:
            sources = [s for _, s in self._sources.values()]
            self._sources.clear()
        for s in sources:
            self._close_source(s)


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
