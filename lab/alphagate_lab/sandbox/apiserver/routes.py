"""Where a request goes: its path as (type, namespace, name, subresource), the Kubernetes verb
RBAC judges, and the discovery documents the client reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alphagate_lab.sandbox.apiserver.resources import ApiError, ResourceType


def route(
    types: Mapping[tuple[str, str, str], ResourceType], path: str
) -> tuple[ResourceType, str | None, str, str] | None:
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
    rtype = types.get((group, version, plural))
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


def discovery(types: Mapping[tuple[str, str, str], ResourceType], path: str) -> dict[str, Any]:
    """The discovery documents (/version, /api, /apis, /apis/<group>/<version>) the client reads."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return {"major": "1", "minor": "33", "gitVersion": "v1.33.0-alphagate-double"}
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    groups: dict[str, list[str]] = {}
    for t in types.values():
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
        for t in types.values():
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


def verb_of(method: str, name: str, query: Mapping[str, str]) -> str:
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
