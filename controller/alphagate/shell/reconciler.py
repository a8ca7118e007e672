"""The reconciler: every SpeculativeCanary, on its own interval, through the core, to the cluster.

For each resource (all namespaces or one, optionally filtered by a label selector so several
controllers can shard the work) it: reads the resource and its canary Deployment(s); resumes the
core's Memory; observes the pools through a `Source`; calls `core.evaluate`; applies the decision
with the `Actuator` (or, in dry-run, only records it); writes status (evidence, conditions,
history, Memory); emits an Event per transition and per refusal; exports metrics through the
exporter's `Recorder`; and logs one structured line per decision.

Resuming: the Memory comes from this process's last evaluation when there is one, else from the
resource's status, unless a Deployment annotation carries a *newer* flip (the controller died
between the patch and the status write): then the annotation wins and the flip is not repeated.
A failed patch keeps the previous Memory (the decision is recorded with `applied: false` and
made again next interval), so an API error can neither lose nor half-apply a flip.

Watching: a list+watch thread keeps a cache of resources and wakes the loop on changes (a new
generation or a manual command is evaluated at once). Only the leader evaluates.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kubernetes import client, watch

from alphagate.config import (
    GROUP,
    PLURAL,
    VERSION,
    Aggregation,
    DeploymentRef,
    Mode,
    SpeculativeCanary,
    SpeculativeCanarySpec,
    parse,
)
from alphagate.core import machine
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import Insights, analyse
from alphagate.core.model import (
    Action,
    Command,
    Evaluation,
    Memory,
    Observation,
    Rollout,
    State,
    Verdict,
)
from alphagate.errors import (
    AlphagateError,
    ConflictError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    PolicyError,
    SourceErrorKind,
)
from alphagate.kube.actuator import Actuator, DeploymentState, config_text
from alphagate.kube.args import ArgsError
from alphagate.kube.client import Kube, call
from alphagate.kube.events import EventRecorder, ObjectRef, Reason, decision_events
from alphagate.kube.insights_status import insights_status
from alphagate.kube.status import (
    COMMANDS,
    CanaryStatus,
    CommandRecord,
    ConditionType,
    Decision,
    StatusWriter,
    UnitStatus,
    encode_memories,
    history_entries,
    latency_evidence,
    p99_ratio,
    parse_status,
    parse_time,
    pending_command,
    rfc3339,
    rounded,
    set_condition,
    slice_evidence,
    summary,
    why,
)
from alphagate.logs import get as get_logger
from alphagate.sources import Source, make_source

SourceFactory = Callable[[SpeculativeCanarySpec, str, str], Source]


class Recorder(Protocol):
    """Where the reconciler reports for metrics (`shell.exporter.Recorder` is the real one)."""

    def track(self, *, namespace: str, canary: str) -> None: ...

    def forget(self, *, namespace: str, canary: str) -> None: ...

    def source_error(
        self, kind: SourceErrorKind | None, *, namespace: str, canary: str
    ) -> None: ...

    def record(
        self,
        evaluation: Evaluation,
        *,
        namespace: str,
        canary: str,
        duration_seconds: float,
        speculation_on: bool,
        spec: SpeculativeCanarySpec | None = None,
        insights: Insights | None = None,
    ) -> None: ...


class NullRecorder:
    """Records nothing: a reconciler run without metrics (tests, one-off evaluations)."""

    def track(self, *, namespace: str, canary: str) -> None:
        """Nothing to start."""

    def forget(self, *, namespace: str, canary: str) -> None:
        """Nothing to drop."""

    def source_error(self, kind: SourceErrorKind | None, *, namespace: str, canary: str) -> None:
        """Nothing to count."""

    def record(
        self,
        evaluation: Evaluation,
        *,
        namespace: str,
        canary: str,
        duration_seconds: float,
        speculation_on: bool,
        spec: SpeculativeCanarySpec | None = None,
        insights: Insights | None = None,
    ) -> None:
        """Nothing to export."""


class Beat(Protocol):
    """The control loop's liveness signal (`shell.exporter.Health` is the real one)."""

    def beat(self) -> None: ...


