"""Deployments in the double: a minimal valid Deployment, the one builder of a Deployment's
status (what the real deployment controller and kubelets report between them), and the default
"kubelet" hook that moves a rollout along when the pod template changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alphagate_lab.sandbox.apiserver.resources import now_rfc3339

if TYPE_CHECKING:
    from alphagate_lab.sandbox.apiserver.server import ApiServer


def deployment_status(
    *,
    name: str,
    generation: int,
    replicas: int,
    updated: int,
    ready: int,
    complete: bool,
    stamp: str | None = None,
    progress_stamp: str | None = None,
    replica_set: str | None = None,
    min_available: int | None = None,
    desired: int | None = None,
) -> dict[str, Any]:
    """A Deployment's status: counts and the Available/Progressing conditions.

    `complete`: every replica runs the current template and is ready (Progressing's reason
    is then NewReplicaSetAvailable). `min_available` (default: all replicas) decides
    Available. `replica_set` names the ReplicaSet in the messages (default: the Deployment).
    `desired`: spec.replicas when it differs from the pods that exist (`replicas`).
    """
    stamp = stamp or now_rfc3339()
    rs = replica_set or name
    available = ready >= (replicas if min_available is None else min_available)
    return {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max((replicas if desired is None else desired) - ready, 0),
        "conditions": [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                "message": f'ReplicaSet "{rs}" has successfully progressed.'
                if complete
                else f'ReplicaSet "{rs}" is progressing.',
                "lastUpdateTime": stamp,
                "lastTransitionTime": progress_stamp or stamp,
            },
        ],
    }


Kubelet = Callable[["ApiServer", dict[str, Any]], None]


class RolloutCompleter:
    """The default "kubelet": marks a Deployment's rollout complete, now or after `delay`.

    With a delay, the Deployment first reports the new generation observed but no updated
    replicas (a rollout in progress), then completes.
    """

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds

    def __call__(self, server: ApiServer, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        ns, name, gen = meta.get("namespace", ""), meta["name"], meta.get("generation", 1)
        replicas = int(deployment.get("spec", {}).get("replicas", 1))
        if self.delay_seconds <= 0:
            server.complete_rollout(ns, name, generation=gen)
            return
        server.set_deployment_status(
            ns,
            name,
            deployment_status(
                name=name,
                generation=gen,
                replicas=replicas,
                updated=0,
                ready=replicas,
                complete=False,
            ),
        )
        server.call_later(
            self.delay_seconds, lambda: server.complete_rollout(ns, name, generation=gen)
        )


@dataclass
class DeploymentTemplate:
    """A minimal valid apps/v1 Deployment for tests and the demo."""

    name: str
    namespace: str = "default"
    container: str = "vllm"
    image: str = "vllm/vllm-openai:latest"
    args: list[str] = field(default_factory=lambda: ["--model", "m", "--port", "8000"])
    replicas: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def build(self) -> dict[str, Any]:
        labels = {"app": self.name, **self.labels}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(labels),
                "annotations": dict(self.annotations),
            },
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "containers": [
                            {"name": self.container, "image": self.image, "args": list(self.args)}
                        ]
                    },
                },
            },
        }
