"""The double's state: objects by (type, namespace, name) under one global resourceVersion,
the REST verbs on them (409 on a stale write, status subresources, generation bumps), the
watch history, and the direct helpers tests use. No HTTP here: `server.ApiServer` serves it.
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.apiserver.deployments import deployment_status
from alphagate_lab.sandbox.apiserver.patches import PATCHERS
from alphagate_lab.sandbox.apiserver.resources import (
    DEFAULT_TYPES,
    ApiError,
    ResourceType,
    now_rfc3339,
)
from alphagate_lab.sandbox.apiserver.selectors import field_selector, label_selector
from alphagate_lab.sandbox.apiserver.validation import validate

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# what a real API server accepts on a custom resource (it has no strategic merge keys)
CUSTOM_PATCHES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


@dataclass(slots=True)
class _WatchEvent:
    rv: int
    type_key: str
    namespace: str
    kind: str  # ADDED / MODIFIED / DELETED
    obj: dict[str, Any]


def _strip_for_generation(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    """Objects, resourceVersions and watch history, with the REST verbs' semantics.

    Test helpers that bypass HTTP (and RBAC/faults) but keep resourceVersion and watch
    semantics: `put`, `get`, `delete`, `objects`, `set_deployment_status`, `complete_rollout`.
    """

    def __init__(
        self,
        *,
        types: Iterable[ResourceType] = DEFAULT_TYPES,
        watch_history: int = 10_000,
        default_watch_timeout: float = 300.0,
    ) -> None:
        self.types: dict[tuple[str, str, str], ResourceType] = {
            (t.group, t.version, t.plural): t for t in types
        }
        self.default_watch_timeout = default_watch_timeout
        self._cond = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 0
        self._history: deque[_WatchEvent] = deque(maxlen=watch_history)
        self._stopping = threading.Event()

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
        return self.set_status("deployments", namespace, name, status, group="apps")

    def set_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        group: str | None = None,
    ) -> dict[str, Any]:
        """Merge `status` into an object's status, under the lock (what the object's own
        controller writes: the deployment controller, Argo Rollouts)."""
        rtype = self.resource_type(plural, group)
        key = (rtype.key, namespace, name)
        with self._cond:
            obj = self._objects.get(key)
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            new = copy.deepcopy(obj)
            new["status"] = {**(obj.get("status") or {}), **copy.deepcopy(dict(status))}
            if new == obj:
                return copy.deepcopy(obj)
            self._commit(rtype, key, new, "MODIFIED")
            stored = copy.deepcopy(new)
        self._after_status(rtype, stored)
        return stored

    def complete_rollout(
        self, namespace: str, name: str, *, generation: int | None = None
    ) -> dict[str, Any]:
        """Report the Deployment's current (or given) generation fully rolled out."""
        dep = self.get("deployments", namespace, name, group="apps")
        gen = dep["metadata"].get("generation", 1)
        if generation is not None and generation != gen:
            return dep  # a newer template superseded this rollout; its own hook completes it
        replicas = int(dep.get("spec", {}).get("replicas", 1))
        return self.set_deployment_status(
            namespace,
            name,
            deployment_status(
                name=name,
                generation=gen,
                replicas=replicas,
                updated=replicas,
                ready=replicas,
                complete=True,
            ),
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
        """Called after every create and update, outside the lock (the server's kubelet hook)."""

    def _after_status(self, rtype: ResourceType, new: dict[str, Any]) -> None:
        """Called after `set_status` changed a status, outside the lock (what an object's owner
        reads from it: KServe from its Deployment)."""

    # ------------------------------------------------------------ REST verbs

    def _list(
        self, rtype: ResourceType, ns: str | None, query: Mapping[str, str]
    ) -> dict[str, Any]:
        lsel = label_selector(query.get("labelSelector", ""))
        fsel = field_selector(query.get("fieldSelector", ""))
        with self._cond:
            items = self._selected(rtype, ns, lsel, fsel)
            rv = self._rv
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    def _selected(
        self,
        rtype: ResourceType,
        ns: str | None,
        lsel: Callable[[Mapping[str, str]], bool],
        fsel: Callable[[Mapping[str, Any]], bool],
    ) -> list[dict[str, Any]]:
        """Copies of the objects of `rtype` in `ns` (None: all) that both selectors pick, in
        key order; caller holds the lock."""
        return [
            copy.deepcopy(o)
            for (k, ons, _), o in sorted(self._objects.items())
            if k == rtype.key
            and (ns is None or ons == ns)
            and lsel(o["metadata"].get("labels") or {})
            and fsel(o)
        ]

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
                if rtype.custom and ctype == STRATEGIC_MERGE:
                    raise ApiError(
                        415,
                        f"the body of the request was in an unknown format - accepted media "
                        f"types include: {', '.join(CUSTOM_PATCHES)}",
                    )
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
        validate(rtype, obj, self._crd_schema(rtype))

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
                initial = self._selected(rtype, ns, lsel, fsel)
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
