"""The actuator against the API server double: patch, rollout, annotations, 409s, 403, 500."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from alphagate.config import DeploymentRef
from alphagate.core.model import Memory, State
from alphagate.errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from alphagate.kube import args as argsmod
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder, ObjectRef
from alphagate.kube.refusals import RejectedConfigError
from alphagate.kube.workload import ANN_LAST_FLIP, ANN_MEMORY, ANN_STATE
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate, RolloutCompleter
from alphagate_lab.testing.rollout import wait_for_rollout

CFG = {"method": "ngram", "num_speculative_tokens": 4}
BASE_ARGS = ["--model", "/m", "--port", "8000"]
REF = DeploymentRef(name="canary", container="vllm")
OWNER = ObjectRef(namespace="ns", name="chat")
NOW = 1_800_000_000.0


@pytest.fixture
def deployment(apiserver: ApiServer) -> dict[str, Any]:
    tmpl = DeploymentTemplate("canary", "ns", args=list(BASE_ARGS), replicas=2)
    obj = tmpl.build()
    obj["spec"]["template"]["spec"]["containers"].insert(
        0, {"name": "sidecar", "image": "envoy", "args": ["--speculative-config-is-not-mine"]}
    )
    return apiserver.put(obj)


def actuator(kube: Kube, **kw: Any) -> Actuator:
    return Actuator(kube.api_client, wait_initial=0.001, wait_max=0.01, **kw)


def containers(apiserver: ApiServer) -> dict[str, list[str]]:
    dep = apiserver.get("deployments", "ns", "canary", group="apps")
    return {c["name"]: c.get("args", []) for c in dep["spec"]["template"]["spec"]["containers"]}


def test_enable_patches_args_and_annotations_in_one_request(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    act = actuator(kube)
    memory = Memory(state=State.PROBING, since=NOW, last_flip_at=NOW)
    rv = apiserver.get("deployments", "ns", "canary", group="apps")["metadata"]["resourceVersion"]
    apiserver.clear_requests()
    result = act.apply(
        "ns",
        REF,
        speculative_config=CFG,
        state=State.PROBING,
        memory=memory,
        now=NOW,
        owner="ns/chat",
    )
    patches = apiserver.requests_matching(method="PATCH", resource="deployments")
    assert len(patches) == 1
    body = patches[0].body
    assert body["metadata"]["resourceVersion"] == rv
    assert body["metadata"]["annotations"][ANN_STATE] == "Probing"
    assert result.patched and result.args_changed
    args = containers(apiserver)
    assert args["vllm"] == [*BASE_ARGS, "--speculative-config", argsmod.render(CFG)]
    assert args["sidecar"] == ["--speculative-config-is-not-mine"]  # other container untouched
    dep = act.read("ns", REF)
    assert dep.speculation_on and dep.speculative_config == CFG
    assert dep.state == "Probing"
    assert dep.memory == memory.model_copy(update={"record": 1})  # the record's first write
    assert dep.record == result.record == 1
    assert dep.last_flip == NOW
    assert dep.generation == 2


def test_apply_is_idempotent(apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]) -> None:
    act = actuator(kube)
    act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    apiserver.clear_requests()
    again = act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW + 60)
    assert not again.patched and not again.args_changed
    assert apiserver.requests_matching(method="PATCH") == []
    # a state change alone is recorded (annotations only), no new rollout
    gen = again.deployment.generation
    changed = act.apply(
        "ns", REF, speculative_config=CFG, state="Probing", memory=None, now=NOW + 90
    )
    assert changed.patched and not changed.args_changed
    assert changed.deployment.generation == gen
    assert changed.deployment.last_flip == NOW  # not a flip


def test_disable_removes_the_flag_and_rollout_is_reported(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    apiserver.kubelet = RolloutCompleter(delay_seconds=0.3)
    act = actuator(kube)
    act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    dep = act.read("ns", REF)
    rollout = act.rollout(dep, now=NOW)
    assert rollout.in_progress and rollout.speculation_on
    done = wait_for_rollout(act, "ns", REF, timeout=10)
    rollout = act.rollout(done, now=NOW + 5)
    assert not rollout.in_progress and rollout.completed_at is not None
    result = act.apply(
        "ns", REF, speculative_config=None, state="RolledBack", memory=None, now=NOW + 100
    )
    assert result.args_changed
    assert containers(apiserver)["vllm"] == BASE_ARGS
    assert act.rollout(result.deployment, now=NOW + 100).in_progress
    assert not act.rollout(result.deployment, now=NOW + 100).speculation_on
    assert act.read("ns", REF).last_flip == NOW + 100


def test_rollout_that_never_completes_times_out_clearly(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    apiserver.kubelet = None
    act = actuator(kube)
    act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    with pytest.raises(KubeError, match="rollout not complete after"):
        wait_for_rollout(act, "ns", REF, timeout=0.2, poll=0.05)


def test_dry_run_decides_but_never_writes(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    apiserver.clear_requests()
    result = actuator(kube).apply(
        "ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW, dry_run=True
    )
    assert result.dry_run and result.args_changed and not result.patched
    assert all(r.method == "GET" for r in apiserver.requests)
    assert containers(apiserver)["vllm"] == BASE_ARGS


def test_one_conflict_then_success(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    fault = apiserver.faults.add("PATCH", r"/deployments/canary$", 409, times=1, reason="Conflict")
    result = actuator(kube).apply(
        "ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW
    )
    assert fault.hits == 1
    assert result.patched and result.attempts == 2
    assert argsmod.read(containers(apiserver)["vllm"]) == CFG
    # the retry re-read the Deployment before patching again
    methods = [r.method for r in apiserver.requests_matching(name="canary")][-4:]
    assert methods == ["GET", "PATCH", "GET", "PATCH"]


def test_real_stale_write_is_retried_on_fresh_state(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    """Someone edits the Deployment between our read and our patch: the patch carries the old
    resourceVersion, gets a real 409, and the retry keeps the other writer's change."""
    act = actuator(kube)
    original_read = act.read
    calls = {"n": 0}

    def racing_read(namespace: str, ref: DeploymentRef) -> Any:
        dep = original_read(namespace, ref)
        calls["n"] += 1
        if calls["n"] == 1:
            apiserver.put(
                apiserver.get("deployments", "ns", "canary", group="apps")
                | {"metadata": {**deployment["metadata"], "labels": {"edited": "by-human"}}}
            )
        return dep

    act.read = racing_read  # type: ignore[method-assign]
    result = act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    assert result.attempts == 2
    assert [r.status for r in apiserver.requests_matching(method="PATCH")] == [409, 200]
    final = apiserver.get("deployments", "ns", "canary", group="apps")
    assert final["metadata"]["labels"] == {"edited": "by-human"}
    assert argsmod.read(final["spec"]["template"]["spec"]["containers"][1]["args"]) == CFG


