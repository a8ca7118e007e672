"""The objects whose pod template runs vLLM: a Deployment, or an Argo Rollout (a KServe
InferenceService is read in `kube.inferenceservice` into the same WorkloadState).

Both carry the vLLM container in a pod template (`spec.template`), so the actuator edits the
flag and writes its record the same way on both. What differs is read here: where the rollout
status lives and what "rolled out" means (a Deployment: the deployment controller's counts, as
`kubectl rollout status`; a Rollout: Argo's `status.phase` Healthy, the current pod hash
promoted to stable, not aborted, plus the same counts), and how a patch is sent (a Deployment
takes a strategic merge patch, which merges `containers` by name; a custom resource takes no
strategic merge and a merge patch would replace the whole `containers` list, so a Rollout gets a
JSON patch that tests the container's name at its index). Both carry the resourceVersion the
edit was computed from, so a concurrent change is a 409, never a lost update.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate.config import WorkloadKind
from alphagate.core.model import Memory
from alphagate.kube import args as argsmod
from alphagate.kube.client import to_dict
from alphagate.kube.status.fields import parse_time

ANN_STATE: Final = "alphagate.io/state"
ANN_MEMORY: Final = "alphagate.io/memory"
ANN_LAST_FLIP: Final = "alphagate.io/last-flip"
ANN_OWNER: Final = "alphagate.io/owner"  # the SpeculativeCanary (namespace/name) it belongs to
ANN_RECORD: Final = "alphagate.io/record"  # generation of the record: +1 on every write of it
ANN_SPECULATION: Final = "alphagate.io/speculation"  # what alphagate last wrote: on|off

# The schema of the Memory JSON in `alphagate.io/memory`, written first in it as
# "schemaVersion". Absent: 0, the unversioned annotation of earlier controllers, whose fields
# are version 1's. A controller reads every version up to its own; a newer one (a later
# controller's, then a downgrade) is not guessed at: it reads as no annotation, and the Memory
# resumes from the status. Bump it, with a reader for the old shape, when a field changes
# meaning or is added. 2: `spread` holds the variance learned per alpha (1 - alpha)
# (core/spread.py); version 1's was unscaled, and is dropped on reading (the slice learns it
# again within three windows). 3: `Memory.run`, the fail run's pooled windows
# (core/streak.py); an older annotation reads with an empty run (the field's default), so a
# restarted controller starts the run over and judges the streak as before.
MEMORY_SCHEMA_VERSION: Final = 3

ROLLOUT_GROUP: Final = "argoproj.io"
ROLLOUT_VERSION: Final = "v1alpha1"
ROLLOUT_PLURAL: Final = "rollouts"
ROLLOUT_HEALTHY: Final = "Healthy"


@dataclass(frozen=True, slots=True)
class WorkloadState:
    namespace: str
    name: str
    container: str
    resource_version: str
    generation: int
    observed_generation: int
    replicas: int
    updated_replicas: int
    ready_replicas: int
    available_replicas: int
    args: tuple[str, ...]
    args_field: str  # "args" or "command": where the flag lives (or will be added)
    speculative_config: dict[str, Any] | None
    annotations: dict[str, str] = field(default_factory=dict)
    completed_at: float | None = None  # when the current generation finished rolling out
    status_replicas: int | None = None  # all pods, old and new; None when the status has none
    image: str = ""  # the vLLM container's image: its tag names the vLLM version, if any
    labels: dict[str, str] = field(default_factory=dict)
    owner_kinds: tuple[str, ...] = ()  # metadata.ownerReferences kinds (e.g. InferenceService)
    kind: str = WorkloadKind.DEPLOYMENT.value
    container_index: int = 0  # the vLLM container's place in the pod template's list
    phase: str | None = None  # Argo Rollouts' status.phase (None: a Deployment, or no phase)
    promoted: bool = True  # Rollout: the current pod hash is the stable one, and not aborted
    owner_ready: bool = True  # InferenceService: KServe says Ready and its Deployment runs this
    pointer: str = ""  # JSON pointer of the container object ("": the pod template's, by index)
    anchor: tuple[str, str] = ("", "")  # (pointer, value) a JSON patch tests before editing
    record_restarts: bool = False  # writing the record restarts pods (KServe copies annotations)

    @property
    def speculation_on(self) -> bool:
        return self.speculative_config is not None

    @property
    def rollout_complete(self) -> bool:
        """Every pod runs the current template (kubectl rollout status; for a Rollout, also
        Argo's own verdict: Healthy and fully promoted)."""
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas == self.replicas
            and self.available_replicas == self.replicas
            and self.ready_replicas == self.replicas
            # during a surge old pods still run: kubectl waits for status.replicas too
            and (self.status_replicas is None or self.status_replicas == self.updated_replicas)
            and self.phase in (None, ROLLOUT_HEALTHY)
            and self.promoted
            and self.owner_ready
        )

    @property
    def memory(self) -> Memory | None:
        return read_memory(self.annotations.get(ANN_MEMORY))

    @property
    def state(self) -> str | None:
        return self.annotations.get(ANN_STATE)

    @property
    def record(self) -> int:
        """The generation of alphagate's record on this object (0: none yet, or unreadable)."""
        raw = self.annotations.get(ANN_RECORD, "")
        return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else 0

    @property
    def owner(self) -> str:
        return self.annotations.get(ANN_OWNER, "")

    @property
    def last_flip(self) -> float | None:
        return parse_time(self.annotations.get(ANN_LAST_FLIP))

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def what(self) -> str:
        return f"{self.kind} {self.ref}"


