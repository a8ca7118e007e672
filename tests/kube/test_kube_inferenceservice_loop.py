"""The reconciler with a KServe InferenceService as its canary, end to end over real HTTP: the
API server double serves `inferenceservices.serving.kserve.io` as a custom resource and plays
KServe in raw deployment mode (it renders the predictor Deployment from the InferenceService,
puts back any edit of it, and copies its rollout status into the InferenceService's). The real
reconciler, actuator and status writer flip the InferenceService through CustomObjectsApi; the
stand-in renders each flip into the predictor Deployment and never reverts it, and no
Deployment is ever patched. Serverless mode, and a Deployment KServe renders, are refused with a
reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import BASE_ARGS, CFG, NS, Clock, FakeSource, canary_cr

from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.kube.workload import ANN_OWNER, ANN_SPECULATION, ANN_STATE
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import (
    ApiServer,
    DeploymentTemplate,
    InferenceServiceTemplate,
    Rbac,
)

GROUP = "serving.kserve.io"
ISVC = "inferenceservices"
PREDICTOR = "chat-canary-predictor"
TARGET = {"name": "chat-canary", "kind": "InferenceService"}


def isvc(api: ApiServer) -> dict[str, Any]:
    return api.get(ISVC, NS, "chat-canary", group=GROUP)


def model_args(api: ApiServer) -> list[str]:
    return list(isvc(api)["spec"]["predictor"]["model"].get("args") or [])


def rendered(api: ApiServer, container: str = "kserve-container") -> list[str]:
    """What the predictor's pods run: the container KServe rendered into the Deployment."""
    dep = api.get("deployments", NS, PREDICTOR, group="apps")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return list(c.get("args") or [])


def runs_flag(api: ApiServer, container: str = "kserve-container") -> bool:
    return argsmod.read(rendered(api, container)) is not None


def template_changes(api: ApiServer) -> int:
    """Pod-template changes of the predictor Deployment since it was rendered: each one restarts
    every predictor pod."""
    return int(api.get("deployments", NS, PREDICTOR, group="apps")["metadata"]["generation"]) - 1


@pytest.fixture
def api() -> Any:
    # the controller may not write Deployments here: an InferenceService target needs none
    rbac = Rbac.allow_all().deny("patch", "apps", "deployments")
    with ApiServer(rbac=rbac) as server:
        yield server


def _reconciler(api: ApiServer, kube: Kube, clock: Clock, source: FakeSource) -> Reconciler:
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )


