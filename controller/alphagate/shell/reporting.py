"""What the reconciler reports besides status and Events: metrics through a `Recorder`, and
one structured log line per decision.

`Recorder` is the seam (`shell.exporter.Recorder` is the real one, `NullRecorder` records
nothing); every value is read from the core's typed fields, never from reason text.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Sequence
from typing import Any, Final, Protocol

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.insights import Insights
from alphagate.core.model import Evaluation, Verdict
from alphagate.errors import BudgetKind, SourceErrorKind
from alphagate.kube.apibudget import BudgetScope
from alphagate.kube.status.evidence import latency_evidence, p99_ratio
from alphagate.kube.units import UnitOutcome

# What the metrics recorder can raise besides a bug: prometheus_client refuses a label set
# (ValueError) or has none to remove (KeyError). Metrics are best effort: either costs a
# series, never an evaluation.
METRIC_ERRORS: Final = (KeyError, ValueError)


class Recorder(Protocol):
    """Where the reconciler reports for metrics (`shell.exporter.Recorder` is the real one)."""

    def track(self, *, namespace: str, canary: str) -> None: ...

    def forget(self, canaries: Collection[tuple[str, str]]) -> None: ...

    def source_error(
        self, kind: SourceErrorKind | None, *, namespace: str, canary: str
    ) -> None: ...

    def budget_exceeded(self, budget: BudgetKind, *, namespace: str, canary: str) -> None: ...

    def api_deferred(self, scope: BudgetScope, *, namespace: str, canary: str) -> None: ...

    def timing(self, *, namespace: str, canary: str, problems: Collection[str]) -> None: ...

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

    def forget(self, canaries: Collection[tuple[str, str]]) -> None:
        """Nothing to drop."""

    def source_error(self, kind: SourceErrorKind | None, *, namespace: str, canary: str) -> None:
        """Nothing to count."""

    def budget_exceeded(self, budget: BudgetKind, *, namespace: str, canary: str) -> None:
        """Nothing to count."""

    def api_deferred(self, scope: BudgetScope, *, namespace: str, canary: str) -> None:
        """Nothing to count."""

    def timing(self, *, namespace: str, canary: str, problems: Collection[str]) -> None:
        """Nothing to show."""

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


def decision_log(log: Any, e: Evaluation, uo: UnitOutcome, dry_run: bool) -> None:
    """One structured `decision` line, read from the typed fields."""
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
        forced=(e.transition.forced or None) if e.transition else None,
        guards=[g.value for g in e.transition.guards] or None if e.transition else None,
        verdict_age_seconds=_finite(e.verdict_age_seconds),
        failing=[c.name for c in e.checks if c.verdict is Verdict.FAIL] or None,
        speculation_target=e.target_speculation_on,
        applied=uo.applied and uo.error is None,
        dry_run=dry_run,
        error=str(uo.error) if uo.error else None,
        alerts=[a.value for a in e.alerts] or None,
        memory_origin=uo.memory_origin or None,
    )


def export(
    recorder: Recorder,
    spec: SpeculativeCanarySpec,
    namespace: str,
    name: str,
    units: Sequence[UnitOutcome],
    duration_seconds: float,
) -> None:
    """Hand every unit's evaluation to the metrics recorder (best effort)."""
    for u in units:
        if u.evaluation is None:
            continue
        canary = name if not u.unit.name else f"{name}/{u.unit.name}"
        with contextlib.suppress(*METRIC_ERRORS):
            recorder.record(
                u.evaluation,
                namespace=namespace,
                canary=canary,
                duration_seconds=duration_seconds or 0.0,
                speculation_on=bool(u.speculation_on),
                spec=spec,
                insights=u.insights,
            )


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
