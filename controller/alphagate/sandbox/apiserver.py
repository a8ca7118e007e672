"""A Kubernetes API server test double on 127.0.0.1: stateful, over real HTTP.

No real kube-apiserver can run here, so tests and the demo talk to this one through the real
`kubernetes` client. It keeps the semantics the controller depends on: a global
resourceVersion with 409 Conflict on a stale write, 404/403/422/500 as `Status` objects,
status subresources (writes to `/status` change only status, writes to the main resource ignore
it, `metadata.generation` bumps when the spec changes), list with label and field selectors,
watch streams (newline-delimited JSON, chunked) resumable from a resourceVersion, JSON patch
(with `test`), merge patch and enough strategic merge patch for containers. On top: an RBAC
allow-list, scripted faults, a request log, and a pluggable "kubelet" that moves Deployment
rollout status along when the pod template changes.

It is a double, not an emulator: admission, defaulting, garbage collection and most
validation are absent on purpose.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from alphagate.errors import SandboxError

HOST: Final = "127.0.0.1"
JSON: Final = "application/json"


def now_rfc3339() -> str:
    """Kubernetes `Time`: second precision, UTC, `Z` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- resource types


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource the double serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    generation: bool = False  # metadata.generation bumps when anything but metadata/status changes

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`deployments.apps`, `pods` (core): how RBAC and the store name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


_STATUS = frozenset({"status"})

DEFAULT_TYPES: Final[tuple[ResourceType, ...]] = (
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
    ResourceType("", "v1", "pods", "Pod", subresources=_STATUS),
    ResourceType("", "v1", "events", "Event"),
    ResourceType("", "v1", "configmaps", "ConfigMap"),
    ResourceType("", "v1", "services", "Service", subresources=_STATUS),
    ResourceType("apps", "v1", "deployments", "Deployment", subresources=_STATUS, generation=True),
    ResourceType("events.k8s.io", "v1", "events", "Event"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        subresources=_STATUS,
    ),
    ResourceType(
        "alphagate.io",
        "v1alpha1",
        "speculativecanaries",
        "SpeculativeCanary",
        subresources=_STATUS,
        generation=True,
    ),
)


# ---------------------------------------------------------------- errors as Status objects


