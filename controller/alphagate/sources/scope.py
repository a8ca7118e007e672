"""The namespace is a boundary on the Prometheus path (docs/security.md).

Pod discovery lists a canary's own namespace only; series in Prometheus carry no such bound by
themselves. So every query a canary's read sends carries its own namespace as a matcher on the
label the admin names (``namespaceLabel`` of the endpoint, default ``namespace``: what the
Prometheus Operator's and kube-prometheus' relabelling write), and a policy whose matchLabels
put another value on that label (``matchLabels: {namespace: team-b}`` on a canary in ``llm``) is
refused before any query is sent: a NamespaceError, SpecValid=False ``CrossNamespace``.

The admin may allow cross-namespace reads on an endpoint (``allowCrossNamespace: true``): then a
policy that names a namespace reads that one, and one that names none still reads its own.
A source built without a namespace (``alphagate evaluate``, the backtest: the person at the
terminal is the admin of their own process) adds no matcher.
"""

from __future__ import annotations

from collections.abc import Mapping

from alphagate.config import SpeculativeCanarySpec
from alphagate.errors import NamespaceError
from alphagate.sources.common import PoolRef, pools_of
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.promql import label_name


def extra_labels(spec: SpeculativeCanarySpec) -> dict[str, str]:
    """The policy's matchers added to every query (``source.prometheus.matchLabels``)."""
    return dict(spec.source.prometheus.match_labels) if spec.source.prometheus else {}


def pool_labels(
    spec: SpeculativeCanarySpec,
    ref: PoolRef,
    endpoint: PrometheusEndpoint,
    namespace: str | None,
) -> dict[str, str]:
    """Every matcher of one pool's queries: the policy's, then the canary's namespace on the
    endpoint's namespace label (unless `namespace` is None). Raises NamespaceError when the
    policy selects another namespace and the endpoint does not allow it."""
    labels = {**extra_labels(spec), **ref.match_labels}
    if namespace is None:
        return labels
    wanted = endpoint.namespace_label
    named = {k: v for k, v in labels.items() if label_name(k) == wanted}
    others = sorted({v for v in named.values() if v != namespace})
    if others and not endpoint.allow_cross_namespace:
        keys = ", ".join(sorted(named))
        raise NamespaceError(
            f"matchLabels select {wanted}={others[0]!r} (key {keys}) but this canary lives in "
            f"namespace {namespace!r}: a canary reads series of its own namespace only (the "
            f"admin may allow cross-namespace reads on endpoint {endpoint.name!r} with "
            "allowCrossNamespace)",
            target=f"{ref.slice}/{ref.role}",
        )
    if named:  # its own namespace, or another one the admin allows: as the policy says
        return labels
    return {**labels, wanted: namespace}


def check_scope(
    spec: SpeculativeCanarySpec, endpoint: PrometheusEndpoint, namespace: str | None
) -> None:
    """Raise NamespaceError when any pool of the policy selects another namespace."""
    for ref in pools_of(spec):
        pool_labels(spec, ref, endpoint, namespace)


def namespace_of(labels: Mapping[str, str], endpoint: PrometheusEndpoint) -> str:
    """The namespace a pool's matchers read ('' when they name none)."""
    return next((v for k, v in labels.items() if label_name(k) == endpoint.namespace_label), "")


__all__ = ["check_scope", "extra_labels", "namespace_of", "pool_labels"]
