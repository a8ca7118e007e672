"""Token and access reviews: who a bearer token is, and what that user may do where.

A real API server answers TokenReview (authentication.k8s.io/v1) from its authenticators and
SubjectAccessReview (authorization.k8s.io/v1) from RBAC; the double answers both from one small
table of people (`Users`: token -> name and groups, and per user the (verb, group, resource,
namespace) they are granted). Reviews are created, never stored, as on a real server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate_lab.sandbox.apiserver.resources import ApiError, ResourceType

TOKEN_REVIEWS: Final = ResourceType(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
ACCESS_REVIEWS: Final = ResourceType(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
REVIEWS: Final = frozenset({TOKEN_REVIEWS.key, ACCESS_REVIEWS.key})

Grant = tuple[str, str, str, str]
"""(verb, apiGroup, resource, namespace); `*` matches any."""


@dataclass
class _User:
    name: str
    groups: tuple[str, ...]
    grants: set[Grant] = field(default_factory=set)


class Users:
    """The people the double knows by token, and what each may do. Thread-safe."""

    def __init__(self) -> None:
        self._by_token: dict[str, _User] = {}
        self._by_name: dict[str, _User] = {}
        self._lock = threading.Lock()

    def add(
        self,
        token: str,
        name: str,
        *,
        groups: Iterable[str] = (),
        grants: Iterable[Grant] = (),
    ) -> None:
        user = _User(name, ("system:authenticated", *groups), set(grants))
        with self._lock:
            self._by_token[token] = user
            self._by_name[name] = user

    def grant(self, name: str, verb: str, group: str, resource: str, namespace: str) -> None:
        with self._lock:
            self._by_name[name].grants.add((verb, group, resource, namespace))

    def review(self, rtype: ResourceType, body: Any) -> dict[str, Any]:
        """The answered review (201 Created's body)."""
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            raise ApiError(400, f"{rtype.kind}: spec is required")
        out = {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": {}, "spec": spec}
        if rtype.key == TOKEN_REVIEWS.key:
            out["status"] = self._authenticate(str(spec.get("token") or ""))
        else:
            out["status"] = self._authorize(spec)
        return out

    def _authenticate(self, token: str) -> dict[str, Any]:
        with self._lock:
            user = self._by_token.get(token)
        if user is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {
            "authenticated": True,
            "user": {"username": user.name, "groups": list(user.groups)},
        }

    def _authorize(self, spec: dict[str, Any]) -> dict[str, Any]:
        attrs = spec.get("resourceAttributes") or {}
        want = (
            str(attrs.get("verb", "")),
            str(attrs.get("group", "")),
            str(attrs.get("resource", "")),
            str(attrs.get("namespace", "")),
        )
        with self._lock:
            user = self._by_name.get(str(spec.get("user", "")))
            grants = set(user.grants) if user is not None else set()
        allowed = any(
            all(g in ("*", w) for g, w in zip(grant, want, strict=True)) for grant in grants
        )
        return {"allowed": allowed, "reason": "granted" if allowed else "no grant matches"}