def memory_annotation(memory: Memory) -> str:
    body = json.loads(memory.model_dump_json())  # pydantic's JSON, values as it writes them
    return json.dumps({"schemaVersion": MEMORY_SCHEMA_VERSION, **body}, separators=(",", ":"))


def read_memory(raw: str | None) -> Memory | None:
    """The Memory in an `alphagate.io/memory` text of any version up to ours (unversioned
    included); None when absent, unreadable, or written by a newer schema."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
        version = body.get("schemaVersion", 0)
        if isinstance(version, int) and version < 2:
            body.pop("spread", None)  # unscaled (see MEMORY_SCHEMA_VERSION)
            raw = json.dumps(body)
        memory = Memory.model_validate_json(raw)  # "schemaVersion" itself is ignored
    except (ValueError, AttributeError):  # not JSON, not an object, not a Memory
        return None
    if not isinstance(version, int) or version > MEMORY_SCHEMA_VERSION:
        return None
    return memory


def _int(value: Any) -> int:
    """A count from a status (Argo writes observedGeneration as a string); 0 if absent."""
    try:
        return int(value) if value not in (None, "") else 0
    except (TypeError, ValueError):
        return 0


def _completed_at(status: Mapping[str, Any]) -> float | None:
    for cond in status.get("conditions") or []:
        kind, reason = cond.get("type"), cond.get("reason")
        if (kind == "Progressing" and reason == "NewReplicaSetAvailable") or (
            kind == "Completed" and cond.get("status") == "True"
        ):
            stamp = cond.get("lastUpdateTime") or cond.get("lastTransitionTime")
            if stamp:
                return parse_time(str(stamp))
    return None


def _container(template: Mapping[str, Any], name: str, what: str) -> tuple[int, dict[str, Any]]:
    containers = list(((template.get("spec") or {}).get("containers")) or [])
    for i, c in enumerate(containers):
        if c.get("name") == name:
            return i, c
    have = ", ".join(str(c.get("name")) for c in containers) or "none"
    raise argsmod.ArgsError(f"{what} has no container {name!r} (containers: {have})")


def workload_state(obj: Any, container: str, kind: str | WorkloadKind) -> WorkloadState:
    """Raises ArgsError also for a Rollout that takes its pod template from a Deployment."""
    body = to_dict(obj)
    kind = str(WorkloadKind(kind).value)
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    what = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
    template = spec.get("template")
    if template is None and spec.get("workloadRef"):
        ref = spec["workloadRef"]
        raise argsmod.ArgsError(
            f"{what} takes its pod template from {ref.get('kind', 'Deployment')} "
            f"{ref.get('name', '?')} (spec.workloadRef), which alphagate does not edit: inline "
            "the template in the Rollout (spec.template)"
        )
    _not_rendered(meta, what)
    index, c = _container(template or {}, container, what)
    flag = container_flag(c, f"{what}, container {container!r}")
    phase: str | None = None
    promoted = True
    if kind == WorkloadKind.ROLLOUT.value:
        phase = str(status["phase"]) if status.get("phase") else None
        current, stable = status.get("currentPodHash"), status.get("stableRS")
        promoted = not status.get("abort") and (not current or not stable or current == stable)
    return WorkloadState(
        **identity(meta),
        container=container,
        **rollout_counts(body),
        **flag,
        kind=kind,
        container_index=index,
        phase=phase,
        promoted=promoted,
    )


RENDERED_BY: Final = {"InferenceService": "InferenceService"}
"""Controllers that render a Deployment from their own spec and revert any edit of it, its
annotations included (so alphagate could not even tell it wrote): their object is the target."""


def _not_rendered(meta: Mapping[str, Any], what: str) -> None:
    for ref in meta.get("ownerReferences") or []:
        kind = str(ref.get("kind"))
        if ref.get("controller") and kind in RENDERED_BY:
            raise argsmod.ArgsError(
                f"{what} is rendered by {kind} {ref.get('name', '?')} (its controller), which "
                "puts back any edit of it, alphagate's record included, at once: every flip "
                f"would restart the pods and be undone. Target the {kind} instead "
                f"(target.kind: {RENDERED_BY[kind]})"
            )


def container_flag(c: Mapping[str, Any], what: str, *, checked: bool = True) -> dict[str, Any]:
    args = tuple(str(a) for a in c.get("args") or ())
    command = tuple(str(a) for a in c.get("command") or ())
    image = str(c.get("image") or "")
    if checked:
        try:
            argsmod.check_invocation(command, args, image)
        except argsmod.ArgsError as exc:
            raise argsmod.ArgsError(f"{what}: {exc}") from None
    config = argsmod.read(args)
    where = "args"
    if config is None:
        command_config = argsmod.read(command)
        if command_config is not None:
            config, where = command_config, "command"
    return {
        "args": args if where == "args" else command,
        "args_field": where,
        "speculative_config": config,
        "image": image,
    }


def identity(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "namespace": str(meta.get("namespace")),
        "name": str(meta.get("name")),
        "resource_version": str(meta.get("resourceVersion") or ""),
        "annotations": {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        "labels": {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        "owner_kinds": tuple(str(o.get("kind")) for o in meta.get("ownerReferences") or []),
    }


def rollout_counts(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    status = body.get("status") or {}
    return {
        "generation": _int(meta.get("generation")),
        "observed_generation": _int(status.get("observedGeneration")),
        "replicas": _int(spec["replicas"]) if spec.get("replicas") is not None else 1,
        "updated_replicas": _int(status.get("updatedReplicas")),
        "ready_replicas": _int(status.get("readyReplicas")),
        "available_replicas": _int(status.get("availableReplicas")),
        "completed_at": _completed_at(status),
        "status_replicas": (
            _int(status["replicas"]) if status.get("replicas") is not None else None
        ),
    }


def _pointer(key: str) -> str:
    """RFC 6901: `alphagate.io/state` -> `alphagate.io~1state`."""
    return key.replace("~", "~0").replace("/", "~1")


def merge_body(
    work: WorkloadState, annotations: Mapping[str, str], new_args: list[str] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": work.resource_version, "annotations": dict(annotations)}
    }
    if new_args is not None:
        container = {"name": work.container, work.args_field: new_args}
        body["spec"] = {"template": {"spec": {"containers": [container]}}}
    return body


def json_patch(
    work: WorkloadState, annotations: Mapping[str, str], new_args: list[str] | None
) -> list[dict[str, Any]]:
    """The same edit as `merge_body`, as RFC 6902 operations for a custom resource: the
    resourceVersion it was computed from (a 409 if it moved), a test that the container is still
    at its index (else the server refuses the patch), then the args and the record."""
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": work.resource_version}
    ]
    if new_args is not None:
        at = work.pointer or f"/spec/template/spec/containers/{work.container_index}"
        test, value = work.anchor if work.anchor[0] else (f"{at}/name", work.container)
        ops.append({"op": "test", "path": test, "value": value})
        ops.append({"op": "add", "path": f"{at}/{work.args_field}", "value": list(new_args)})
    if work.annotations:
        ops.extend(
            {"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v}
            for k, v in annotations.items()
        )
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(annotations)})
    return ops


__all__ = [
    "ROLLOUT_GROUP",
    "ROLLOUT_HEALTHY",
    "ROLLOUT_PLURAL",
    "ROLLOUT_VERSION",
    "WorkloadState",
    "container_flag",
    "identity",
    "json_patch",
    "merge_body",
    "rollout_counts",
    "workload_state",
]
