"""The verdict API with the canary tools teams run: the shipped Argo Rollouts AnalysisTemplate
(its `web` provider URL, `jsonPath` and success/failure conditions, evaluated as Argo does:
JSONPath on the answer, the condition as an expression over `result`, here with CEL, which
shares the subset the template uses) and the Flagger webhook gate, against the real HTTP
server and the API server double. The answers come from the controller's watch cache; callers
are authenticated by TokenReview and held to their namespaces by SubjectAccessReview (or, with
the admin's switch, not at all)."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import celpy
import httpx
import pytest
import ship_support as ship
from prometheus_client import CollectorRegistry

from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.kube.client import Kube
from alphagate.kube.status.fields import rfc3339
from alphagate.kube.status.resource import CanaryStatus, Decision
from alphagate.shell import server as metrics_server
from alphagate.shell.watch import WatchLoop
from alphagate.verdict_auth import Auth, OpenAuth, TokenReviewAuth
from alphagate.verdicts import VerdictApi
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

NOW = 1_800_000_000.0
NS = "llm"
READER = "argo-reader-token"  # a ServiceAccount token that may read canaries in llm
OUTSIDER = "team-b-token"  # one that may read canaries in team-b only
TEMPLATE = ship.DEPLOY / "integrations" / "argo-rollouts" / "analysistemplate.yaml"
FLAGGER = ship.DEPLOY / "integrations" / "flagger" / "canary-webhook.yaml"
# One TLS context for every request: httpx otherwise builds one per call (loading the CA
# bundle: most of this module's CPU), though these servers speak plain HTTP on 127.0.0.1.
# Each request still opens its own connection.
TLS = ssl.create_default_context()


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
        "spec": {"timing": {"intervalSeconds": 30}},  # = default
        "status": status.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def _cache(kube: Kube, namespace: str | None = NS) -> WatchLoop:
    """The controller's watch cache, listed once (what the verdict API answers from)."""
    cache = WatchLoop(
        kube,
        namespace=namespace,
        label_selector=None,
        clock=lambda: NOW,
        watch_timeout_seconds=5,
        health=None,
        owns=None,
    )
    cache.relist()
    return cache


@pytest.fixture
def apiserver(shipped_rbac: Rbac) -> Iterator[ApiServer]:
    with ApiServer(rbac=shipped_rbac) as server:  # the verdict API runs as the controller
        server.put(_canary("good", "Pass", NOW - 10))
        server.put(_canary("bad", "Fail", NOW - 10))
        server.put(_canary("old", "Pass", NOW - 600))  # 20 intervals ago: stale
        server.put(_canary("unsure", "Inconclusive", NOW - 10))
        other = _canary("theirs", "Pass", NOW - 10)
        other["metadata"]["namespace"] = "team-b"
        server.put(other)
        reads = ("get", "list")
        reader = "system:serviceaccount:argo-rollouts:reader"
        server.users.add(READER, reader, grants=[(v, GROUP, PLURAL, NS) for v in reads])
        server.users.add(
            OUTSIDER, "team-b-dev", grants=[(v, GROUP, PLURAL, "team-b") for v in reads]
        )
        yield server


def _serve(
    apiserver: ApiServer, auth: Callable[[Kube], Auth], namespace: str | None
) -> Iterator[str]:
    kube = Kube.from_configuration(apiserver.configuration())
    verdicts = VerdictApi(_cache(kube, namespace), auth=auth(kube), namespace=namespace,
                          clock=lambda: NOW)  # fmt: skip
    with metrics_server.serve(0, CollectorRegistry(), api=verdicts) as server:
        yield server.url
    kube.close()


@pytest.fixture
def api(apiserver: ApiServer) -> Iterator[str]:
    """The shipped default: callers authenticated by TokenReview."""
    yield from _serve(apiserver, TokenReviewAuth, NS)


@pytest.fixture
def open_api(apiserver: ApiServer) -> Iterator[str]:
    """The admin's switch (--verdict-api-auth none), what Flagger's webhooks need."""
    yield from _serve(apiserver, lambda kube: OpenAuth(), NS)


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
    (metric,) = ship.yaml_load(TEMPLATE.read_text())["spec"]["metrics"]
    web = metric["provider"]["web"]
    url = web["url"].replace("{{args.namespace}}", namespace).replace("{{args.canary}}", canary)
    path = url.split("://", 1)[1].split("/", 1)[1]
    assert url.startswith("http://alphagate-metrics.alphagate-system.svc:8080/")
    headers = {h["key"]: h["value"].replace("{{args.token}}", READER) for h in web["headers"]}
    resp = httpx.get(f"{base}/{path}", verify=TLS, timeout=web["timeoutSeconds"], headers=headers)
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
    doc = ship.yaml_load(TEMPLATE.read_text())
    assert doc["apiVersion"] == "argoproj.io/v1alpha1" and doc["kind"] == "AnalysisTemplate"
    assert [a["name"] for a in doc["spec"]["args"]] == ["namespace", "canary", "token"]
    token = doc["spec"]["args"][2]["valueFrom"]["secretKeyRef"]  # from a Secret, not inline
    assert token == {"name": "alphagate-verdict-reader", "key": "token"}
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
def test_flagger_webhook_gate(open_api: str, canary: str, code: int) -> None:
    api = open_api
    doc = ship.yaml_load(FLAGGER.read_text())
    hooks = doc["spec"]["analysis"]["webhooks"]
    assert {h["type"] for h in hooks} == {"confirm-promotion", "pre-rollout"}
    for hook in hooks:
        path = hook["url"].split(":8080", 1)[1].replace("llama-3-1-8b-chat", canary)
        # Flagger's payload: the Canary's name, namespace, phase and the webhook's metadata
        payload = {"name": "llama-3-1-8b-chat", "namespace": NS, "phase": "Progressing"}
        resp = httpx.post(f"{api}{path}", json=payload, verify=TLS, timeout=10)
        assert resp.status_code == code, resp.text
        body = resp.json()
        assert body["name"] == canary and body["pass"] is (code == 200)


