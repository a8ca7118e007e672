"""KServe in the API server double: a minimal `InferenceService` and a stand-in for KServe's
InferenceService controller in raw deployment mode.

The double serves `inferenceservices.serving.kserve.io` like any custom resource. What KServe
does with one is played here, as KServe's code does it (kserve/kserve, `pkg/controller/v1beta1/
inferenceservice`, `pkg/apis/serving/v1beta1/inference_service_status.go`):

- it renders the predictor Deployment `<name>-predictor` from the InferenceService on every
  change of it: labels `serving.kserve.io/inferenceservice=<name>`, `component=predictor` (and
  the InferenceService's own), an owner reference to it, the InferenceService's annotations
  (but KServe's disallowed ones) on the Deployment *and its pod template*, the model's container
  `kserve-container` (the Hugging Face runtime's image and arguments, then `model.args`) or the
  predictor's own containers, `minReplicas` replicas;
- a Deployment it owns that someone else edited is rendered back from the InferenceService at
  once (what KServe's reconcile does, and why alphagate edits the InferenceService);
- the Deployment's status is copied into the InferenceService's as KServe's
  `PropagateRawStatus` does: `PredictorReady` True only when the Deployment's `Progressing` says
  `NewReplicaSetAvailable`, `Ready` from it (ingress taken as ready), `observedGeneration` the
  *Deployment's*, `deploymentMode`. So right after a new template, before the deployment
  controller has observed it, the InferenceService still reads Ready, as on a real cluster.

In serverless mode (`Serverless`, `Knative`) nothing is rendered (Knative revisions are not
played); the status only reports the mode, so alphagate's refusal can be tested. No ingress,
HPA, storage initializer or transformer is played.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from alphagate_lab.sandbox.apiserver.deployments import DeploymentTemplate
from alphagate_lab.sandbox.apiserver.resources import ApiError, now_rfc3339

if TYPE_CHECKING:
    from alphagate_lab.sandbox.apiserver.server import ApiServer

GROUP: Final = "serving.kserve.io"
VERSION: Final = "v1beta1"
PLURAL: Final = "inferenceservices"
KIND: Final = "InferenceService"
LABEL_ISVC: Final = "serving.kserve.io/inferenceservice"
ANN_MODE: Final = "serving.kserve.io/deploymentMode"
MODEL_CONTAINER: Final = "kserve-container"
HF_IMAGE: Final = "kserve/huggingfaceserver:v0.16.0"
DISALLOWED_ANNOTATIONS: Final = frozenset(
    (  # KServe's ServiceAnnotationDisallowedList: never copied to what it renders
        "autoscaling.knative.dev/min-scale",
        "autoscaling.knative.dev/max-scale",
        "internal.serving.kserve.io/storage-initializer-sourceuri",
        "kubectl.kubernetes.io/last-applied-configuration",
    )
)
SERVERLESS: Final = frozenset(("Serverless", "Knative"))


def predictor_name(isvc: Mapping[str, Any]) -> str:
    return f"{isvc['metadata']['name']}-predictor"


def _mode(isvc: Mapping[str, Any]) -> str:
    annotations = (isvc.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANN_MODE) or "RawDeployment")


def _containers(predictor: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    model = predictor.get("model")
    out = [
        copy.deepcopy(c)
        for c in predictor.get("containers") or []
        if not (model and c.get("name") == MODEL_CONTAINER)
    ]
    if model:  # the Hugging Face runtime's container, with the model's args after its own
        container: dict[str, Any] = {
            "name": MODEL_CONTAINER,
            "image": model.get("image") or HF_IMAGE,
            "args": [
                f"--model_name={name}",
                "--model_dir=/mnt/models",
                "--http_port=8080",
                *[str(a) for a in model.get("args") or []],
            ],
        }
        if model.get("command"):
            container["command"] = list(model["command"])
        out.insert(0, container)
    return out


def render(isvc: Mapping[str, Any]) -> dict[str, Any]:
    """The predictor Deployment KServe renders from `isvc` (module text)."""
    meta = isvc["metadata"]
    name = predictor_name(isvc)
    labels = {**(meta.get("labels") or {}), LABEL_ISVC: meta["name"], "component": "predictor"}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in DISALLOWED_ANNOTATIONS
    }
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    app = f"isvc.{name}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "labels": dict(labels),
            "annotations": dict(annotations),
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": int(predictor.get("minReplicas") or 1),
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {**labels, "app": app}, "annotations": dict(annotations)},
                "spec": {"containers": _containers(predictor, str(meta["name"]))},
            },
        },
    }


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """What KServe compares before it updates a Deployment it renders."""
    keys = ("labels", "annotations", "ownerReferences")
    return a.get("spec") == b.get("spec") and all(
        (a["metadata"].get(k) or None) == (b["metadata"].get(k) or None) for k in keys
    )


def _condition(kind: str, status: str, old: Mapping[str, Any], reason: str = "") -> dict[str, Any]:
    """A Knative-style condition: lastTransitionTime moves only when the status does."""
    prior = next((c for c in old.get("conditions") or [] if c.get("type") == kind), None)
    stamp = (
        prior["lastTransitionTime"]
        if prior is not None and prior.get("status") == status and prior.get("lastTransitionTime")
        else now_rfc3339()
    )
    out = {"type": kind, "status": status, "lastTransitionTime": stamp}
    if reason:
        out["reason"] = reason
    return out


def propagated(isvc: Mapping[str, Any], deployment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The InferenceService's status from its predictor Deployment (PropagateRawStatus)."""
    old = isvc.get("status") or {}
    mode = _mode(isvc)
    if mode in SERVERLESS or deployment is None:
        return {"deploymentMode": mode, "conditions": list(old.get("conditions") or [])}
    dstatus = deployment.get("status") or {}
    conds = {c.get("type"): c for c in dstatus.get("conditions") or []}
    progressing, available = conds.get("Progressing") or {}, conds.get("Available") or {}
    ready, reason = "False", ""
    if available.get("status") == "True":
        ready = "True"
    if progressing.get("status") == "True":
        ready = "True" if progressing.get("reason") == "NewReplicaSetAvailable" else "Unknown"
        reason = str(progressing.get("reason") or "")
    if available.get("status") == "False":
        ready, reason = "False", str(available.get("reason") or "")
    name = isvc["metadata"]["name"]
    ns = isvc["metadata"].get("namespace", "default")
    return {
        "deploymentMode": mode,
        "observedGeneration": dstatus.get("observedGeneration", 0),
        "conditions": [
            _condition("IngressReady", "True", old),
            _condition("PredictorReady", ready, old, reason),
            _condition("Ready", ready, old, reason),
        ],
        "components": {"predictor": {"url": f"http://{name}-predictor.{ns}.svc.cluster.local"}},
        "modelStatus": {"transitionStatus": "UpToDate" if ready == "True" else "InProgress"},
    }


