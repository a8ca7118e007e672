"""The SpeculativeCanary policy schema: the single source of truth for the CRD.

These pydantic models define what a user may write (spec) and what the controller reports
(status). The CRD's OpenAPI schema is generated from them; YAML keys are camelCase as in
Kubernetes, Python attributes snake_case. This module validates and parses only: it reads no
files and talks to no API (the shell does). The decision core reads these models.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from alphagate.errors import PolicyError

GROUP: Final = "alphagate.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SpeculativeCanary"
PLURAL: Final = "speculativecanaries"

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0)]
NonNegativeSeconds = Annotated[float, Field(ge=0.0)]


class _Model(BaseModel):
    """Strict, camelCase, frozen: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
        validate_default=True,
    )


class Mode(StrEnum):
    """Enforce patches the canary; dryRun decides and records but never patches."""

    ENFORCE = "enforce"
    DRY_RUN = "dryRun"


class Aggregation(StrEnum):
    """combined: one canary flips on the traffic-weighted alpha (with a per-slice floor).
    perSlice: each slice has its own canary Deployment and flips alone."""

    COMBINED = "combined"
    PER_SLICE = "perSlice"


class LatencyMetric(StrEnum):
    """Which latency the P99 guard compares, canary against baseline.

    perToken: vllm:request_time_per_output_token_seconds (one observation per request; like
      for like between a speculating canary and a plain baseline). The default.
    perStepScaled: vllm:inter_token_latency_seconds divided by the canary's measured tokens per
      engine step before comparison.
    perStepAbsolute: vllm:inter_token_latency_seconds against an absolute stutter limit
      (`maxStepSeconds`): the longest gap a streaming user sees.
    """

    PER_TOKEN = "perToken"
    PER_STEP_SCALED = "perStepScaled"
    PER_STEP_ABSOLUTE = "perStepAbsolute"


class FailSafe(StrEnum):
    """What repeated source Errors do: hold the current state (default) or turn speculation off."""

    HOLD = "hold"
    DISABLE = "disable"


class SourceKind(StrEnum):
    PROMETHEUS = "prometheus"
    POD_SCRAPE = "podScrape"


class DeploymentRef(_Model):
    """A Deployment and the vLLM container in it."""

    name: str = Field(min_length=1, max_length=253)
    container: str = Field(default="vllm", min_length=1)


class PodSelector(_Model):
    """Labels that pick a pool's pods: pod labels for scraping, series labels in Prometheus."""

    match_labels: dict[str, str] = Field(min_length=1)


class Slice(_Model):
    """A traffic slice: a routable pool with its own canary and baseline pods."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$")
    canary: PodSelector
    baseline: PodSelector
    # The canary Deployment serving this slice. perSlice: required, flipped alone. combined:
    # optional; every distinct slice Deployment (or spec.target when none) flips together.
    deployment: DeploymentRef | None = None
    # combined aggregation: a slice below this alpha (upper bound) vetoes enabling.
    min_alpha: Ratio | None = None


class AcceptanceGate(_Model):
    """Hysteresis on alpha's confidence bounds, in consecutive evaluation windows."""

    disable_below: Ratio = 0.55
    enable_above: Ratio = 0.60
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    min_drafts: int = Field(default=200, ge=1)
    consecutive_windows: int = Field(default=2, ge=1, le=100)

    @model_validator(mode="after")
    def _enable_not_below_disable(self) -> AcceptanceGate:
        if self.enable_above < self.disable_below:
            raise ValueError(
                f"enableAbove ({self.enable_above}) must not be below disableBelow "
                f"({self.disable_below}): the hysteresis band would be inverted"
            )
        return self


