"""The Prometheus query budget (sources/querybudget.py): queries a second per canary and per
namespace. The buckets with a clock the test moves; the schedule's admission (`WatchLoop.due`)
deferring a namespace in debt and no other; and the 0.1 s interval floor read through the
cycle, as the controller reads, from a Prometheus double over real HTTP on 127.0.0.1 that
counts the queries of each namespace."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from loopback import Handler, Loopback

from alphagate.core.model import Observation
from alphagate.errors import BudgetError, BudgetKind
from alphagate.kube.client import Kube
from alphagate.shell.watch import WatchLoop
from alphagate.sources import querybudget
from alphagate.sources.cycle import Read, observe_each
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.querybudget import QueryBudget, QueryBudgets
from specs import SOURCE_SPEC, spec_from


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def install(monkeypatch: pytest.MonkeyPatch, clock: Clock, **rates: Any) -> QueryBudget:
    budget = QueryBudget(QueryBudgets(**rates), clock=clock)
    monkeypatch.setattr(querybudget, "_budget", budget)
    return budget


def schedule(clock: Clock) -> WatchLoop:
    """The schedule alone (no API budget, every canary owned) on the test's clock."""
    return WatchLoop(
        cast(Kube, SimpleNamespace(budget=None)),
        namespace=None,
        label_selector=None,
        clock=clock,
        watch_timeout_seconds=5,
        health=None,
        owns=None,
    )


class CountingProm(Loopback):
    """Answers every query at once with an empty result; counts them by namespace matcher."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queries: Counter[str] = Counter()
        outer = self

        class PromHandler(Handler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                found = re.search(r'namespace="([^"]+)"', form.get("query", [""])[0])
                with outer.lock:
                    outer.queries[found.group(1) if found else ""] += 1
                kind = "matrix" if self.path.endswith("query_range") else "vector"
                body = {"status": "success", "data": {"resultType": kind, "result": []}}
                self.answer(json.dumps(body).encode(), content_type="application/json")

            def do_GET(self) -> None:  # the targets API: not here
                body = {"status": "error", "error": "not here"}
                self.answer(json.dumps(body).encode(), status=404, content_type="application/json")

        super().__init__(PromHandler)


@pytest.fixture
def prom() -> Iterator[CountingProm]:
    server = CountingProm()
    yield server
    server.stop()


def test_the_buckets_run_into_debt_defer_and_refuse_past_a_burst_of_debt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    budget = install(monkeypatch, clock, canary_qps=10.0, canary_burst=20)
    for _ in range(30):  # one read may overdraw
        budget.take(("team-a", ("flood",)))
    deferral = budget.deferral("team-a", "flood")
    assert deferral is not None and deferral.scope == "canary"
    assert deferral.retry_in == pytest.approx(1.0)  # 10 tokens of debt at 10 a second
    assert budget.deferral("team-a", "second") is None  # the namespace has room
    assert budget.deferral("team-b", "victim") is None
    for _ in range(10):
        budget.take(("team-a", ("flood",)))
    with pytest.raises(BudgetError) as refused:  # a whole burst of debt: refused, typed
        budget.take(("team-a", ("flood",)), "q")
    assert refused.value.budget is BudgetKind.QUERIES
    assert budget.sent == {"team-a": 40}  # the refused one was not sent
    budget.take(("team-b", ("victim",)))  # another namespace pays nothing for it
    clock.now += 4.0  # 40 tokens back: out of debt
    assert budget.deferral("team-a", "flood") is None


def test_a_namespaces_shared_queries_hold_its_canaries_and_no_other_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    budget = install(monkeypatch, clock, namespace_qps=50.0, namespace_burst=100)
    for _ in range(150):  # a batch's shared queries: the namespace's alone
        budget.take(("team-a", ()))
    loop = schedule(clock)
    for ns, name in (("team-a", "one"), ("team-a", "two"), ("team-b", "victim")):
        loop._observe_object("ADDED", _canary(ns, name))
    assert loop.due(clock.now) == [("team-b", "victim")]
    clock.now += 1.0  # 50 tokens back: out of debt, both due again
    assert sorted(loop.due(clock.now)) == [
        ("team-a", "one"),
        ("team-a", "two"),
        ("team-b", "victim"),
    ]


def _canary(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "alphagate.io/v1alpha1",
        "kind": "SpeculativeCanary",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"source": {"kind": "prometheus"}, "timing": {"intervalSeconds": 0.1}},
    }


def test_the_interval_floor_costs_the_budget_not_ten_reads_a_second(
    prom: CountingProm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten evaluations due in one second at intervalSeconds 0.1: the schedule admits the
    flood's canary while its budget is out of debt (`deferral`, what `WatchLoop.due` asks),
    so its queries stay within one burst, one second of rate and one evaluation's overdraft;
    the victim of another namespace (every 0.5 s), read in the same cycles, is read every
    time it is due."""
    clock = Clock()
    budget = install(monkeypatch, clock, canary_qps=20.0, canary_burst=40)
    endpoint = PrometheusEndpoint(url=prom.url, timeout_seconds=10)
    spec = spec_from(SOURCE_SPEC, source={"kind": "prometheus", "prometheus": {}})
    flood = PrometheusSource(endpoint, namespace="hostile", name="flood", backoff_seconds=0.0)
    victim = PrometheusSource(endpoint, namespace="llm", name="victim", backoff_seconds=0.0)
    evaluations: Counter[str] = Counter()
    seen: list[Observation] = []
    try:
        for tick in range(10):
            now = 1_800_000_000.0 + 0.1 * tick
            due = [(flood, 0.1)] + ([(victim, 0.5)] if tick % 5 == 0 else [])
            reads = [
                Read(src, spec, now - 60.0, now, interval)
                for src, interval in due
                if budget.deferral(src.namespace or "", src.name or "") is None
            ]
            for read in reads:
                evaluations[cast(PrometheusSource, read.source).namespace or ""] += 1
            seen += observe_each(reads)
            clock.now += 0.1
    finally:
        flood.close()
        victim.close()
    per_evaluation = prom.queries["llm"] / evaluations["llm"]  # the same policy, alone
    unbudgeted = 10 * per_evaluation
    bound = 40 + 20 * 1.0 + per_evaluation  # a burst, a second of rate, one overdraft
    print(
        f"\nqueries at 0.1 s for one second: flood {prom.queries['hostile']} "
        f"({evaluations['hostile']} evaluations) against {unbudgeted:.0f} unbudgeted; "
        f"victim {prom.queries['llm']} ({evaluations['llm']} evaluations)"
    )
    assert evaluations["llm"] == 2  # never deferred
    assert prom.queries["hostile"] <= bound < unbudgeted
    assert evaluations["hostile"] < 10
    assert not [p for o in seen for p in o.pools if p.budget is BudgetKind.QUERIES]


