"""Argo Rollouts in the API server double: a minimal `Rollout` and a stand-in for the Argo
Rollouts controller.

The double serves `rollouts.argoproj.io` like any custom resource (status subresource,
generation, JSON and merge patch; no strategic merge, as on a real API server). What Argo itself
does to a Rollout's status when its pod template changes is played here: the new revision is
Progressing (its pod hash is not yet the stable one), then, after `delay_seconds`, Healthy and
fully promoted, with the fields Argo writes (`observedGeneration` as a string, `phase`,
`currentPodHash`, `stableRS`, replica counts, the `Completed` condition). No canary steps,
traffic weights or analysis are simulated: alphagate reads only whether the revision is done.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Final

from alphagate_lab.sandbox.apiserver.deployments import DeploymentTemplate
from alphagate_lab.sandbox.apiserver.resources import now_rfc3339

if TYPE_CHECKING:
    from alphagate_lab.sandbox.apiserver.server import ApiServer

GROUP: Final = "argoproj.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "rollouts"
KIND: Final = "Rollout"


def pod_hash(rollout: dict[str, Any]) -> str:
    """A stable hash of the pod template, as Argo's `rollouts-pod-template-hash`."""
    template = (rollout.get("spec") or {}).get("template") or {}
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def healthy_status(rollout: dict[str, Any]) -> dict[str, Any]:
    """The status Argo reports once the current revision is fully promoted."""
    replicas = int((rollout.get("spec") or {}).get("replicas", 1))
    generation = int(rollout["metadata"].get("generation", 1))
    h, stamp = pod_hash(rollout), now_rfc3339()
    return {
        "observedGeneration": str(generation),
        "phase": "Healthy",
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "currentPodHash": h,
        "stableRS": h,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Completed",
                "status": "True",
                "reason": "RolloutCompleted",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
        ],
    }


class ArgoRolloutCompleter:
    """Plays the Argo Rollouts controller for a Rollout whose template changed: Progressing at
    once, Healthy and promoted after `delay_seconds` (0: at once)."""

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds

    def __call__(self, server: ApiServer, rollout: dict[str, Any]) -> None:
        meta = rollout["metadata"]
        ns, name, gen = meta.get("namespace", ""), meta["name"], meta.get("generation", 1)
        if self.delay_seconds <= 0:
            self._promote(server, ns, name, gen)
            return
        old = rollout.get("status") or {}
        server.set_status(
            PLURAL,
            ns,
            name,
            {
                **old,
                "observedGeneration": str(gen),
                "phase": "Progressing",
                "currentPodHash": pod_hash(rollout),
                "updatedReplicas": 0,
            },
            group=GROUP,
        )
        server.call_later(self.delay_seconds, lambda: self._promote(server, ns, name, gen))

    @staticmethod
    def _promote(server: ApiServer, ns: str, name: str, generation: int) -> None:
        current = server.get(PLURAL, ns, name, group=GROUP)
        if current["metadata"].get("generation", 1) != generation:
            return  # a newer template superseded this revision; its own call promotes it
        server.set_status(PLURAL, ns, name, healthy_status(current), group=GROUP)


class ArgoRolloutTemplate(DeploymentTemplate):
    """A minimal Argo Rollout carrying vLLM (a canary strategy with two steps), already Healthy
    at its first revision: the Deployment template's pod template, with Argo's kind, strategy
    and status."""

    def build(self) -> dict[str, Any]:
        base = DeploymentTemplate.build(self)
        spec = base["spec"]
        obj: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {**base["metadata"], "generation": 1},
            "spec": {
                "replicas": spec["replicas"],
                "selector": spec["selector"],
                "strategy": {
                    "canary": {"steps": [{"setWeight": 50}, {"pause": {"duration": "30s"}}]}
                },
                "template": spec["template"],
            },
        }
        obj["status"] = healthy_status(obj)
        return obj


__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "ArgoRolloutCompleter",
    "ArgoRolloutTemplate",
    "healthy_status",
    "pod_hash",
]
