"""A KServe InferenceService (serving.kserve.io/v1beta1) as the canary: where its vLLM flag
lives, whether KServe has rolled an edit out, and what alphagate refuses there.

In raw deployment mode (`RawDeployment`, `Standard` from KServe 0.16) KServe renders a
Deployment `<name>-predictor` from the InferenceService on every reconcile (an edit of the
Deployment itself is reverted at once). So alphagate edits the InferenceService:

- `spec.predictor.model.args` for a model served by a runtime. Only the Hugging Face runtime
  (`modelFormat.name: huggingface`) on its vLLM backend (`--backend=vllm`) is accepted without a
  `command`: its server builds its argument parser from vLLM's own and hands the parsed
  arguments to vLLM's engine (`kube.invocation`). Another runtime's command lives in its
  ServingRuntime, which alphagate does not read: refused (set `command`, or use `containers`).
- the named container of `spec.predictor.containers` (a custom predictor): checked like a
  Deployment's container.

Rolled out means KServe says so (`Ready` and `PredictorReady` True) *and* the predictor
Deployment renders the edit (its container runs the same `--speculative-config`) and has rolled
it out as `kubectl rollout status` would: in raw mode KServe copies the Deployment's conditions
and `observedGeneration` into the InferenceService's status, so right after an edit the
InferenceService still reads Ready from the old ReplicaSet. Warm-up counts from the later of the
Deployment's completion and `PredictorReady`'s last transition. Revisions
(`status.components.predictor.latestReadyRevision`) exist only in serverless mode.

Refused (ArgsError): ModelMesh, a mode KServe has not reported yet, a predictor alphagate
cannot place, and serverless mode (`Serverless`, `Knative`): there every edit is a new Knative
revision, traffic is split between the old and new revisions, and Knative scales them with
load, so a pool's pods come, go and mix configs inside a window: neither the canary's data nor
its rollout can be judged safely.

KServe copies the InferenceService's annotations into the predictor's pod template, so writing
alphagate's record alone would restart every predictor pod: the record rides on flips only
(`record_restarts`; the actuator never writes it alone on such an object).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from alphagate.config import WorkloadKind, WorkloadRef
from alphagate.kube import args as argsmod
from alphagate.kube import invocation
from alphagate.kube.client import call, to_dict
from alphagate.kube.status.fields import parse_time
from alphagate.kube.workload import (
    WorkloadState,
    container_flag,
    identity,
    rollout_counts,
)

GROUP: Final = "serving.kserve.io"
VERSION: Final = "v1beta1"
PLURAL: Final = "inferenceservices"
KIND: Final = WorkloadKind.INFERENCE_SERVICE.value
LABEL_ISVC: Final = "serving.kserve.io/inferenceservice"
LABEL_COMPONENT: Final = "component"
PREDICTOR: Final = "predictor"
ANN_MODE: Final = "serving.kserve.io/deploymentMode"
RAW_MODES: Final = frozenset(("RawDeployment", "Standard"))
SERVERLESS_MODES: Final = frozenset(("Serverless", "Knative"))
MODEL_CONTAINER: Final = "kserve-container"  # KServe's name for the model's container
HF_FORMAT: Final = "huggingface"


def predictor_selector(name: str) -> str:
    return f"{LABEL_ISVC}={name},{LABEL_COMPONENT}={PREDICTOR}"


def deployment_mode(body: Mapping[str, Any]) -> str:
    """The mode KServe reports (status.deploymentMode), else the annotation asking for one."""
    status = body.get("status") or {}
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return str(status.get("deploymentMode") or annotations.get(ANN_MODE) or "")


def _check_mode(body: Mapping[str, Any], what: str) -> None:
    mode = deployment_mode(body)
    if mode in RAW_MODES:
        return
    if mode in SERVERLESS_MODES:
        raise argsmod.ArgsError(
            f"{what} runs in serverless mode ({mode}): each edit is a new Knative revision, "
            "which KServe's canaryTrafficPercent splits traffic with and Knative scales with "
            "load (to zero included), so a pool's pods would mix configs and restart inside a "
            "window; alphagate flips raw-deployment InferenceServices only (annotation "
            f"{ANN_MODE}: RawDeployment, or Standard from KServe 0.16)"
        )
    if not mode:
        raise argsmod.ArgsError(
            f"{what}: KServe has not reported its deployment mode (status.deploymentMode) and "
            f"it asks for none ({ANN_MODE}): alphagate flips raw-deployment InferenceServices "
            "only and will not guess the cluster's default"
        )
    raise argsmod.ArgsError(
        f"{what} runs in {mode} mode: alphagate flips raw-deployment InferenceServices only "
        f"({ANN_MODE}: RawDeployment, or Standard from KServe 0.16)"
    )


@dataclass(frozen=True, slots=True)
class Predictor:
    pointer: str  # JSON pointer of the container object
    anchor: tuple[str, str]  # what a patch tests: the model's format, or the container's name
    rendered_as: str  # the container's name in the predictor Deployment
    flag: dict[str, Any]  # container_flag fields
    index: int = 0


def _model(model: Mapping[str, Any], container: str, what: str) -> Predictor:
    if container not in ("vllm", MODEL_CONTAINER):
        raise argsmod.ArgsError(
            f"{what} serves spec.predictor.model (KServe's container {MODEL_CONTAINER}); "
            f"container {container!r} names none: use {MODEL_CONTAINER}"
        )
    fmt = str((model.get("modelFormat") or {}).get("name") or "")
    where = f"{what}, spec.predictor.model"
    if model.get("command"):
        flag = container_flag(model, where)
    elif fmt.lower() == HF_FORMAT:
        flag = container_flag(model, where, checked=False)
        try:
            invocation.check_hf(flag["args"])
        except invocation.InvocationError as exc:
            raise argsmod.ArgsError(f"{where}: {exc}") from None
    else:
        raise argsmod.ArgsError(
            f"{where} (modelFormat {fmt or '?'}) runs its ServingRuntime's command, which "
            "alphagate does not read, so it cannot tell that --speculative-config reaches vLLM: "
            "use the Hugging Face runtime (modelFormat huggingface, --backend=vllm), give the "
            "model a command (vllm serve ...), or a vLLM container in spec.predictor.containers"
        )
    at = "/spec/predictor/model"
    return Predictor(at, (f"{at}/modelFormat/name", fmt), MODEL_CONTAINER, flag)


def predictor(body: Mapping[str, Any], container: str, what: str) -> Predictor:
    """The vLLM container of the InferenceService's predictor (module text). ArgsError when it
    cannot be edited safely."""
    spec = (body.get("spec") or {}).get("predictor") or {}
    model = spec.get("model")
    if isinstance(model, Mapping):
        return _model(model, container, what)
    containers = list(spec.get("containers") or [])
    for i, c in enumerate(containers):
        if c.get("name") == container:
            at = f"/spec/predictor/containers/{i}"
            flag = container_flag(c, f"{what}, container {container!r}")
            return Predictor(at, (f"{at}/name", container), container, flag, i)
    have = ", ".join(str(c.get("name")) for c in containers) or "none"
    raise argsmod.ArgsError(
        f"{what} has neither spec.predictor.model nor a container {container!r} in "
        f"spec.predictor.containers (containers: {have})"
    )


def pick_deployment(items: Sequence[Any], name: str) -> dict[str, Any] | None:
    """The predictor's Deployment among those with its labels: `<name>-predictor` (KServe 0.9
    named it `<name>-predictor-default`), else the only one that is not a worker's."""
    found = [to_dict(d) for d in items]
    by_name = {str((d.get("metadata") or {}).get("name")): d for d in found}
    for candidate in (f"{name}-{PREDICTOR}", f"{name}-{PREDICTOR}-default"):
        if candidate in by_name:
            return by_name[candidate]
    heads = [d for n, d in by_name.items() if not n.endswith("-worker")]
    return heads[0] if len(heads) == 1 else None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(cond: Mapping[str, Any] | None) -> bool:
    return cond is not None and str(cond.get("status")) == "True"


