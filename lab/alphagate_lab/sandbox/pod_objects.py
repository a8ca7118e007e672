"""The Pod objects the kubelet double writes: one pod it owns, and that pod as the API shows it
(metadata, spec, and a status shaped like kubelet's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from alphagate_lab.sandbox.apiserver import now_rfc3339
from alphagate_lab.sandbox.pod_runtime import PodLaunch

HOST: Final = "127.0.0.1"
PORT_ANNOTATION: Final = "prometheus.io/port"
MANAGED_BY: Final = "alphagate.io/kubelet"


@dataclass(slots=True)
class OwnedPod:
    """One pod the runner owns."""

    name: str
    namespace: str
    deployment: str
    template_hash: str
    launch: PodLaunch
    port: int | None = None
    ready: bool = False
    restarts: int = 0
    started: str = ""
    error: str = ""  # why the container is not running (start failed)
    retry_at: float = 0.0
    backoff: float = 1.0
    uid: str = ""


def pod_object(pod: OwnedPod, owner: dict[str, Any] | None, node_name: str) -> dict[str, Any]:
    """A new Pod object for `pod` (spec and metadata; the status is `pod_status`)."""
    owner_refs = []
    if owner is not None:
        owner_refs = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"].get("uid", ""),
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": dict(pod.launch.labels),
            "annotations": {MANAGED_BY: "true"},
            "ownerReferences": owner_refs,
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": pod.launch.container,
                    "image": pod.launch.image,
                    "args": list(pod.launch.args),
                }
            ],
        },
    }


def pod_status(pod: OwnedPod, previous: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod's status as kubelet reports it; a condition's time moves only when it flips."""
    stamp = now_rfc3339()
    ready = "True" if pod.ready else "False"
    conditions = []
    for ctype, status in (
        ("Initialized", "True"),
        ("ContainersReady", ready),
        ("Ready", ready),
        ("PodScheduled", "True"),
    ):
        before = next((c for c in previous.get("conditions") or [] if c.get("type") == ctype), None)
        since = before["lastTransitionTime"] if before and before.get("status") == status else stamp
        conditions.append({"type": ctype, "status": status, "lastTransitionTime": since})
    if pod.error:
        state: dict[str, Any] = {
            "waiting": {"reason": "CrashLoopBackOff", "message": pod.error[:500]}
        }
        phase = "Pending" if pod.restarts == 0 else "Running"
    else:
        state = {"running": {"startedAt": pod.started or stamp}}
        phase = "Running"
    return {
        "phase": phase,
        "hostIP": HOST,
        "podIP": HOST if pod.port is not None else "",
        "podIPs": [{"ip": HOST}] if pod.port is not None else [],
        "startTime": previous.get("startTime") or stamp,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": pod.launch.container,
                "image": pod.launch.image,
                "imageID": f"sandbox://{pod.launch.image}",
                "containerID": f"sandbox://{pod.name}/{pod.restarts}",
                "ready": pod.ready,
                "started": pod.port is not None,
                "restartCount": pod.restarts,
                "state": state,
            }
        ],
    }