COMBINED_UNIT: Final = ""


# ---------------------------------------------------------------- small helpers


def source_failures(observation: Observation) -> list[tuple[SourceErrorKind | None, str]]:
    """Every failure the source reported, whole-read first, with its kind (None: unknown)."""
    out: list[tuple[SourceErrorKind | None, str]] = []
    if observation.source_error:
        out.append((observation.source_error_kind, observation.source_error))
    out += [
        (p.error_kind, f"{p.slice}/{p.role.value}: {p.error}") for p in observation.pools if p.error
    ]
    return out


def source_errors(observation: Observation) -> list[str]:
    """Every failure the source reported, whole-read first (sentences for people)."""
    return [text for _, text in source_failures(observation)]


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


def resume_memory(
    cached: Memory | None, status_memory: Memory | None, deployments: Sequence[DeploymentState]
) -> tuple[Memory, str]:
    """Pick the Memory to continue from, and say where it came from.

    This process's own last Memory wins. Otherwise the status; but a Deployment annotation whose
    recorded flip is newer than the status's means the status write after that flip was lost.
    """
    if cached is not None:
        return cached, "process"
    best, origin = status_memory, "status"
    best_flip = (status_memory.last_flip_at or -math.inf) if status_memory else -math.inf
    for dep in deployments:
        ann = dep.memory
        if ann is None:
            continue
        flip = ann.last_flip_at if ann.last_flip_at is not None else -math.inf
        if best is None or flip > best_flip:
            best, best_flip, origin = ann, flip, f"annotation on {dep.name}"
    return (best or Memory()), (origin if best is not None else "new")


@dataclass(slots=True)
class Prepared:
    """A unit after its Deployments were read: what runs, its memory and its rollout."""

    outcome: UnitOutcome
    log: Any
    deps: list[DeploymentState] = field(default_factory=list)
    memory: Memory | None = None
    rollout: Rollout | None = None


def observe_start(spec: SpeculativeCanarySpec, prepared: Sequence[Prepared], now: float) -> float:
    """Where the one query for all units starts: the core's window rule
    (`machine.shared_window`), the same the backtest follows."""
    units = [
        (p.memory, p.rollout) for p in prepared if p.memory is not None and p.rollout is not None
    ]
    return machine.shared_window(spec, units, now)[0]


def combined_rollout(actuator: Actuator, deps: Sequence[DeploymentState], now: float) -> Rollout:
    """One Rollout for Deployments flipped together: in progress if any is, done when all are."""
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


# ---------------------------------------------------------------- results


@dataclass(slots=True)
class UnitOutcome:
    unit: Unit
    evaluation: Evaluation | None = None
    insights: Insights | None = None  # draft length, diagnosis, short outputs (core.insights)
    memory: Memory | None = None  # what was persisted
    memory_origin: str = ""
    applied: bool = False  # a patch changed the Deployment(s)
    args_changed: bool = False
    speculation_on: bool | None = None
    rollout_complete: bool | None = None
    error: KubeError | None = None
    error_reason: str = ""


@dataclass(slots=True)
class Outcome:
    """What one reconcile of one resource did (for tests, logs and `alphagate run`)."""

    namespace: str
    name: str
    units: list[UnitOutcome] = field(default_factory=list)
    status: CanaryStatus | None = None
    status_written: bool = False
    spec_error: str | None = None
    spec_invalid: bool = False  # the policy itself is wrong (not a transient API failure)
    gone: bool = False
    duration_seconds: float = 0.0

    @property
    def evaluation(self) -> Evaluation | None:
        return self.units[0].evaluation if self.units else None


@dataclass(slots=True)
class _Entry:
    obj: dict[str, Any]
    next_due: float = 0.0
    generation: int = 0
    command_id: str = ""


# ---------------------------------------------------------------- the reconciler