def test_conflict_storm_ends_in_conflict_error_and_event(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    events = EventRecorder(kube.api_client)
    apiserver.faults.add("PATCH", r"/deployments/canary$", 409, times=None, reason="Conflict")
    act = actuator(kube, events=events, max_attempts=4)
    with pytest.raises(ConflictError, match="still conflicting after 4 attempts") as err:
        act.apply(
            "ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW, involved=OWNER
        )
    assert err.value.status == 409
    assert len(apiserver.requests_matching(method="PATCH")) == 4
    evs = apiserver.objects("events", "ns", group="")
    assert [(e["type"], e["reason"]) for e in evs] == [("Warning", "ConflictRetriesExhausted")]
    assert evs[0]["involvedObject"]["name"] == "chat"
    assert argsmod.read(containers(apiserver)["vllm"]) is None


@pytest.mark.parametrize(
    ("status", "error", "event_reason"),
    [
        (403, ForbiddenError, "Forbidden"),
        (500, KubeError, "PatchFailed"),
        (422, KubeError, "PatchFailed"),
    ],
)
def test_patch_failures_are_clear_errors_with_an_event(
    apiserver: ApiServer,
    kube: Kube,
    deployment: dict[str, Any],
    status: int,
    error: type[KubeError],
    event_reason: str,
) -> None:
    events = EventRecorder(kube.api_client)
    if status == 403:
        apiserver.rbac.deny("patch", "apps", "deployments")
    else:
        apiserver.faults.add(
            "PATCH", r"/deployments/canary$", status, times=None, message=f"boom {status}"
        )
    with pytest.raises(error) as err:
        actuator(kube, events=events).apply(
            "ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW, involved=OWNER
        )
    assert err.value.status == status
    assert "patch Deployment ns/canary" in str(err.value)
    assert len(apiserver.requests_matching(method="PATCH")) == 1  # not retried
    reasons = [e["reason"] for e in apiserver.objects("events", "ns", group="")]
    assert reasons == [event_reason]


def test_missing_deployment_and_container(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    act = actuator(kube)
    with pytest.raises(NotFoundError, match="read Deployment ns/nope"):
        act.apply(
            "ns",
            DeploymentRef(name="nope"),
            speculative_config=CFG,
            state="On",
            memory=None,
            now=NOW,
        )
    with pytest.raises(argsmod.ArgsError, match="has no container 'vlm'"):
        act.apply(
            "ns",
            DeploymentRef(name="canary", container="vlm"),
            speculative_config=CFG,
            state="On",
            memory=None,
            now=NOW,
        )


def test_flag_in_command_is_edited_there(apiserver: ApiServer, kube: Kube) -> None:
    obj = DeploymentTemplate("canary", "ns", args=[]).build()
    c = obj["spec"]["template"]["spec"]["containers"][0]
    c.pop("args")
    c["command"] = ["vllm", "serve", "/m", "-sc", json.dumps(CFG)]
    apiserver.put(obj)
    act = actuator(kube)
    assert act.read("ns", REF).speculative_config == CFG
    act.apply("ns", REF, speculative_config=None, state="RolledBack", memory=None, now=NOW)
    dep = apiserver.get("deployments", "ns", "canary", group="apps")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm", "serve", "/m"]
    assert "args" not in container


def test_memory_annotation_is_trimmed_and_readable(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    from alphagate.core.model import Transition

    hist = tuple(
        Transition(from_state=State.OFF, to_state=State.PROBING, reason=f"r{i}", at=NOW + i)
        for i in range(12)
    )
    memory = Memory(state=State.PROBING, history=hist)
    actuator(kube).apply("ns", REF, speculative_config=CFG, state="Probing", memory=memory, now=NOW)
    raw = apiserver.get("deployments", "ns", "canary", group="apps")["metadata"]["annotations"][
        ANN_MEMORY
    ]
    back = Memory.model_validate_json(raw)
    assert [t.reason for t in back.history] == ["r7", "r8", "r9", "r10", "r11"]
    assert (
        ANN_LAST_FLIP
        in apiserver.get("deployments", "ns", "canary", group="apps")["metadata"]["annotations"]
    )


def test_a_config_the_images_vllm_refuses_never_reaches_the_pod(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    """vLLM 0.13 (V1) has no draft-model speculation: the patch is refused with vLLM's words."""
    obj = apiserver.get("deployments", "ns", "canary", group="apps")
    vllm_c = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    vllm_c["image"] = "vllm/vllm-openai:v0.13.0"
    apiserver.put(obj)
    events = EventRecorder(kube.api_client, component="alphagate")
    act = actuator(kube, events=events)
    draft = {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 4}
    apiserver.clear_requests()
    with pytest.raises(RejectedConfigError, match="not supported yet") as err:
        act.apply("ns", REF, speculative_config=draft, state="Probing", memory=None, now=NOW,
                  involved=OWNER)  # fmt: skip
    assert "v0.13.0" in str(err.value)
    assert apiserver.requests_matching(method="PATCH", resource="deployments") == []
    assert "--speculative-config" not in containers(apiserver)["vllm"]
    # the same config on a vLLM that has draft models goes through
    vllm_c["image"] = "vllm/vllm-openai:v0.32.0"
    apiserver.put(
        apiserver.get("deployments", "ns", "canary", group="apps") | {"spec": obj["spec"]}
    )
    ok = act.apply("ns", REF, speculative_config=draft, state="Probing", memory=None, now=NOW)
    assert ok.patched and ok.deployment.image.endswith("v0.32.0")


@pytest.mark.parametrize("body", [b"[1, 2]", b"{not json", b""])
def test_a_deployment_answer_that_is_not_a_json_object_is_a_typed_error(body: bytes) -> None:
    """The Deployment is read as the API server's JSON (no model in between): an answer that
    is no JSON object is a KubeError naming the read, never a crash or an empty Deployment."""

    class Answers(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        act = Actuator(client.ApiClient(config), wait_initial=0.001, wait_max=0.01)
        with pytest.raises(KubeError, match="read Deployment ns/canary"):
            act.read("ns", REF)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
