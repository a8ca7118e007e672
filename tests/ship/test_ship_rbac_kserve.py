"""RBAC coverage for a KServe InferenceService target: with the shipped namespaced Role plus
deploy/rbac/kserve/role.yaml, the real reconciler flips an InferenceService against the API
server double (which plays KServe) with no request refused, and uses every rule of the KServe
Role; without it, the refusal is a Forbidden Event that names the resource."""

from __future__ import annotations

from typing import Any

import ship_support as ship

from alphagate.config import API_VERSION, KIND, SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import (
    ApiServer,
    DeploymentTemplate,
    InferenceServiceTemplate,
    Rbac,
)

WATCHED = "llm"
Rule = tuple[str, str, str]


def _rules(*parts: str) -> set[Rule]:
    (role,) = ship.load_all(ship.DEPLOY.joinpath(*parts))
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


class NoData:
    """A source with nothing to say: a new canary is probed regardless (one flip)."""

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        return Observation(at=end, window_seconds=end - start, pools=())


def _canary() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "chat", "namespace": WATCHED},
        "spec": {
            "target": {"name": "chat-canary", "kind": "InferenceService"},
            "baseline": {"name": "chat-baseline"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "chat",
                    "canary": {
                        "matchLabels": {
                            "serving.kserve.io/inferenceservice": "chat-canary",
                            "component": "predictor",
                        }
                    },
                    "baseline": {"matchLabels": {"app": "chat-baseline"}},
                }
            ],
            "source": {"kind": "podScrape"},
        },
    }


def _run(rules: set[Rule]) -> ApiServer:
    rbac = Rbac()
    for verb, group, resource in rules:
        rbac.allow(verb, group, resource)
    api = ApiServer(rbac=rbac).start()
    api.put(InferenceServiceTemplate("chat-canary", WATCHED).build())
    api.put(DeploymentTemplate("chat-baseline", WATCHED).build())
    api.put(_canary())
    api.clear_requests()  # seeding bypassed HTTP; only the controller's calls count
    kube = Kube.from_configuration(api.configuration())
    try:
        rec = Reconciler(
            kube,
            source_factory=lambda spec, ns, name: NoData(),
            events=EventRecorder(kube.api_client),
        )
        rec.reconcile(WATCHED, "chat")
    finally:
        kube.close()
    return api


def test_the_kserve_role_covers_an_inference_service_target_and_nothing_more() -> None:
    kserve = _rules("rbac", "kserve", "role.yaml")
    api = _run(_rules("rbac", "namespaced", "role.yaml") | kserve)
    try:
        refused = [r for r in api.requests if r.status == 403]
        assert refused == [], refused
        isvc = api.get("inferenceservices", WATCHED, "chat-canary", group="serving.kserve.io")
        assert "--speculative-config" in isvc["spec"]["predictor"]["model"]["args"]
        kinds = {(group, resource) for _, group, resource in kserve}
        used = {
            (r.verb, r.group, r.resource)
            for r in api.requests
            if r.namespace == WATCHED and (r.group, r.resource) in kinds
        }
        assert kserve <= used, f"unused KServe rules: {kserve - used}"
    finally:
        api.stop()


def test_without_the_kserve_role_the_refusal_names_the_resource() -> None:
    api = _run(_rules("rbac", "namespaced", "role.yaml"))
    try:
        events = [(e["reason"], e["message"]) for e in api.objects("events", WATCHED, group="")]
        assert any(
            reason == "Forbidden" and "inferenceservices" in message for reason, message in events
        ), events
        assert api.requests_matching(method="PATCH", resource="inferenceservices") == []
    finally:
        api.stop()