class Reconciler:
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
        self.kube = kube
        self.namespace = namespace
        self.label_selector = label_selector
        self.dry_run = dry_run
        self.clock = clock
        self.watch_timeout_seconds = watch_timeout_seconds
        self.events = events if events is not None else EventRecorder(kube.api_client)
        self.actuator = actuator or Actuator(kube.api_client, events=self.events)
        self.status_writer = StatusWriter(kube.api_client)
        self.recorder: Recorder = recorder if recorder is not None else NullRecorder()
        self.health = health
        # Checked right before every write to a Deployment: with leader election, "do I still
        # hold a fresh Lease?" (a replica that stalled must not act on an old decision).
        self.may_act = may_act or (lambda: True)
        # Sharding: is this canary (namespace, name) this replica's to evaluate and act on now?
        # Checked when picking what is due and again right before every Deployment write.
        self.owns = owns or (lambda namespace, name: True)
        # Sharding: a canary first seen here waits until one interval after its last
        # evaluation (another replica may have made it moments ago).
        self.resume_schedule = owns is not None
        # Told about every reconcile (the demo's live view, tests); exceptions are swallowed.
        self.on_outcome = on_outcome
        self._source_factory = source_factory or self._default_source
        self._sources: dict[tuple[str, str], tuple[int, Source]] = {}
        self._memories: dict[tuple[str, str], dict[str, Memory]] = {}
        self._tracked: set[tuple[str, str]] = set()
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._watch: Any = None
        self.synced = threading.Event()
        self.leading = threading.Event()
        self.leading.set()  # `alphagate run` clears it until the Lease is won
        self.evaluations = 0
        self._log = get_logger("reconciler")

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
            with contextlib.suppress(Exception):
                close()

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its source, memory and metrics."""
        with self._lock:
            held = self._sources.pop((namespace, name), None)
            self._memories.pop((namespace, name), None)
            self._cache.pop((namespace, name), None)
            self._tracked.discard((namespace, name))
        if held is not None:
            self._close_source(held[1])
        with contextlib.suppress(Exception):  # metrics are best effort
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
        except Exception as exc:  # a bug must cost one evaluation, never the controller
            log.exception("reconcile_crashed", error=repr(exc))
            out.spec_error = f"internal error: {exc!r}"
        out.duration_seconds = time.monotonic() - started
        self.evaluations += 1
        if self.on_outcome is not None:
            try:
                self.on_outcome(out)
            except Exception as exc:
                log.warning("on_outcome_failed", error=repr(exc))
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
            self._spec_invalid(obj, previous, ref, "InvalidSpec", str(exc), generation, now, out)
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

        # ---- a manual command, if one is pending
        command: Command | None = None
        command_record: CommandRecord | None = previous.last_command
        pending = pending_command(obj, previous)
        if pending is not None:
            text, ident = pending
            if text in COMMANDS:
                command = Command(text)
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
            )
            for unit in units_of(spec)
        ]

        # ---- observe once for all units, over the widest window any unit may judge: the
        # configured window cut to start after warm-up (the same cut the backtest makes)
        source = self._source(spec, namespace, name, generation)
        start = observe_start(spec, prepared, now)
        window = now - start
        try:
            observation: Observation = source.observe(
                spec, start=start, end=now, interval_seconds=spec.timing.interval_seconds
            )
        except Exception as exc:  # sources should not raise; if one does, it is an Error
            observation = Observation(
                at=now, window_seconds=window, pools=(), source_error=f"unknown: {exc!r}"
            )
        failures = source_failures(observation)
        errors = [text for _, text in failures]
        if failures:
            for kind, _ in failures:
                with contextlib.suppress(Exception):
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

        # ---- each unit: evaluate, act
        memories: dict[str, Memory] = {}
        for prep in prepared:
            uo = self._unit(
                spec,
                prep,
                observation,
                now=now,
                command=command,
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
            )

        if any(u.error_reason == "NotLeader" for u in out.units):
            log.warning("lost_leadership_mid_evaluation")
            return  # the new leader writes status and acts; this replica must not
        status = self._status(
            spec,
            out,
            previous,
            conditions,
            memories,
            command_record,
            generation=generation,
            now=now,
            dry_run=dry_run,
            observation=observation,
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
        self._export(spec, out, now)

    def _prepare(
        self,
        unit: Unit,
        *,
        ref: ObjectRef,
        cached: Memory | None,
        stored: Memory | None,
        now: float,
        log: Any,
    ) -> Prepared:
        """Read the unit's Deployments and resume its memory (never judge without knowing
        what runs); a failed read is kept as the unit's outcome."""
        uo = UnitOutcome(unit)
        ulog = log.bind(unit=unit.name) if unit.name else log
        deps: list[DeploymentState] = []
        try:
            for dref in unit.deployments:
                deps.append(self.actuator.read(ref.namespace, dref))
        except KubeError as exc:
            uo.error, uo.error_reason = exc, _failure_reason(exc)
            uo.memory = cached or stored
            self.events.warning(ref, _event_reason(exc), str(exc))
            ulog.warning("deployment_read_failed", error=str(exc))
            return Prepared(uo, ulog)
        memory, origin = resume_memory(cached, stored, deps)
        uo.memory_origin = origin
        if origin.startswith("annotation"):
            ulog.info("resumed_from_annotation", origin=origin, state=memory.state.value)
        rollout = combined_rollout(self.actuator, deps, now)
        return Prepared(uo, ulog, deps, memory, rollout)

    def _unit(
        self,
        spec: SpeculativeCanarySpec,
        prep: Prepared,
        observation: Observation,
        *,
        now: float,
        command: Command | None,
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
            spec, observation, memory, rollout, now=now, command=command, slices=unit.slices
        )
        uo.evaluation = evaluation
        uo.insights = analyse(
            spec,
            observation,
            estimates=evaluation.estimates,
            combined=evaluation.combined,
            slices=unit.slices,
            cost_per_position=spec.draft_length.cost_per_position,
        )
        want = dict(spec.speculative_config) if evaluation.target_speculation_on else None

        # ---- act
        changed = False
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
                )
                changed = changed or result.args_changed
                flip = evaluation.action in (Action.ENABLE, Action.DISABLE)
                if result.args_changed and not flip and not dry_run:
                    # Someone else changed the flag (or spec.speculativeConfig changed): the
                    # Deployment is brought back to what the current state needs.
                    self.events.warning(
                        ref,
                        Reason.DRIFT_CORRECTED,
                        f"Deployment {dref.name} ran {config_text(dep.speculative_config)}; "
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
            uo.error, uo.error_reason = exc, _failure_reason(exc)
            uo.memory = memory
            uo.speculation_on = all(d.speculation_on for d in deps) if deps else None
            uo.rollout_complete = all(d.rollout_complete for d in deps) if deps else None
            ulog.warning(
                "decision_not_applied",
                action=evaluation.action.value,
                error=str(exc),
                status=exc.status,
            )
            self._decision_log(ulog, evaluation, uo, dry_run)
            return uo
        uo.memory = evaluation.memory
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
        )
        self._decision_log(ulog, evaluation, uo, dry_run)
        return uo

    # ------------------------------------------------------------ status, events, logs

    def _spec_invalid(
        self,
        obj: dict[str, Any],
        previous: CanaryStatus,
        ref: ObjectRef,
        reason: str,
        message: str,
        generation: int,
        now: float,
        out: Outcome,
    ) -> None:
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
        out.status = status
        already = previous.condition(ConditionType.SPEC_VALID)
        if already is None or already.status != "False" or already.message != message[:1024]:
            self.events.warning(ref, Reason.INVALID_SPEC, message)
        try:
            self.status_writer.write(out.namespace, out.name, status)
            out.status_written = True
        except KubeError as exc:
            self._log.error("status_write_failed", error=str(exc))

    def _status(
        self,
        spec: SpeculativeCanarySpec,
        out: Outcome,
        previous: CanaryStatus,
        conditions: list[Any],
        memories: Mapping[str, Memory],
        command_record: CommandRecord | None,
        *,
        generation: int,
        now: float,
        dry_run: bool,
        observation: Observation,
    ) -> CanaryStatus:
        units = out.units
        first = units[0] if units else None
        evs = [u.evaluation for u in units if u.evaluation is not None]
        # conditions: Ready (decision applied), RolloutComplete
        failed = [u for u in units if u.error is not None]
        if failed:
            u = failed[0]
            conditions = set_condition(
                conditions,
                ConditionType.READY,
                False,
                u.error_reason,
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
        if any(isinstance(u.error, ArgsError) for u in units):
            u = next(u for u in units if isinstance(u.error, ArgsError))
            conditions = set_condition(
                conditions,
                ConditionType.SPEC_VALID,
                False,
                "ArgsUneditable",
                str(u.error),
                now=now,
                generation=generation,
            )

        # evidence (combined: one evaluation; perSlice: merged across units)
        slices = [s for e in evs for s in slice_evidence(e)]
        latency = [c for e in evs for c in latency_evidence(e.checks)]
        combined = evs[0].combined if len(evs) == 1 else None
        decision = None
        if first is not None and first.evaluation is not None:
            decision = self._decision(first, now, dry_run)
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
                        last_decision=self._decision(u, now, dry_run) if u.evaluation else None,
                    )
                )
        states = {m.state.value for m in memories.values()}
        state = states.pop() if len(states) == 1 else ("Mixed" if states else previous.state)
        spec_on = [u.speculation_on for u in units if u.speculation_on is not None]
        return CanaryStatus(
            state=state,
            observed_generation=generation,
            speculation_on=(all(spec_on) if spec_on else previous.speculation_on),
            mode=spec.mode.value if not self.dry_run else Mode.DRY_RUN.value,
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
                insights_status(first.insights)
                if first is not None and first.insights is not None
                else previous.insights
            ),
            memory=encode_memories(memories) if memories else previous.memory,
        )

    @staticmethod
    def _decision(u: UnitOutcome, now: float, dry_run: bool) -> Decision:
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

    @staticmethod
    def _decision_log(log: Any, e: Evaluation, uo: UnitOutcome, dry_run: bool) -> None:
        c = e.combined
        lat = latency_evidence(e.checks)
        log.info(
            "decision",
            state=(uo.memory or e.memory).state.value,
            action=e.action.value,
            verdict=e.verdict.value,
            reason=e.reason,
            alpha=_finite(c.value) if c else None,
            alpha_lower=_finite(c.lower) if c else None,
            alpha_upper=_finite(c.upper) if c else None,
            drafts=_finite(c.drafts) if c else None,
            p99_ratio=p99_ratio(lat),
            transition=(
                f"{e.transition.from_state.value}->{e.transition.to_state.value}"
                if e.transition
                else None
            ),
            cause=e.transition.cause.value if e.transition else None,
            failing=[c.name for c in e.checks if c.verdict is Verdict.FAIL] or None,
            speculation_target=e.target_speculation_on,
            applied=uo.applied and uo.error is None,
            dry_run=dry_run,
            error=str(uo.error) if uo.error else None,
            alerts=[a.value for a in e.alerts] or None,
            memory_origin=uo.memory_origin or None,
        )

    def _export(self, spec: SpeculativeCanarySpec, out: Outcome, now: float) -> None:
        for u in out.units:
            if u.evaluation is None:
                continue
            canary = out.name if not u.unit.name else f"{out.name}/{u.unit.name}"
            with contextlib.suppress(Exception):
                self.recorder.record(
                    u.evaluation,
                    namespace=out.namespace,
                    canary=canary,
                    duration_seconds=out.duration_seconds or 0.0,
                    speculation_on=bool(u.speculation_on),
                    spec=spec,
                    insights=u.insights,
                )

    # ------------------------------------------------------------ watching and scheduling

    def _list_fn(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if self.namespace:
            return self.kube.custom.list_namespaced_custom_object, (
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
            )
        return self.kube.custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL)

    def relist(self) -> int:
        """List every resource in scope into the cache; returns the list's resourceVersion."""
        fn, args = self._list_fn()
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        listing = call(f"list {PLURAL}.{GROUP}", lambda: fn(*args, **kwargs))
        items = listing.get("items", []) if isinstance(listing, dict) else []
        seen = set()
        for item in items:
            self._observe_object("ADDED", item)
            meta = item.get("metadata") or {}
            seen.add((meta.get("namespace", ""), meta.get("name", "")))
        with self._lock:
            gone = [k for k in self._cache if k not in seen]
        for ns, name in gone:
            self.forget(ns, name)
        rv = (
            (listing.get("metadata") or {}).get("resourceVersion", "0")
            if isinstance(listing, dict)
            else "0"
        )
        self.synced.set()
        return int(rv or 0)

    def _observe_object(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            self.forget(*key)
            self._kick.set()
            return
        generation = int(meta.get("generation") or 0)
        annotations = meta.get("annotations") or {}
        from alphagate.kube.status import ANN_COMMAND_ID

        command_id = str(annotations.get(ANN_COMMAND_ID, ""))
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                last = _last_evaluated(obj) if self.resume_schedule else None
                due = 0.0 if last is None else last + _interval(obj)
                self._cache[key] = _Entry(obj, due, generation, command_id)
                urgent = True
            else:
                urgent = generation != entry.generation or command_id != entry.command_id
                entry.obj, entry.generation, entry.command_id = obj, generation, command_id
                if urgent:
                    entry.next_due = 0.0
                elif self.resume_schedule:  # another replica may have evaluated it just now
                    last = _last_evaluated(obj)
                    if last is not None:
                        entry.next_due = max(entry.next_due, last + _interval(obj))
        if urgent:
            self._kick.set()

    def watch_loop(self, stop: threading.Event) -> None:
        """List, then watch from the list's resourceVersion; relist on 410 or errors."""
        backoff = 0.5
        while not stop.is_set():
            try:
                rv = self.relist()
                backoff = 0.5
                fn, args = self._list_fn()
                kwargs: dict[str, Any] = {
                    "resource_version": str(rv),
                    "timeout_seconds": max(1, int(self.watch_timeout_seconds)),
                    "_request_timeout": self.watch_timeout_seconds + 10,
                }
                if self.label_selector:
                    kwargs["label_selector"] = self.label_selector
                w = watch.Watch()  # type: ignore[no-untyped-call]
                self._watch = w
                if stop.is_set():
                    break
                for ev in w.stream(fn, *args, **kwargs):  # type: ignore[no-untyped-call]
                    if stop.is_set():
                        w.stop()  # type: ignore[no-untyped-call]
                        break
                    obj = ev.get("raw_object") or ev.get("object")
                    if isinstance(obj, dict):
                        self._observe_object(str(ev.get("type")), obj)
            except (KubeError, client.ApiException, Exception) as exc:  # relist after a pause
                if stop.is_set():
                    break
                self._log.warning("watch_failed", error=str(exc)[:300])
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def due(self, now: float) -> list[tuple[str, str]]:
        with self._lock:
            keys = sorted(k for k, e in self._cache.items() if e.next_due <= now)
        return [k for k in keys if self.owns(*k)]

    def cached(self) -> list[tuple[str, str]]:
        """Every resource in the cache, owned by this replica or not."""
        with self._lock:
            return list(self._cache)

    def hand_over(self, namespace: str, name: str) -> None:
        """Another replica owns this canary now: drop what this process remembers of it (its
        Memory and source state), so taking it back later resumes from the cluster."""
        with self._lock:
            held = self._sources.pop((namespace, name), None)
            self._memories.pop((namespace, name), None)
        if held is not None:
            self._close_source(held[1])

    def take_over(self, namespace: str, name: str) -> None:
        """This replica owns the canary now: resume from the cluster (what this process
        remembers of an earlier ownership is stale), and evaluate it one interval after its
        last evaluation (by whichever replica), as the status records it."""
        self.hand_over(namespace, name)
        try:  # the status as written now: the watch may not have brought the last one yet
            fresh = self.kube.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except Exception:
            fresh = None
        with self._lock:
            entry = self._cache.get((namespace, name))
            if entry is None:
                return
            obj = fresh if isinstance(fresh, dict) else entry.obj
            last = _last_evaluated(obj)
            entry.next_due = last + _interval(obj) if last is not None else 0.0
        self._kick.set()

    def schedule_loop(self, stop: threading.Event, *, tick: float = 0.5) -> None:
        """Evaluate each cached resource when due (its interval after the last evaluation)."""
        while not stop.is_set():
            if self.health is not None:
                with contextlib.suppress(Exception):
                    self.health.beat()
            if not self.leading.is_set() or not self.synced.is_set():
                self._kick.wait(tick)
                self._kick.clear()
                continue
            now = self.clock()
            for ns, name in self.due(now):
                if stop.is_set() or not self.leading.is_set():
                    break
                out = self.reconcile(ns, name)
                interval = self._interval_of(ns, name)
                with self._lock:
                    entry = self._cache.get((ns, name))
                    if entry is not None:
                        entry.next_due = self.clock() + (
                            # an invalid spec waits for an edit; API trouble retries on time
                            interval if not out.spec_invalid else max(interval, 30.0)
                        )
            with self._lock:
                upcoming = [e.next_due for e in self._cache.values()]
            wait = (
                min([tick, *[max(0.0, d - self.clock()) for d in upcoming]]) if upcoming else tick
            )
            self._kick.wait(max(wait, 0.01))
            self._kick.clear()

    def _interval_of(self, namespace: str, name: str) -> float:
        with self._lock:
            entry = self._cache.get((namespace, name))
        return 30.0 if entry is None else _interval(entry.obj)

    def run(self, stop: threading.Event) -> None:
        """Watch in a thread and evaluate in this one until `stop` is set."""
        watcher = threading.Thread(
            target=self.watch_loop, args=(stop,), daemon=True, name="alphagate-watch"
        )
        watcher.start()
        try:
            self.schedule_loop(stop)
        finally:
            stop.set()
            self._kick.set()
            current = self._watch
            if current is not None:
                with contextlib.suppress(Exception):
                    current.stop()  # shuts the streaming socket down: no wait for the timeout
            watcher.join(timeout=self.watch_timeout_seconds + 15)
            with self._lock:
                sources = [s for _, s in self._sources.values()]
                self._sources.clear()
            for s in sources:
                self._close_source(s)

    def wake(self) -> None:
        self._kick.set()


def _interval(obj: dict[str, Any]) -> float:
    """spec.timing.intervalSeconds of a raw resource (30 s when absent or bad)."""
    try:
        timing = ((obj.get("spec") or {}).get("timing")) or {}
        value = float(timing.get("intervalSeconds", 30.0))
        return value if value > 0 else 30.0
    except (TypeError, ValueError, AttributeError):
        return 30.0


def _last_evaluated(obj: dict[str, Any]) -> float | None:
    """When the canary was last evaluated, by any replica: status.lastEvaluated rounded up
    (it is kept to the second), None when absent or unreadable."""
    raw = (obj.get("status") or {}).get("lastEvaluated")
    at = parse_time(raw) if isinstance(raw, str) else None
    return None if at is None else math.floor(at) + 1.0


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _failure_reason(exc: AlphagateError) -> str:
    if isinstance(exc, KubeError) and exc.reason == "NotLeader":
        return "NotLeader"
    if isinstance(exc, ConflictError):
        return "ConflictRetriesExhausted"
    if isinstance(exc, ForbiddenError):
        return "Forbidden"
    if isinstance(exc, NotFoundError):
        return "TargetNotFound"
    if isinstance(exc, ArgsError):
        return "ArgsUneditable"
    return "PatchFailed"


def _event_reason(exc: AlphagateError) -> Reason:
    return Reason(
        {
            "ConflictRetriesExhausted": Reason.CONFLICT_RETRIES_EXHAUSTED,
            "Forbidden": Reason.FORBIDDEN,
            "TargetNotFound": Reason.NOT_FOUND,
            "ArgsUneditable": Reason.ARGS_UNEDITABLE,
        }.get(_failure_reason(exc), Reason.PATCH_FAILED)
    )


__all__ = [
    "Outcome",
    "Reconciler",
    "Unit",
    "UnitOutcome",
    "combined_rollout",
    "resume_memory",
    "source_errors",
    "source_failures",
    "units_of",
]