def test_an_inference_service_canary_is_enabled_judged_and_rolled_back(api: ApiServer) -> None:
    api.put(InferenceServiceTemplate("chat-canary", NS, replicas=2).build())
    api.put(DeploymentTemplate("chat-baseline", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(canary_cr(target=TARGET))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    alpha = {"chat": 0.7}
    source = FakeSource(api, lambda s: alpha[s], on=lambda s: runs_flag(api))
    rec = _reconciler(api, kube, clock, source)

    def step(n: int = 1) -> Any:
        out = None
        for _ in range(n):
            clock.tick()
            out = rec.reconcile(NS, "chat")
        return out

    def state() -> str:
        return str(parse_status(api.get("speculativecanaries", NS, "chat")).state)

    try:
        out = step()  # a new canary is probed: the InferenceService's model args get the flag
        assert out.evaluation.action.value == "enable"
        assert argsmod.read(model_args(api)) == CFG
        assert model_args(api)[:2] == ["--backend=vllm", "--max-model-len=512"]
        # KServe rendered it into the predictor's pods, after the runtime's own arguments
        assert argsmod.read(rendered(api)) == CFG
        assert rendered(api)[0] == "--model_name=chat-canary"
        meta = isvc(api)["metadata"]["annotations"]
        assert meta[ANN_SPECULATION] == "on" and meta[ANN_OWNER] == f"{NS}/chat"
        step(3)
        assert state() == "On"
        assert runs_flag(api)  # the stand-in did not revert it: KServe renders what we wrote
        # Probing -> On wrote no record on the InferenceService: KServe copies its annotations
        # into the pod template, so a record written alone would restart every predictor pod
        assert isvc(api)["metadata"]["annotations"][ANN_STATE] == "Probing"
        assert template_changes(api) == 1
        alpha["chat"] = 0.4
        out = step(2)
        assert out.evaluation.action.value == "disable"
        assert model_args(api) == ["--backend=vllm", "--max-model-len=512"]
        assert not runs_flag(api)
        assert isvc(api)["metadata"]["annotations"][ANN_STATE] == "RolledBack"
        assert state() == "RolledBack"
    finally:
        kube.close()
    assert template_changes(api) == 2  # on, off: a pod restart per flip and none besides
    patches = api.requests_matching(method="PATCH", resource=ISVC)
    assert patches and all(r.content_type == "application/json-patch+json" for r in patches)
    assert sum(1 for r in patches if r.status == 200 and _edits_args(r.body)) == 2
    assert len(patches) == 2  # no claim or record-only write either
    assert api.requests_matching(resource="deployments", method="PATCH") == []
    assert all(r.status != 403 for r in api.requests)


def test_a_custom_predictor_container_is_flipped(api: ApiServer) -> None:
    template = InferenceServiceTemplate("chat-canary", NS, args=list(BASE_ARGS), containers=True)
    api.put(template.build())
    api.put(DeploymentTemplate("chat-baseline", NS, args=list(BASE_ARGS)).build())
    api.put(canary_cr(target={**TARGET, "container": "vllm"}))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    source = FakeSource(api, lambda s: 0.7, on=lambda s: runs_flag(api, "vllm"))
    rec = _reconciler(api, kube, clock, source)
    try:
        clock.tick()
        assert rec.reconcile(NS, "chat").evaluation.action.value == "enable"
    finally:
        kube.close()
    (c,) = isvc(api)["spec"]["predictor"]["containers"]
    assert argsmod.read(c["args"]) == CFG and c["args"][:4] == BASE_ARGS
    assert argsmod.read(rendered(api, "vllm")) == CFG


def test_nothing_is_judged_until_kserve_has_rolled_the_edit_out(api: ApiServer) -> None:
    """Right after an edit the InferenceService still reads Ready (KServe copies the old
    ReplicaSet's status); alphagate waits for the predictor Deployment itself."""
    api.put(InferenceServiceTemplate("chat-canary", NS, replicas=2).build())
    api.put(DeploymentTemplate("chat-baseline", NS, args=list(BASE_ARGS), replicas=2).build())
    api.put(canary_cr(target=TARGET))
    api.kubelet = None  # the deployment controller never rolls the new template out
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    source = FakeSource(api, lambda s: 0.2, on=lambda s: runs_flag(api))  # would roll back
    rec = _reconciler(api, kube, clock, source)
    try:
        clock.tick()
        rec.reconcile(NS, "chat")
        assert runs_flag(api)
        conditions = {c["type"]: c["status"] for c in isvc(api)["status"]["conditions"]}
        assert conditions["Ready"] == "True"  # stale, as on a real cluster
        for _ in range(4):
            clock.tick()
            assert rec.reconcile(NS, "chat").evaluation.action.value == "hold"
        assert runs_flag(api)  # bad alpha, but nothing from a rollout in progress is judged
    finally:
        kube.close()


def test_serverless_mode_is_refused_with_a_reason(api: ApiServer) -> None:
    api.put(InferenceServiceTemplate("chat-canary", NS, mode="Serverless").build())
    api.put(DeploymentTemplate("chat-baseline", NS).build())
    api.put(canary_cr(target=TARGET))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    rec = _reconciler(api, kube, clock, FakeSource(api, lambda s: 0.7, on=lambda s: False))
    try:
        clock.tick()
        rec.reconcile(NS, "chat")
    finally:
        kube.close()
    evs = [(e["reason"], e["message"]) for e in api.objects("events", NS, group="")]
    assert any(r == "ArgsUneditable" and "serverless mode" in m for r, m in evs), evs
    cond = {c.type: c for c in parse_status(api.get("speculativecanaries", NS, "chat")).conditions}
    assert cond["SpecValid"].status == "False"
    assert api.requests_matching(method="PATCH", resource=ISVC) == []
    assert api.objects("deployments", NS, group="apps") == [
        api.get("deployments", NS, "chat-baseline", group="apps")
    ]  # nothing rendered: Knative is not played


def test_the_deployment_kserve_renders_is_refused_as_a_target(api: ApiServer) -> None:
    """KServe puts back any edit of its predictor Deployment, alphagate's annotations too, so a
    canary pointed at it would flip and be undone every interval: refused, nothing patched."""
    api.rbac = Rbac.allow_all()
    api.put(InferenceServiceTemplate("chat-canary", NS).build())
    api.put(DeploymentTemplate("chat-baseline", NS).build())
    api.put(canary_cr(target={"name": PREDICTOR, "container": "kserve-container"}))
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()
    rec = _reconciler(api, kube, clock, FakeSource(api, lambda s: 0.7, on=lambda s: False))
    try:
        clock.tick()
        rec.reconcile(NS, "chat")
    finally:
        kube.close()
    evs = [(e["reason"], e["message"]) for e in api.objects("events", NS, group="")]
    assert any(
        r == "ArgsUneditable" and "rendered by InferenceService chat-canary" in m for r, m in evs
    ), evs
    assert api.requests_matching(method="PATCH", resource="deployments") == []


def test_the_stand_in_puts_back_a_direct_edit_of_the_deployment(api: ApiServer) -> None:
    """What makes the refusal above necessary: KServe renders its Deployment back at once."""
    api.put(InferenceServiceTemplate("chat-canary", NS).build())
    dep = api.get("deployments", NS, PREDICTOR, group="apps")
    dep["spec"]["template"]["spec"]["containers"][0]["args"].append("--speculative-config={}")
    dep["metadata"]["annotations"]["alphagate.io/speculation"] = "on"
    api.put(dep)
    after = api.get("deployments", NS, PREDICTOR, group="apps")
    assert argsmod.read(after["spec"]["template"]["spec"]["containers"][0]["args"]) is None
    assert "alphagate.io/speculation" not in after["metadata"]["annotations"]


def _edits_args(ops: Any) -> bool:
    return any(str(op.get("path", "")).endswith("/args") for op in ops or [])


def test_the_shipped_kserve_policy_flips_its_inference_service(api: ApiServer) -> None:
    """policies/kserve-hf-vllm.yaml as shipped: its canary InferenceService is probed, and
    KServe renders the flag into the predictor's pods."""
    path = Path(__file__).resolve().parents[2] / "policies" / "kserve-hf-vllm.yaml"
    policy = yaml.safe_load(path.read_text())
    for name in ("llama-chat-canary", "llama-chat-baseline"):
        api.put(InferenceServiceTemplate(name, NS, replicas=2).build())
    api.put(policy)
    kube = Kube.from_configuration(api.configuration())
    clock = Clock()

    def on(slice_name: str) -> bool:
        dep = api.get("deployments", NS, "llama-chat-canary-predictor", group="apps")
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        return argsmod.read(c["args"]) is not None

    source = FakeSource(api, lambda s: 0.7, on=on)
    rec = _reconciler(api, kube, clock, source)
    try:
        clock.tick()
        out = rec.reconcile(NS, policy["metadata"]["name"])
    finally:
        kube.close()
    assert out.evaluation.action.value == "enable"
    assert on("chat")
    canary = api.get(ISVC, NS, "llama-chat-canary", group=GROUP)
    assert (
        argsmod.read(canary["spec"]["predictor"]["model"]["args"])
        == policy["spec"]["speculativeConfig"]
    )
    assert api.requests_matching(resource="deployments", method="PATCH") == []
