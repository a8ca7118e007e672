"""The namespaces take the control loop in turn: one tenant's many canaries, due together and
read together, cannot put another tenant's decision behind all of theirs.

The real reconciler over the API double, canaries in two namespaces, a source per canary that
answers at once; what is asserted is the order of the decisions, never a time.
"""

from __future__ import annotations

import threading
from typing import Any

from kube_support import BASE_ARGS, canary_cr

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.kube.client import Kube
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
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


def test_the_schedule_hands_out_due_canaries_the_namespaces_in_turn(
    apiserver: ApiServer, kube: Kube
) -> None:
    for name in ("flood-0", "flood-1", "flood-2"):
        _tenant(apiserver, HOSTILE, name)
    _tenant(apiserver, VICTIM, "chat")
    rec = Reconciler(kube)
    try:
        rec.loop.relist()
        due = rec.loop.due(float("inf"))
    finally:
        rec.close()
    # all due at once: by name the hostile three came first and the victim was read last
    assert due[:2] == [(HOSTILE, "flood-0"), (VICTIM, "chat")]
    assert sorted(due) == sorted([*((HOSTILE, f"flood-{i}") for i in range(3)), (VICTIM, "chat")])
