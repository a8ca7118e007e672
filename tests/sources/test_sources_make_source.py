"""Sources never import `kube`: the shell injects the pod client pod scraping lists pods
with, and a source built without one says so on every read instead of reaching for a
kubeconfig."""

from __future__ import annotations

from test_sources_endpoints import spec

from alphagate.config import SpeculativeCanarySpec
from alphagate.errors import SourceErrorKind
from alphagate.sources import FailedSource, make_source


def test_pod_scraping_without_a_pod_client_fails_every_read_typed() -> None:
    scraped = SpeculativeCanarySpec.model_validate({**spec(), "source": {"kind": "podScrape"}})
    src = make_source(scraped, namespace="llm")
    assert isinstance(src, FailedSource)
    assert not src.spec_invalid  # the wiring is wrong, not the policy
    obs = src.observe(scraped, start=0.0, end=60.0, interval_seconds=30.0)
    assert obs.source_error_kind is SourceErrorKind.UNREACHABLE
    assert obs.source_error is not None and "llm" in obs.source_error