class KServeReconciler:
    """Plays KServe's InferenceService controller in raw deployment mode (module text). The
    double calls it when an InferenceService or a Deployment is written, and when a
    Deployment's status changes."""

    def __call__(self, server: ApiServer, obj: dict[str, Any]) -> None:
        if obj.get("kind") == KIND:
            self.reconcile(server, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            return
        owner = self._owner(obj)
        if owner is not None:  # a Deployment KServe owns: render it back, then report it
            self.reconcile(server, obj["metadata"].get("namespace", ""), owner)

    def status_changed(self, server: ApiServer, deployment: dict[str, Any]) -> None:
        owner = self._owner(deployment)
        if owner is None:
            return
        ns = deployment["metadata"].get("namespace", "")
        try:
            isvc = server.get(PLURAL, ns, owner, group=GROUP)
        except ApiError:
            return
        server.set_status(PLURAL, ns, owner, propagated(isvc, deployment), group=GROUP)

    @staticmethod
    def _owner(obj: Mapping[str, Any]) -> str | None:
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == KIND and ref.get("controller"):
                return str(ref.get("name"))
        return None

    def reconcile(self, server: ApiServer, ns: str, name: str) -> None:
        """Render the predictor Deployment from the InferenceService (reverting anyone's edit of
        it), then copy its status into the InferenceService's."""
        try:
            isvc = server.get(PLURAL, ns, name, group=GROUP)
        except ApiError:
            return  # deleted meanwhile
        if _mode(isvc) in SERVERLESS:
            server.set_status(PLURAL, ns, name, propagated(isvc, None), group=GROUP)
            return
        want = render(isvc)
        try:
            have: dict[str, Any] | None = server.get(
                "deployments", ns, want["metadata"]["name"], group="apps"
            )
        except ApiError:
            have = None
        if have is None or not _same(have, want):
            if have is not None:
                want["status"] = have.get("status") or {}
            server.put(want)  # the kubelet hook may move its status along at once: read it again
            have = server.get("deployments", ns, want["metadata"]["name"], group="apps")
        server.set_status(PLURAL, ns, name, propagated(isvc, have), group=GROUP)


@dataclass
class InferenceServiceTemplate:
    """A minimal InferenceService serving vLLM, already reconciled (put it, and the double's
    KServe renders its predictor Deployment). `containers` instead of the Hugging Face runtime's
    `model` makes a custom predictor with a vLLM container named `container`."""

    name: str
    namespace: str = "default"
    args: list[str] = field(default_factory=lambda: ["--backend=vllm", "--max-model-len=512"])
    replicas: int = 1
    mode: str = "RawDeployment"
    containers: bool = False
    container: str = "vllm"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def build(self) -> dict[str, Any]:
        predictor: dict[str, Any] = {"minReplicas": self.replicas}
        if self.containers:
            vllm = DeploymentTemplate(self.name, container=self.container, args=list(self.args))
            predictor["containers"] = vllm.build()["spec"]["template"]["spec"]["containers"]
        else:
            predictor["model"] = {
                "modelFormat": {"name": "huggingface"},
                "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "args": list(self.args),
            }
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(self.labels),
                "annotations": {ANN_MODE: self.mode, **self.annotations},
            },
            "spec": {"predictor": predictor},
        }


__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "InferenceServiceTemplate",
    "KServeReconciler",
    "predictor_name",
    "propagated",
    "render",
]
