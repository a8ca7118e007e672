"""Prometheus endpoints are the admin's: a policy names one and can neither point the
controller at another address nor make it read a file or send a credential."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hostile import serving

from alphagate.config import SpeculativeCanarySpec, parse
from alphagate.errors import ConfigError, EndpointError, PolicyError, SourceErrorKind
from alphagate.sources import FailedSource, make_source
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig, load
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.scrape import ScrapeSource


def test_the_admin_chooses_what_encoding_pods_are_asked_for(tmp_path: Path) -> None:
    scraped = SpeculativeCanarySpec.model_validate({**spec(), "source": {"kind": "podScrape"}})
    path = tmp_path / "config.yaml"
    for text, want in (
        ("prometheus: []\n", "identity"),  # the default: plain pages (cheaper CPU both ends)
        ("podScrape: {acceptEncoding: gzip}\n", "gzip"),
        ("podScrape: {acceptEncoding: identity}\n", "identity"),
    ):
        path.write_text(text)
        source = make_source(scraped, core_api=object(), endpoints=load(path))
        assert isinstance(source, ScrapeSource)
        assert source.accept_encoding == want
    default = make_source(scraped, core_api=object())  # no configuration at all
    assert isinstance(default, ScrapeSource) and default.accept_encoding == "identity"
    path.write_text("podScrape: {acceptEncoding: br}\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert "podScrape.acceptEncoding" in str(caught.value)


def spec(prometheus: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "target": {"name": "chat-canary"},
        "baseline": {"name": "chat-baseline"},
        "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
        "slices": [
            {
                "name": "chat",
                "canary": {"matchLabels": {"role": "canary"}},
                "baseline": {"matchLabels": {"role": "baseline"}},
            }
        ],
        "source": {"kind": "prometheus", "prometheus": prometheus or {}},
    }


def resource(prometheus: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "alphagate.io/v1alpha1",
        "kind": "SpeculativeCanary",
        "metadata": {"name": "c", "namespace": "llm"},
        "spec": spec(prometheus),
    }


@pytest.mark.parametrize(
    "field",
    [
        {"url": "http://attacker.example:443"},
        {"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
        {"basicAuth": {"username": "u", "passwordFile": "/etc/shadow"}},
        {"caFile": "/etc/ssl/private/key.pem"},
        {"headers": {"Authorization": "Bearer x"}},
    ],
)
def test_a_policy_cannot_carry_an_address_or_a_credential(field: dict[str, Any]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse(resource(field))
    assert caught.value.path == "spec.source.prometheus"


def test_a_policy_names_an_endpoint_and_gets_only_that() -> None:
    endpoints = SourcesConfig(
        prometheus=[
            PrometheusEndpoint(name="default", url="http://prom-a.test:9090"),
            PrometheusEndpoint(name="thanos", url="https://thanos.test", timeout_seconds=20),
        ]
    )
    chosen = make_source(
        SpeculativeCanarySpec.model_validate(spec({"endpoint": "thanos", "timeoutSeconds": 60})),
        endpoints=endpoints,
    )
    assert isinstance(chosen, PrometheusSource)
    assert chosen.base_url == "https://thanos.test/"
    assert chosen.timeout_seconds == 20  # a policy may shorten the deadline, never lengthen it
    chosen.close()
    default = make_source(SpeculativeCanarySpec.model_validate(spec()), endpoints=endpoints)
    assert isinstance(default, PrometheusSource) and default.base_url == "http://prom-a.test:9090/"
    default.close()


def test_an_unknown_endpoint_fails_every_read_without_a_request() -> None:
    requests: list[int] = []

    def answer(conn: Any, stop: threading.Event) -> None:
        requests.append(1)

    with serving(answer) as server:
        endpoints = SourcesConfig.single(server.base)
        s = SpeculativeCanarySpec.model_validate(spec({"endpoint": "elsewhere"}))
        src = make_source(s, endpoints=endpoints)
        assert isinstance(src, FailedSource)
        assert src.spec_invalid  # the policy is wrong, not the source: SpecValid=False
        assert (
            isinstance(src.error, EndpointError) and src.error.kind is SourceErrorKind.UNREACHABLE
        )
        obs = src.observe(s, start=0.0, end=60.0, interval_seconds=30.0)
        assert server.requests == 0
    assert obs.source_error is not None and "elsewhere" in obs.source_error
    assert all(p.error for p in obs.pools)


@pytest.mark.parametrize(
    "url", ["prom:9090", "ftp://prom", "http://", "http://prom/#x", "http://[::1", "://x"]
)
def test_malformed_endpoint_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SourcesConfig.single(url)
    assert "--prometheus-url" in str(caught.value)


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "prometheus:\n"
        "  - name: default\n"
        "    url: https://alice:s3cret@prom.test:9090\n"
        "    bearerTokenFile: /var/run/secrets/prom/token\n"
        "    timeoutSeconds: 5\n"
    )
    cfg = load(path)
    endpoint = cfg.prometheus_endpoint("default")
    assert endpoint.timeout_seconds == 5 and "s3cret" not in endpoint.display_url
    for bad, where in [
        ("prometheus:\n  - {name: a, url: 'x'}\n", "prometheus.0.url"),
        ("prometheus:\n  - {name: a, url: 'http://p'}\n  - {name: a, url: 'http://q'}\n", "unique"),
        (
            "prometheus: [{name: a, url: 'http://p', bearerTokenFile: t,\n"
            "  basicAuth: {username: u, passwordFile: p}}]\n",
            "not both",
        ),
        ("prometheus: [{name: a, url: 'http://p', timeoutSeconds: .inf}]\n", "inf"),
        ("a: &a [*a]\n", "alias"),
    ]:
        path.write_text(bad)
        with pytest.raises(ConfigError) as caught:
            load(path)
        assert str(path) in str(caught.value) and where in str(caught.value), str(caught.value)
