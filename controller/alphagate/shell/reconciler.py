"""The reconciler: one evaluation of each SpeculativeCanary due, through the core, to the cluster.

`reconcile_many` (`reconcile` for one) reads each resource and its canary Deployment(s);
resumes the core's Memory; observes every resource's pools at once (`shell.observing`:
Prometheus reads sharing an endpoint and a window become one batch of queries, pod scrapes one
wave of GETs); calls `core.evaluate`; applies the decision with the `Actuator` (in dry-run only
records it); writes status and metrics (`shell.status_write`); emits an Event per transition
and refusal; logs one line per decision (`shell.reporting`). When to evaluate what is the
watch loop's job: the reconciler holds it (`loop`, a `shell.watch.WatchLoop`) as its evaluator.

Resuming: the Deployment's record is the truth (`kube.record`). The Memory comes from this
process's last evaluation when there is one, else from the resource's status, unless a canary
Deployment's record (`alphagate.io/record`) is newer than the generation that Memory continues:
a reply lost after the patch landed, a controller that died before its status write, another
replica. Then the record's Memory wins and the flip is neither lost nor repeated. Every patch
carries the record generation its decision was made from and is refused when the record has
moved since (RecordChangedError), so two replicas never flip twice for one decision. A failed
patch keeps the previous Memory (the decision is recorded with `applied: false` and made again
next interval), so an API error can neither lose nor half-apply a flip.

The steps live beside it: `shell.claims` (claiming, resuming), `shell.manual`,
`shell.observing`, `shell.unit` (judging, K tuning, the diagnosis Event, applying),
`shell.timing_warnings`, `shell.judgeable_warnings`, `shell.status_write`. A policy naming a
Prometheus endpoint the admin did not configure is an invalid spec (`UnknownEndpoint`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from alphagate import clock as clockmod
from alphagate.config import (
    GROUP,
    PLURAL,
    VERSION,
    Mode,
    SpeculativeCanary,
    SpeculativeCanarySpec,
    parse,
)
from alphagate.core.model import Memory, Observation
from alphagate.errors import (
    KubeError,
    NotFoundError,
    NotLeaderError,
    PolicyError,
    RecordChangedError,
)
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube, call
from alphagate.kube.events import EventRecorder, ObjectRef
from alphagate.kube.freshness import verdict_fresh
from alphagate.kube.status.fields import Condition, ConditionType, set_condition
from alphagate.kube.status.resource import CanaryStatus, parse_status
from alphagate.kube.status.writer import StatusWriter
from alphagate.kube.units import units_of
from alphagate.logs import get as get_logger
from alphagate.shell.api_budget import budget_condition, query_budget_condition
from alphagate.shell.claims import prepare
from alphagate.shell.cycles import Cycle, Cycles
from alphagate.shell.judgeable_warnings import JudgeableWarnings
from alphagate.shell.manual import manual_command
from alphagate.shell.outcome import Outcome, Pending, Prepared, observe_start
from alphagate.shell.reporting import METRIC_ERRORS, NullRecorder, Recorder
from alphagate.shell.source_cache import SourceCache, SourceFactory
from alphagate.shell.status_write import StatusOut, source_health
from alphagate.shell.timing_warnings import TimingWarnings
from alphagate.shell.unit import Diagnoses, decide_unit
from alphagate.shell.watch import Beat, WatchLoop
from alphagate.sources import FailedSource, Source, make_source

CLOSE_WAIT_SECONDS = 5.0
"""On stop, reads in flight get this long to end before their sources close."""


class Reconciler:
    """Reconciles SpeculativeCanary resources. `reconcile(ns, name, now=...)` does one
    evaluation; `loop.run(stop)` watches and evaluates each resource on its interval."""

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
        wait: clockmod.Wait = clockmod.wait,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.health = health
        self.loop = WatchLoop(
            kube,
            evaluator=self,
            namespace=namespace,
            label_selector=label_selector,
            clock=clock,
            watch_timeout_seconds=watch_timeout_seconds,
            health=health,
            owns=owns,
            wait=wait,
        )
        self._lock = threading.Lock()
        self._log = get_logger("reconciler")
        self.dry_run = dry_run
        self.events = events if events is not None else EventRecorder(kube.api_client)
        self.actuator = actuator or Actuator(kube.api_client, events=self.events)
        self.status_writer = StatusWriter(kube.api_client)
        self.recorder: Recorder = recorder if recorder is not None else NullRecorder()
        self.status_out = StatusOut(
            self.status_writer, self.events, self.recorder, self._log, forced_dry_run=dry_run
        )
        # Checked right before every write to a Deployment: with leader election, "do I still
        # hold a fresh Lease?" (a replica that stalled must not act on an old decision).
        self.may_act = may_act or (lambda: True)
        # Told about every reconcile (the demo's live view, tests); exceptions are swallowed.
        self.on_outcome = on_outcome
        self.sources = SourceCache(source_factory or self._default_source)
        self._memories: dict[tuple[str, str], dict[str, Memory]] = {}
        self.diagnoses = Diagnoses()  # the diagnosis findings last reported
        self._tracked: set[tuple[str, str]] = set()
        self.timing_warnings = TimingWarnings(self.events, self.recorder)  # told once per change
        self.judgeable_warnings = JudgeableWarnings(self.events)  # told once per change
        self.evaluations = 0
        self.cycles = Cycles()  # reads in flight (shell.cycles)

    # ------------------------------------------------------------ sources

    def _default_source(self, spec: SpeculativeCanarySpec, namespace: str, name: str) -> Source:
        return make_source(spec, namespace=namespace, core_api=self.kube.core, name=name)

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone (the loop dropped it): drop its source, memory, metrics."""
        with self._lock:
            self._memories.pop((namespace, name), None)
            self._tracked.discard((namespace, name))
        self.timing_warnings.forget(namespace, name)
        self.judgeable_warnings.forget(namespace, name)
        self.sources.drop(namespace, name)
        if self.kube.budget is not None:
            self.kube.budget.forget(namespace, name)
        with contextlib.suppress(*METRIC_ERRORS):  # metrics are best effort
            self.recorder.forget([(namespace, name)])

    def owns(self, namespace: str, name: str) -> bool:
        """Sharding: is this canary this replica's now? (Asked again before every write.)"""
        return self.loop.owns(namespace, name)

    def forget_memories(self) -> None:
        """Leadership changed hands: trust the cluster, not what this process remembers."""
        with self._lock:
            self._memories.clear()

    # ------------------------------------------------------------ one evaluation

    def reconcile(self, namespace: str, name: str, *, now: float | None = None) -> Outcome:
        """Evaluate one resource once and act. Never raises for API or source trouble."""
        return self.reconcile_many([(namespace, name)], now=now)[0]

    def reconcile_many(
        self, keys: Sequence[tuple[str, str]], *, now: float | None = None
    ) -> list[Outcome]:
        """Evaluate resources once each, at one `now`, and act: read each, then observe them
        all at once (Prometheus reads sharing an endpoint and a window are batched, pod
        scrapes run side by side: `sources.cycle.observe_each`), then decide and act for each
        as its observation arrives. The same decisions as one `reconcile` each; an
        evaluation's duration counts its own read."""
        cycle = self.start_cycle(keys, now=now)
        while not cycle.done:
            self.finish_arrived(cycle, block=True)
        return [out for out, _ in cycle.begun]

    def start_cycle(self, keys: Sequence[tuple[str, str]], *, now: float | None = None) -> Cycle:
        """Read each resource and its Deployments, then start observing them all on a thread
        of their own: `finish_arrived` decides and acts for each as its observation comes."""
        now = self.clock() if now is None else now
        begun = []
        for ns, name in keys:
            with self._charging(ns, name):
                begun.append(self._begin(ns, name, now))
            if self.health is not None:
                self.health.beat()  # the loop is working, however many canaries are due
        return self.cycles.start(keys, begun, self._log, self.loop.wake)

    def finish_arrived(self, cycle: Cycle, *, block: bool) -> list[tuple[tuple[str, str], Outcome]]:
        """Decide and act for the canaries of `cycle` whose observations have arrived (with
        `block`: wait for one at least, unless none is left), namespaces in turn, not in
        arrival order (`shell.turns`); their keys and Outcomes."""
        done = []
        for i in cycle.unannounced:
            done.append((cycle.keys[i], self._announce(cycle.begun[i][0])))
        cycle.unannounced = []
        while cycle.waiting:
            arrival = cycle.take(block=block and not done)  # namespaces in turn
            if arrival is None:
                break
            i, observation = arrival
            cycle.waiting.discard(i)
            out, pending = cycle.begun[i]
            assert pending is not None
            out.duration_seconds += time.monotonic() - cycle.started  # its own read
            started = time.monotonic()
            try:
                with self._charging(out.namespace, out.name):
                    self._finish(pending, observation)
            except Exception as exc:  # last resort: a bug must cost one evaluation, not the loop
                pending.log.exception(
                    "reconcile_crashed", error=repr(exc), error_type=type(exc).__name__
                )
                out.spec_error = f"internal error: {exc!r}"
            out.duration_seconds += time.monotonic() - started
            done.append((cycle.keys[i], self._announce(out)))
            if self.health is not None:
                self.health.beat()
        return done

    def _announce(self, out: Outcome) -> Outcome:
        self.evaluations += 1
        if self.on_outcome is not None:
            try:
                self.on_outcome(out)
            except Exception as exc:  # noqa: BLE001 - last resort: the caller's hook may be buggy
                self._log.warning(
                    "on_outcome_failed", error=repr(exc), error_type=type(exc).__name__
                )
        return out

    def start_batch(self, keys: Sequence[tuple[str, str]]) -> None:
        """Start evaluating `keys` together; `collect` hands each out once decided."""
        self.start_cycle(keys)

    def collect(self) -> list[tuple[tuple[str, str], Outcome]]:
        """Every canary of the cycles in flight decided since the last call (never waits)."""
        done = []
        for cycle in self.cycles.running():
            done += self.finish_arrived(cycle, block=False)
        return done

    def overdue(self) -> str | None:
        """Why the control loop is stuck reading, if it is (for /healthz)."""
        return self.cycles.overdue()

    def _charging(self, namespace: str, name: str) -> contextlib.AbstractContextManager[None]:
        """Charge the requests of the block to this canary's API budget, if there is one."""
        budget = self.kube.budget
        return contextlib.nullcontext() if budget is None else budget.charging(namespace, name)

    def _begin(self, namespace: str, name: str, now: float) -> tuple[Outcome, Pending | None]:
        """Read the resource and its Deployments: what its observation needs, or None when
        the evaluation ends here (gone, unreadable, an invalid spec)."""
        started = time.monotonic()
        out = Outcome(namespace, name, now=now)
        log = self._log.bind(namespace=namespace, canary=name)
        pending: Pending | None = None
        try:
            obj = call(
                f"read {PLURAL}.{GROUP} {namespace}/{name}",
                lambda: self.kube.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                ),
            )
        except NotFoundError:
            self.loop.forget(namespace, name)  # and, through it, this evaluator
            out.gone = True
            return out, None
        except KubeError as exc:
            log.error("read_failed", error=str(exc))
            out.spec_error = str(exc)
            return out, None
        if not isinstance(obj, dict):
            return out, None
        if (namespace, name) not in self._tracked:
            # counters start at 0 before the first evaluation, so increase() sees its flip
            self._tracked.add((namespace, name))
            self.recorder.track(namespace=namespace, canary=name)
        try:
            pending = self._prepare(obj, now, out, log)
        except Exception as exc:  # last resort: a bug must cost one evaluation, not the loop
            log.exception("reconcile_crashed", error=repr(exc), error_type=type(exc).__name__)
            out.spec_error = f"internal error: {exc!r}"
        out.duration_seconds = time.monotonic() - started
        return out, pending

    def _prepare(self, obj: dict[str, Any], now: float, out: Outcome, log: Any) -> Pending | None:
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
            self.status_out.invalid(
                out, previous, ref, "InvalidSpec", str(exc), generation=generation, now=now
            )
            return None
        spec = canary.spec
        conditions = set_condition(
            conditions,
            ConditionType.SPEC_VALID,
            True,
            "Valid",
            "policy accepted",
            now=now,
            generation=generation,
        )
        # ---- evaluated late because an API or Prometheus query budget was spent
        conditions = self._deferrals(out, conditions, previous, ref, now, generation)

        # ---- the source: a policy naming an endpoint nobody configured is wrong, not failing
        source = self.sources.get(spec, namespace, name, generation)
        if isinstance(source, FailedSource) and source.spec_invalid:
            self.status_out.invalid(
                out, previous, ref, source.reason, str(source.error), generation=generation, now=now
            )
            return None

        # ---- a manual command, if one is pending
        manual = manual_command(obj, previous, self.events, ref, now)

        # ---- read each unit's Deployments first: the window to query depends on its rollout
        dry_run = self.dry_run or spec.mode is Mode.DRY_RUN
        prepared = self._read_units(
            spec, previous, ref, key=(namespace, name), now=now, dry_run=dry_run, log=log
        )
        # ---- observe once for all units, over the widest window any unit may judge: the
        # configured window cut to start after warm-up (the same cut the backtest makes)
        return Pending(
            out=out,
            log=log,
            now=now,
            generation=generation,
            previous=previous,
            ref=ref,
            conditions=conditions,
            spec=spec,
            dry_run=dry_run,
            source=source,
            manual=manual,
            prepared=prepared,
            start=observe_start(spec, prepared, now),
        )

    def _deferrals(
        self,
        out: Outcome,
        conditions: list[Condition],
        previous: CanaryStatus,
        ref: ObjectRef,
        now: float,
        generation: int,
    ) -> list[Condition]:
        """Whether the schedule deferred this evaluation for a budget, told in its conditions
        (WithinApiBudget, WithinQueryBudget), an Event and the API deferrals metric."""
        conditions, out.api_deferral = budget_condition(
            self.kube.budget,
            conditions,
            previous,
            ref=ref,
            events=self.events,
            now=now,
            generation=generation,
        )
        if out.api_deferral is not None:
            with contextlib.suppress(*METRIC_ERRORS):
                self.recorder.api_deferred(
                    out.api_deferral.scope, namespace=out.namespace, canary=out.name
                )
        out.query_deferral = self.loop.query_deferrals.pop((out.namespace, out.name), None)
        return query_budget_condition(
            out.query_deferral,
            conditions,
            previous,
            ref=ref,
            events=self.events,
            now=now,
            generation=generation,
        )

    def _read_units(
        self,
        spec: SpeculativeCanarySpec,
        previous: CanaryStatus,
        ref: ObjectRef,
        *,
        key: tuple[str, str],
        now: float,
        dry_run: bool,
        log: Any,
    ) -> list[Prepared]:
        """Each unit's Deployments read (or claimed) and its Memory resumed: the cached one,
        the status's, or the Deployments' record (`shell.claims.prepare`)."""
        with self._lock:
            cached = dict(self._memories.get(key, {}))
        stored = previous.memories()
        return [
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
                claim_as="" if dry_run else f"{key[0]}/{key[1]}",
            )
            for unit in units_of(spec)
        ]

    def _finish(self, p: Pending, observation: Observation) -> None:
        """Decide and act for each unit from the observation; write status."""
        out, log, now, generation = p.out, p.log, p.now, p.generation
        conditions = source_health(p, observation, self.recorder, self.timing_warnings)
        memories = self._decide_units(p, observation)
        command_record = p.manual.handled(out.units, now)
        judged = [(u.unit.name, u.evaluation) for u in out.units if u.evaluation is not None]
        conditions = verdict_fresh(
            conditions, p.spec, [e for _, e in judged], now=now, generation=generation
        )
        conditions = self.judgeable_warnings.check(
            judged, conditions, ref=p.ref, generation=generation, now=now, log=log
        )
        if any(isinstance(u.error, NotLeaderError) for u in out.units):
            log.warning("lost_leadership_mid_evaluation")
            return  # the new leader writes status and acts; this replica must not
        if any(isinstance(u.error, RecordChangedError) for u in out.units):
            # Another writer (a replica, or a reply of ours that was lost) moved the record
            # since this decision's read: its status stands; the next evaluation resumes.
            log.warning("record_moved_mid_evaluation")
            return
        owned = self.owns(out.namespace, out.name)
        self.status_out.write(p, conditions, memories, command_record, owned=owned)

    def _decide_units(self, p: Pending, observation: Observation) -> dict[str, Memory]:
        """Each unit: evaluate and act; the Memory each keeps (cached for the next cycle)."""
        out = p.out
        namespace, name = out.namespace, out.name
        memories: dict[str, Memory] = {}
        for prep in p.prepared:
            uo = decide_unit(
                self,
                p.spec,
                prep,
                observation,
                now=p.now,
                command=p.manual.command,
                force=p.manual.force,
                dry_run=p.dry_run,
                ref=p.ref,
                owner=f"{namespace}/{name}",
                previous=p.previous,
                log=p.log,
            )
            out.units.append(uo)
            if uo.memory is not None:
                memories[uo.unit.name] = uo.memory
        with self._lock:
            self._memories[(namespace, name)] = dict(memories)
        return memories

    def hand_over(self, keys: Collection[tuple[str, str]]) -> None:
        """Other replicas own these canaries now: drop what this process remembers of them
        (their Memory and source state), so taking one back later resumes from the cluster,
        and their series (the owner exports them; two replicas must not)."""
        with self._lock:
            for key in keys:
                self._memories.pop(key, None)
        for namespace, name in keys:
            self.sources.drop(namespace, name)
        with contextlib.suppress(*METRIC_ERRORS):  # metrics are best effort
            self.recorder.forget(keys)

    def close(self) -> None:
        """The loops stopped: let reads in flight end (a few seconds at most), close every
        source."""
        self.cycles.join(CLOSE_WAIT_SECONDS)
        self.sources.close()


__all__ = ["Reconciler"]