def test_a_read_past_a_whole_burst_of_debt_fails_typed_and_alone(
    prom: CountingProm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A canary a whole burst in debt (its reads cost more than twice its burst): its next
    queries are refused before they are sent, its pools fail typed (QUERIES),
    and the other namespace's read is whole."""
    clock = Clock()
    endpoint = PrometheusEndpoint(url=prom.url, timeout_seconds=10)
    spec = spec_from(SOURCE_SPEC, source={"kind": "prometheus", "prometheus": {}})
    now = 1_800_000_000.0
    sources = [
        PrometheusSource(endpoint, namespace=ns, name=n, backoff_seconds=0.0)
        for ns, n in (("hostile", "flood"), ("llm", "victim"))
    ]
    monkeypatch.setattr(querybudget, "_budget", QueryBudget(QueryBudgets(), clock=clock))
    try:  # the victim under the default budget, the flood under its own small one
        calm = observe_each([Read(sources[1], spec, now - 60.0, now, 30.0)])[0]
        spent = install(monkeypatch, clock, canary_qps=1.0, canary_burst=3)
        for _ in range(6):  # its last reads: a burst and a burst of debt
            spent.take(("hostile", ("flood",)))
        hit = observe_each([Read(sources[0], spec, now - 60.0, now, 30.0)])[0]
    finally:
        for src in sources:
            src.close()
    assert prom.queries["hostile"] == 0  # nothing more sent
    refused = [p for p in hit.pools if p.budget is BudgetKind.QUERIES]
    assert refused and all(p.error for p in refused)
    assert {p.budget for p in hit.pools} <= {BudgetKind.QUERIES, None}
    assert all(p.budget is None for p in calm.pools)


def test_the_admin_config_carries_the_budgets() -> None:
    config = SourcesConfig.model_validate(
        {"prometheusBudgets": {"canaryQps": 5, "namespaceBurst": 10}}
    )
    assert config.prometheus_budgets.canary_qps == 5.0
    assert config.prometheus_budgets.namespace_burst == 10
    assert SourcesConfig().prometheus_budgets == QueryBudgets()


def test_a_deleted_canary_leaves_no_bucket_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    budget = install(monkeypatch, clock, canary_qps=1.0, canary_burst=1)
    budget.take(("llm", ("gone",)))
    budget.take(("llm", ("gone",)))
    deferral = budget.deferral("llm", "gone")
    assert deferral is not None and deferral.scope == "canary"
    loop = schedule(clock)
    loop.forget("llm", "gone")  # the watch saw it deleted
    assert budget.deferral("llm", "gone") is None  # a canary of that name starts afresh
