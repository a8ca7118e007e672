"""What the double serves: resource types, the loopback host, and errors as `Status` objects."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

HOST: Final = "127.0.0.1"
JSON: Final = "application/json"
_T = TypeVar("_T")


def json_copy(value: _T) -> _T:
    """A deep copy of a JSON document, several times faster than `copy.deepcopy` on one:
    the double copies what it hands out (test helpers, hooks) and what it takes from a
    caller. Anything but dicts, lists and JSON scalars goes to `copy.deepcopy`."""
    return cast(_T, _copied(value))


def _copied(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


_SCALARS: Final = frozenset((str, int, float, bool, type(None)))


def now_rfc3339() -> str:
    """Kubernetes `Time`: second precision, UTC, `Z` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    custom: bool = False  # served from a CRD: no strategic merge patch, as on a real API server

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
        custom=True,
    ),
    # Argo Rollouts' CRD: a canary target alphagate may flip (argo_rollouts plays Argo)
    ResourceType(
        "argoproj.io",
        "v1alpha1",
        "rollouts",
        "Rollout",
        subresources=_STATUS,
        generation=True,
        custom=True,
    ),
    # KServe's CRD: a canary target alphagate may flip (kserve plays KServe, raw mode)
    ResourceType(
        "serving.kserve.io",
        "v1beta1",
        "inferenceservices",
        "InferenceService",
        subresources=_STATUS,
        generation=True,
        custom=True,
    ),
)


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