class LatencyGuard(_Model):
    """P99 guard of canary against baseline, with the bucket-exceedance test."""

    enabled: bool = True
    metric: LatencyMetric = LatencyMetric.PER_TOKEN
    quantile: float = Field(default=0.99, gt=0.5, lt=1.0)
    max_regression_ratio: float = Field(default=0.10, ge=0.0, le=10.0)
    max_step_seconds: PositiveSeconds | None = None
    min_count: int = Field(default=100, ge=1)
    significance: float = Field(default=0.01, gt=0.0, lt=0.5)
    consecutive_windows: int = Field(default=2, ge=1, le=100)

    @model_validator(mode="after")
    def _absolute_needs_limit(self) -> LatencyGuard:
        if self.metric is LatencyMetric.PER_STEP_ABSOLUTE and self.max_step_seconds is None:
            raise ValueError("metric perStepAbsolute needs maxStepSeconds")
        return self


class Backoff(_Model):
    """Cooldown after a rollback: initial * factor**n, capped."""

    initial_seconds: PositiveSeconds = 900.0
    factor: float = Field(default=2.0, ge=1.0, le=10.0)
    max_seconds: PositiveSeconds = 4 * 3600.0

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Backoff:
        if self.max_seconds < self.initial_seconds:
            raise ValueError("maxSeconds must not be below initialSeconds")
        return self


class Timing(_Model):
    """How often to evaluate, over what window, and the budget for restarts."""

    interval_seconds: PositiveSeconds = 30.0
    window_seconds: PositiveSeconds = 300.0
    warmup_seconds: NonNegativeSeconds = 120.0
    rollout_timeout_seconds: PositiveSeconds = 900.0
    min_dwell_seconds: NonNegativeSeconds = 600.0
    probe_seconds: PositiveSeconds = 900.0
    # At least 2: an enable is allowed only with room for itself and its possible rollback.
    max_flips_per_hour: int = Field(default=4, ge=2, le=60)
    cooldown: Backoff = Backoff()
    # Re-probe before the cooldown ends when the traffic share of slices whose last known alpha
    # cleared the gate grew by at least this much since the rollback.
    reprobe_mix_shift: Ratio = 0.15

    @model_validator(mode="after")
    def _window_covers_interval(self) -> Timing:
        if self.window_seconds < self.interval_seconds:
            raise ValueError("windowSeconds must not be shorter than intervalSeconds")
        return self


class ErrorPolicy(_Model):
    """Repeated source Errors raise an alert after `alertAfter` and may apply a fail-safe."""

    alert_after: int = Field(default=3, ge=1)
    fail_safe: FailSafe = FailSafe.HOLD
    fail_safe_after: int = Field(default=10, ge=1)


class BasicAuth(_Model):
    username: str
    password_file: str


class PrometheusSource(_Model):
    url: str = Field(pattern=r"^https?://")
    bearer_token_file: str | None = None
    basic_auth: BasicAuth | None = None
    ca_file: str | None = None
    headers: dict[str, str] = {}
    timeout_seconds: PositiveSeconds = 10.0
    # Extra label matchers added to every query, e.g. {namespace: "llm"}.
    match_labels: dict[str, str] = {}


class ScrapeSource(_Model):
    port: int | None = Field(default=None, ge=1, le=65535)
    # Pod annotation that overrides the port (as prometheus.io/port does).
    port_annotation: str = "prometheus.io/port"
    path: str = "/metrics"
    scheme: Literal["http", "https"] = "http"
    timeout_seconds: PositiveSeconds = 5.0
    max_concurrency: int = Field(default=32, ge=1, le=1024)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)


class Source(_Model):
    kind: SourceKind = SourceKind.PROMETHEUS
    prometheus: PrometheusSource | None = None
    scrape: ScrapeSource | None = None

    @model_validator(mode="after")
    def _kind_has_settings(self) -> Source:
        if self.kind is SourceKind.PROMETHEUS and self.prometheus is None:
            raise ValueError("kind prometheus needs a `prometheus` block with a url")
        return self


