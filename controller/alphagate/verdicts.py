"""Each canary's current verdict and evidence as JSON over HTTP, for the canary tools teams run.

Argo Rollouts (an AnalysisTemplate with the `web` metric provider) and Flagger (a webhook gate)
ask one question: does speculation pay on this canary right now? The answer is what the
controller wrote into the SpeculativeCanary's status, read from the API on each request (both
replicas answer the same, leader or not; a 2 s cache spares the API server a burst):

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
from typing import Any, Final

from alphagate.config import API_VERSION, GROUP, PLURAL, VERSION
from alphagate.errors import KubeError, NotFoundError
from alphagate.kube.client import Kube, call
from alphagate.kube.status import parse_status, parse_time

PREFIX: Final = "/api/v1/"
CACHE_SECONDS: Final = 2.0
DEFAULT_INTERVAL: Final = 30.0
STALE_INTERVALS: Final = 3.0

_ONE = re.compile(r"^/api/v1/(verdicts|gate)/([a-z0-9][-a-z0-9.]*)/([a-z0-9][-a-z0-9./]*)$")

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


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
        kube: Kube,
        *,
        namespace: str | None = None,
        clock: Callable[[], float] = time.time,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self.kube = kube
        self.namespace = namespace  # the watched namespace; None: all
        self._clock = clock
        self.cache_seconds = cache_seconds
        self._cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ reading

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        key = (namespace, name)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.cache_seconds:
                return hit[1]
        obj = call(
            f"read {PLURAL}.{GROUP} {namespace}/{name}",
            lambda: self.kube.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            ),
        )
        out = obj if isinstance(obj, dict) else {}
        with self._lock:
            self._cache[key] = (now, out)
            if len(self._cache) > 1024:
                self._cache.clear()
        return out

    def _list(self) -> list[dict[str, Any]]:
        ns = self.namespace
        if ns is None:
            result = call(
                f"list {PLURAL}.{GROUP}",
                lambda: self.kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL),
            )
        else:
            result = call(
                f"list {PLURAL}.{GROUP} in {ns}",
                lambda: self.kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL),
            )
        items = result.get("items", []) if isinstance(result, dict) else []
        return [i for i in items if isinstance(i, dict)]

    # ------------------------------------------------------------ HTTP

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", "/"))
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        try:
            if path.rstrip("/") == "/api/v1/verdicts" and method == "GET":
                now = self._clock()
                docs = [verdict_document(o, now=now) for o in self._list()]
                return _json(start_response, 200, {"kind": "VerdictList", "items": docs})
            m = _ONE.match(path)
            if m is None:
                return _json(start_response, 404, {"error": f"no such endpoint: {path}"})
            what, namespace, name = m.groups()
            if self.namespace is not None and namespace != self.namespace:
                return _json(
                    start_response,
                    404,
                    {"error": f"namespace {namespace} is not watched by this controller"},
                )
            if what == "verdicts" and method != "GET":
                return _json(start_response, 405, {"error": "GET only"})
            if what == "gate" and method not in ("POST", "GET"):
                return _json(start_response, 405, {"error": "POST (Flagger webhook) or GET"})
            _drain(environ)
            doc = verdict_document(self._read(namespace, name), now=self._clock())
            if what == "verdicts":
                return _json(start_response, 200, doc)
            code = 200 if doc["pass"] else 412
            return _json(start_response, code, doc)
        except NotFoundError:
            return _json(start_response, 404, {"error": f"no SpeculativeCanary at {path}"})
        except KubeError as exc:
            return _json(start_response, 503, {"error": str(exc)})


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
    404: "Not Found",
    405: "Method Not Allowed",
    412: "Precondition Failed",
    503: "Service Unavailable",
}


def _json(start_response: StartResponse, code: int, body: Any) -> list[bytes]:
    data = (json.dumps(body, indent=2) + "\n").encode()
    start_response(
        f"{code} {_REASONS[code]}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]
