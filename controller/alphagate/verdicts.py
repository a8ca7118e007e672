"""Each canary's current verdict and evidence as JSON over HTTP, for the canary tools teams run.

Argo Rollouts (an AnalysisTemplate with the `web` metric provider) and Flagger (a webhook gate)
ask one question: does speculation pay on this canary right now? The answer is what the
controller wrote into the SpeculativeCanary's status, read from the controller's own watch
cache (no API call per request; every replica keeps it, so leader or not they answer the same).
Callers are authenticated (`verdict_auth`: a TokenReview of their bearer token, 401 without
one) and see only the namespaces the API server lets them read speculativecanaries in (a
SubjectAccessReview: 403 for a canary of another namespace, left out of the list):

    GET  /api/v1/verdicts                      every canary in scope (a list)
    GET  /api/v1/verdicts/NAMESPACE/NAME       one canary: verdict, state and evidence
    POST /api/v1/gate/NAMESPACE/NAME           Flagger webhook: 200 when the verdict is Pass
                                               and fresh, 412 otherwise (the body says why)

`verdict` is the last decision's combined verdict (Pass, Fail, Inconclusive, Error) while it is
fresh; once the last evaluation is older than `staleAfterSeconds` (3 intervals) it reads
Inconclusive (`stale: true`, the old one in `lastVerdict`): a stale verdict never opens the
gate, and missing data never flips anything.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from alphagate.config import API_VERSION, GROUP, PLURAL
from alphagate.errors import KubeError
from alphagate.kube.status.fields import parse_time
from alphagate.kube.status.resource import parse_status
from alphagate.verdict_auth import Auth, Caller, TooManyReviews

PREFIX: Final = "/api/v1/"
DEFAULT_INTERVAL: Final = 30.0
STALE_INTERVALS: Final = 3.0

_ONE = re.compile(r"^/api/v1/(verdicts|gate)/([a-z0-9][-a-z0-9.]*)/([a-z0-9][-a-z0-9./]*)$")

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class Canaries(Protocol):
    """The SpeculativeCanaries the controller watches, as its cache holds them
    (`shell.watch.WatchLoop`)."""

    synced: threading.Event

    def cached_object(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def cached_objects(self) -> list[dict[str, Any]]: ...


def verdict_document(obj: dict[str, Any], *, now: float) -> dict[str, Any]:
    """One SpeculativeCanary -> the JSON an analysis tool reads (camelCase, no Nones)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    st = parse_status(obj)
    interval = float(((spec.get("timing") or {}).get("intervalSeconds")) or DEFAULT_INTERVAL)
    stale_after = STALE_INTERVALS * interval
    evaluated = parse_time(st.last_evaluated)
    age = None if evaluated is None else max(0.0, now - evaluated)
    stale = age is None or age > stale_after
    decision = st.last_decision
    decided = decision.verdict if decision is not None else "Inconclusive"
    # a stale verdict is no verdict: tools read `verdict`, so it says Inconclusive
    verdict = "Inconclusive" if stale else decided
    ready = st.condition("Ready")
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Verdict",
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "verdict": verdict,
        "pass": verdict == "Pass",
        "fail": verdict == "Fail",
        "lastVerdict": decided,
        "stale": stale,
        "ageSeconds": None if age is None else round(age, 3),
        "staleAfterSeconds": stale_after,
        "state": st.state,
        "speculationOn": st.speculation_on,
        "mode": st.mode or spec.get("mode"),
        "ready": None if ready is None else ready.status == "True",
        "combinedAlpha": st.combined_alpha,
        "combinedLower": st.combined_lower,
        "combinedUpper": st.combined_upper,
        "p99Ratio": st.p99_ratio,
        "lastEvaluated": st.last_evaluated,
        "observedGeneration": st.observed_generation,
        "generation": meta.get("generation"),
    }
    dumped = st.model_dump(mode="json", by_alias=True, exclude_none=True)
    for key in ("lastDecision", "slices", "latency", "units", "conditions"):
        if key in dumped:
            doc[key] = dumped[key]
    return {k: v for k, v in doc.items() if v is not None}


class VerdictApi:
    """The WSGI app behind /api/v1/ (mounted next to /metrics by `shell.server.serve`)."""

    def __init__(
        self,
        canaries: Canaries,
        *,
        auth: Auth,
        namespace: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.canaries = canaries
        self.auth = auth
        self.namespace = namespace  # the watched namespace; None: all
        self._clock = clock

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            return self._answer(environ, start_response)
        except TooManyReviews as exc:
            return _json(start_response, 429, {"error": str(exc)})
        except KubeError as exc:
            return _json(start_response, 503, {"error": f"cannot review the caller: {exc}"})

    def _answer(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", "/"))
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        listing = path.rstrip("/") == "/api/v1/verdicts"
        m = _ONE.match(path)
        if not listing and m is None:
            return _json(start_response, 404, {"error": f"no such endpoint: {path}"})
        caller = self.auth.who(_bearer(environ))
        if caller is None:
            return _json(start_response, 401, {"error": "a valid bearer token is required"})
        if not self.canaries.synced.is_set():
            return _json(start_response, 503, {"error": "the watch cache is not synced yet"})
        now = self._clock()
        if listing:
            if method != "GET":
                return _json(start_response, 405, {"error": "GET only"})
            docs = [verdict_document(o, now=now) for o in self._readable(caller)]
            return _json(start_response, 200, {"kind": "VerdictList", "items": docs})
        assert m is not None
        what, namespace, name = m.groups()
        if what == "verdicts" and method != "GET":
            return _json(start_response, 405, {"error": "GET only"})
        if what == "gate" and method not in ("POST", "GET"):
            return _json(start_response, 405, {"error": "POST (Flagger webhook) or GET"})
        if self.namespace is not None and namespace != self.namespace:
            return _json(
                start_response,
                404,
                {"error": f"namespace {namespace} is not watched by this controller"},
            )
        if not self.auth.may(caller, "get", namespace):
            return _json(
                start_response,
                403,
                {"error": f"{caller.user} may not get {PLURAL}.{GROUP} in {namespace}"},
            )
        _drain(environ)
        obj = self.canaries.cached_object(namespace, name)
        if obj is None:
            return _json(start_response, 404, {"error": f"no SpeculativeCanary at {path}"})
        doc = verdict_document(obj, now=now)
        if what == "verdicts":
            return _json(start_response, 200, doc)
        return _json(start_response, 200 if doc["pass"] else 412, doc)

    def _readable(self, caller: Caller) -> list[dict[str, Any]]:
        items = self.canaries.cached_objects()
        spaces = {str((o.get("metadata") or {}).get("namespace", "")) for o in items}
        allowed = {ns for ns in spaces if self.auth.may(caller, "list", ns)}
        return [o for o in items if (o.get("metadata") or {}).get("namespace") in allowed]


def _bearer(environ: Environ) -> str | None:
    header = str(environ.get("HTTP_AUTHORIZATION", ""))
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _drain(environ: Environ) -> None:
    """Read (and ignore, up to 64 KiB) a request body: Flagger's payload says nothing we need."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > 0 and environ.get("wsgi.input") is not None:
        environ["wsgi.input"].read(min(length, 65536))


_REASONS: Final = {
    200: "OK",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    412: "Precondition Failed",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def _json(start_response: StartResponse, code: int, body: Any) -> list[bytes]:
    data = (json.dumps(body, indent=2) + "\n").encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    if code == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="alphagate"'))
    start_response(f"{code} {_REASONS[code]}", headers)
    return [data]
