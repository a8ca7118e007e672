"""Prometheus endpoints the cluster admin configured for the controller, by name.

Trust boundary (docs/security.md): whoever may write a SpeculativeCanary is a namespace user. If a
policy held a URL and a credentials file, a namespace editor could make the controller read any
file in its pod (its own ServiceAccount token) and send it anywhere. So the URL, the CA bundle
and every credential live here, in the controller's own configuration (`alphagate run --config
FILE`, or `--prometheus-url URL` for one endpoint without credentials), and a policy only names
an endpoint (`spec.source.prometheus.endpoint`, default ``default``).

The file, YAML::

    prometheus:
      - name: default
        url: https://prometheus.monitoring.svc:9090
        bearerTokenFile: /var/run/secrets/prometheus/token   # optional
        caFile: /etc/alphagate/prometheus-ca.crt              # optional
        timeoutSeconds: 10
        scrapeIntervalSeconds: 30   # optional: how often it scrapes vLLM (else measured)
        namespaceLabel: namespace   # the label holding a series' namespace (the default)
        allowCrossNamespace: false  # the default: a canary reads its own namespace only
    podScrape:
      acceptEncoding: identity      # or gzip where bytes are dear (PodScrapeConfig)
      budgets:                      # what one canary's read may spend (sources/budget.py)
        maxReadSeconds: 60
        inFlightBytes: 50331648     # pages read and parsed at once, all canaries
        perCanaryBytes: 16777216
        keptBytes: 67108864         # pages and increments kept, shared by canaries
        receiveBytes: 8388608       # pages received at once, shared by namespaces
        parseWorkers: 2
    prometheusBudgets:              # queries a second (sources/querybudget.py)
      canaryQps: 20
      canaryBurst: 600
      namespaceQps: 100
      namespaceBurst: 3000

``scrapeIntervalSeconds`` tells the controller how often this Prometheus scrapes the vLLM
pods; without it the controller measures it (samples per series over ten minutes) and warns
when a policy's interval or window holds too few scrapes (alphagate.core.timing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

import httpx
import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from alphagate import files, yamlload
from alphagate.config import StrictModel, TimeoutSeconds
from alphagate.errors import ConfigError, EndpointError
from alphagate.sources.budget import ScrapeBudgets
from alphagate.sources.common import redact_url
from alphagate.sources.promwire import MAX_ANSWER_LABELS, MAX_ANSWER_POINTS
from alphagate.sources.querybudget import QueryBudgets

DEFAULT_ENDPOINT: Final = "default"
MAX_CONFIG_BYTES: Final = 256 * 1024


class BasicAuth(StrictModel):
    """Basic auth whose password is in a file of the controller's pod (re-read on rotation)."""

    username: str = Field(min_length=1)
    password_file: str = Field(min_length=1)


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host and no fragment; ValueError naming what is wrong."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"must start with http:// or https:// (got {url[:40]!r})")
    if not parsed.host:
        raise ValueError("the URL has no host")
    if parsed.fragment:
        raise ValueError("the URL may not have a #fragment")
    return url


class PrometheusEndpoint(StrictModel):
    """One Prometheus (or Thanos, Mimir, VictoriaMetrics) HTTP API the controller may query."""

    name: str = Field(
        default=DEFAULT_ENDPOINT,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    )
    url: str = Field(max_length=2048)
    bearer_token_file: str | None = None
    basic_auth: BasicAuth | None = None
    ca_file: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: TimeoutSeconds = 10.0
    max_response_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    # What one answer may cost to decode (sources/promwire.check_answer): a batch whose shared
    # answer is larger is asked again in halves; a pool's own answer larger fails that pool.
    max_answer_points: int = Field(default=MAX_ANSWER_POINTS, ge=10, le=10_000_000)
    max_answer_labels: int = Field(default=MAX_ANSWER_LABELS, ge=10, le=10_000_000)
    # how often this Prometheus scrapes the vLLM pods; None: measured from the samples
    scrape_interval_seconds: float | None = Field(
        default=None, ge=1.0, le=3600.0, allow_inf_nan=False
    )
    # Set when deploy/monitoring/rules/alphagate-batches.yaml is installed in this Prometheus:
    # its group interval (30 as shipped). Policies whose interval is a multiple of it read
    # the per-pod rates it records instead of raw counters.
    recorded_rules_interval_seconds: int | None = Field(default=None, ge=1, le=3600)
    # The namespace boundary (sources/scope.py): the label this Prometheus stores a series'
    # Kubernetes namespace in; every query of a canary matches its own namespace on it.
    namespace_label: str = Field(
        default="namespace", min_length=1, max_length=128, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$"
    )
    # True: a policy may select series of another namespace on this endpoint (matchLabels on
    # the namespace label); one that names none still reads its own.
    allow_cross_namespace: bool = False

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @model_validator(mode="after")
    def _one_credential(self) -> PrometheusEndpoint:
        if self.bearer_token_file and self.basic_auth:
            raise ValueError("set bearerTokenFile or basicAuth, not both")
        return self

    @property
    def display_url(self) -> str:
        """The URL without userinfo: what status, Events, logs and errors may show."""
        return redact_url(self.url)


