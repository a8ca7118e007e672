"""The double's state: objects by (type, namespace, name) under one global resourceVersion,
the REST verbs on them (what each write makes of an object is `writes`), each change recorded
for watches (`watch`), and the direct helpers tests use. No HTTP here: `server.ApiServer`
serves it.

A stored object is never changed in place: every write builds a new one, sharing with the old
what the write left alone. So the REST verbs answer, list and stream stored objects without
copying them (they are only encoded), and the watch history holds the stored objects
themselves; what leaves for a caller that may change it (the test helpers, the hooks) is a
copy.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.apiserver.deployments import deployment_status
from alphagate_lab.sandbox.apiserver.resources import (
    DEFAULT_TYPES,
    ApiError,
    ResourceType,
    json_copy,
    now_rfc3339,
)
from alphagate_lab.sandbox.apiserver.selectors import field_selector, label_selector
from alphagate_lab.sandbox.apiserver.validation import validate
from alphagate_lab.sandbox.apiserver.watch import WatchEvent, WatchHistory, watch_stream
from alphagate_lab.sandbox.apiserver.writes import (
    created_body,
    patched,
    strip_for_generation,
    updated,
)


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
        self._history = WatchHistory(watch_history)
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
        body = json_copy(dict(obj))
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
                    1 if strip_for_generation(old) != strip_for_generation(body) else 0
                )
            self._commit(rtype, key, body, "MODIFIED" if old else "ADDED")
        self._after_write(rtype, old, body)
        return json_copy(body)

    def get(
        self, plural: str, namespace: str, name: str, *, group: str | None = None
    ) -> dict[str, Any]:
        rtype = self.resource_type(plural, group)
        with self._cond:
            obj = self._objects.get((rtype.key, namespace if rtype.namespaced else "", name))
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found', reason="NotFound")
        return json_copy(obj)

    def objects(
        self, plural: str, namespace: str | None = None, *, group: str | None = None
    ) -> list[dict[str, Any]]:
        rtype = self.resource_type(plural, group)
        type_key = rtype.key
        with self._cond:
            found = sorted(
                (key, o)
                for key, o in self._objects.items()
                if key[0] == type_key and (namespace is None or key[1] == namespace)
            )
        return [json_copy(o) for _, o in found]

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
            new = {**obj, "metadata": dict(obj["metadata"])}
            new["status"] = {**(obj.get("status") or {}), **json_copy(dict(status))}
            if new == obj:
                return json_copy(obj)
            self._commit(rtype, key, new, "MODIFIED")
        self._after_status(rtype, new)
        return json_copy(new)

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
        """Store with a fresh resourceVersion; caller holds the lock. ``obj`` and its metadata
        are the store's own from here on, never changed again (the history holds it too)."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = obj
        self._history.record(WatchEvent(self._rv, rtype.key, key[1], kind, obj))
        self._cond.notify_all()

    def _emit(self, rtype: ResourceType, ns: str, kind: str, obj: dict[str, Any]) -> None:
        self._rv += 1
        snap = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
        self._history.record(WatchEvent(self._rv, rtype.key, ns, kind, snap))
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
        """The objects of `rtype` in `ns` (None: all) that both selectors pick, in key order
        (the stored ones: read, never change them); caller holds the lock."""
        type_key = rtype.key
        found = sorted(
            (key, o)
            for key, o in self._objects.items()
            if key[0] == type_key
            and (ns is None or key[1] == ns)
            and lsel(o["metadata"].get("labels") or {})
            and fsel(o)
        )
        return [o for _, o in found]

    def _read(self, rtype: ResourceType, ns: str, name: str) -> dict[str, Any]:
        with self._cond:
            obj = self._objects.get((rtype.key, ns, name))
            if obj is None:
                raise ApiError(404, f'{rtype.key} "{name}" not found')
            return obj

    def _create(self, rtype: ResourceType, ns: str, body: Any) -> dict[str, Any]:
        body = created_body(rtype, ns, body, self._validate)
        meta = body["metadata"]
        key = (rtype.key, ns if rtype.namespaced else "", meta["name"])
        with self._cond:
            if key in self._objects:
                raise ApiError(
                    409, f'{rtype.key} "{meta["name"]}" already exists', reason="AlreadyExists"
                )
            self._fill_meta(rtype, body, None)
            self._commit(rtype, key, body, "ADDED")
        stored: dict[str, Any] = body
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
                body = patched(rtype, old, *patch)
            new = updated(
                rtype,
                old,
                body,
                ns=ns,
                name=name,
                sub=sub,
                validate=self._validate,
                owned=patch is not None,
            )
            if new == old:
                return old  # a no-op write does not bump resourceVersion
            self._commit(rtype, key, new, "MODIFIED")
        self._after_write(rtype, old, new)
        return new

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
        return watch_stream(
            self._history,
            self._cond,
            self._stopping,
            rtype,
            ns,
            query,
            default_timeout=self.default_watch_timeout,
            head=lambda: self._rv,
            select=lambda lsel, fsel: self._selected(rtype, ns, lsel, fsel),
        )
