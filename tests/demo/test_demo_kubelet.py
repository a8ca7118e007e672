"""The sandbox kubelet runner against the API double, with simulated pods on a hand-held clock.

Everything the controller relies on is checked through the real `kubernetes` client and the
real actuator: pods appear with labels, IP and port; a patched template restarts the pods with
the new args; rollout status says complete only once the new pods are ready; a deleted pod is
replaced; a dead container restarts; a container that cannot start says why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from alphagate.config import DeploymentRef
from alphagate.core.model import Memory
from alphagate.kube.actuator import Actuator
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate
from alphagate_lab.sandbox.kubelet import HASH_LABEL, KubeletRunner
from alphagate_lab.sandbox.pod_objects import PORT_ANNOTATION
from alphagate_lab.sandbox.pod_runtime import PodRuntime, SimRuntime
from alphagate_lab.sim import Fleet, SimServer, parse_scenario

NS = "demo"
LOAD = 10.0
EAGLE = {"method": "eagle3", "model": "x/EAGLE3-head", "num_speculative_tokens": 5}
SCENARIO = f"""
name: kubelet-test
duration: 1h
slices: {{chat: {{alpha: 0.7}}}}
pools:
  - {{name: chat-canary, role: canary, slice: chat, replicas: 1, load_time: {LOAD}s}}
  - {{name: chat-baseline, role: baseline, slice: chat, replicas: 2, load_time: {LOAD}s}}