def _rendered(deployment: Mapping[str, Any], p: Predictor) -> bool:
    template = (deployment.get("spec") or {}).get("template") or {}
    for c in (template.get("spec") or {}).get("containers") or []:
        if c.get("name") == p.rendered_as:
            runs = argsmod.read([str(a) for a in c.get("args") or ()])
            if runs is None:
                runs = argsmod.read([str(a) for a in c.get("command") or ()])
            return bool(runs == p.flag["speculative_config"])
    return False


def isvc_state(obj: Any, container: str, deployment: Mapping[str, Any] | None) -> WorkloadState:
    """An InferenceService (a dict) and its predictor Deployment (None: not rendered yet) ->
    WorkloadState. Raises ArgsError for what the module text refuses."""
    body = to_dict(obj)
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    what = f"{KIND} {meta.get('namespace')}/{meta.get('name')}"
    _check_mode(body, what)
    p = predictor(body, container, what)
    ready, predictor_ready = _condition(status, "Ready"), _condition(status, "PredictorReady")
    counts: dict[str, Any] = {"generation": 1, "observed_generation": 0, "replicas": 1}
    counts |= {"updated_replicas": 0, "ready_replicas": 0, "available_replicas": 0}
    rendered = False
    if deployment is not None:
        counts = rollout_counts(deployment)
        rendered = _rendered(deployment, p)
    stamps = [counts.pop("completed_at", None)]
    if predictor_ready is not None and _true(predictor_ready):
        stamps.append(parse_time(str(predictor_ready.get("lastTransitionTime") or "")))
    stamps = [t for t in stamps if t is not None]
    return WorkloadState(
        **identity(meta),
        container=container,
        **counts,
        completed_at=max(stamps) if stamps else None,
        **p.flag,
        kind=KIND,
        container_index=p.index,
        owner_ready=_true(ready)
        and (predictor_ready is None or _true(predictor_ready))
        and rendered,
        pointer=p.pointer,
        anchor=p.anchor,
        record_restarts=True,
    )


def read(
    custom: Any,
    apps: Any,
    as_dict: Callable[[Any], dict[str, Any]],
    namespace: str,
    ref: WorkloadRef,
) -> WorkloadState:
    """The InferenceService and, in raw mode, the predictor Deployment KServe renders from it.
    Raises KubeError (ArgsError for what the module text refuses)."""
    what = f"read {KIND} {namespace}/{ref.name}"
    obj = call(
        what,
        lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, ref.name),
    )
    isvc_state(obj, ref.container, None)  # refuse serverless before listing anything
    found = call(
        f"list the predictor Deployment of {KIND} {namespace}/{ref.name}",
        lambda: apps.list_namespaced_deployment(
            namespace, label_selector=predictor_selector(ref.name)
        ),
    )
    items = [as_dict(d) for d in getattr(found, "items", None) or []]
    return isvc_state(obj, ref.container, pick_deployment(items, ref.name))


__all__ = [
    "ANN_MODE",
    "GROUP",
    "KIND",
    "LABEL_COMPONENT",
    "LABEL_ISVC",
    "MODEL_CONTAINER",
    "PLURAL",
    "PREDICTOR",
    "VERSION",
    "Predictor",
    "deployment_mode",
    "isvc_state",
    "pick_deployment",
    "predictor",
    "predictor_selector",
    "read",
]