class Promotion(_Model):
    """Copy the confirmed config to the stable fleet after a bake time in On."""

    enabled: bool = False
    bake_seconds: PositiveSeconds = 24 * 3600.0
    stable: DeploymentRef | None = None

    @model_validator(mode="after")
    def _enabled_needs_target(self) -> Promotion:
        if self.enabled and self.stable is None:
            raise ValueError("promotion enabled needs `stable` (the Deployment to copy to)")
        return self


class SpeculativeCanarySpec(_Model):
    target: DeploymentRef
    baseline: DeploymentRef
    # The JSON object given to vLLM's --speculative-config when speculation is on.
    speculative_config: dict[str, Any]
    mode: Mode = Mode.ENFORCE
    aggregation: Aggregation = Aggregation.COMBINED
    slices: list[Slice] = Field(min_length=1)
    acceptance: AcceptanceGate = AcceptanceGate()
    latency: LatencyGuard = LatencyGuard()
    timing: Timing = Timing()
    errors: ErrorPolicy = ErrorPolicy()
    source: Source
    promotion: Promotion = Promotion()
    paused: bool = False

    @field_validator("speculative_config")
    @classmethod
    def _speculative_config_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        k = value.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool):
            raise ValueError("num_speculative_tokens is required and must be an integer")
        if k < 1:
            raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
        if not isinstance(value.get("method", "ngram"), str):
            raise ValueError("method must be a string")
        return value

    @model_validator(mode="after")
    def _slices_consistent(self) -> SpeculativeCanarySpec:
        names = [s.name for s in self.slices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"slice names must be unique; repeated: {', '.join(dupes)}")
        if self.aggregation is Aggregation.PER_SLICE:
            missing = [s.name for s in self.slices if s.deployment is None]
            if missing:
                raise ValueError(
                    f"aggregation perSlice needs a deployment on every slice; missing on: "
                    f"{', '.join(missing)}"
                )
        return self

    def canary_deployments(self, slice_name: str | None = None) -> list[DeploymentRef]:
        """The Deployments one decision flips: a slice's own (perSlice) or all (combined)."""
        if slice_name is not None:
            for s in self.slices:
                if s.name == slice_name:
                    return [s.deployment or self.target]
            raise KeyError(slice_name)
        seen: dict[str, DeploymentRef] = {}
        for s in self.slices:
            ref = s.deployment or self.target
            seen.setdefault(ref.name, ref)
        return list(seen.values()) or [self.target]

    @property
    def k(self) -> int:
        """Draft length K from the speculative config."""
        return int(self.speculative_config["num_speculative_tokens"])


class ObjectMeta(_Model):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str = Field(
        default="default", max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class SpeculativeCanary(_Model):
    """One resource: a canary whose speculative config alphagate turns on and off."""

    model_config = ConfigDict(
        extra="ignore",  # status and server-side metadata are read elsewhere
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
    )

    api_version: Literal["alphagate.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeCanary"]
    metadata: ObjectMeta
    spec: SpeculativeCanarySpec


def _field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic loc -> `spec.slices[1].canary`; aliases are used so paths match the YAML."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def parse(obj: Any, *, where: str = "") -> SpeculativeCanary:
    """Validate one resource (a dict from YAML or the API) or raise PolicyError.

    The error names `where` (file, document index) and the first offending field path; all
    problems are listed in the message so one run shows everything that is wrong.
    """
    if not isinstance(obj, dict):
        raise PolicyError(f"expected a mapping, got {type(obj).__name__}", where=where)
    try:
        return SpeculativeCanary.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = _field_path(tuple(errors[0]["loc"])) if errors else ""
        lines = [f"{_field_path(tuple(e['loc'])) or '<root>'}: {e['msg']}" for e in errors]
        raise PolicyError("; ".join(lines), where=where, path=first) from exc


def dump(canary: SpeculativeCanary) -> dict[str, Any]:
    """The resource as the YAML/JSON a user writes (camelCase, no Nones)."""
    return canary.model_dump(mode="json", by_alias=True, exclude_none=True)
