"""Where observations come from: the Prometheus HTTP API or direct pod scrapes.

Both implement :class:`Source` and fill the same :class:`~alphagate.core.model.Observation`
per slice and role: acceptance batches (one per pod and interval), generated tokens over the
window, ITL and TPOT buckets, and the pod count. A source never raises for source trouble:
failures become ``Observation.source_error`` or ``PoolObservation.error`` with a classified
kind (:class:`~alphagate.errors.SourceErrorKind`) and a reason, never zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from alphagate.config import SourceKind, SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.errors import EndpointError, NamespaceError, SourceError, SourceErrorKind
from alphagate.sources.common import failed_observation
from alphagate.sources.endpoints import SourcesConfig


@runtime_checkable
class Source(Protocol):
    """Reads every pool of a policy over [start, end] with `interval_seconds` batches."""

    def observe(
        self,
        spec: SpeculativeCanarySpec,
        *,
        start: float,
        end: float,
        interval_seconds: float,
    ) -> Observation: ...


class FailedSource:
    """A source that could not be built (e.g. the policy names no configured endpoint): every
    observe reports why, so the canary holds with a clear error instead of crashing."""

    def __init__(self, error: SourceError) -> None:
        self.error = error

    @property
    def spec_invalid(self) -> bool:
        """The policy itself is wrong (it names an endpoint nobody configured, or selects
        another namespace's series): SpecValid=False rather than a source that failed."""
        return isinstance(self.error, EndpointError | NamespaceError)

    @property
    def reason(self) -> str:
        """The SpecValid=False reason when `spec_invalid`."""
        return "CrossNamespace" if isinstance(self.error, NamespaceError) else "UnknownEndpoint"

    def observe(
        self,
        spec: SpeculativeCanarySpec,
        *,
        start: float,
        end: float,
        interval_seconds: float,
    ) -> Observation:
        return failed_observation(spec, self.error, at=end, window=max(end - start, 0.0))


def make_source(
    spec: SpeculativeCanarySpec,
    *,
    namespace: str = "default",
    core_api: Any = None,
    endpoints: SourcesConfig | None = None,
    name: str = "",
) -> Source:
    """The source a policy asks for. Prometheus: the endpoint the policy names among those the
    admin configured (`endpoints`), reading series of `namespace` only (sources/scope.py).
    Pod scraping lists pods with `core_api` (a kubernetes CoreV1Api the shell builds and
    injects: sources never import `kube`) in `namespace`, asking for the encoding the admin
    chose (`endpoints.pod_scrape`).
    Never raises for a bad or unknown endpoint, nor for a missing `core_api`: the source then
    reports it on every read."""
    if spec.source.kind is SourceKind.PROMETHEUS:
        from alphagate.sources.prometheus import PrometheusSource

        try:
            return PrometheusSource.from_spec(
                spec, endpoints or SourcesConfig(), namespace=namespace, name=name or None
            )
        except SourceError as err:
            return FailedSource(err)
    from alphagate.sources.discovery import KubeDiscovery
    from alphagate.sources.scrape import ScrapeSource

    if core_api is None:
        return FailedSource(
            SourceError(
                SourceErrorKind.UNREACHABLE,
                "pod scraping needs a Kubernetes API client to list pods; none was given",
                target=f"namespace {namespace}",
            )
        )
    encoding = (endpoints or SourcesConfig()).pod_scrape.accept_encoding
    owner = f"{namespace}/{name}" if name else ""  # whose budgets its reads spend
    return ScrapeSource(KubeDiscovery(core_api, namespace), accept_encoding=encoding, owner=owner)


def factory(
    endpoints: SourcesConfig, *, core_api: Any = None
) -> Callable[[SpeculativeCanarySpec, str, str], Source]:
    """A reconciler's source factory: `make_source` with the admin's endpoints."""

    def build(spec: SpeculativeCanarySpec, namespace: str, name: str) -> Source:
        return make_source(
            spec, namespace=namespace, core_api=core_api, endpoints=endpoints, name=name
        )

    return build


__all__ = ["FailedSource", "Source", "factory", "make_source"]
