"""How the kubelet double runs a pod's container: the `PodRuntime` protocol and the runtime of
simulated vLLM pods (`SimRuntime`); real vLLM processes plug in the same way (`vllm_runtime`)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from alphagate.errors import SandboxError


@dataclass(frozen=True, slots=True)
class PodLaunch:
    """Everything a runtime needs to start one pod's vLLM container."""

    name: str
    namespace: str
    deployment: str
    labels: Mapping[str, str]
    container: str
    image: str
    args: tuple[str, ...]
    template_hash: str


@runtime_checkable
class PodRuntime(Protocol):
    """Runs pod containers on 127.0.0.1. Implementations: :class:`SimRuntime` here; a real
    vLLM runtime (``alphagate_lab.sandbox.vllm_server.VllmServer`` per pod) fits the same shape."""

    def start(self, pod: PodLaunch) -> int:
        """Start the container (returns at once, loading may go on); return its port.
        Raise AlphagateError when it cannot start (bad args ...)."""
        ...

    def ready(self, name: str) -> bool:
        """Would a readiness probe pass now (the model is loaded and serving)?"""
        ...

    def alive(self, name: str) -> bool:
        """Is the container still running (False: it died or was killed)?"""
        ...

    def stop(self, name: str) -> None:
        """Stop the container; unknown names are ignored."""
        ...

    def close(self) -> None:
        """Stop everything this runtime started."""
        ...


# ---------------------------------------------------------------- the simulator runtime


class SimRuntime:
    """Pods as simulated vLLM engines served by a :class:`~alphagate_lab.sim.SimServer`.

    ``role`` and ``slice`` come from the pod labels; per-Deployment settings (load time,
    latency scale, alpha offset, decode model) from the scenario's pool of the same name.
    """

    def __init__(self, server: Any, *, label_role: str = "role", label_slice: str = "slice"):
        self.server = server
        self.label_role = label_role
        self.label_slice = label_slice
        self._pools = {p.name: p for p in server.fleet.scenario.pools}

    def start(self, pod: PodLaunch) -> int:
        from alphagate_lab.sim import PodSpec

        role = pod.labels.get(self.label_role)
        slice_name = pod.labels.get(self.label_slice)
        if role not in ("canary", "baseline") or not slice_name:
            raise SandboxError(
                f"pod {pod.namespace}/{pod.name}: the simulator needs labels "
                f"{self.label_role}=canary|baseline and {self.label_slice}=<slice>, got "
                f"{dict(pod.labels)}"
            )
        scenario = self.server.fleet.scenario
        pool = self._pools.get(pod.deployment)
        decode = (pool.decode if pool is not None else None) or scenario.decode
        spec = PodSpec(
            name=pod.name,
            deployment=pod.deployment,
            role="canary" if role == "canary" else "baseline",
            slice=slice_name,
            namespace=pod.namespace,
            args=tuple(pod.args),
            model_name=scenario.model_name,
            load_time=pool.load_time if pool is not None else 30.0,
            latency_scale=pool.latency_scale if pool is not None else 1.0,
            alpha_offset=pool.alpha_offset if pool is not None else 0.0,
            params=decode.params(),
        )
        return int(self.server.add_pod(spec))

    def ready(self, name: str) -> bool:
        try:
            return bool(self.server.ready(name))
        except KeyError:
            return False

    def alive(self, name: str) -> bool:
        with self.server.lock:
            return name in self.server.fleet.pods

    def stop(self, name: str) -> None:
        with contextlib.suppress(KeyError):
            self.server.remove_pod(name)

    def kill(self, name: str) -> None:
        """Make the container die (for chaos tests): the runner sees it gone and restarts it."""
        self.stop(name)

    def close(self) -> None:
        with self.server.lock:
            names = list(self.server.fleet.pods)
        for name in names:
            self.stop(name)
