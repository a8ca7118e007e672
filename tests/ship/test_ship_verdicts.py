"""The verdict API with the canary tools teams run: the shipped Argo Rollouts AnalysisTemplate
(its `web` provider URL, `jsonPath` and success/failure conditions, evaluated as Argo does:
JSONPath on the answer, the condition as an expression over `result`, here with CEL, which
shares the subset the template uses) and the Flagger webhook gate, against the real HTTP
server and the API server double."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import celpy
import httpx
import pytest
import ship_support as ship
import yaml
from prometheus_client import CollectorRegistry

from alphagate.config import GROUP, VERSION
from alphagate.kube.client import Kube
from alphagate.kube.status import CanaryStatus, Decision, rfc3339
from alphagate.shell import server as metrics_server
from alphagate.verdicts import VerdictApi
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

NOW = 1_800_000_000.0
NS = "llm"
TEMPLATE = ship.DEPLOY / "integrations" / "argo-rollouts" / "analysistemplate.yaml"
FLAGGER = ship.DEPLOY / "integrations" / "flagger" / "canary-webhook.yaml"


def _canary(name: str, verdict: str, evaluated: float) -> dict[str, Any]:
    status = CanaryStatus(
        state="On" if verdict == "Pass" else "RolledBack",
        speculation_on=verdict == "Pass",
        combined_alpha=0.71 if verdict == "Pass" else 0.41,
        last_evaluated=rfc3339(evaluated),
        last_decision=Decision(
            at=rfc3339(evaluated),
            action="hold" if verdict == "Pass" else "disable",
            verdict=verdict,
            reason="r",
            state="On" if verdict == "Pass" else "RolledBack",
        ),
    )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeCanary",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"timing": {"intervalSeconds": 30}},
        "status": status.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


@pytest.fixture
def api(shipped_rbac: Rbac) -> Iterator[str]:
    with ApiServer(rbac=shipped_rbac) as apiserver:  # the verdict API runs as the controller
        apiserver.put(_canary("good", "Pass", NOW - 10))
        apiserver.put(_canary("bad", "Fail", NOW - 10))
        apiserver.put(_canary("old", "Pass", NOW - 600))  # 20 intervals ago: stale
        apiserver.put(_canary("unsure", "Inconclusive", NOW - 10))
        kube = Kube.from_configuration(apiserver.configuration())
        verdicts = VerdictApi(kube, namespace=NS, clock=lambda: NOW)
        with metrics_server.serve(0, CollectorRegistry(), api=verdicts) as server:
            yield server.url
        kube.close()


# ---------------------------------------------------------------- Argo Rollouts, as Argo reads it


def _jsonpath(template: str, doc: Any) -> Any:
    """Kubernetes JSONPath for the `{$.a.b}` form the template uses (Argo's web provider)."""
    m = re.fullmatch(r"\{\$((?:\.[A-Za-z0-9_]+)*)\}", template)
    assert m, f"the template uses a JSONPath form this test does not model: {template}"
    for part in [p for p in m.group(1).split(".") if p]:
        doc = doc[part]
    return doc


def _condition(expr: str, result: Any) -> bool:
    env = celpy.Environment()
    value = env.program(env.compile(expr)).evaluate({"result": celpy.json_to_cel(result)})
    return bool(value)


def _argo_measure(base: str, namespace: str, canary: str) -> str:
    """One Argo measurement of the shipped template: Successful, Failed, Inconclusive, Error."""
    (metric,) = yaml.safe_load(TEMPLATE.read_text())["spec"]["metrics"]
    web = metric["provider"]["web"]
    url = web["url"].replace("{{args.namespace}}", namespace).replace("{{args.canary}}", canary)
    path = url.split("://", 1)[1].split("/", 1)[1]
    assert url.startswith("http://alphagate-metrics.alphagate-system.svc:8080/")
    resp = httpx.get(f"{base}/{path}", timeout=web["timeoutSeconds"])
    if resp.status_code >= 300:
        return "Error"  # Argo's web provider errors on a non-2xx answer
    result = _jsonpath(web["jsonPath"], resp.json())
    if _condition(metric["successCondition"], result):
        return "Successful"
    if _condition(metric["failureCondition"], result):
        return "Failed"
    return "Inconclusive"


@pytest.mark.parametrize(
    ("canary", "phase"),
    [
        ("good", "Successful"),
        ("bad", "Failed"),
        ("old", "Inconclusive"),  # a stale Pass never passes
        ("unsure", "Inconclusive"),
        ("missing", "Error"),
    ],
)
def test_argo_rollouts_analysis_template(api: str, canary: str, phase: str) -> None:
    assert _argo_measure(api, NS, canary) == phase


def test_the_template_is_well_formed() -> None:
    doc = yaml.safe_load(TEMPLATE.read_text())
    assert doc["apiVersion"] == "argoproj.io/v1alpha1" and doc["kind"] == "AnalysisTemplate"
    assert [a["name"] for a in doc["spec"]["args"]] == ["namespace", "canary"]
    (metric,) = doc["spec"]["metrics"]
    assert metric["failureLimit"] >= 1 and metric["inconclusiveLimit"] >= 1
    service = next(o for o in ship.load_all(ship.DEPLOY / "base" / "service.yaml"))
    port = service["spec"]["ports"][0]["port"]
    host = f"{service['metadata']['name']}.alphagate-system.svc:{port}"
    assert f"http://{host}/api/v1/verdicts/" in metric["provider"]["web"]["url"]


# ---------------------------------------------------------------- Flagger webhook gate


@pytest.mark.parametrize(
    ("canary", "code"), [("good", 200), ("bad", 412), ("old", 412), ("unsure", 412)]
)
def test_flagger_webhook_gate(api: str, canary: str, code: int) -> None:
    doc = yaml.safe_load(FLAGGER.read_text())
    hooks = doc["spec"]["analysis"]["webhooks"]
    assert {h["type"] for h in hooks} == {"confirm-promotion", "pre-rollout"}
    for hook in hooks:
        path = hook["url"].split(":8080", 1)[1].replace("llama-3-1-8b-chat", canary)
        # Flagger's payload: the Canary's name, namespace, phase and the webhook's metadata
        payload = {"name": "llama-3-1-8b-chat", "namespace": NS, "phase": "Progressing"}
        resp = httpx.post(f"{api}{path}", json=payload, timeout=10)
        assert resp.status_code == code, resp.text
        body = resp.json()
        assert body["name"] == canary and body["pass"] is (code == 200)


# ---------------------------------------------------------------- the API itself


def test_list_detail_and_errors(api: str) -> None:
    listed = httpx.get(f"{api}/api/v1/verdicts", timeout=10).json()
    assert listed["kind"] == "VerdictList"
    by = {d["name"]: d for d in listed["items"]}
    assert set(by) == {"good", "bad", "old", "unsure"}
    assert by["old"]["stale"] is True and by["old"]["lastVerdict"] == "Pass"
    assert by["old"]["verdict"] == "Inconclusive" and by["old"]["ageSeconds"] == 600
    good = by["good"]
    assert good["verdict"] == "Pass" and good["stale"] is False and good["combinedAlpha"] == 0.71
    assert good["lastDecision"]["action"] == "hold"  # the evidence travels with it
    assert httpx.get(f"{api}/api/v1/verdicts/other/good", timeout=10).status_code == 404
    assert httpx.post(f"{api}/api/v1/verdicts/llm/good", timeout=10).status_code == 405
    assert httpx.get(f"{api}/api/v1/nothing", timeout=10).status_code == 404
    assert httpx.get(f"{api}/metrics", timeout=10).status_code == 200  # next to /metrics
