"""What the Kubernetes API and Prometheus query budgets did to one canary's evaluation, told
where people look.

A canary whose budget was spent is evaluated late (the schedule deferred it: `kube.apibudget`);
its status says so with the WithinApiBudget condition (False, the budget's reason, the
deferral's sentence), an `ApiBudgetExceeded` Warning Event when it turns False, and the
Outcome carries the typed `Deferral`. The condition turns True once the canary is evaluated on
time again and stays absent for a canary that never met its budget. A read the Prometheus
query budget held back (`sources.querybudget`, the schedule deferred it) is told the same way:
WithinQueryBudget, a `QueryBudgetExceeded` Event.
"""

from __future__ import annotations

from collections.abc import Sequence

from alphagate.kube.apibudget import ApiBudget, Deferral
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.status.fields import Condition, ConditionType, set_condition
from alphagate.kube.status.resource import CanaryStatus
from alphagate.sources.querybudget import QueryDeferral


def budget_condition(
    budget: ApiBudget | None,
    conditions: Sequence[Condition],
    previous: CanaryStatus,
    *,
    ref: ObjectRef,
    events: EventRecorder,
    now: float,
    generation: int,
) -> tuple[list[Condition], Deferral | None]:
    """The conditions with WithinApiBudget set for this evaluation, and its deferral."""
    deferral = None if budget is None else budget.deferral(ref.namespace, ref.name)
    told = None if deferral is None else (deferral.reason, deferral.message())
    out = _deferred(
        ConditionType.WITHIN_API_BUDGET,
        Reason.API_BUDGET_EXCEEDED,
        told,
        "evaluated on time: its Kubernetes API budgets hold what an evaluation costs",
        conditions,
        previous,
        ref=ref,
        events=events,
        now=now,
        generation=generation,
    )
    return out, deferral


def query_budget_condition(
    deferral: QueryDeferral | None,
    conditions: Sequence[Condition],
    previous: CanaryStatus,
    *,
    ref: ObjectRef,
    events: EventRecorder,
    now: float,
    generation: int,
) -> list[Condition]:
    """The conditions with WithinQueryBudget set for this evaluation."""
    return _deferred(
        ConditionType.WITHIN_QUERY_BUDGET,
        Reason.QUERY_BUDGET_EXCEEDED,
        None if deferral is None else (deferral.reason, deferral.message()),
        "read on time: its Prometheus query budgets hold what its reads cost",
        conditions,
        previous,
        ref=ref,
        events=events,
        now=now,
        generation=generation,
    )


def _deferred(
    kind: ConditionType,
    event: Reason,
    told: tuple[str, str] | None,
    on_time: str,
    conditions: Sequence[Condition],
    previous: CanaryStatus,
    *,
    ref: ObjectRef,
    events: EventRecorder,
    now: float,
    generation: int,
) -> list[Condition]:
    """`kind` False with the deferral's (reason, message) and an Event when it turns False;
    True once on time again; absent for a canary never deferred."""
    before = previous.condition(kind)
    if told is not None:
        if before is None or before.status != "False":
            events.warning(ref, event, told[1])
        return set_condition(
            conditions, kind, False, told[0], told[1], now=now, generation=generation
        )
    if before is None:
        return list(conditions)
    return set_condition(
        conditions, kind, True, "WithinBudget", on_time, now=now, generation=generation
    )