class PodScrapeConfig(StrictModel):
    """How the controller scrapes pods (admin-owned: what bytes and CPU cost is the cluster's).

    ``acceptEncoding``: ``identity`` (the default) asks pods for plain pages, ``gzip`` for
    compressed ones. Measured at 1,000 pods (docs/benchmarks.md, "Fleet scale"): gzip reads 9x
    fewer bytes (6 MB against 53 MB a cycle: about 42 Mbit/s at a 10 s interval, cheap inside
    a cluster) for about the same controller CPU (1.12 against 1.07 s, paired), and costs every
    pod about 1 ms of CPU per scrape to deflate its page (vLLM's prometheus_client, level 9).
    Choose gzip where bytes are dear (pods across zones or a metered link).
    """

    accept_encoding: Literal["identity", "gzip"] = "identity"
    # What one canary's read may make the controller spend (time, memory, parse workers):
    # sources/budget.py; docs/reliability.md ("Budgets").
    budgets: ScrapeBudgets = Field(default_factory=ScrapeBudgets)


class SourcesConfig(StrictModel):
    """The controller's own source configuration (admin-owned)."""

    prometheus: list[PrometheusEndpoint] = Field(default=[], max_length=64)
    pod_scrape: PodScrapeConfig = Field(default_factory=PodScrapeConfig)
    # Prometheus queries a second per canary and per namespace (sources/querybudget.py)
    prometheus_budgets: QueryBudgets = Field(default_factory=QueryBudgets)

    @model_validator(mode="after")
    def _unique_names(self) -> SourcesConfig:
        names = [e.name for e in self.prometheus]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"prometheus endpoint names must be unique; repeated: {dupes}")
        return self

    @classmethod
    def single(cls, url: str, *, name: str = DEFAULT_ENDPOINT, **kw: object) -> SourcesConfig:
        """One endpoint (e.g. from `--prometheus-url`); ConfigError when the URL is bad."""
        try:
            return cls(
                prometheus=[PrometheusEndpoint.model_validate({"name": name, "url": url, **kw})]
            )
        except ValidationError as exc:
            raise ConfigError(_first_error(exc), where="--prometheus-url") from None

    def prometheus_endpoint(self, name: str) -> PrometheusEndpoint:
        """The endpoint a policy names; EndpointError when the admin configured none by it."""
        for endpoint in self.prometheus:
            if endpoint.name == name:
                return endpoint
        have = ", ".join(e.name for e in self.prometheus) or "none"
        raise EndpointError(
            f"no Prometheus endpoint named {name!r} is configured for the controller "
            f"(configured: {have}; the admin sets them with `alphagate run --config` or "
            "--prometheus-url)",
        )

    def merged(self, other: SourcesConfig) -> SourcesConfig:
        """Endpoints of both; `other` wins on a name both define."""
        names = {e.name for e in other.prometheus}
        keep = [e for e in self.prometheus if e.name not in names]
        return SourcesConfig(
            prometheus=[*keep, *other.prometheus],
            pod_scrape=self.pod_scrape,
            prometheus_budgets=self.prometheus_budgets,
        )


def _first_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc or '<root>'}: {str(err['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def load(path: Path) -> SourcesConfig:
    """The controller's config file; ConfigError naming the file and field when it is wrong."""
    where = str(path)
    try:
        raw = files.read_regular(path, MAX_CONFIG_BYTES)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", where=where)
        docs = yamlload.load_all(raw.decode("utf-8"), max_bytes=MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", where=where) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", where=where) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", where=where) from None
    data = [d.data for d in docs if d.data is not None]
    if len(data) != 1 or not isinstance(data[0], dict):
        raise ConfigError("expected one YAML mapping", where=where)
    try:
        return SourcesConfig.model_validate(data[0])
    except ValidationError as exc:
        raise ConfigError(_first_error(exc), where=where) from None
