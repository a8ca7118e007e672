"""The namespaces take the control loop in turn: one tenant's many canaries, due together and
read together, cannot put another tenant's decision behind all of theirs.

The real reconciler over the API double, canaries in two namespaces, a source per canary that
answers at once; what is asserted is the order of the decisions, never a time.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from kube_support import BASE_ARGS, canary_cr

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.kube.client import Kube
from alphagate.shell.cycles import Cycle
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
from alphagate.shell.watch import namespaces_in_turn
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

HOSTILE, VICTIM = "hostile", "llm"


def _tenant(apiserver: ApiServer, namespace: str, name: str) -> None:
    for dep in (f"{name}-canary", f"{name}-baseline"):
        apiserver.put(DeploymentTemplate(dep, namespace, args=list(BASE_ARGS)).build())
    cr = canary_cr(
        name,
        target={"name": f"{name}-canary", "container": "vllm"},
        baseline={"name": f"{name}-baseline", "container": "vllm"},
    )
    cr["metadata"]["namespace"] = namespace
    apiserver.put(cr)


class _Answers:
    """Every canary's read answers at once with an empty window; the victim's read also says
    it has been answered (the reads run in the order given, the victim's last)."""

    def __init__(self, name: str, answered: threading.Event | None) -> None:
        self.name, self.answered = name, answered

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        if self.answered is not None:
            self.answered.set()
        return Observation(at=end, window_seconds=end - start, pools=())


def test_a_victims_decision_waits_for_one_of_another_namespaces_not_for_all(
    apiserver: ApiServer, kube: Kube
) -> None:
    hostile = [f"flood-{i}" for i in range(8)]
    for name in hostile:
        _tenant(apiserver, HOSTILE, name)
    _tenant(apiserver, VICTIM, "chat")
    victim_read = threading.Event()
    decided: list[tuple[str, str]] = []

    def told(out: Outcome) -> None:
        decided.append((out.namespace, out.name))
        if len(decided) == 1:  # hold the first decision until every read has arrived
            assert victim_read.wait(10)

    def source(spec: Any, namespace: str, name: str) -> _Answers:
        return _Answers(name, victim_read if namespace == VICTIM else None)

    rec = Reconciler(kube, source_factory=source, on_outcome=told)
    try:
        # due together, the hostile tenant's canaries first (they fell due first)
        rec.reconcile_many([*((HOSTILE, n) for n in hostile), (VICTIM, "chat")], now=1e9)
    finally:
        rec.close()
    assert len(decided) == 9
    assert decided[1] == (VICTIM, "chat")  # in arrival order it was ninth


def test_a_cycle_hands_out_each_namespaces_nth_arrival_before_any_n_plus_first() -> None:
    keys = [(HOSTILE, f"h{i}") for i in range(3)] + [(VICTIM, "a"), (VICTIM, "b"), ("c", "x")]
    cycle = Cycle(keys, [])
    for i in (0, 1, 2, 3, 4, 5):  # arrival order: the hostile three first
        cycle.arrived.put((i, Observation(at=0.0, window_seconds=1.0, pools=())))
    order = []
    while (arrival := cycle.next_arrival(block=False)) is not None:
        order.append(keys[arrival[0]][1])
    assert order == ["h0", "a", "x", "h1", "b", "h2"]
    assert cycle.next_arrival(block=False) is None


def test_a_cycle_blocks_for_the_first_arrival_when_asked_to() -> None:
    cycle = Cycle([(VICTIM, "a")], [])
    got: queue.SimpleQueue[tuple[int, Observation] | None] = queue.SimpleQueue()
    waiter = threading.Thread(target=lambda: got.put(cycle.next_arrival(block=True)))
    waiter.start()
    cycle.arrived.put((0, Observation(at=0.0, window_seconds=1.0, pools=())))
    waiter.join(5)
    arrival = got.get(timeout=5)
    assert arrival is not None and arrival[0] == 0


def test_due_canaries_come_the_namespaces_in_turn_each_in_its_own_order() -> None:
    keys = [(HOSTILE, "h0"), (HOSTILE, "h1"), (HOSTILE, "h2"), (VICTIM, "a"), (VICTIM, "b")]
    assert namespaces_in_turn(keys) == [
        (HOSTILE, "h0"),
        (VICTIM, "a"),
        (HOSTILE, "h1"),
        (VICTIM, "b"),
        (HOSTILE, "h2"),
    ]
    assert namespaces_in_turn([]) == []


def test_the_schedule_hands_out_due_canaries_the_namespaces_in_turn(
    apiserver: ApiServer, kube: Kube
) -> None:
    for name in ("flood-0", "flood-1", "flood-2"):
        _tenant(apiserver, HOSTILE, name)
    _tenant(apiserver, VICTIM, "chat")
    rec = Reconciler(kube)
    try:
        rec.relist()
        due = rec.due(float("inf"))
    finally:
        rec.close()
    # all due at once: by name the hostile three came first and the victim was read last
    assert due[:2] == [(HOSTILE, "flood-0"), (VICTIM, "chat")]
    assert sorted(due) == sorted([*((HOSTILE, f"flood-{i}") for i in range(3)), (VICTIM, "chat")])