"""


class HandClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Sandbox:
    """API double + simulated pods (time moves only when told) + the runner, synced by hand."""

    def __init__(self) -> None:
        self.clock = HandClock()
        self.fleet = Fleet(parse_scenario(SCENARIO), create_pools=False)
        self.sim = SimServer(self.fleet, clock=self.clock)
        self.sim.start()
        self.runtime = SimRuntime(self.sim)
        self.api = ApiServer(kubelet=None).start()
        self.runner = KubeletRunner(self.api, self.runtime, namespace=NS)
        self.api.kubelet = self.runner.hook
        self.api_client = client.ApiClient(self.api.configuration())
        self.core = client.CoreV1Api(self.api_client)
        self.actuator = Actuator(self.api_client)

    def close(self) -> None:
        self.runner.stop()
        self.api_client.close()
        self.api.stop()
        self.sim.close()

    def deploy(self, name: str, role: str, *, replicas: int = 1, strategy: str = "Recreate",
               args: list[str] | None = None) -> None:  # fmt: skip
        dep = DeploymentTemplate(
            name, NS, args=args or ["--model", "m"], replicas=replicas,
            labels={"role": role, "slice": "chat"},
        ).build()  # fmt: skip
        dep["spec"]["strategy"] = {"type": strategy}
        if strategy == "RollingUpdate":
            dep["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 1, "maxUnavailable": 0}
        self.api.put(dep)

    def advance(self, seconds: float) -> None:
        self.clock.t += seconds
        self.sim.sync()
        self.runner.sync()

    def status(self, name: str) -> dict[str, Any]:
        dep = self.api.get("deployments", NS, name, group="apps")
        return dict(dep.get("status") or {})

    def pods(self, deployment: str) -> list[Any]:
        return [
            p
            for p in self.core.list_namespaced_pod(NS).items
            if p.metadata.labels.get("app") == deployment
        ]

    def complete(self, name: str) -> bool:
        return self.actuator.read(NS, DeploymentRef(name=name)).rollout_complete


@pytest.fixture
def box() -> Iterator[Sandbox]:
    sandbox = Sandbox()
    try:
        yield sandbox
    finally:
        sandbox.close()


def test_sim_runtime_fits_the_runtime_protocol(box: Sandbox) -> None:
    assert isinstance(box.runtime, PodRuntime)


def test_pods_start_loading_then_become_ready_with_ip_port_and_labels(box: Sandbox) -> None:
    box.deploy("chat-baseline", "baseline", replicas=2, strategy="RollingUpdate")
    box.runner.sync()
    pods = box.pods("chat-baseline")
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.pod_ip == "127.0.0.1"
        assert pod.metadata.labels["role"] == "baseline"
        assert pod.metadata.labels["slice"] == "chat"
        assert HASH_LABEL in pod.metadata.labels
        ready = {c.type: c.status for c in pod.status.conditions}["Ready"]
        assert ready == "False"  # the model is loading
        port = int(pod.metadata.annotations[PORT_ANNOTATION])
        assert pod.spec.containers[0].ports[0].container_port == port
        assert port == box.sim.ports[pod.metadata.name]
    assert not box.complete("chat-baseline")
    assert box.status("chat-baseline")["readyReplicas"] == 0

    box.advance(LOAD + 1)
    for pod in box.pods("chat-baseline"):
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
        port = pod.metadata.annotations[PORT_ANNOTATION]
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert f'pod="{pod.metadata.name}"' not in page  # vLLM's page has no pod label
        assert "vllm:generation_tokens_total" in page
    assert box.complete("chat-baseline")
    status = box.status("chat-baseline")
    assert status["readyReplicas"] == status["availableReplicas"] == 2


def test_template_change_restarts_pods_with_new_args_and_completes_only_when_ready(
    box: Sandbox,
) -> None:
    box.deploy("chat-canary", "canary")
    box.runner.sync()
    box.advance(LOAD + 1)
    assert box.complete("chat-canary")
    (old,) = box.pods("chat-canary")
    assert box.fleet.pods[old.metadata.name].k == 0

    # The real actuator turns speculation on: a patch of the container args.
    result = box.actuator.apply(
        NS, DeploymentRef(name="chat-canary"), speculative_config=EAGLE, state="Probing",
        memory=Memory(), now=time.time(),
    )  # fmt: skip
    assert result.args_changed
    box.runner.sync()
    status = box.status("chat-canary")
    assert status["observedGeneration"] == 2
    assert status["readyReplicas"] == 0
    assert not box.complete("chat-canary")
    rollout = box.actuator.rollout(box.actuator.read(NS, DeploymentRef(name="chat-canary")),
                                   now=time.time())  # fmt: skip
    assert rollout.in_progress

    (new,) = box.pods("chat-canary")
    assert new.metadata.name != old.metadata.name
    assert old.metadata.name not in box.fleet.pods  # the old process is gone
    args = new.spec.containers[0].args
    assert json.loads(args[args.index("--speculative-config") + 1]) == EAGLE
    assert box.fleet.pods[new.metadata.name].k == 5

    box.advance(LOAD / 2)
    assert not box.complete("chat-canary")  # still loading: not complete
    box.advance(LOAD)
    assert box.complete("chat-canary")
    dep = box.actuator.read(NS, DeploymentRef(name="chat-canary"))
    assert dep.speculation_on
    assert dep.completed_at is not None  # Progressing=NewReplicaSetAvailable has a time
    port = box.pods("chat-canary")[0].metadata.annotations[PORT_ANNOTATION]
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert "vllm:spec_decode_num_drafts_total" in page


def test_rolling_update_keeps_the_old_pod_until_the_new_one_is_ready(box: Sandbox) -> None:
    box.deploy("chat-baseline", "baseline", strategy="RollingUpdate")
    box.runner.sync()
    box.advance(LOAD + 1)
    (old,) = box.pods("chat-baseline")
    box.actuator.apply(
        NS, DeploymentRef(name="chat-baseline"), speculative_config=EAGLE, state="Probing",
        memory=None, now=time.time(),
    )  # fmt: skip
    box.runner.sync()
    names = {p.metadata.name for p in box.pods("chat-baseline")}
    assert old.metadata.name in names and len(names) == 2  # surge: old serves meanwhile
    status = box.status("chat-baseline")
    assert status["replicas"] == 2 and status["updatedReplicas"] == 1
    assert status["readyReplicas"] == 1
    progressing = {c["type"]: c for c in status["conditions"]}["Progressing"]
    assert progressing["reason"] == "ReplicaSetUpdated"
    box.advance(LOAD + 1)
    (new,) = box.pods("chat-baseline")
    assert new.metadata.name != old.metadata.name
    status = box.status("chat-baseline")
    assert status["replicas"] == status["updatedReplicas"] == status["readyReplicas"] == 1
    progressing = {c["type"]: c for c in status["conditions"]}["Progressing"]
    assert progressing["reason"] == "NewReplicaSetAvailable"


def test_a_deleted_pod_is_stopped_and_replaced(box: Sandbox) -> None:
    box.deploy("chat-canary", "canary")
    box.runner.sync()
    box.advance(LOAD + 1)
    (pod,) = box.pods("chat-canary")
    port = int(pod.metadata.annotations[PORT_ANNOTATION])
    # As `kubectl delete pod` would (the double answers with a Status, so skip decoding).
    box.core.delete_namespaced_pod(pod.metadata.name, NS, _preload_content=False)
    box.runner.sync()
    assert pod.metadata.name not in box.fleet.pods
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    (replacement,) = box.pods("chat-canary")
    assert replacement.metadata.name != pod.metadata.name
    assert box.status("chat-canary")["readyReplicas"] == 0
    assert not box.complete("chat-canary")
    box.advance(LOAD + 1)
    assert box.complete("chat-canary")
    kinds = [e.kind for e in box.runner.events()]
    assert "deleted" in kinds


def test_a_dead_container_is_restarted_and_counted(box: Sandbox) -> None:
    box.deploy("chat-canary", "canary")
    box.runner.sync()
    box.advance(LOAD + 1)
    (pod,) = box.pods("chat-canary")
    box.runtime.kill(pod.metadata.name)
    box.runner.sync()
    (same,) = box.pods("chat-canary")
    assert same.metadata.name == pod.metadata.name
    assert same.status.container_statuses[0].restart_count == 1
    assert {c.type: c.status for c in same.status.conditions}["Ready"] == "False"
    box.advance(LOAD + 1)
    assert box.complete("chat-canary")


def test_a_container_that_cannot_start_says_why_and_is_never_ready(box: Sandbox) -> None:
    box.deploy("chat-canary", "canary", args=["--model", "m", "--speculative-config", "{bad"])
    box.runner.sync()
    box.advance(LOAD + 1)
    (pod,) = box.pods("chat-canary")
    waiting = pod.status.container_statuses[0].state.waiting
    assert waiting.reason == "CrashLoopBackOff"
    assert "--speculative-config" in waiting.message and "invalid JSON" in waiting.message
    assert pod.status.pod_ip == ""
    assert box.status("chat-canary")["readyReplicas"] == 0  # (the actuator refuses these args)
    assert any(e.kind == "failed" for e in box.runner.events())


def test_scaling_down_and_deleting_the_deployment_stop_pods(box: Sandbox) -> None:
    box.deploy("chat-baseline", "baseline", replicas=2, strategy="RollingUpdate")
    box.runner.sync()
    dep = box.api.get("deployments", NS, "chat-baseline", group="apps")
    dep["spec"]["replicas"] = 1
    box.api.put(dep)
    box.runner.sync()
    assert len(box.pods("chat-baseline")) == 1
    assert len(box.fleet.pods) == 1
    box.api.delete("deployments", NS, "chat-baseline", group="apps")
    box.runner.sync()
    assert box.pods("chat-baseline") == []
    assert box.fleet.pods == {}


def test_the_runner_thread_follows_a_patch_and_stops_cleanly() -> None:
    box = Sandbox()
    try:
        box.clock.t = 0.0
        box.runner.start()
        box.deploy("chat-canary", "canary")
        deadline = time.monotonic() + 10
        while not box.pods("chat-canary") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert box.pods("chat-canary")
    finally:
        box.close()
    assert box.runner._thread is None
    assert box.fleet.pods == {}  # stop() stopped every pod it started