class ApiError(Exception):
    """Raised inside the double; becomes a `Status` response with `code`."""

    REASONS: Final[dict[int, str]] = {
        400: "BadRequest",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Expired",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }

    def __init__(self, code: int, message: str, *, reason: str | None = None) -> None:
        self.code = code
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.message = message
        super().__init__(f"{code} {self.reason}: {message}")

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


# ---------------------------------------------------------------- RBAC and faults


class Rbac:
    """An allow-list of (verb, apiGroup, resource) with `*` wildcards; denials win.

    `resource` may carry a subresource (`speculativecanaries/status`). A double-level
    shorthand: `Rbac.allow_all().deny("patch", "apps", "deployments")` removes one permission.
    """

    def __init__(self, rules: Iterable[tuple[str, str, str]] = ()) -> None:
        self._allow: set[tuple[str, str, str]] = set(rules)
        self._deny: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    @classmethod
    def allow_all(cls) -> Rbac:
        return cls([("*", "*", "*")])

    def allow(self, verbs: str | Iterable[str], group: str, resources: str | Iterable[str]) -> Rbac:
        with self._lock:
            for v in [verbs] if isinstance(verbs, str) else verbs:
                for r in [resources] if isinstance(resources, str) else resources:
                    self._allow.add((v, group, r))
                    self._deny.discard((v, group, r))
        return self

    def deny(self, verbs: str | Iterable[str], group: str, resources: str | Iterable[str]) -> Rbac:
        with self._lock:
            for v in [verbs] if isinstance(verbs, str) else verbs:
                for r in [resources] if isinstance(resources, str) else resources:
                    self._deny.add((v, group, r))
        return self

    @staticmethod
    def _match(rules: set[tuple[str, str, str]], verb: str, group: str, resource: str) -> bool:
        return any(
            rv in ("*", verb) and rg in ("*", group) and rr in ("*", resource)
            for rv, rg, rr in rules
        )

    def allows(self, verb: str, group: str, resource: str) -> bool:
        with self._lock:
            if self._match(self._deny, verb, group, resource):
                return False
            return self._match(self._allow, verb, group, resource)


@dataclass(slots=True)
class Fault:
    """A scripted failure: requests matching `method` and `path` get `status`, `times` times
    (None: until removed). `hits` counts how often it fired."""

    method: str
    path: re.Pattern[str]
    status: int
    times: int | None
    reason: str | None = None
    message: str = "injected fault"
    hits: int = 0

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Faults:
    """Fault injection table, checked before RBAC and before any state change."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int | None = 1,
        reason: str | None = None,
        message: str = "injected fault",
    ) -> Fault:
        """`method` is an HTTP method or `*`; `path_regex` is searched in the URL path."""
        fault = Fault(method.upper(), re.compile(path_regex), status, times, reason, message)
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def fire(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.exhausted:
                    continue
                if fault.method in ("*", method) and fault.path.search(path):
                    fault.hits += 1
                    return fault
        return None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the double saw it; `body` is parsed JSON (None if absent)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    status: int
    verb: str = ""
    resource: str = ""  # plural[/subresource]
    group: str = ""
    namespace: str = ""
    name: str = ""


# ---------------------------------------------------------------- selectors

_SEL_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_SEL_CMP = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s,()]*)\s*$")
_SEL_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p for p in parts if p.strip()]


def _label_test(part: str, text: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SEL_SET.match(part):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _SEL_CMP.match(part):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SEL_EXISTS.match(part):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise ApiError(400, f"unable to parse requirement: {part!r} in selector {text!r}")


def label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Parse a Kubernetes label selector (`a=b,c!=d,e in (f,g),!h`) into a predicate."""
    tests = [_label_test(part, text) for part in _split_selector(text or "")]
    return lambda labels: all(t(labels) for t in tests)


def _dig(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_selector(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """`metadata.name=x,involvedObject.kind=Pod`: equality and inequality on dotted paths."""
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split_selector(text or ""):
        m = _SEL_CMP.match(part)
        if not m:
            raise ApiError(400, f"invalid field selector requirement {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)

        def test(obj: Mapping[str, Any], p: str = path, o: str = op, v: str = value) -> bool:
            got = _dig(obj, p)
            got_s = "" if got is None else str(got)
            return got_s != v if o == "!=" else got_s == v

        tests.append(test)
    return lambda obj: all(t(obj) for t in tests)


# ---------------------------------------------------------------- patches


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"json patch: invalid pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict):
            if part not in cur:
                raise ApiError(422, f"json patch: path {path!r} not found")
            cur = cur[part]
        elif isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError) as exc:
                raise ApiError(422, f"json patch: bad array index in {path!r}") from exc
        else:
            raise ApiError(422, f"json patch: path {path!r} crosses a scalar")
    return cur


def _jp_get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def _jp_remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise ApiError(422, "json patch: cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise ApiError(422, f"json patch: cannot remove missing {path!r}")
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError) as exc:
            raise ApiError(422, f"json patch: bad array index in {path!r}") from exc
    raise ApiError(422, f"json patch: cannot remove from a scalar at {path!r}")


def _jp_add(doc: Any, path: str, value: Any, *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"json patch: cannot replace missing {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError as exc:
                raise ApiError(422, f"json patch: bad array index in {path!r}") from exc
            if replace:
                if not 0 <= idx < len(parent):
                    raise ApiError(422, f"json patch: index out of range in {path!r}")
                parent[idx] = value
            else:
                if not 0 <= idx <= len(parent):
                    raise ApiError(422, f"json patch: index out of range in {path!r}")
                parent.insert(idx, value)
    else:
        raise ApiError(422, f"json patch: cannot add into a scalar at {path!r}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 on a deep copy. A failed `test` is 422, as kube-apiserver answers."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch body must be a list of operations")
    out = copy.deepcopy(doc)
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"json patch operation {i} needs `op` and `path`")
        kind, path = op["op"], op["path"]
        if kind == "add":
            out = _jp_add(out, path, copy.deepcopy(op.get("value")))
        elif kind == "replace":
            out = _jp_add(out, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _jp_remove(out, path)
        elif kind == "test":
            if _jp_get(out, path) != op.get("value"):
                raise ApiError(
                    422,
                    f"json patch: test operation {i} failed at {path!r}: "
                    f"expected {op.get('value')!r}",
                )
        elif kind == "move":
            value = _jp_remove(out, op["from"])
            out = _jp_add(out, path, value)
        elif kind == "copy":
            out = _jp_add(out, path, copy.deepcopy(_jp_get(out, op["from"])))
        else:
            raise ApiError(400, f"json patch: unknown op {kind!r}")
    return out


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Lists merged by key in strategic merge patch (the subset of Kubernetes' patchMergeKey tags
# the controller and the demo touch); every other list is replaced whole.
STRATEGIC_MERGE_KEYS: Final[dict[str, str]] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}


def strategic_merge_patch(doc: Any, patch: Any) -> Any:
    """Strategic merge: like merge patch, but `containers` (and friends) merge by key and
    `$patch: delete|replace` directives work on list items and maps."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif key in STRATEGIC_MERGE_KEYS and isinstance(value, list):
            out[key] = _merge_list(out.get(key) or [], value, STRATEGIC_MERGE_KEYS[key])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(out.get(key), value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(orig: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = copy.deepcopy(orig)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(422, f"strategic merge patch: list item without merge key {key!r}")
        idx = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item[key]),
            None,
        )
        directive = item.get("$patch")
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
        elif directive == "replace" or idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


PATCHERS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}


# ---------------------------------------------------------------- kubelet hooks

Kubelet = Callable[["ApiServer", dict[str, Any]], None]


class RolloutCompleter:
    """The default "kubelet": marks a Deployment's rollout complete, now or after `delay`.

    With a delay, the Deployment first reports the new generation observed but no updated
    replicas (a rollout in progress), then completes.
    """

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds

    def __call__(self, server: ApiServer, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        ns, name, gen = meta.get("namespace", ""), meta["name"], meta.get("generation", 1)
        replicas = int(deployment.get("spec", {}).get("replicas", 1))
        if self.delay_seconds <= 0:
            server.complete_rollout(ns, name, generation=gen)
            return
        server.set_deployment_status(
            ns,
            name,
            {
                "observedGeneration": gen,
                "replicas": replicas,
                "updatedReplicas": 0,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            },
        )
        server.call_later(
            self.delay_seconds, lambda: server.complete_rollout(ns, name, generation=gen)
        )


# ---------------------------------------------------------------- the store


@dataclass(slots=True)
class _WatchEvent:
    rv: int
    type_key: str
    namespace: str
    kind: str  # ADDED / MODIFIED / DELETED
    obj: dict[str, Any]


def _strip_for_generation(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class ApiServer:
    """The API server double. Use as a context manager or call start()/stop().

    Test helpers that bypass HTTP (and RBAC/faults) but keep resourceVersion and watch
    semantics: `put`, `get`, `delete`, `objects`, `set_deployment_status`, `complete_rollout`.
    """

    def __init__(
        self,
        *,
        types: Iterable[ResourceType] = DEFAULT_TYPES,
        rbac: Rbac | None = None,
        kubelet: Kubelet | str | None = "default",
        watch_history: int = 10_000,
        default_watch_timeout: float = 300.0,
        port: int = 0,
    ) -> None:
        self.types: dict[tuple[str, str, str], ResourceType] = {
            (t.group, t.version, t.plural): t for t in types
        }
        self.rbac = rbac if rbac is not None else Rbac.allow_all()
        self.faults = Faults()
        self.kubelet: Kubelet | None = (
            RolloutCompleter() if kubelet == "default" else kubelet  # type: ignore[assignment]
        )
        self.default_watch_timeout = default_watch_timeout
        self._port = port
        self._cond = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 0
        self._history: deque[_WatchEvent] = deque(maxlen=watch_history)
        self._requests: list[RecordedRequest] = []
        self._req_lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> ApiServer:
        if self._httpd is not None:
            return self
        try:
            httpd = ThreadingHTTPServer((HOST, self._port), _make_handler(self))
        except OSError as exc:
            raise SandboxError(
                f"API server double: cannot bind {HOST}:{self._port}: {exc}"
            ) from exc
        httpd.daemon_threads = True
        self._httpd = httpd
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name=f"apiserver:{httpd.server_port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for timer in list(self._timers):
            timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise SandboxError("API server double is not running")
        return int(self._httpd.server_port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def configuration(self) -> Any:
        """A `kubernetes.client.Configuration` pointing at this double (no TLS, no auth)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = 1
        return cfg

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        """Run `fn` after `delay` seconds unless the server stops first."""

        def run() -> None:
            if not self._stopping.is_set():
                with contextlib.suppress(ApiError):  # the object went away meanwhile
                    fn()

        timer = threading.Timer(delay, run)
        timer.daemon = True
        self._timers = [t for t in self._timers if t.is_alive()]
        self._timers.append(timer)
        timer.start()

    # ------------------------------------------------------------ request log

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._req_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._req_lock:
            self._requests.clear()

    def requests_matching(
        self,
        *,
        method: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        name: str | None = None,
    ) -> list[RecordedRequest]:
        """Requests filtered by exact method/verb/resource/name and a regex on the path."""
        rx = re.compile(path) if path else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (name is None or r.name == name)
            and (rx is None or rx.search(r.path))
        ]

    def _record(self, req: RecordedRequest) -> None:
        with self._req_lock:
            self._requests.append(req)

    # ------------------------------------------------------------ type lookup

    def resource_type(self, plural: str, group: str | None = None) -> ResourceType:
        """Find a type by plural (and group when ambiguous, e.g. `events`)."""
        found = [
            t
            for t in self.types.values()
            if t.plural == plural and (group is None or t.group == group)
        ]
        if not found:
            raise SandboxError(f"API server double serves no resource {plural!r} (group {group!r})")
        found.sort(key=lambda t: t.group != "")  # core group first for `events`
        return found[0]

    # ------------------------------------------------------------ direct helpers (no HTTP)

    def put(self, obj: Mapping[str, Any], *, group: str | None = None) -> dict[str, Any]:
        """Create or overwrite an object exactly as given (status included), bumping the
        resourceVersion and notifying watchers. For seeding tests and the demo."""
        rtype = self._type_of(obj, group)
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if rtype.namespaced:
            meta.setdefault("namespace", "default")
        ns = meta.get("namespace", "") if rtype.namespaced else ""
        key = (rtype.key, ns, meta["name"])
        with self._cond:
            old = self._objects.get(key)
            self._fill_meta(rtype, body, old)
            if old is not None and rtype.generation:
                meta["generation"] = old["metadata"].get("generation", 1) + (
                    1 if _strip_for_generation(old) != _strip_for_generation(body) else 0
                )
            self._commit(rtype, key, body, "MODIFIED" if old else "ADDED")
            stored = copy.deepcopy(body)
        self._after_write(rtype, old, stored)
        return stored

    def get(
        self, plural: str, namespace: str, name: str, *, group: str | None = None
    ) -> dict[str, Any]:
        rtype = self.resource_type(plural, group)
        with self._cond:
            obj = self._objects.get((rtype.key, namespace if rtype.namespaced else "", name))
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found', reason="NotFound")
            return copy.deepcopy(obj)

    def objects(
        self, plural: str, namespace: str | None = None, *, group: str | None = None
    ) -> list[dict[str, Any]]:
        rtype = self.resource_type(plural, group)
        with self._cond:
            return [
                copy.deepcopy(o)
                for (k, ns, _), o in sorted(self._objects.items())
                if k == rtype.key and (namespace is None or ns == namespace)
            ]

    def delete(self, plural: str, namespace: str, name: str, *, group: str | None = None) -> None:
        rtype = self.resource_type(plural, group)
        key = (rtype.key, namespace if rtype.namespaced else "", name)
        with self._cond:
            obj = self._objects.pop(key, None)
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            self._emit(rtype, key[1], "DELETED", obj)

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def set_deployment_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge `status` into a Deployment's status (what the real deployment controller
        and kubelets do between them)."""
        rtype = self.resource_type("deployments", "apps")
        key = (rtype.key, namespace, name)
        with self._cond:
            obj = self._objects.get(key)
            if obj is None:
                raise ApiError(404, f'deployments.apps "{name}" not found')
            new = copy.deepcopy(obj)
            new["status"] = {**(obj.get("status") or {}), **copy.deepcopy(dict(status))}
            if new == obj:
                return copy.deepcopy(obj)
            self._commit(rtype, key, new, "MODIFIED")
            return copy.deepcopy(new)

    def complete_rollout(
        self, namespace: str, name: str, *, generation: int | None = None
    ) -> dict[str, Any]:
        """Report the Deployment's current (or given) generation fully rolled out."""
        dep = self.get("deployments", namespace, name, group="apps")
        gen = dep["metadata"].get("generation", 1)
        if generation is not None and generation != gen:
            return dep  # a newer template superseded this rollout; its own hook completes it
        replicas = int(dep.get("spec", {}).get("replicas", 1))
        stamp = now_rfc3339()
        return self.set_deployment_status(
            namespace,
            name,
            {
                "observedGeneration": gen,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "unavailableReplicas": 0,
                "conditions": [
                    {
                        "type": "Available",
                        "status": "True",
                        "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability.",
                        "lastUpdateTime": stamp,
                        "lastTransitionTime": stamp,
                    },
                    {
                        "type": "Progressing",
                        "status": "True",
                        "reason": "NewReplicaSetAvailable",
                        "message": f'ReplicaSet "{name}" has successfully progressed.',
                        "lastUpdateTime": stamp,
                        "lastTransitionTime": stamp,
                    },
                ],
            },
        )

    # ------------------------------------------------------------ internals

    def _type_of(self, obj: Mapping[str, Any], group: str | None) -> ResourceType:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        g, _, v = api_version.rpartition("/")
        for t in self.types.values():
            if t.kind == kind and t.group == g and t.version == v:
                return t
        raise SandboxError(f"API server double serves no {api_version} {kind}")

    def _fill_meta(
        self, rtype: ResourceType, body: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        body["apiVersion"] = rtype.api_version
        body["kind"] = rtype.kind
        meta = body.setdefault("metadata", {})
        if old is not None:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        else:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            if rtype.generation:
                meta["generation"] = 1

    def _commit(
        self, rtype: ResourceType, key: tuple[str, str, str], obj: dict[str, Any], kind: str
    ) -> None:
        """Store with a fresh resourceVersion; caller holds the lock."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = obj
        self._history.append(_WatchEvent(self._rv, rtype.key, key[1], kind, copy.deepcopy(obj)))
        self._cond.notify_all()

    def _emit(self, rtype: ResourceType, ns: str, kind: str, obj: dict[str, Any]) -> None:
        self._rv += 1
        snap = copy.deepcopy(obj)
        snap["metadata"]["resourceVersion"] = str(self._rv)
        self._history.append(_WatchEvent(self._rv, rtype.key, ns, kind, snap))
        self._cond.notify_all()

    def _after_write(
        self, rtype: ResourceType, old: dict[str, Any] | None, new: dict[str, Any]
    ) -> None:
        """Call the kubelet hook when a Deployment's pod template (or the whole object) is new."""
        if rtype.key != "deployments.apps" or self.kubelet is None:
            return
        old_gen = None if old is None else old["metadata"].get("generation")
        if old is None or old_gen != new["metadata"].get("generation"):
            self.kubelet(self, copy.deepcopy(new))

    # ------------------------------------------------------------ REST verbs

    def _list(
        self, rtype: ResourceType, ns: str | None, query: Mapping[str, str]
    ) -> dict[str, Any]:
        lsel = label_selector(query.get("labelSelector", ""))
        fsel = field_selector(query.get("fieldSelector", ""))
        with self._cond:
            items = [
                copy.deepcopy(o)
                for (k, ons, _), o in sorted(self._objects.items())
                if k == rtype.key
                and (ns is None or ons == ns)
                and lsel(o["metadata"].get("labels") or {})
                and fsel(o)
            ]
            rv = self._rv
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    def _read(self, rtype: ResourceType, ns: str, name: str) -> dict[str, Any]:
        with self._cond:
            obj = self._objects.get((rtype.key, ns, name))
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            return copy.deepcopy(obj)

    def _create(self, rtype: ResourceType, ns: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {}) or {}
        body["metadata"] = meta
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            else:
                raise ApiError(422, f"{rtype.kind}: metadata.name: Required value")
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(
                    400,
                    f"the namespace of the provided object ({meta['namespace']}) does not match "
                    f"the namespace sent on the request ({ns})",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta.pop("resourceVersion", None)
        self._validate(rtype, body)
        if rtype.has_status:
            body.pop("status", None)
        key = (rtype.key, ns if rtype.namespaced else "", meta["name"])
        with self._cond:
            if key in self._objects:
                raise ApiError(
                    409, f'{rtype.key} "{meta["name"]}" already exists', reason="AlreadyExists"
                )
            self._fill_meta(rtype, body, None)
            self._commit(rtype, key, body, "ADDED")
            stored: dict[str, Any] = copy.deepcopy(body)
        self._after_write(rtype, None, stored)
        return stored

    def _update(
        self,
        rtype: ResourceType,
        ns: str,
        name: str,
        sub: str,
        body: Any,
        *,
        patch: tuple[str, Any] | None = None,
    ) -> dict[str, Any]:
        """PUT (body) or PATCH (patch=(content type, patch doc)) of the object or its status."""
        key = (rtype.key, ns if rtype.namespaced else "", name)
        with self._cond:
            old = self._objects.get(key)
            if old is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            if patch is not None:
                ctype, doc = patch
                patcher = PATCHERS.get(ctype)
                if patcher is None:
                    raise ApiError(
                        415, f"the body of the request was in an unknown format: {ctype}"
                    )
                body = patcher(old, doc)
            if not isinstance(body, dict):
                raise ApiError(400, "request body must be a JSON object")
            meta = body.get("metadata") or {}
            if meta.get("name") not in (None, name):
                raise ApiError(
                    400, f"the name of the object ({meta.get('name')}) does not match {name}"
                )
            sent_rv = meta.get("resourceVersion")
            if sent_rv not in (None, "") and str(sent_rv) != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on {rtype.key} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            if sub == "status":
                new = copy.deepcopy(old)
                if "status" in body:
                    new["status"] = copy.deepcopy(body["status"])
                else:
                    new.pop("status", None)
            else:
                new = copy.deepcopy(body)
                new_meta = new.setdefault("metadata", {})
                new_meta["name"] = name
                if rtype.namespaced:
                    new_meta["namespace"] = ns
                for managed in ("uid", "creationTimestamp", "generation"):
                    if managed in old["metadata"]:
                        new_meta[managed] = old["metadata"][managed]
                if rtype.has_status:
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                self._validate(rtype, new)
                if rtype.generation and _strip_for_generation(old) != _strip_for_generation(new):
                    new_meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old:
                return copy.deepcopy(old)  # a no-op write does not bump resourceVersion
            self._commit(rtype, key, new, "MODIFIED")
            stored = copy.deepcopy(new)
        self._after_write(rtype, old, stored)
        return stored

    def _delete_http(self, rtype: ResourceType, ns: str, name: str, body: Any) -> dict[str, Any]:
        key = (rtype.key, ns if rtype.namespaced else "", name)
        with self._cond:
            obj = self._objects.get(key)
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            pre = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]
            ):
                raise ApiError(409, f'{rtype.key} "{name}": precondition failed: resourceVersion')
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
                raise ApiError(409, f'{rtype.key} "{name}": precondition failed: uid')
            del self._objects[key]
            self._emit(rtype, key[1], "DELETED", obj)
        if rtype.key == "pods":
            # graceful deletion: the real API server answers with the Pod being deleted, which
            # is what CoreV1Api.delete_namespaced_pod decodes
            return obj
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": rtype.group,
                "kind": rtype.plural,
                "uid": obj["metadata"]["uid"],
            },
        }

    def _validate(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """The little server-side validation the controller's error paths need (422)."""
        if rtype.key == "deployments.apps":
            spec = obj.get("spec") or {}
            problems = []
            if not spec.get("selector"):
                problems.append("spec.selector: Required value")
            containers = ((spec.get("template") or {}).get("spec") or {}).get("containers")
            if not containers:
                problems.append("spec.template.spec.containers: Required value")
            else:
                for i, c in enumerate(containers):
                    for fld in ("args", "command"):
                        vals = c.get(fld)
                        if vals is not None and not all(isinstance(a, str) for a in vals):
                            problems.append(
                                f"spec.template.spec.containers[{i}].{fld}: must be strings"
                            )
            if problems:
                name = obj.get("metadata", {}).get("name", "")
                raise ApiError(422, f'Deployment.apps "{name}" is invalid: ' + "; ".join(problems))
        crd = self._crd_schema(rtype)
        if crd is not None:
            self._validate_against(crd, rtype, obj)

    def _crd_schema(self, rtype: ResourceType) -> dict[str, Any] | None:
        if not rtype.group or rtype.group.endswith(".k8s.io") or rtype.group == "apps":
            return None
        with self._cond:
            crd = self._objects.get(
                (
                    "customresourcedefinitions.apiextensions.k8s.io",
                    "",
                    f"{rtype.plural}.{rtype.group}",
                )
            )
        if crd is None:
            return None
        for ver in crd.get("spec", {}).get("versions", []):
            if ver.get("name") == rtype.version:
                schema = (ver.get("schema") or {}).get("openAPIV3Schema")
                return schema if isinstance(schema, dict) else None
        return None

    @staticmethod
    def _validate_against(schema: dict[str, Any], rtype: ResourceType, obj: dict[str, Any]) -> None:
        """With the CRD installed, reject what its schema rejects (spec only), like the real
        server does. Needs `jsonschema`; without it the check is skipped."""
        try:
            import jsonschema  # type: ignore[import-untyped]
        except ImportError:  # pragma: no cover - jsonschema ships with the dev tools
            return
        spec_schema = (schema.get("properties") or {}).get("spec")
        if spec_schema is None or "spec" not in obj:
            return
        errors = sorted(
            jsonschema.Draft4Validator(spec_schema).iter_errors(obj["spec"]),
            key=lambda e: list(e.absolute_path),
        )
        if errors:
            name = obj.get("metadata", {}).get("name", "")
            details = "; ".join(
                "spec"
                + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
                + f": {e.message}"
                for e in errors[:10]
            )
            raise ApiError(422, f'{rtype.kind}.{rtype.group} "{name}" is invalid: {details}')

    # ------------------------------------------------------------ watch

    def _watch_events(
        self,
        rtype: ResourceType,
        ns: str | None,
        query: Mapping[str, str],
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (dicts) until timeoutSeconds, server stop, or a 410."""
        lsel = label_selector(query.get("labelSelector", ""))
        fsel = field_selector(query.get("fieldSelector", ""))
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout)
        deadline = time.monotonic() + timeout
        rv_text = query.get("resourceVersion", "")

        def matches(ev: _WatchEvent) -> bool:
            return (
                ev.type_key == rtype.key
                and (ns is None or ev.namespace == ns)
                and lsel(ev.obj["metadata"].get("labels") or {})
                and fsel(ev.obj)
            )

        with self._cond:
            if rv_text in ("", "0"):
                initial = [
                    copy.deepcopy(o)
                    for (k, ons, _), o in sorted(self._objects.items())
                    if k == rtype.key
                    and (ns is None or ons == ns)
                    and lsel(o["metadata"].get("labels") or {})
                    and fsel(o)
                ]
                cursor = self._rv
            else:
                try:
                    cursor = int(rv_text)
                except ValueError:
                    cursor = -1
                oldest = self._history[0].rv if self._history else self._rv + 1
                if cursor < 0 or (cursor < oldest - 1 and cursor < self._rv):
                    gone = ApiError(
                        410, f"too old resource version: {rv_text} ({oldest - 1})", reason="Expired"
                    )
                    yield {"type": "ERROR", "object": gone.status()}
                    return
                initial = []
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        while not self._stopping.is_set():
            with self._cond:
                pending = []
                for ev in reversed(self._history):  # newest first; stop at the cursor
                    if ev.rv <= cursor:
                        break
                    pending.append(ev)
                pending.reverse()
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self._cond.wait(timeout=min(remaining, 0.5))
                    continue
                cursor = pending[-1].rv
            for ev in pending:
                if matches(ev):
                    yield {"type": ev.kind, "object": copy.deepcopy(ev.obj)}
            if time.monotonic() >= deadline:
                return

    # ------------------------------------------------------------ dispatch

    def _route(self, path: str) -> tuple[ResourceType, str | None, str, str] | None:
        """path -> (type, namespace or None (all), name, subresource) or None (discovery)."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if not rest:
            return None
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        rtype = self.types.get((group, version, plural))
        if rtype is None:
            raise ApiError(404, f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3 or (sub and sub not in rtype.subresources):
            raise ApiError(404, f"the server could not find the requested resource ({path})")
        if rtype.namespaced and ns is None and name:
            raise ApiError(404, f"{rtype.key} is namespaced: use /namespaces/<ns>/{plural}/{name}")
        if not rtype.namespaced:
            ns = ""
        return rtype, ns, name, sub

    def _discovery(self, path: str) -> dict[str, Any]:
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            return {"major": "1", "minor": "33", "gitVersion": "v1.33.0-alphagate-double"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups: dict[str, list[str]] = {}
        for t in self.types.values():
            if t.group:
                groups.setdefault(t.group, [])
                if t.version not in groups[t.group]:
                    groups[t.group].append(t.version)
        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if parts in (["api", "v1"],) or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            resources = []
            for t in self.types.values():
                if t.group == group and t.version == version:
                    resources.append(
                        {
                            "name": t.plural,
                            "singularName": t.kind.lower(),
                            "namespaced": t.namespaced,
                            "kind": t.kind,
                            "verbs": [
                                "create",
                                "delete",
                                "get",
                                "list",
                                "patch",
                                "update",
                                "watch",
                            ],
                        }
                    )
                    resources.extend(
                        {
                            "name": f"{t.plural}/{s}",
                            "singularName": "",
                            "namespaced": t.namespaced,
                            "kind": t.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                        for s in sorted(t.subresources)
                    )
            if not resources:
                raise ApiError(404, f"the server could not find the requested resource ({path})")
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources,
            }
        raise ApiError(404, f"the server could not find the requested resource ({path})")


def _verb(method: str, name: str, query: Mapping[str, str]) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("1", "true", "True") else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, method.lower())


def _make_handler(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "alphagate-apiserver-double"
        # Headers and body leave in one segment (handle_one_request flushes): without this,
        # Nagle plus delayed ACKs add ~40 ms to every keep-alive request.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, code: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", JSON)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> tuple[Any, bytes]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return None, raw
            try:
                return json.loads(raw), raw
            except json.JSONDecodeError as exc:
                raise ApiError(400, f"request body is not valid JSON: {exc}") from exc

        def _handle(self, method: str) -> None:
            split = urlsplit(self.path)
            path = split.path
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            body: Any = None
            verb = resource = group = ns = name = ""
            code = 200
            try:
                body, _ = self._body()
                routed = server._route(path)
                if routed is None:
                    if method != "GET":
                        raise ApiError(405, f"{method} is not allowed on {path}")
                    self._send(200, server._discovery(path))
                    return
                rtype, ns_or_all, name, sub = routed
                ns = ns_or_all or ""
                group = rtype.group
                resource = rtype.plural + (f"/{sub}" if sub else "")
                verb = _verb(method, name, query)
                fault = server.faults.fire(method, path)
                if fault is not None:
                    raise ApiError(fault.status, fault.message, reason=fault.reason)
                if not server.rbac.allows(verb, group, resource):
                    where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
                    raise ApiError(
                        403,
                        f'{rtype.key} "{name}" is forbidden: User '
                        f'"system:serviceaccount:alphagate:alphagate" cannot {verb} resource '
                        f'"{resource}" in API group "{group}"{where}',
                    )
                if verb == "watch":
                    self._stream(server._watch_events(rtype, ns_or_all, query))
                    return
                if verb == "list":
                    result = server._list(rtype, ns_or_all, query)
                elif verb == "get":
                    result = server._read(rtype, ns, name)
                elif verb == "create":
                    if name:
                        raise ApiError(405, "POST to a named resource")
                    result = server._create(rtype, ns, body)
                    code = 201
                elif verb == "update":
                    result = server._update(rtype, ns, name, sub, body)
                elif verb == "patch":
                    result = server._update(rtype, ns, name, sub, None, patch=(ctype, body))
                elif verb == "delete":
                    result = server._delete_http(rtype, ns, name, body)
                else:
                    raise ApiError(405, f"{method} {path} is not supported by the double")
                self._send(code, result)
            except ApiError as err:
                code = err.code
                self._send(err.code, err.status())
            except Exception as exc:  # a bug in the double: say so, as a 500 Status
                code = 500
                self._send(500, ApiError(500, f"API server double: {exc!r}").status())
            finally:
                server._record(
                    RecordedRequest(
                        method=method,
                        path=path,
                        query=query,
                        content_type=ctype,
                        body=body,
                        status=code,
                        verb=verb,
                        resource=resource,
                        group=group,
                        namespace=ns,
                        name=name,
                    )
                )

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", JSON)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for ev in events:
                    line = json.dumps(ev).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    return Handler


@dataclass
class DeploymentTemplate:
    """A minimal valid apps/v1 Deployment for tests and the demo."""

    name: str
    namespace: str = "default"
    container: str = "vllm"
    image: str = "vllm/vllm-openai:latest"
    args: list[str] = field(default_factory=lambda: ["--model", "m", "--port", "8000"])
    replicas: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def build(self) -> dict[str, Any]:
        labels = {"app": self.name, **self.labels}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(labels),
                "annotations": dict(self.annotations),
            },
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "containers": [
                            {"name": self.container, "image": self.image, "args": list(self.args)}
                        ]
                    },
                },
            },
        }
