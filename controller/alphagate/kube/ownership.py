"""Living with a declared owner: Argo CD, Flux, Helm or an operator that also manages a canary
Deployment.

alphagate edits one field, the vLLM container's `--speculative-config` (plus its own
`alphagate.io/*` annotations), with the field manager `alphagate`, so a GitOps tool can ignore
exactly that (Argo CD: `ignoreDifferences.managedFieldsManagers: [alphagate]`; see
deploy/README.md). When an owner reverts the flag anyway, the two must not fight: each round
would restart GPU pods. So on a Deployment with a declared owner, alphagate *yields*: if the
running config differs from the one alphagate last wrote (its `alphagate.io/speculation`
annotation), the actuator raises OwnerConflictError instead of patching it back; the decision
stands and is retried. Without a declared owner, or with the annotation
`alphagate.io/on-owner-conflict: correct`, the flag is patched back (DriftCorrected).

A declared owner is: the annotation `alphagate.io/gitops-owner: <name>`; Argo CD's tracking
(`argocd.argoproj.io/tracking-id` annotation or `argocd.argoproj.io/instance` label); Flux's
`kustomize.toolkit.fluxcd.io/name` or `helm.toolkit.fluxcd.io/name` labels; Helm's
`app.kubernetes.io/managed-by: Helm`; or an owner reference of a kind other than ReplicaSet
(an InferenceService, a LeaderWorkerSet, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from alphagate.kube.workload import ANN_SPECULATION

if TYPE_CHECKING:
    from alphagate.kube.workload import WorkloadState

ANN_GITOPS_OWNER: Final = "alphagate.io/gitops-owner"
ANN_ON_OWNER_CONFLICT: Final = "alphagate.io/on-owner-conflict"
YIELD: Final = "yield"
CORRECT: Final = "correct"

_ANNOTATIONS: Final = (("argocd.argoproj.io/tracking-id", "Argo CD"),)
_LABELS: Final = (
    ("argocd.argoproj.io/instance", "Argo CD"),
    ("kustomize.toolkit.fluxcd.io/name", "Flux"),
    ("helm.toolkit.fluxcd.io/name", "Flux (HelmRelease)"),
)


def declared_owner(dep: WorkloadState) -> str | None:
    explicit = dep.annotations.get(ANN_GITOPS_OWNER)
    if explicit:
        return explicit
    for key, name in _ANNOTATIONS:
        if dep.annotations.get(key):
            return name
    for key, name in _LABELS:
        if dep.labels.get(key):
            return name
    if dep.labels.get("app.kubernetes.io/managed-by", "").lower() == "helm":
        return "Helm"
    for kind in dep.owner_kinds:
        if kind != "ReplicaSet":
            return kind
    return None


def reverted(dep: WorkloadState) -> bool:
    """The running config is not the one alphagate last wrote: someone else changed it."""
    recorded = dep.annotations.get(ANN_SPECULATION)
    if recorded not in ("on", "off"):
        return False  # alphagate never wrote here: nothing to revert
    return (recorded == "on") != dep.speculation_on


def yields_to(dep: WorkloadState) -> str | None:
    if dep.annotations.get(ANN_ON_OWNER_CONFLICT, YIELD).strip().lower() == CORRECT:
        return None
    if not reverted(dep):
        return None
    return declared_owner(dep)


def conflict_message(dep: WorkloadState, owner: str, field_manager: str) -> str:
    running = "on" if dep.speculation_on else "off"
    wrote = dep.annotations.get(ANN_SPECULATION, "?")
    return (
        f"{dep.what}: {owner} changed --speculative-config (alphagate set {wrote}, "
        f"it runs {running}); yielding instead of patching it back. Let {owner} ignore the field "
        f"manager {field_manager!r} (deploy/README.md, GitOps), or annotate the {dep.kind} "
        f"{ANN_ON_OWNER_CONFLICT}=correct to have alphagate correct it"
    )