# ---------------------------------------------------------------- the API itself


def test_list_detail_and_errors(open_api: str) -> None:
    api = open_api
    listed = httpx.get(f"{api}/api/v1/verdicts", verify=TLS, timeout=10).json()
    assert listed["kind"] == "VerdictList"
    by = {d["name"]: d for d in listed["items"]}
    assert set(by) == {"good", "bad", "old", "unsure"}
    assert by["old"]["stale"] is True and by["old"]["lastVerdict"] == "Pass"
    assert by["old"]["verdict"] == "Inconclusive" and by["old"]["ageSeconds"] == 600
    good = by["good"]
    assert good["verdict"] == "Pass" and good["stale"] is False and good["combinedAlpha"] == 0.71
    assert good["lastDecision"]["action"] == "hold"  # the evidence travels with it
    assert httpx.get(f"{api}/api/v1/verdicts/other/good", verify=TLS, timeout=10).status_code == 404
    assert httpx.post(f"{api}/api/v1/verdicts/llm/good", verify=TLS, timeout=10).status_code == 405
    assert httpx.get(f"{api}/api/v1/nothing", verify=TLS, timeout=10).status_code == 404
    assert (
        httpx.get(f"{api}/metrics", verify=TLS, timeout=10).status_code == 200
    )  # next to /metrics


# ---------------------------------------------------------------- who may read what


def _get(base: str, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}{path}", headers=headers, verify=TLS, timeout=10)


def test_callers_are_reviewed_and_held_to_their_namespaces(apiserver: ApiServer) -> None:
    for base in _serve(apiserver, TokenReviewAuth, None):  # every namespace watched
        assert _get(base, "/api/v1/verdicts/llm/good").status_code == 401
        assert _get(base, "/api/v1/verdicts/llm/good", "made-up").status_code == 401
        assert _get(base, "/api/v1/verdicts/llm/good", READER).json()["verdict"] == "Pass"
        refused = _get(base, "/api/v1/verdicts/llm/good", OUTSIDER)
        assert refused.status_code == 403 and "team-b-dev" in refused.json()["error"]
        # not even whether it exists: 403 before 404
        assert _get(base, "/api/v1/verdicts/llm/nothing", OUTSIDER).status_code == 403
        theirs = _get(base, "/api/v1/verdicts", OUTSIDER).json()["items"]
        mine = _get(base, "/api/v1/verdicts", READER).json()["items"]
        assert [(d["namespace"], d["name"]) for d in theirs] == [("team-b", "theirs")]
        assert {d["namespace"] for d in mine} == {NS} and len(mine) == 4
        gate = httpx.post(f"{base}/api/v1/gate/team-b/theirs", verify=TLS, timeout=10)
        assert gate.status_code == 401


def test_requests_are_answered_from_the_cache_with_one_review(apiserver: ApiServer) -> None:
    for base in _serve(apiserver, TokenReviewAuth, NS):
        apiserver.clear_requests()
        for _ in range(30):
            assert _get(base, "/api/v1/verdicts/llm/good", READER).status_code == 200
        calls = [(r.verb, r.resource) for r in apiserver.requests]
        # before: one GET of the canary per request; now one review of the token and one
        # of its access, then the cache
        assert sorted(calls) == [("create", "subjectaccessreviews"), ("create", "tokenreviews")]


def test_a_flood_of_made_up_tokens_is_not_a_flood_of_reviews(apiserver: ApiServer) -> None:
    def still(kube: Kube) -> Auth:  # the clock stands still: no review budget refills
        return TokenReviewAuth(kube, clock=lambda: 100.0)

    for base in _serve(apiserver, still, NS):
        apiserver.clear_requests()
        codes = [
            _get(base, "/api/v1/verdicts/llm/good", f"fake-{i}").status_code for i in range(80)
        ]
        reviews = len(apiserver.requests_matching(resource="tokenreviews"))
        assert codes == [401] * 50 + [429] * 30  # the burst of 50 reviews, then 429
        assert reviews == 50
