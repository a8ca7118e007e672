"""A canary the Prometheus query budget held back says so where people look: its status
(WithinQueryBudget False, the budget's scope as the reason), one Warning Event, and True once
it is read on time again. The real reconciler and schedule over the API double."""

from __future__ import annotations

import pytest
from kube_support import NS, seed

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.kube.client import Kube
from alphagate.shell.reconciler import Reconciler
from alphagate.sources import querybudget
from alphagate.sources.querybudget import QueryBudget, QueryBudgets
from alphagate_lab.sandbox.apiserver import ApiServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Empty:
    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        return Observation(at=end, window_seconds=end - start, pools=())


def test_a_read_held_back_by_its_query_budget_is_told_in_status_and_one_event(
    apiserver: ApiServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    budget = QueryBudget(QueryBudgets(canary_qps=1.0, canary_burst=1), clock=clock)
    monkeypatch.setattr(querybudget, "_budget", budget)
    seed(apiserver)
    budget.take((NS, ("chat",)))
    budget.take((NS, ("chat",)))  # one query of debt: its next read waits a second
    rec = Reconciler(kube, source_factory=lambda spec, ns, name: Empty())
    try:
        rec.loop.relist()
        assert (NS, "chat") not in rec.loop.due(float("inf"))
        clock.now += 2.0  # refilled
        assert (NS, "chat") in rec.loop.due(float("inf"))
        late = rec.reconcile(NS, "chat")
        on_time = rec.reconcile(NS, "chat")
    finally:
        rec.close()
    assert late.query_deferral is not None and late.query_deferral.scope == "canary"
    assert late.status is not None and on_time.status is not None
    cond = late.status.condition("WithinQueryBudget")
    assert cond is not None
    assert (cond.status, cond.reason) == ("False", "CanaryQueryBudgetExceeded")
    again = on_time.status.condition("WithinQueryBudget")
    assert again is not None and (again.status, again.reason) == ("True", "WithinBudget")
    warned = [
        e for e in apiserver.objects("events", NS) if e.get("reason") == "QueryBudgetExceeded"
    ]
    assert len(warned) == 1
