"""The controller's own Prometheus metrics: the `Recorder` the reconciler reports to.

Role: the reconciler hands every `Evaluation` to a `Recorder`, which turns it into gauges and
counters under the ``alphagate_`` prefix (labels ``namespace``, ``canary``, and ``slice`` where a
value is per slice). The names and label vocabularies are in `shell.metric_names`, the families in
`shell.metric_families`, the shard gauges in `shell.shard_metrics`; the HTTP
endpoints that expose them in `shell.server`.

This module decides nothing: it reads the core's results and never changes them; times and
durations come from the caller. Label values stay bounded: slices come from the policy,
states/verdicts/actions from the core's enums, and a decision's ``reason`` label is a short
machine kind (`reason_kind`), never the sentence.

Only the leader exports per-canary gauges: `Recorder.set_leader(False)` drops them, so a
standby replica never shows a stale state next to the leader's live one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Gauge,
)

from alphagate import __version__
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.diagnosis import Shape
from alphagate.core.draft_length import DraftAdvice
from alphagate.core.insights import Insights
from alphagate.core.model import (
    AcceptanceEvidence,
    CheckResult,
    Evaluation,
    LatencyEvidence,
    State,
    Verdict,
)
from alphagate.core.suitability import Finding
from alphagate.errors import BudgetKind, SourceErrorKind
from alphagate.kube.apibudget import BudgetScope
from alphagate.shell.metric_families import MetricFamilies
from alphagate.shell.metric_names import (
    ALERT,
    ALPHA,
    ALPHA_GATE,
    ALPHA_LOWER,
    ALPHA_UPPER,
    BUILD_INFO,
    CHECK_VERDICT,
    COMBINED_ALPHA,
    COMBINED_ALPHA_LOWER,
    COMBINED_ALPHA_UPPER,
    DRAFT_ADVICE,
    DRAFT_CONFIGURED_K,
    DRAFT_POSITION_RATE,
    DRAFT_RECOMMENDED_K,
    ERROR_STREAK,
    ITL_QUANTILE,
    LAST_EVALUATION,
    LAST_SUCCESS,
    LATENCY_RATIO,
    LATENCY_SHAPE,
    LEADER,
    MEASURED_SPEEDUP,
    MEASURED_SPEEDUP_LOWER,
    MEASURED_SPEEDUP_UPPER,
    OWNERSHIP_REFUSED,
    PREDICTED_SPEEDUP,
    SHORT_OUTPUTS,
    SLICE_WEIGHT,
    SPECULATION_ENABLED,
    STATE,
    UNKNOWN_ERROR_KIND,
    VERDICT_AGE,
    WATCHED_WARNINGS,
    WINDOW_DRAFTS,
    latency_metric_label,
    reason_kind,
)
from alphagate.shell.shard_metrics import ShardCollector

# ---------------------------------------------------------------- the recorder


@dataclass
class _Seen:
    """Label tuples set per metric for one canary, so series of vanished slices are dropped."""

    series: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)


_Put = Callable[[Gauge, str, tuple[str, ...], float], None]
"""Sets one series of a gauge and remembers it as seen in this evaluation."""


class Recorder(MetricFamilies):
    """Turns evaluations into metrics. Thread-safe: one lock serialises updates.

    `registry` is injectable so tests (and several controllers in one process) never share
    the global default registry.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._invalid: set[tuple[str, str]] = set()
        # pairs whose counters exist at 0 (only `forget` removes counter series), and each
        # pair's current timing problems: neither first-seen nor timing scans the series
        self._counted: set[tuple[str, str]] = set()
        self._problems: dict[tuple[str, str], set[str]] = {}
        # the gauge children `put` sets, by (metric name, labels): labels() validates and locks
        # on every call; a child leaves here whenever its series is removed or cleared
        self._children: dict[tuple[str, tuple[str, ...]], Gauge] = {}
        self._leader = False
        r = self.registry

        super().__init__(r)
        self._shards: tuple[int, Callable[[], frozenset[int]], Callable[[str, str], int]] | None
        self._shards = None
        r.register(ShardCollector(self))
        self.leader = Gauge(LEADER, "1 while this replica holds the leader lease.", registry=r)
        self.ownership_refused = Gauge(
            OWNERSHIP_REFUSED,
            "1 while this replica owns no canary because the coordination Lease records another "
            "--shards / --leader-elect (its OwnershipRefused Event says which).",
            registry=r,
        )
        self.ownership_refused.set(0)
        self.build_info = Gauge(BUILD_INFO, "alphagate version, value 1.", ("version",), registry=r)
        self.build_info.labels(__version__).set(1)
        self.leader.set(0)

    # ------------------------------------------------------------ public API

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
        """Export one evaluation of `namespace/canary`.

        `spec` (a `SpeculativeCanarySpec`, optional) supplies the alpha gate when the checks'
        evidence does not carry it, and the latency metric's name. Series of slices and checks
        that vanished since the last evaluation are removed.
        """
        key = (namespace, canary)
        c = (namespace, canary)
        with self._lock:
            if key not in self._seen:
                self._init_counters(c)
            with_spec = (namespace, canary.split("/", 1)[0])
            if with_spec in self._invalid:  # evaluated, so its spec parses again
                self._invalid.discard(with_spec)
                self.spec_invalid.remove(*with_spec)
            new: dict[str, set[tuple[str, ...]]] = {}

            def put(metric: Gauge, name: str, labels: tuple[str, ...], value: float) -> None:
                if not math.isfinite(value):
                    return
                child = self._children.get((name, labels))
                if child is None:
                    child = self._children[name, labels] = metric.labels(*labels)
                child.set(value)
                new.setdefault(name, set()).add(labels)

            self._acceptance(evaluation, spec, c, put)
            only_slice = self._only_slice(evaluation, spec)
            for check in evaluation.checks:
                if isinstance(check.evidence, LatencyEvidence):
                    self._latency(check, check.evidence, c, put, only_slice)

            self._state(evaluation, speculation_on, c, put)
            put(self.last_evaluation, LAST_EVALUATION, c, evaluation.at)
            if self._succeeded(evaluation):
                put(self.last_success, LAST_SUCCESS, c, evaluation.at)
            else:
                # keep the previous success time: staleness is measured from it
                if c in self._seen.get(key, _Seen()).series.get(LAST_SUCCESS, ()):
                    new.setdefault(LAST_SUCCESS, set()).add(c)
            if evaluation.predicted_speedup is not None:
                put(self.speedup, PREDICTED_SPEEDUP, c, evaluation.predicted_speedup)
            put(self.error_streak, ERROR_STREAK, c, float(evaluation.memory.error_streak))
            if evaluation.verdict_age_seconds is not None:
                put(self.verdict_age, VERDICT_AGE, c, evaluation.verdict_age_seconds)
            for alert in sorted(set(evaluation.alerts)):
                put(self.alert, ALERT, (*c, alert), 1.0)
            if insights is not None:
                self._insights(insights, c, put)

            self.decisions.labels(*c, evaluation.action.value, reason_kind(evaluation)).inc()
            if evaluation.transition is not None:
                t = evaluation.transition
                self.transitions.labels(*c, t.from_state.value, t.to_state.value).inc()
            if math.isfinite(duration_seconds) and duration_seconds >= 0:
                self.duration.labels(*c).observe(duration_seconds)

            old = self._seen.get(key, _Seen()).series
            gauges = self.gauges_by_name()
            for name, labelsets in old.items():
                for labels in labelsets - new.get(name, set()):
                    gauges[name].remove(*labels)
                    self._children.pop((name, labels), None)
            self._seen[key] = _Seen(series=new)

    def _acceptance(
        self,
        evaluation: Evaluation,
        spec: SpeculativeCanarySpec | None,
        c: tuple[str, str],
        put: _Put,
    ) -> None:
        """Alpha per slice with its bounds and drafts, the slices' weights, the combined alpha
        and the policy's gate."""
        for slice_name, est in evaluation.estimates.items():
            s = (*c, slice_name)
            put(self.alpha, ALPHA, s, est.value)
            put(self.alpha_lower, ALPHA_LOWER, s, est.lower)
            put(self.alpha_upper, ALPHA_UPPER, s, est.upper)
            put(self.window_drafts, WINDOW_DRAFTS, s, est.drafts)
        for slice_name, weight in evaluation.weights.items():
            put(self.slice_weight, SLICE_WEIGHT, (*c, slice_name), weight)
        if evaluation.combined is not None:
            put(self.combined, COMBINED_ALPHA, c, evaluation.combined.value)
            put(self.combined_lower, COMBINED_ALPHA_LOWER, c, evaluation.combined.lower)
            put(self.combined_upper, COMBINED_ALPHA_UPPER, c, evaluation.combined.upper)

        for bound, value in self._gate(evaluation.checks, spec).items():
            put(self.gate, ALPHA_GATE, (*c, bound), value)

    def _state(
        self, evaluation: Evaluation, speculation_on: bool, c: tuple[str, str], put: _Put
    ) -> None:
        """The state, whether the canary speculates, and each check's verdict (1 for the current
        one, 0 for the others)."""
        for state in State:
            put(
                self.state,
                STATE,
                (*c, state.value),
                1.0 if evaluation.memory.state is state else 0.0,
            )
        put(self.speculation, SPECULATION_ENABLED, c, 1.0 if speculation_on else 0.0)
        for check in evaluation.checks:
            for verdict in Verdict:
                put(
                    self.check_verdict,
                    CHECK_VERDICT,
                    (*c, check.name, verdict.value),
                    1.0 if check.verdict is verdict else 0.0,
                )

    def track(self, *, namespace: str, canary: str) -> None:
        """Start the canary's counters at 0. Call it when a canary is first seen, before its
        first evaluation, so even a transition in that evaluation is visible to increase()."""
        with self._lock:
            self._init_counters((namespace, canary))

    def warning_event(self, *, namespace: str, name: str, reason: str) -> None:
        """Count one Warning Event about `namespace/name`; InvalidSpec also sets
        alphagate_spec_invalid until the canary is evaluated again."""
        with self._lock:
            self.warnings.labels(namespace, name, str(reason)).inc()
            if str(reason) == "InvalidSpec":
                self._invalid.add((namespace, name))
                self.spec_invalid.labels(namespace, name).set(1)

    def timing(self, *, namespace: str, canary: str, problems: Collection[str]) -> None:
        """The policy's timing problems right now (core/timing, every evaluation): 1 for each,
        and the series of problems that cleared removed."""
        c = (namespace, canary)
        with self._lock:
            now = set(problems)
            for problem in self._problems.pop(c, set()) - now:
                self.timing_problem.remove(*c, problem)
            for problem in problems:
                self.timing_problem.labels(*c, problem).set(1)
            if now:
                self._problems[c] = now

    def source_error(self, kind: SourceErrorKind | None, *, namespace: str, canary: str) -> None:
        """Count one failed read by kind (a bounded set; None counts as "unknown")."""
        label = kind.value if kind is not None else UNKNOWN_ERROR_KIND
        self.source_errors.labels(namespace, canary, label).inc()

    def budget_exceeded(self, budget: BudgetKind, *, namespace: str, canary: str) -> None:
        """Count one read that spent the canary's `budget` (a bounded set: BudgetKind)."""
        self.budget_exceeded_total.labels(namespace, canary, budget.value).inc()

    def api_deferred(self, scope: BudgetScope, *, namespace: str, canary: str) -> None:
        """Count one evaluation deferred because the `scope` API budget was spent."""
        self.api_deferrals.labels(namespace, canary, scope.value).inc()

    def set_leader(self, leader: bool) -> None:
        """Mark leadership. Losing it drops every per-canary gauge: only the leader's count."""
        with self._lock:
            self._leader = leader
            self.leader.set(1.0 if leader else 0.0)
            if not leader:
                for gauge in self.gauges_by_name().values():
                    gauge.clear()
                self._children.clear()
                self._seen.clear()
                self.spec_invalid.clear()
                self._invalid.clear()

    @property
    def is_leader(self) -> bool:
        return self._leader

    def set_shards(
        self, total: int, held: Callable[[], frozenset[int]], shard_of: Callable[[str, str], int]
    ) -> None:
        """A sharded replica (``run --shards``): export, at every scrape, the shards it holds
        (`held()`) and the decision units it evaluates in each (`shard_of(namespace, canary)`)."""
        with self._lock:
            self._shards = (total, held, shard_of)

    def shard_units(self) -> tuple[int, dict[int, int]] | None:
        """(shards, decision units per held shard) of a sharded replica, else None."""
        with self._lock:
            shards = self._shards
        if shards is None:
            return None
        total, held, shard_of = shards
        units = dict.fromkeys(held(), 0)  # outside our lock: the Leases have their own
        with self._lock:
            for namespace, unit in self._seen:  # a perSlice unit is labelled canary/slice
                shard = shard_of(namespace, unit.split("/", 1)[0])
                if shard in units:
                    units[shard] += 1
            return total, units

    def forget(self, canaries: Collection[tuple[str, str]]) -> None:
        """Drop every series of these (namespace, canary) pairs, deleted or moved to another
        replica (gauges, counters and the histogram), their per-slice units
        (`canary/slice`, as the reconciler labels perSlice canaries) included. One pass over
        the series for all of them: a shard moving hands over hundreds at once."""
        gone = set(canaries)

        def mine(ns: str, name: str) -> bool:
            return (ns, name.split("/", 1)[0]) in gone

        with self._lock:
            for key in [k for k in self._seen if mine(*k)]:
                seen = self._seen.pop(key)
                for name, labelsets in seen.series.items():
                    for labels in labelsets:
                        self.gauges_by_name()[name].remove(*labels)
                        self._children.pop((name, labels), None)
            for pair in [p for p in self._invalid if mine(*p)]:
                self._invalid.discard(pair)
                self.spec_invalid.remove(*pair)
            self._counted = {p for p in self._counted if not mine(*p)}
            self._problems = {p: v for p, v in self._problems.items() if not mine(*p)}
            for metric in (
                self.decisions,
                self.transitions,
                self.source_errors,
                self.budget_exceeded_total,
                self.api_deferrals,
                self.duration,
                self.warnings,
                self.timing_problem,
            ):
                for values in list(metric._metrics):  # no public listing in prometheus_client
                    if mine(values[0], values[1]):
                        metric.remove(*values)

    def canaries(self) -> list[tuple[str, str]]:
        """(namespace, canary) pairs currently exported, for tests and the status command."""
        with self._lock:
            return sorted(self._seen)

    # ------------------------------------------------------------ helpers

    def _init_counters(self, c: tuple[str, str]) -> None:
        """Create every transition and source-error series at 0, so `increase()` sees the
        first rollback (or error).

        A counter series born at 1 has no earlier sample, and Prometheus' increase() over it is
        0: the rollback alert would miss the first rollback after a restart or a leader change.
        Once per pair: creating a child that exists changes nothing, and costs a canary's
        every first evaluation after `track` (and after each leader change) ~30 label lookups.
        """
        if c in self._counted:
            return
        self._counted.add(c)
        for from_state in State:
            for to_state in State:
                if from_state is not to_state:
                    self.transitions.labels(*c, from_state.value, to_state.value)
        for kind in SourceErrorKind:
            self.source_errors.labels(*c, kind.value)
        for budget in BudgetKind:
            self.budget_exceeded_total.labels(*c, budget.value)
        for scope in BudgetScope:
            self.api_deferrals.labels(*c, scope.value)
        for reason in WATCHED_WARNINGS:
            self.warnings.labels(*c, reason)
        self.duration.labels(*c)

    def _insights(self, ins: Insights, c: tuple[str, str], put: _Put) -> None:
        d = ins.draft
        if d is not None:
            put(self.draft_configured, DRAFT_CONFIGURED_K, c, float(d.configured_k))
            put(self.draft_recommended, DRAFT_RECOMMENDED_K, c, float(d.recommended_k))
            for advice in DraftAdvice:
                value = 1.0 if d.advice is advice else 0.0
                put(self.draft_advice, DRAFT_ADVICE, (*c, advice.value), value)
            for p in d.positions:
                put(
                    self.draft_position, DRAFT_POSITION_RATE, (*c, str(p.position)), p.unconditional
                )
        g = ins.diagnosis
        if g is not None:
            for shape in Shape:
                value = 1.0 if g.shape is shape else 0.0
                put(self.latency_shape, LATENCY_SHAPE, (*c, shape.value), value)
        if ins.outputs.finding is not Finding.UNKNOWN:
            put(self.short_outputs, SHORT_OUTPUTS, c, 1.0 if ins.outputs.holds else 0.0)

    @staticmethod
    def _only_slice(evaluation: Evaluation, spec: SpeculativeCanarySpec | None) -> str | None:
        """The slice a check without a slice is about: the core leaves it off when the policy
        has a single slice."""
        if spec is not None:
            names = {s.name for s in spec.slices}
        else:
            names = set(evaluation.weights) | set(evaluation.estimates)
        return next(iter(names)) if len(names) == 1 else None

    @staticmethod
    def _succeeded(evaluation: Evaluation) -> bool:
        """The source answered: no Error verdict anywhere in this evaluation."""
        if evaluation.verdict is Verdict.ERROR:
            return False
        return all(c.verdict is not Verdict.ERROR for c in evaluation.checks)

    @staticmethod
    def _gate(
        checks: Iterable[CheckResult], spec: SpeculativeCanarySpec | None
    ) -> dict[str, float]:
        """The alpha gate an acceptance check applied, else the policy's."""
        for check in checks:
            if isinstance(check.evidence, AcceptanceEvidence):
                e = check.evidence
                return {"disable": e.disable_below, "enable": e.enable_above}
        if spec is None:
            return {}
        return {"disable": spec.acceptance.disable_below, "enable": spec.acceptance.enable_above}

    def _latency(
        self,
        check: CheckResult,
        ev: LatencyEvidence,
        c: tuple[str, str],
        put: _Put,
        only_slice: str | None,
    ) -> None:
        s = (*c, check.slice or only_slice or "all")
        metric = latency_metric_label(ev.metric)
        quantile = f"{ev.quantile:g}"
        for role, pool in (("canary", ev.canary), ("baseline", ev.baseline)):
            if pool is not None:
                put(
                    self.itl_quantile,
                    ITL_QUANTILE,
                    (*s, role, metric, quantile),
                    pool.quantile_seconds,
                )
        ratio = ev.ratio
        if ratio is not None:
            put(self.latency_ratio, LATENCY_RATIO, s, ratio)
        sp = ev.speedup
        if sp is not None:
            put(self.measured_speedup, MEASURED_SPEEDUP, s, sp.value)
            put(self.measured_speedup_lower, MEASURED_SPEEDUP_LOWER, s, sp.lower)
            put(self.measured_speedup_upper, MEASURED_SPEEDUP_UPPER, s, sp.upper)


__all__ = ["Recorder"]
