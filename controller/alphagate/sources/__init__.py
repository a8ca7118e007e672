"""Where observations come from: the Prometheus HTTP API or direct pod scrapes.

Both implement :class:`Source` and fill the same :class:`~alphagate.core.model.Observation`
per slice and role: acceptance batches (one per pod and interval), generated tokens over the
window, ITL and TPOT buckets, and the pod count. A source never raises for source trouble:
failures become ``Observation.source_error`` or ``PoolObservation.error`` with a classified
kind (:class:`~alphagate.errors.SourceErrorKind`) and a reason, never zeros.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from alphagate.config import SourceKind, SpeculativeCanarySpec
from alphagate.core.model import Observation


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


def make_source(
    spec: SpeculativeCanarySpec, *, namespace: str = "default", core_api: Any = None
) -> Source:
    """The source a policy asks for. Pod scraping lists pods with `core_api` (a kubernetes
    CoreV1Api; built from kubeconfig or the in-cluster account when None) in `namespace`."""
    if spec.source.kind is SourceKind.PROMETHEUS:
        from alphagate.sources.prometheus import PrometheusSource

        return PrometheusSource.from_spec(spec)
    from alphagate.sources.discovery import KubeDiscovery
    from alphagate.sources.scrape import ScrapeSource

    if core_api is None:  # a private ApiClient from kubeconfig or the service account
        from kubernetes import client

        from alphagate.kube.client import load_configuration

        core_api = client.CoreV1Api(client.ApiClient(load_configuration()))
    return ScrapeSource(KubeDiscovery(core_api, namespace))


__all__ = ["Source", "make_source"]
