"""What one reconcile of one SpeculativeCanary did (`Outcome`), and the steps' small parts:
the source's failures with their kinds, a unit once its Deployments were read (`Prepared`),
where the one observation for all units starts (the core's window rule), and a resource read
and waiting for its observation (`Pending`: a cycle observes every due resource at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import window
from alphagate.core.model import Evaluation, Memory, Observation, Rollout
from alphagate.errors import BudgetKind, SourceErrorKind
from alphagate.kube.apibudget import Deferral
from alphagate.kube.events import ObjectRef
from alphagate.kube.status.fields import Condition
from alphagate.kube.status.resource import CanaryStatus
from alphagate.kube.units import UnitOutcome
from alphagate.kube.workload import WorkloadState
from alphagate.shell.manual import Manual
from alphagate.sources import Source
from alphagate.sources.querybudget import QueryDeferral

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


def source_budgets(observation: Observation) -> list[BudgetKind]:
    """The budgets of the canary the read spent (whole read first, pools in order)."""
    found = [observation.source_budget, *(p.budget for p in observation.pools if p.error)]
    return [b for b in found if b is not None]


def source_errors(observation: Observation) -> list[str]:
    """Every failure the source reported, whole-read first (sentences for people)."""
    return [text for _, text in source_failures(observation)]


@dataclass(slots=True)
class Prepared:
    """A unit after its Deployments were read: what runs, its memory and its rollout."""

    outcome: UnitOutcome
    log: Any
    deps: list[WorkloadState] = field(default_factory=list)
    memory: Memory | None = None
    rollout: Rollout | None = None


def observe_start(spec: SpeculativeCanarySpec, prepared: Sequence[Prepared], now: float) -> float:
    """Where the one query for all units starts: the core's window rule
    (`window.shared_window`), the same the backtest follows."""
    units = [
        (p.memory, p.rollout) for p in prepared if p.memory is not None and p.rollout is not None
    ]
    return window.shared_window(spec, units, now)[0]


@dataclass(slots=True)
class Pending:
    """A resource read, its Deployments read, its policy valid: what deciding needs once
    the observation over [start, now] is in."""

    out: Outcome
    log: Any
    now: float
    generation: int
    previous: CanaryStatus
    ref: ObjectRef
    conditions: list[Condition]
    spec: SpeculativeCanarySpec
    dry_run: bool
    source: Source
    manual: Manual
    prepared: list[Prepared]
    start: float


# ---------------------------------------------------------------- results


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
    # evaluated late: a Kubernetes API budget was spent (which one, its rate, how late)
    api_deferral: Deferral | None = None
    # evaluated late: a Prometheus query budget was spent (whose, how long it waited)
    query_deferral: QueryDeferral | None = None
    duration_seconds: float = 0.0
    now: float = 0.0
    """The time it decided for: the clock when its cycle began (one for a cycle's batch)."""

    @property
    def evaluation(self) -> Evaluation | None:
        return self.units[0].evaluation if self.units else None
