"""The reconciler with an Argo Rollout as its canary, end to end over real HTTP: the API server
double serves `rollouts.argoproj.io` as a custom resource and plays Argo (a new template
becomes Healthy and promoted after a delay); the real reconciler, actuator and status writer
read and patch it through the `kubernetes` client's CustomObjectsApi. It enables, waits for
Argo, confirms, rolls back when alpha falls, and never touches a Deployment."""

from __future__ import annotations

from typing import Any

import pytest
from kube_support import BASE_ARGS, CFG, NS, Clock, FakeSource, canary_cr

from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.kube.workload import ANN_SPECULATION, ANN_STATE
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import (
    ApiServer,
    ArgoRolloutCompleter,
    ArgoRolloutTemplate,
    DeploymentTemplate,
    Rbac,
)

GROUP = "argoproj.io"


def rollout_args(apiserver: ApiServer) -> list[str]:
    ro = apiserver.get("rollouts", NS, "chat-canary", group=GROUP)
    return list(ro["spec"]["template"]["spec"]["containers"][0].get("args") or [])


def speculating(apiserver: ApiServer) -> bool:
    return argsmod.read(rollout_args(apiserver)) is not None


@pytest.fixture
def api() -> Any:
    # the controller may not write Deployments here: a Rollout target needs none
    rbac = Rbac.allow_all().deny("patch", "apps", "deployments")
    with ApiServer(rbac=rbac) as server:
        yield server


def test_a_rollout_canary_is_enabled_judged_after_argo_and_rolled_back(api: ApiServer) -> None:
    api.argo = ArgoRolloutCompleter(delay_seconds=0.0)
    api.put(ArgoRolloutTemplate("chat-canary", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(DeploymentTemplate("chat-baseline", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(canary_cr(target={"name": "chat-canary", "container": "vllm", "kind": "Rollout"}))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    alpha = {"chat": 0.7}
    source = FakeSource(api, lambda s: alpha[s], on=lambda s: speculating(api))
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )

    def step(n: int = 1) -> Any:
        out = None
        for _ in range(n):
            clock.tick()
            out = rec.reconcile(NS, "chat")
        return out

    def state() -> str:
        return str(parse_status(api.get("speculativecanaries", NS, "chat")).state)

    try:
        out = step()  # a new canary is probed: the Rollout's template gets the flag
        assert out.evaluation.action.value == "enable"
        assert argsmod.read(rollout_args(api)) == CFG
        assert rollout_args(api)[:4] == BASE_ARGS
        ro = api.get("rollouts", NS, "chat-canary", group=GROUP)
        assert ro["metadata"]["annotations"][ANN_SPECULATION] == "on"
        # Argo promoted the new revision (the double plays Argo): now the canary is judged
        assert ro["status"]["phase"] == "Healthy"
        assert ro["status"]["currentPodHash"] == ro["status"]["stableRS"]
        step(3)
        assert state() == "On"
        alpha["chat"] = 0.4
        out = step(2)
        assert out.evaluation.action.value == "disable"
        assert rollout_args(api) == BASE_ARGS
        ro = api.get("rollouts", NS, "chat-canary", group=GROUP)
        assert ro["metadata"]["annotations"][ANN_STATE] == "RolledBack"
        assert state() == "RolledBack"
    finally:
        kube.close()
    patches = api.requests_matching(method="PATCH", resource="rollouts")
    assert patches and all(r.content_type == "application/json-patch+json" for r in patches)
    assert sum(1 for r in patches if r.status == 200 and _edits_args(r.body)) == 2  # on, off
    assert api.requests_matching(resource="deployments", method="PATCH") == []
    assert all(r.status != 403 for r in api.requests)


def test_no_judging_while_argo_is_still_in_its_steps(api: ApiServer) -> None:
    api.argo = None  # Argo never promotes the new revision
    api.put(ArgoRolloutTemplate("chat-canary", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(DeploymentTemplate("chat-baseline", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(canary_cr(target={"name": "chat-canary", "kind": "Rollout"}))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    source = FakeSource(api, lambda s: 0.2, on=lambda s: speculating(api))  # would roll back
    rec = Reconciler(kube, source_factory=lambda spec, ns, name: source, clock=clock)
    try:
        clock.tick()
        rec.reconcile(NS, "chat")
        assert speculating(api)
        ro = api.get("rollouts", NS, "chat-canary", group=GROUP)
        ro["status"] = {**ro["status"], "phase": "Paused", "currentPodHash": "new"}
        api.put(ro)
        for _ in range(4):
            clock.tick()
            out = rec.reconcile(NS, "chat")
            assert out.evaluation.action.value == "hold"
        assert speculating(api)  # bad alpha, but nothing from a rollout in progress is judged
    finally:
        kube.close()


def _edits_args(ops: Any) -> bool:
    return any(str(op.get("path", "")).endswith("/args") for op in ops or [])


def test_a_rollout_with_a_workload_ref_is_refused_with_a_reason(api: ApiServer) -> None:
    ro = ArgoRolloutTemplate("chat-canary", NS).build()
    del ro["spec"]["template"]
    ro["spec"]["workloadRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}
    api.put(ro)
    api.put(DeploymentTemplate("chat-baseline", NS).build())
    api.put(canary_cr(target={"name": "chat-canary", "kind": "Rollout"}))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    source = FakeSource(api, lambda s: 0.7, on=lambda s: False)
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    try:
        clock.tick()
        rec.reconcile(NS, "chat")
    finally:
        kube.close()
    evs = [(e["reason"], e["message"]) for e in api.objects("events", NS, group="")]
    assert any(r == "ArgsUneditable" and "spec.workloadRef" in m for r, m in evs), evs
    st = parse_status(api.get("speculativecanaries", NS, "chat"))
    cond = {c.type: c for c in st.conditions}
    assert cond["SpecValid"].status == "False"
    assert api.requests_matching(method="PATCH", resource="rollouts") == []
