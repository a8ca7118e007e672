"""The Kubernetes API budget: per canary, per namespace and overall (kube/apibudget.py).

The buckets and the admission with a clock the test moves; then the real controller over real
HTTP against the API double: one canary of 64 slices at the 0.1 s interval floor (713 API
requests a second before the budget) is held to its own budget, typed, while a canary of
another tenant is evaluated on time.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from kube_support import canary_cr
from prometheus_client import CollectorRegistry

from alphagate.config import GROUP
from alphagate.errors import ApiBudgetError
from alphagate.kube.apibudget import ApiBudget, BudgetConfig, BudgetScope, Charged, Rate
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder, ObjectRef
from alphagate.kube.status.resource import CanaryStatus, parse_status
from alphagate.shell.api_budget import budget_condition
from alphagate.shell.controller import Controller, RunOptions
from alphagate.shell.outcome import Outcome
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

if TYPE_CHECKING:
    from conftest import WaitFor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget(clock: Clock, **rates: Rate | None) -> ApiBudget:
    config = BudgetConfig(**({"overall": None, "namespace": None, "canary": None} | rates))
    return ApiBudget(config, clock=clock)


def spend(b: ApiBudget, key: tuple[str, str], n: int) -> None:
    with b.charging(*key):
        for _ in range(n):
            b.spend()


A, B, C = ("team-a", "flood"), ("team-b", "victim"), ("team-a", "second")
NOW = 1_800_000_000.0


def test_a_canary_in_debt_waits_alone_until_it_is_paid_back() -> None:
    clock = Clock()
    b = budget(clock, canary=Rate(10.0, 100))
    assert b.admit([A, B]) == ([A, B], {})
    spend(b, A, 150)  # one evaluation overdraws its bucket by 50
    spend(b, B, 5)
    admitted, deferred = b.admit([A, B])
    assert admitted == [B]
    d = deferred[A]
    assert (d.scope, d.owner, d.cost, d.rate) == (
        BudgetScope.CANARY,
        "team-a/flood",
        150,
        Rate(10.0, 100),
    )
    assert d.retry_in == pytest.approx(5.0)  # 50 tokens of debt at 10 a second
    assert d.reason == "CanaryApiBudgetExceeded"
    clock.now += 5.0
    assert b.admit([A, B])[0] == [A, B]
    assert b.deferral(*A) == d and b.deferral(*A) is None  # told once, then forgotten
    assert b.deferral(*B) is None


def test_the_namespace_budget_holds_a_tenants_many_canaries_not_the_others() -> None:
    clock = Clock()
    b = budget(clock, namespace=Rate(10.0, 20))
    third = ("team-a", "third")
    for key in (A, C, third, B):
        spend(b, key, 12)
    b.admit([A, C, third, B])  # counts each one's cost (12)
    clock.now += 10.0  # every bucket full again
    admitted, deferred = b.admit([A, C, third, B])
    # team-a's 20 tokens: A leaves 8, C may overdraw them, the third would start in debt
    assert admitted == [A, C, B]
    assert deferred[third].scope is BudgetScope.NAMESPACE
    assert deferred[third].owner == "team-a" and deferred[third].retry_in == pytest.approx(0.4)


def test_the_overall_budget_admits_in_order_what_it_can_pay_for() -> None:
    clock = Clock()
    b = budget(clock, overall=Rate(100.0, 20))
    for key in (A, B, C):
        spend(b, key, 12)
    b.admit([A, B, C])
    clock.now += 10.0
    admitted, deferred = b.admit([B, A, C])
    assert admitted == [B, A]  # 20 tokens: 8 left after B, then A overdraws
    assert deferred[C].scope is BudgetScope.OVERALL and deferred[C].owner == "controller"


def test_a_request_past_a_whole_burst_of_debt_is_refused_typed_and_uncharged_ones_never() -> None:
    clock = Clock()
    b = budget(clock, canary=Rate(1.0, 10), overall=Rate(1.0, 10))
    with b.charging(*A):
        for _ in range(20):  # 10 tokens and 10 of debt
            b.spend()
        with pytest.raises(ApiBudgetError) as err:
            b.spend("GET /api/v1/pods")
    assert err.value.scope == "canary" and err.value.status == 429
    assert "team-a/flood" in str(err.value) and "1 requests/s, burst 10" in str(err.value)
    for _ in range(50):  # the watch, leases: counted, never refused, never charged
        b.spend()
    assert (b.tally.total, b.tally.charged, b.tally.refused) == (71, 20, 1)
    assert b.tally.by_canary == {A: 20}


def test_charged_calls_pay_from_their_canary_on_any_thread() -> None:
    clock = Clock()
    b = budget(clock, canary=Rate(1.0, 100))

    class Api:
        def list_namespaced_pod(self, namespace: str) -> str:
            b.spend()
            return namespace

    charged = Charged(Api(), b, *A)
    t = threading.Thread(target=lambda: charged.list_namespaced_pod("team-a"))
    t.start()
    t.join(5)
    assert b.tally.by_canary == {A: 1}


# ---------------------------------------------------------------- the real controller


def _flood(api: ApiServer, slices: int) -> dict[str, Any]:
    """A perSlice canary of `slices` slices at the 0.1 s floor, each slice its Deployment."""
    ns = "team-a"
    api.put(DeploymentTemplate("base", ns, replicas=1).build())
    entries = []
    for i in range(slices):
        api.put(DeploymentTemplate(f"s{i}", ns, replicas=1).build())
        entries.append(
            {
                "name": f"s{i}",
                "deployment": {"name": f"s{i}", "container": "vllm"},
                "canary": {"matchLabels": {"slice": f"s{i}", "track": "canary"}},
                "baseline": {"matchLabels": {"slice": f"s{i}", "track": "baseline"}},
            }
        )
    timing = {"intervalSeconds": 0.1, "windowSeconds": 0.2}  # the interval floor: under test
    obj = canary_cr("flood", aggregation="perSlice", slices=entries, timing=timing)
    obj["spec"]["target"] = {"name": "s0", "container": "vllm"}
    obj["spec"]["baseline"] = {"name": "base", "container": "vllm"}
    obj["metadata"]["namespace"] = ns
    return obj


def test_a_64_slice_canary_at_the_interval_floor_pays_alone_and_says_so(
    wait_for: WaitFor,
) -> None:
    outcomes: list[Outcome] = []
    with ApiServer() as api:
        api.put(_flood(api, 64))
        for role in ("canary", "baseline"):
            api.put(DeploymentTemplate(f"chat-{role}", "team-b", replicas=1).build())
        # compressed: the victim must evaluate many times within the test
        victim = canary_cr("victim", timing={"intervalSeconds": 1.0, "windowSeconds": 2.0})
        victim["metadata"]["namespace"] = "team-b"
        api.put(victim)
        # a canary budget 5x the shipped one: the flood's debt is paid back in seconds
        rates = BudgetConfig(canary=Rate(50.0, 300))
        kube = Kube.from_configuration(api.configuration(), budget=ApiBudget(rates))
        opts = RunOptions(leader_elect=False, serve_metrics=False, watch_timeout=2.0)
        c = Controller(opts, kube=kube, on_outcome=outcomes.append).start()
        try:
            wait_for(
                lambda: any(o.api_deferral is not None and o.evaluation for o in outcomes),
                60,
                "the flood deferred by its budget, then evaluated",
            )
            api.clear_requests()
            started, victims_before = time.monotonic(), _times(outcomes, "victim")
            time.sleep(6.0)
            elapsed = time.monotonic() - started
            requests = api.requests
            victim_times = _times(outcomes, "victim")[len(victims_before) :]
            deferrals = _deferrals(c.recorder.registry)
        finally:
            c.stop()
        flood = parse_status(api.get("speculativecanaries", "team-a", "flood", group=GROUP))
        calm = parse_status(api.get("speculativecanaries", "team-b", "victim", group=GROUP))
    deferred = [o.api_deferral for o in outcomes if o.api_deferral is not None]
    assert {d.scope for d in deferred} == {BudgetScope.CANARY}
    assert {d.owner for d in deferred} == {"team-a/flood"}
    assert all(o.name == "flood" for o in outcomes if o.api_deferral is not None)
    cond = flood.condition("WithinApiBudget")
    assert cond is not None and cond.status == "False"
    assert cond.reason == "CanaryApiBudgetExceeded"
    assert calm.condition("WithinApiBudget") is None  # the victim never met a budget
    # exported per canary and budget: the flood's canary budget counts, the victim's series
    # exist at 0 (so increase() sees its first deferral), no other budget counts
    assert deferrals[("team-a", "flood", "canary")] >= 1
    assert deferrals[("team-b", "victim", "canary")] == 0
    assert {k for k, v in deferrals.items() if v > 0} == {("team-a", "flood", "canary")}
    # the flood made at most its rate plus one burst; unbudgeted it made 700 a second
    charged = [r for r in requests if r.namespace == "team-a"]
    assert len(charged) <= 50.0 * elapsed + 300, len(charged)
    # the other tenant's canary kept its 1 s interval (a cycle may run a little late)
    gaps = [b - a for a, b in itertools.pairwise(victim_times)]
    assert len(victim_times) >= 4 and max(gaps) < 2.0, gaps


def _deferrals(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """alphagate_api_budget_deferrals_total by (namespace, canary, scope)."""
    return {
        (s.labels["namespace"], s.labels["canary"], s.labels["scope"]): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "alphagate_api_budget_deferrals_total"
    }


def _times(outcomes: list[Outcome], name: str) -> list[float]:
    return [o.now for o in list(outcomes) if o.name == name and o.evaluation is not None]


def test_the_condition_turns_false_once_and_true_when_on_time_again() -> None:
    clock = Clock()
    b = budget(clock, canary=Rate(10.0, 100))
    ref = ObjectRef("team-a", "flood")
    with ApiServer() as api:
        kube = Kube.from_configuration(api.configuration())
        events = EventRecorder(kube.api_client)
        spend(b, A, 150)
        b.admit([A])
        b.admit([A])  # deferred: 50 tokens of debt
        first, deferral = budget_condition(
            b, [], CanaryStatus(), ref=ref, events=events, now=NOW, generation=1
        )
        assert deferral is not None and deferral.scope is BudgetScope.CANARY
        (cond,) = first
        assert (cond.type, cond.status, cond.reason) == (
            "WithinApiBudget",
            "False",
            "CanaryApiBudgetExceeded",
        )
        clock.now += 5.0
        assert b.admit([A])[0] == [A]
        again, none = budget_condition(
            b, first, CanaryStatus(conditions=first), ref=ref, events=events, now=NOW + 5,
            generation=1,
        )  # fmt: skip
        assert none is None
        assert [(c.status, c.reason) for c in again] == [("True", "WithinBudget")]
        # a canary that never met its budget carries no such condition
        assert budget_condition(b, [], CanaryStatus(), ref=ObjectRef("team-b", "victim"),
                                events=events, now=NOW, generation=1) == ([], None)  # fmt: skip
        warned = [
            e for e in api.objects("events", "team-a") if e.get("reason") == "ApiBudgetExceeded"
        ]
        assert len(warned) == 1  # told once, when it turned False
        kube.close()
