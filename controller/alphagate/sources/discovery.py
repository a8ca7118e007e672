"""Which pods to scrape for a pool: through the Kubernetes API, or a fixed list.

`KubeDiscovery` lists pods with the pool's ``matchLabels`` as a label selector (keys that name
vLLM series labels, ``model_name``/``engine``, filter series instead; a ``namespace`` key must
name the canary's own namespace: a policy cannot make the controller read pods elsewhere),
keeps ready pods with an IP, and finds the port from, in order: the pod annotation
``scrape.portAnnotation``, ``scrape.port``, a container port named ``metrics``, then one named
``http``. `StaticDiscovery` takes URLs per (slice, role) for ``inspect``, ``evaluate``
and tests without an API server.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import urllib3
from kubernetes.client import ApiException

from alphagate.config import ScrapeSettings, SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources.common import SERIES_LABELS, PoolRef

# What listing pods can raise besides a bug: the API's answer, the transport, a body the client
# cannot decode. The same as kube.client.API_ERRORS, which sources may not import (layers).
LIST_ERRORS: Final = (
    ApiException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,
)

NAMESPACE_KEY = "namespace"
PORT_NAMES = ("metrics", "http")


@dataclass(frozen=True, slots=True)
class Target:
    """One /metrics endpoint and the pod behind it."""

    url: str
    pod: str = ""
    namespace: str = ""

    @property
    def name(self) -> str:
        return self.pod or self.url


class Discovery(Protocol):
    """Finds the targets of one pool now. Raises SourceError when it cannot tell."""

    def targets(self, spec: SpeculativeCanarySpec, pool: PoolRef) -> list[Target]: ...


def scrape_settings(spec: SpeculativeCanarySpec) -> ScrapeSettings:
    return spec.source.scrape or ScrapeSettings()


class StaticDiscovery:
    """Fixed targets per (slice, role); a pool without an entry has no pods."""

    def __init__(self, targets: Mapping[Any, Sequence[str | Target]]) -> None:
        """`targets` maps (slice, role) -- role a Role or "canary"/"baseline" -- to URLs."""
        self._targets: dict[tuple[str, Role], list[Target]] = {}
        for (slice_name, role), items in targets.items():
            key = (slice_name, Role(role))
            self._targets[key] = [t if isinstance(t, Target) else Target(url=t) for t in items]

    def targets(self, spec: SpeculativeCanarySpec, pool: PoolRef) -> list[Target]:
        return list(self._targets.get((pool.slice, pool.role), ()))


def pod_selector(match_labels: Mapping[str, str]) -> str:
    """The Kubernetes label selector for a pool: every key but series labels and namespace."""
    return ",".join(
        f"{k}={v}"
        for k, v in sorted(match_labels.items())
        if k not in SERIES_LABELS and k != NAMESPACE_KEY
    )


def is_ready(pod: Any) -> bool:
    """Running, Ready condition True, not terminating, has an IP."""
    status = pod.status
    if status is None or pod.metadata is None or pod.metadata.deletion_timestamp is not None:
        return False
    if status.phase != "Running" or not status.pod_ip:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())


def pod_port(pod: Any, settings: ScrapeSettings) -> int | None:
    annotations = (pod.metadata.annotations or {}) if pod.metadata else {}
    raw = annotations.get(settings.port_annotation)
    text = str(raw).strip() if raw is not None else ""
    if text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) < 65536:
        return int(text)
    if settings.port is not None:
        return settings.port
    ports: dict[str, int] = {}
    for container in (pod.spec.containers if pod.spec else None) or ():
        for port in container.ports or ():
            if port.name and port.container_port:
                ports.setdefault(port.name, int(port.container_port))
    for name in PORT_NAMES:
        if name in ports:
            return ports[name]
    return None


def target_url(ip: str, port: int, settings: ScrapeSettings) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    path = settings.path if settings.path.startswith("/") else "/" + settings.path
    return f"{settings.scheme}://{host}:{port}{path}"


class KubeDiscovery:
    """Ready pods from ``CoreV1Api.list_namespaced_pod`` with the pool's label selector."""

    def __init__(self, core_api: Any, namespace: str, *, timeout_seconds: float = 10.0) -> None:
        self.api = core_api
        self.namespace = namespace
        self.timeout_seconds = timeout_seconds
        self.skipped: list[str] = []  # pods skipped in the last call, with why

    def targets(self, spec: SpeculativeCanarySpec, pool: PoolRef) -> list[Target]:
        settings = scrape_settings(spec)
        selector = pod_selector(pool.match_labels)
        where = f"{pool.slice}/{pool.role}"
        if not selector:
            raise SourceError(
                SourceErrorKind.QUERY_ERROR,
                "matchLabels have no pod label to select pods by "
                f"(only {', '.join(sorted(pool.match_labels))})",
                target=where,
            )
        namespace = pool.match_labels.get(NAMESPACE_KEY, self.namespace)
        if namespace != self.namespace:
            # A policy may not make the controller read pods of another namespace.
            raise SourceError(
                SourceErrorKind.QUERY_ERROR,
                f"matchLabels ask for pods in namespace {namespace!r}; a canary's pods are "
                f"read in its own namespace ({self.namespace!r}) only",
                target=where,
            )
        try:
            listing = self.api.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=self.timeout_seconds
            )
        except LIST_ERRORS as exc:  # all mean "cannot list"
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or type(exc).__name__
            raise SourceError(
                SourceErrorKind.UNREACHABLE,
                f"listing pods {namespace}/{selector} failed: "
                + (f"HTTP {status} {reason}" if status else f"{reason}: {exc}"),
                target=where,
            ) from exc
        out: list[Target] = []
        self.skipped = []
        for pod in listing.items or ():
            name = pod.metadata.name if pod.metadata else "?"
            if not is_ready(pod):
                continue
            port = pod_port(pod, settings)
            if port is None:
                self.skipped.append(
                    f"{name}: no metrics port (no {settings.port_annotation} annotation, no "
                    "scrape.port, no container port named metrics or http)"
                )
                continue
            out.append(
                Target(
                    url=target_url(pod.status.pod_ip, port, settings),
                    pod=name,
                    namespace=pod.metadata.namespace or namespace,
                )
            )
        return sorted(out, key=lambda t: t.pod)
