"""Waiting for a workload's rollout, for tests against the sandbox's kubelet.

The controller never waits (it reads the rollout each evaluation and does not judge data from
it); a test that drives the actuator by hand does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from alphagate.config import WorkloadRef
from alphagate.errors import KubeError
from alphagate.kube.actuator import Actuator
from alphagate.kube.workload import WorkloadState


def wait_for_rollout(
    actuator: Actuator,
    namespace: str,
    ref: WorkloadRef,
    *,
    timeout: float,
    poll: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkloadState:
    """Poll until the rollout completes (bounded by `timeout`); KubeError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        dep = actuator.read(namespace, ref)
        if dep.rollout_complete:
            return dep
        if time.monotonic() >= deadline:
            raise KubeError(
                f"{dep.what}: rollout not complete after {timeout:g} s "
                f"(generation {dep.generation}, observed {dep.observed_generation}, "
                f"updated {dep.updated_replicas}/{dep.replicas}, available "
                f"{dep.available_replicas}/{dep.replicas}"
                + (f", phase {dep.phase}" if dep.phase else "")
                + ("" if dep.promoted else ", not promoted to stable")
                + ")",
                reason="RolloutTimeout",
            )
        sleep(poll)
