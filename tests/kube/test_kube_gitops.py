"""Living with a GitOps owner, against the API server double: alphagate patches with its own
field manager; on a Deployment another tool owns, a revert of the flag is not patched back
(OwnerReverted, no PATCH); `alphagate.io/on-owner-conflict: correct` and owner-less
Deployments are corrected; the README's Argo CD snippet names the field manager used."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from alphagate.config import DeploymentRef
from alphagate.core.model import Memory, State
from alphagate.errors import OwnerConflictError
from alphagate.kube import args as argsmod
from alphagate.kube import ownership
from alphagate.kube.actuator import Actuator, deployment_state
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder, ObjectRef
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

CFG = {"method": "ngram", "num_speculative_tokens": 4}
BASE_ARGS = ["--model", "/m", "--port", "8000"]
REF = DeploymentRef(name="canary", container="vllm")
INVOLVED = ObjectRef(namespace="ns", name="chat")
NOW = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[2]

ARGO = {"annotations": {"argocd.argoproj.io/tracking-id": "llm:apps/Deployment:ns/canary"}}
FLUX = {"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}


def _put(apiserver: ApiServer, meta: dict[str, Any]) -> None:
    obj = DeploymentTemplate("canary", "ns", args=list(BASE_ARGS), replicas=1).build()
    for key in ("labels", "annotations"):
        obj["metadata"].setdefault(key, {}).update(meta.get(key, {}))
    apiserver.put(obj)


def _enable(act: Actuator) -> Any:
    return act.apply(
        "ns",
        REF,
        speculative_config=CFG,
        state=State.PROBING,
        memory=Memory(state=State.PROBING, since=NOW, last_flip_at=NOW),
        now=NOW,
        involved=INVOLVED,
    )


def _revert(apiserver: ApiServer) -> None:
    """What Argo CD's self-heal or a Flux reconcile does: the args from Git, annotations kept."""
    dep = apiserver.get("deployments", "ns", "canary", group="apps")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    c["args"] = list(BASE_ARGS)
    apiserver.put(dep)


def _args(apiserver: ApiServer) -> list[str]:
    dep = apiserver.get("deployments", "ns", "canary", group="apps")
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(("meta", "owner"), [(ARGO, "Argo CD"), (FLUX, "Flux")])
def test_a_reverted_flag_under_an_owner_is_not_patched_back(
    apiserver: ApiServer, kube: Kube, meta: dict[str, Any], owner: str
) -> None:
    _put(apiserver, meta)
    events = EventRecorder(kube.api_client)
    act = Actuator(kube.api_client, events=events, wait_initial=0.001, wait_max=0.01)
    first = _enable(act)
    assert first.patched and argsmod.read(_args(apiserver)) == CFG  # the first flip is fine
    patch = apiserver.requests_matching(method="PATCH", resource="deployments")[-1]
    assert patch.query.get("fieldManager") == "alphagate"  # what ignoreDifferences names
    _revert(apiserver)
    apiserver.clear_requests()
    with pytest.raises(OwnerConflictError, match=owner):
        _enable(act)
    assert apiserver.requests_matching(method="PATCH", resource="deployments") == []
    assert argsmod.read(_args(apiserver)) is None  # the owner's word stands
    reasons = [e[2] for e in events.emitted]
    assert "OwnerReverted" in reasons


def test_correct_annotation_and_ownerless_deployments_are_patched_back(
    apiserver: ApiServer, kube: Kube
) -> None:
    for meta in (
        {"annotations": {**ARGO["annotations"], ownership.ANN_ON_OWNER_CONFLICT: "correct"}},
        {},
    ):
        _put(apiserver, meta)
        act = Actuator(kube.api_client, wait_initial=0.001, wait_max=0.01)
        _enable(act)
        _revert(apiserver)
        result = _enable(act)
        assert result.patched and argsmod.read(_args(apiserver)) == CFG, meta


def test_owner_markers(apiserver: ApiServer, kube: Kube) -> None:
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({}, None),
        (ARGO, "Argo CD"),
        ({"labels": {"argocd.argoproj.io/instance": "llm"}}, "Argo CD"),
        (FLUX, "Flux"),
        ({"labels": {"helm.toolkit.fluxcd.io/name": "vllm"}}, "Flux (HelmRelease)"),
        ({"labels": {"app.kubernetes.io/managed-by": "Helm"}}, "Helm"),
        ({"annotations": {ownership.ANN_GITOPS_OWNER: "platform-operator"}}, "platform-operator"),
    ]
    for meta, owner in cases:
        _put(apiserver, meta)
        dep = kube.apps.read_namespaced_deployment("canary", "ns")
        assert ownership.declared_owner(deployment_state(dep, "vllm")) == owner, meta


def test_readme_snippets_name_the_field_manager_and_parse() -> None:
    text = (ROOT / "deploy" / "README.md").read_text()
    section = text[text.index("## Living with Argo CD or Flux") :]
    section = section[: section.index("\n## ", 5)]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, flags=re.S)]
    argo = next(b for b in blocks if "ignoreDifferences" in b)
    (rule,) = argo["ignoreDifferences"]
    assert rule["managedFieldsManagers"] == [Actuator.__init__.__kwdefaults__["field_manager"]]
    assert "RespectIgnoreDifferences=true" in argo["syncPolicy"]["syncOptions"]
    flux = next(b for b in blocks if "metadata" in b)
    assert flux["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/ssa"] == "IfNotPresent"
