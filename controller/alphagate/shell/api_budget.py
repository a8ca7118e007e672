"""What the Kubernetes API budget did to one canary's evaluation, told where people look.

A canary whose budget was spent is evaluated late (the schedule deferred it: `kube.apibudget`);
its status says so with the WithinApiBudget condition (False, the budget's reason, the
deferral's sentence), an `ApiBudgetExceeded` Warning Event when it turns False, and the
Outcome carries the typed `Deferral`. The condition turns True once the canary is evaluated on
time again and stays absent for a canary that never met its budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from alphagate.kube.apibudget import ApiBudget, Deferral
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.status.fields import Condition, ConditionType, set_condition
from alphagate.kube.status.resource import CanaryStatus


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
    before = previous.condition(ConditionType.WITHIN_API_BUDGET)
    if deferral is not None:
        if before is None or before.status != "False":
            events.warning(ref, Reason.API_BUDGET_EXCEEDED, deferral.message())
        out = set_condition(
            conditions,
            ConditionType.WITHIN_API_BUDGET,
            False,
            deferral.reason,
            deferral.message(),
            now=now,
            generation=generation,
        )
        return out, deferral
    if before is None:
        return list(conditions), None
    return set_condition(
        conditions,
        ConditionType.WITHIN_API_BUDGET,
        True,
        "WithinBudget",
        "evaluated on time: its Kubernetes API budgets hold what an evaluation costs",
        now=now,
        generation=generation,
    ), None
