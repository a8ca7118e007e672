"""The demo's sandbox, started in order: the API server double seeded with the namespace, the
CRD and the scenario's Deployments; Prometheus, when the source is Prometheus; the simulated
fleet (paused until the controller starts) and the kubelet runner that creates its pods. Each
part is kept as it starts and its stop registered at once, so a start that fails stops what
had started. The controller and the scenario's loop are the engine's (`engine.Demo`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alphagate_lab.sandbox.apiserver import ApiServer
from alphagate_lab.sandbox.demo.feed import ClusterFeed
from alphagate_lab.sandbox.demo.inputs import deployment_objects, fleet_scenario
from alphagate_lab.sandbox.demo.parts import prometheus_for
from alphagate_lab.sandbox.kubelet import KubeletRunner
from alphagate_lab.sandbox.pod_runtime import SimRuntime


class PausedClock:
    """Monotonic time that stands still until `go()`: pods are created and Prometheus
    discovers them before the scenario's first second passes."""

    def __init__(self) -> None:
        self._t0: float | None = None

    def go(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0


@dataclass
class Sandbox:
    """The sandbox's parts, each set as it starts."""

    api: ApiServer | None = None
    prometheus: Any = None
    sim: Any = None
    kubelet: KubeletRunner | None = None
    workdir: Path | None = None

    def start(
        self,
        scenario: Any,
        namespace: str,
        *,
        source_kind: str,
        prometheus_binary: str | None,
        prometheus_timeout: float,
        interval_wall: float,
        metrics_port: int,
        speed: float,
        seed: int | None,
        clock: PausedClock,
        feed: ClusterFeed,
        defer: Callable[[str, Callable[[], None]], None],
        wait: Callable[[Callable[[], bool], float, str], None],
        say: Callable[[str, str], None],
    ) -> dict[str, Any]:
        """Start every part; return the policy's `source` (what the controller reads)."""
        from alphagate.kube.crd import build_crd
        from alphagate_lab.sim import Fleet, SimServer

        self.workdir = Path(tempfile.mkdtemp(prefix="alphagate-demo-"))
        workdir = self.workdir
        defer("workdir", lambda: shutil.rmtree(workdir, ignore_errors=True))

        # 1. the API server double, the namespace, the CRD and the Deployments
        self.api = ApiServer(kubelet=None)
        self.api.start()
        api = self.api
        feed.api = api
        defer("API server", api.stop)
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        api.put(build_crd())
        for dep in deployment_objects(scenario, namespace):
            api.put(dep)

        # 2. Prometheus (its targets file is rewritten by the simulator)
        file_sd: Path | None = None
        if source_kind == "prometheus":
            prom = prometheus_for(
                prometheus_binary,
                interval_wall=interval_wall,
                metrics_port=metrics_port,
                workdir=workdir / "prometheus",  # ours: kept across a chaos restart
            )
            self.prometheus = prom
            defer("Prometheus", prom.close)
            prom.start(timeout=prometheus_timeout)
            file_sd = prom.targets_path
            # The controller is configured with this Prometheus (as an admin would); the policy
            # names it (`default`) and never holds its URL.
            source = {
                "kind": "prometheus",
                "prometheus": {"timeoutSeconds": max(1.0, interval_wall)},
            }
        else:
            source = {"kind": "podScrape", "scrape": {"timeoutSeconds": max(1.0, interval_wall)}}

        # 3. the simulated fleet (paused) and the kubelet runner: pods are created, loading
        fleet = Fleet(fleet_scenario(scenario), seed=seed, create_pools=False)
        self.sim = SimServer(fleet, speed=speed, file_sd=file_sd, clock=clock)
        self.sim.start()
        defer("simulated pods", self.sim.close)
        runtime = SimRuntime(self.sim)
        self.kubelet = KubeletRunner(
            api,
            runtime,
            namespace=namespace,
            seed=seed or 0,
            poll_seconds=min(0.1, max(0.02, interval_wall / 10)),
        )
        api.kubelet = self.kubelet.hook
        kubelet = self.kubelet
        defer("kubelet runner", kubelet.stop)
        kubelet.start()
        pods = sum(p.replicas for p in scenario.pools)
        wait(lambda: len(kubelet.pods()) >= pods, 30.0, f"{pods} pods created")
        if self.prometheus is not None:
            say("demo", f"Prometheus {self.prometheus.url}: waiting until it sees the pods")
            self.prometheus.wait_for(
                'up{job="vllm"}', lambda r: len(r) >= pods, timeout=prometheus_timeout
            )
        return source
