"""The whole loop on the real simulator: simulated vLLM pods serving /metrics over HTTP, pods
and Deployments in the API server double, the real pod-scrape source discovering them through
the kubernetes client, the core, the actuator, and a small kubelet that restarts simulated pods
when the controller patches their Deployment. Alpha falls from 0.7 to 0.4; speculation goes."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
from kube_support import NS, canary_cr, speculating

from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario, SliceSpec
from alphagate_lab.sim.server import SimServer

if TYPE_CHECKING:
    from conftest import WaitFor


pytestmark = pytest.mark.slow

SPEED = 20.0  # simulated seconds per wall second

SCENARIO = {
    "name": "alpha-falls",
    "seed": 3,
    "traffic": {"rate": 30},
    "slices": {"chat": {"share": 1.0, "alpha": 0.7, "output_tokens": 128}},
    "pools": [
        {
            "name": "chat-baseline",
            "namespace": NS,
            "role": "baseline",
            "slice": "chat",
            "replicas": 1,
            "load_time": 4,
        },
        {
            "name": "chat-canary",
            "namespace": NS,
            "role": "canary",
            "slice": "chat",
            "replicas": 2,
            "load_time": 4,
        },
    ],
}


class SimKubelet:
    """Pods of the API double backed by simulated pods; a new pod template restarts them."""

    def __init__(self, api: ApiServer, sim: SimServer) -> None:
        self.api, self.sim = api, sim
        for name, pod in sim.fleet.pods.items():
            self._put_pod(name, pod.labels(), ready=True)

    def _put_pod(self, name: str, labels: dict[str, str], *, ready: bool) -> None:
        self.api.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": labels,
                    "annotations": {"prometheus.io/port": str(self.sim.ports[name])},
                },
                "spec": {"containers": [{"name": "vllm", "image": "sim"}]},
                "status": {
                    "phase": "Running",
                    "podIP": "127.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
        )

    def __call__(self, api: ApiServer, deployment: dict[str, Any]) -> None:
        name = deployment["metadata"]["name"]
        gen = deployment["metadata"]["generation"]
        args = deployment["spec"]["template"]["spec"]["containers"][0].get("args") or []
        with self.sim.lock:
            pods = [p for p in self.sim.fleet.pods.values() if p.spec.deployment == name]
        if not pods:
            api.complete_rollout(NS, name, generation=gen)
            return
        for pod in pods:
            if self.sim.apply_args(pod.name, list(args)):
                self._put_pod(pod.name, pod.labels(), ready=False)
        replicas = len(pods)
        api.set_deployment_status(
            NS,
            name,
            {
                "observedGeneration": gen,
                "replicas": replicas,
                "updatedReplicas": 0,
                "readyReplicas": 0,
                "availableReplicas": 0,
            },
        )
        api.call_later(0.05, lambda: self._poll(name, gen, [p.name for p in pods]))

    def _poll(self, name: str, gen: int, pods: list[str]) -> None:
        self.sim.sync()
        with self.sim.lock:
            ready = all(self.sim.fleet.pods[p].ready for p in pods)
        if not ready:
            self.api.call_later(0.05, lambda: self._poll(name, gen, pods))
            return
        for p in pods:
            with self.sim.lock:
                labels = self.sim.fleet.pods[p].labels()
            self._put_pod(p, labels, ready=True)
        self.api.complete_rollout(NS, name, generation=gen)


def test_simulated_alpha_falls_and_the_real_loop_rolls_back(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    fleet = Fleet(Scenario.model_validate(SCENARIO), tick=0.5)
    with SimServer(fleet, speed=SPEED) as sim:
        apiserver.kubelet = SimKubelet(apiserver, sim)
        for dep in ("chat-canary", "chat-baseline"):
            apiserver.put(DeploymentTemplate(dep, NS, args=[], replicas=2).build())
        timing = {
            "intervalSeconds": 1.0,  # compressed: the test runs minutes at most
            "windowSeconds": 3.0,  # compressed with the interval
            "warmupSeconds": 1.0,  # compressed with the interval
            "minDwellSeconds": 0,  # flips follow the verdicts at once
            "probeSeconds": 60,  # compressed (900 shipped)
            "maxFlipsPerHour": 60,  # the flip budget is not under test here
            "rolloutTimeoutSeconds": 30,  # compressed: a sandbox rollout takes seconds
            # compressed (12-24 h in the policies)
            "cooldown": {"initialSeconds": 300, "factor": 2, "maxSeconds": 600},
        }
        cr = canary_cr(
            timing=timing,
            slices=[
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"slice": "chat", "role": "canary"}},
                    "baseline": {"matchLabels": {"slice": "chat", "role": "baseline"}},
                }
            ],
            acceptance={"minDrafts": 200, "consecutiveWindows": 2},  # = the defaults
            latency={"enabled": False},
        )
        apiserver.put(cr)
        kube = Kube.from_configuration(apiserver.configuration())
        rec = Reconciler(
            kube, events=EventRecorder(kube.api_client), namespace=NS, watch_timeout_seconds=2
        )
        stop = threading.Event()
        loop = threading.Thread(target=rec.loop.run, args=(stop,), daemon=True)
        loop.start()

        def status() -> Any:
            return parse_status(apiserver.get("speculativecanaries", NS, "chat"))

        try:
            wait_for(lambda: status().state == "On", 40, "speculation confirmed On")
            st = status()
            assert st.combined_alpha == pytest.approx(0.7, abs=0.08)
            assert st.slices[0].drafts and st.slices[0].drafts >= 200
            dep = apiserver.get("deployments", NS, "chat-canary", group="apps")
            args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
            assert argsmod.read(args) == cr["spec"]["speculativeConfig"]
            with sim.lock:  # every simulated canary pod restarted with the flag
                assert all(
                    p.k == 4 for p in fleet.pods.values() if p.spec.deployment == "chat-canary"
                )

            with sim.lock:  # the traffic changes: drafts stop matching
                fleet.slices["chat"] = SliceSpec.model_validate(
                    {**fleet.slices["chat"].model_dump(), "alpha": 0.4}
                )
            wait_for(lambda: status().state == "RolledBack", 40, "the rollback")
            assert not speculating(apiserver, "chat-canary")
            st = status()
            assert st.last_decision.action == "disable"
            assert "upper bound below disableBelow 0.55" in st.last_decision.why
            assert st.combined_upper is not None and st.combined_upper < 0.55
            reasons = [e["reason"] for e in apiserver.objects("events", NS, group="")]
            assert reasons.count("SpeculationEnabled") == 1
            assert reasons.count("SpeculationDisabled") == 1
            with sim.lock:
                assert all(
                    p.k == 0 for p in fleet.pods.values() if p.spec.deployment == "chat-canary"
                )
            json.dumps(st.dump())  # the status is plain JSON
        finally:
            stop.set()
            rec.loop.wake()
            loop.join(10)
            kube.close()
            apiserver.stop()  # no kubelet timer may outlive the simulated pods
