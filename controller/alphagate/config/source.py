"""Where a policy's metrics come from: a named Prometheus endpoint (never a URL or credential)
or pod scrapes within a memory budget."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, model_validator

from alphagate.config.base import StrictModel, TimeoutSeconds
from alphagate.config.enums import SourceKind

ADMIN_ONLY_SOURCE_FIELDS: Final = ("url", "bearerTokenFile", "basicAuth", "caFile", "headers")
"""Prometheus settings a SpeculativeCanary may not carry: where the controller sends queries
and with which credentials is the cluster admin's choice (the controller's `--config`)."""


class PrometheusSettings(StrictModel):
    """Which Prometheus endpoint to query, by the name the controller's admin gave it: a
    policy holds no URL and no credential (the trust boundary in docs/security.md)."""

    model_config = ConfigDict(title="PrometheusSource")  # the CRD's title, as shipped

    endpoint: str = Field(
        default="default",
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description=(
            "Name of a Prometheus endpoint configured for the controller by its admin "
            "(`alphagate run --config` or --prometheus-url); URL and credentials live there."
        ),
    )
    timeout_seconds: TimeoutSeconds | None = Field(
        default=None,
        description="Deadline of one query, in seconds; at most the endpoint's (its default).",
    )
    match_labels: dict[str, str] = Field(
        default={}, description="Extra label matchers added to every query, e.g. {namespace: llm}."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_address_or_credential(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = [k for k in ADMIN_ONLY_SOURCE_FIELDS if k in data]
            if found:
                raise ValueError(
                    f"{', '.join(found)} may not be set in a SpeculativeCanary: the controller's "
                    "admin configures Prometheus URLs and credentials (`alphagate run --config`); "
                    "name one with `endpoint:`"
                )
        return data


SCRAPE_MEMORY_BUDGET: Final = 256 * 1024 * 1024
"""The pages in flight must fit the pod (512 Mi in deploy/): maxConcurrency pages, each costing
about 2 x maxBodyBytes + 100 bytes x maxLines while read and parsed (docs/reliability.md
measures it: ~6 MiB a page at the defaults, 192 MiB for 32 pages at both caps)."""


def scrape_page_cost(max_body_bytes: int, max_lines: int) -> int:
    """Bytes one page may cost while it is read and parsed (see SCRAPE_MEMORY_BUDGET)."""
    return 2 * max_body_bytes + 100 * max_lines


class ScrapeSettings(StrictModel):
    # no docstring: it would become the CRD's description of the field
    model_config = ConfigDict(title="ScrapeSource")  # the CRD's title, as shipped

    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description=(
            "Port of vLLM's /metrics on each pod; unset: the portAnnotation, else the container "
            "port named http."
        ),
    )
    port_annotation: str = Field(
        default="prometheus.io/port",
        min_length=1,
        max_length=253,
        description="Pod annotation that overrides the port (as prometheus.io/port does).",
    )
    path: str = Field(
        default="/metrics",
        max_length=1024,
        pattern=r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$",
        description="HTTP path of the metrics page.",
    )
    scheme: Literal["http", "https"] = Field(default="http", description="http or https.")
    timeout_seconds: TimeoutSeconds = Field(
        default=5.0,
        description="Deadline of one pod scrape (connect, headers and body), in seconds.",
    )
    max_concurrency: int = Field(
        default=32, ge=1, le=256, description="Pods scraped at the same time."
    )
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description=(
            "A metrics page larger than this once decoded is refused (an Error for that pod); "
            "maxConcurrency x (2 x maxBodyBytes + 100 x maxLines) is at most 256 MiB."
        ),
    )
    max_lines: int = Field(
        default=20_000,
        ge=100,
        le=1_000_000,
        description="A metrics page with more lines than this is refused (an Error for that pod).",
    )

    @model_validator(mode="after")
    def _fits_in_memory(self) -> ScrapeSettings:
        per_page = scrape_page_cost(self.max_body_bytes, self.max_lines)
        if self.max_concurrency * per_page > SCRAPE_MEMORY_BUDGET:
            raise ValueError(
                f"maxConcurrency ({self.max_concurrency}) pages of up to {self.max_body_bytes} "
                f"bytes and {self.max_lines} lines would need about "
                f"{self.max_concurrency * per_page >> 20} MiB, over the "
                f"{SCRAPE_MEMORY_BUDGET >> 20} MiB the controller keeps for scrapes: lower one"
            )
        return self


class SourceSettings(StrictModel):
    kind: SourceKind = Field(
        default=SourceKind.PROMETHEUS,
        description=(
            "Where metrics come from: prometheus (PromQL over the HTTP API) or podScrape (the "
            "controller scrapes pod /metrics found through the Kubernetes API)."
        ),
    )
    prometheus: PrometheusSettings | None = Field(
        default=None,
        description="Settings of the prometheus source; required when kind is prometheus.",
    )
    scrape: ScrapeSettings | None = Field(
        default=None, description="Settings of the podScrape source (defaults apply when omitted)."
    )

    @model_validator(mode="after")
    def _kind_has_settings(self) -> SourceSettings:
        if self.kind is SourceKind.PROMETHEUS and self.prometheus is None:
            raise ValueError(
                "kind prometheus needs a `prometheus` block naming the endpoint to query"
            )
        return self
