"""What a write makes of an object, before the store commits it: a create's body checked and
named, a PATCH applied by its content type (strategic merge refused on custom resources, as a
real server does), and a PUT or PATCH of the object or its status checked (name,
resourceVersion: 409 on a stale write) and turned into the new object, its generation bumped
when anything but metadata and status changed. Pure: the store holds the lock and commits.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

from alphagate_lab.sandbox.apiserver.patches import PATCHERS
from alphagate_lab.sandbox.apiserver.resources import ApiError, ResourceType, json_copy

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# what a real API server accepts on a custom resource (it has no strategic merge keys)
CUSTOM_PATCHES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)

Validate = Callable[[ResourceType, dict[str, Any]], None]


def strip_for_generation(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of bumps ``metadata.generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def created_body(rtype: ResourceType, ns: str, body: Any, validate: Validate) -> dict[str, Any]:
    """A create's body, named (``generateName``), placed in ``ns``, validated, without status."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    body = json_copy(body)
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
    validate(rtype, body)
    if rtype.has_status:
        body.pop("status", None)
    out: dict[str, Any] = body
    return out


def patched(rtype: ResourceType, old: dict[str, Any], ctype: str, doc: Any) -> Any:
    """``old`` with the patch ``doc`` of content type ``ctype`` applied (415 if refused)."""
    patcher = PATCHERS.get(ctype)
    if rtype.custom and ctype == STRATEGIC_MERGE:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(CUSTOM_PATCHES)}",
        )
    if patcher is None:
        raise ApiError(415, f"the body of the request was in an unknown format: {ctype}")
    return patcher(old, doc)


def updated(
    rtype: ResourceType,
    old: dict[str, Any],
    body: Any,
    *,
    ns: str,
    name: str,
    sub: str,
    validate: Validate,
    owned: bool = False,
) -> dict[str, Any]:
    """The object a PUT of ``body`` to the object (``sub`` "") or its status makes of ``old``,
    with ``old``'s resourceVersion (the store gives the new one if it differs). It shares
    with ``old`` what the write leaves alone (a stored object is never changed in place);
    ``owned``: ``body`` is the double's own (a patch's result), taken without a copy."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    meta = body.get("metadata") or {}
    if meta.get("name") not in (None, name):
        raise ApiError(400, f"the name of the object ({meta.get('name')}) does not match {name}")
    sent_rv = meta.get("resourceVersion")
    if sent_rv not in (None, "") and str(sent_rv) != old["metadata"]["resourceVersion"]:
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on {rtype.key} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
        )
    if sub == "status":
        new = dict(old)
        if "status" in body:
            new["status"] = body["status"] if owned else json_copy(body["status"])
        else:
            new.pop("status", None)
        new_meta = dict(old["metadata"])
    else:
        new = dict(body) if owned else json_copy(body)
        new_meta = dict(new.get("metadata") or {})
        new_meta["name"] = name
        if rtype.namespaced:
            new_meta["namespace"] = ns
        for managed in ("uid", "creationTimestamp", "generation"):
            if managed in old["metadata"]:
                new_meta[managed] = old["metadata"][managed]
        new["metadata"] = new_meta
        if rtype.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        validate(rtype, new)
        if rtype.generation and strip_for_generation(old) != strip_for_generation(new):
            new_meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
    new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
    new_meta["resourceVersion"] = old["metadata"]["resourceVersion"]
    new["metadata"] = new_meta
    return new
