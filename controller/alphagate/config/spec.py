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

from alphagate import specconfig
from alphagate.errors import PolicyError

GROUP: Final = "alphagate.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SpeculativeCanary"
PLURAL: Final = "speculativecanaries"

MAX_SECONDS: Final = 30 * 24 * 3600.0
"""No duration in a policy is longer than 30 days (and none is infinite or NaN)."""
MIN_INTERVAL_SECONDS: Final = 0.1
"""Every evaluation reads the source and the API: a shorter interval floods both (the demo
compresses its 2 s interval 20-fold: 0.1 s). The controller may set a higher floor."""

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
IntervalSeconds = Annotated[
    float, Field(ge=MIN_INTERVAL_SECONDS, le=MAX_SECONDS, allow_inf_nan=False)
]
TimeoutSeconds = Annotated[float, Field(ge=0.1, le=300.0, allow_inf_nan=False)]


class StrictModel(BaseModel):
    """Strict, camelCase, frozen: unknown fields are errors, not silently dropped. The base of
    every policy model, and of the controller's own configuration (`sources.endpoints`)."""

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


class WorkloadKind(StrEnum):
    """The kind of object whose pod template runs vLLM: a Deployment, or an Argo Rollout
    (argoproj.io/v1alpha1) whose own canary steps roll the change out."""

    DEPLOYMENT = "Deployment"
    ROLLOUT = "Rollout"


class WorkloadRef(StrictModel):
    """A Deployment (or an Argo Rollout) and the vLLM container in its pod template."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the Deployment or Rollout, in the SpeculativeCanary's namespace.",
    )
    container: str = Field(
        default="vllm",
        min_length=1,
        description=(
            "Name of the vLLM container in that object's pod template whose args carry "
            "--speculative-config."
        ),
    )
    kind: WorkloadKind = Field(
        default=WorkloadKind.DEPLOYMENT,
        description=(
            "Deployment (apps/v1, the default) or Rollout (argoproj.io/v1alpha1, an Argo Rollout "
            "with its own spec.template; one that uses workloadRef is refused). The flag is "
            "edited and recorded the same way on both; a Rollout counts as rolled out when Argo "
            "reports it Healthy and fully promoted."
        ),
    )

    @property
    def key(self) -> tuple[str, str]:
        """(kind, name): two objects of different kinds may share a name."""
        return (self.kind.value, self.name)


DeploymentRef = WorkloadRef
"""The name this reference had when only Deployments could be targets."""


class PodSelector(StrictModel):
    """Labels that pick a pool's pods: pod labels for scraping, series labels in Prometheus."""

    match_labels: dict[str, str] = Field(
        min_length=1,
        description=(
            "Labels every pod of the pool carries. A podScrape source selects pods by them; a "
            "prometheus source adds them as series matchers (the PodMonitor copies pod labels onto"
            " series)."
        ),
    )


class Slice(StrictModel):
    """A traffic slice: a routable pool with its own canary and baseline pods."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$",
        description=(
            "Slice name (lowercase, digits, - and _), unique in the resource; used as a label "
            "value in metrics."
        ),
    )
    canary: PodSelector = Field(
        description="Selects this slice's canary pods (speculation on or being probed)."
    )
    baseline: PodSelector = Field(
        description="Selects this slice's baseline pods (speculation off), the latency reference."
    )
    # The canary Deployment serving this slice. perSlice: required, flipped alone. combined:
    # optional; every distinct slice Deployment (or spec.target when none) flips together.
    deployment: WorkloadRef | None = Field(
        default=None,
        description=(
            "The canary Deployment serving this slice. Required on every slice with aggregation "
            "perSlice (each flips alone); optional with combined (every distinct slice Deployment,"
            " or spec.target when none, flips together)."
        ),
    )
    # combined aggregation: a slice below this alpha (upper bound) vetoes enabling.
    min_alpha: Ratio | None = Field(
        default=None,
        description=(
            "combined aggregation only: a per-slice floor; a slice whose alpha upper bound is "
            "below it vetoes enabling even when the pooled alpha clears the gate."
        ),
    )


class AcceptanceGate(StrictModel):
    """Hysteresis on alpha's confidence bounds, in consecutive evaluation windows."""

    disable_below: Ratio = Field(
        default=0.55,
        description=(
            "Turn speculation off when the upper confidence bound of alpha (accepted / proposed "
            "draft tokens) is below this, for consecutiveWindows windows."
        ),
    )
    enable_above: Ratio = Field(
        default=0.60,
        description=(
            "Confirm speculation (Probing to On) when the lower confidence bound of alpha is above"
            " this. Must not be below disableBelow (hysteresis band)."
        ),
    )
    confidence: float = Field(
        default=0.95,
        gt=0.5,
        lt=1.0,
        description="Two-sided confidence level of alpha's interval (0.5 to 1, exclusive).",
    )
    min_drafts: int = Field(
        default=200,
        ge=1,
        description=(
            "Drafts a window needs before alpha is judged; fewer gives Inconclusive, which never "
            "flips."
        ),
    )
    consecutive_windows: int = Field(
        default=2,
        ge=1,
        le=100,
        description="Disjoint windows in a row that must agree before a flip.",
    )
    batch_seconds: PositiveSeconds = Field(
        default=900.0,
        description=(
            "Shortest time block of one pod that counts as an independent batch for alpha's "
            "interval: at least as long as a request lives (a request keeps its acceptance "
            "across scrapes). Pods are always separate batches; fewer than two batches is "
            "Inconclusive. Lower it only for short outputs."
        ),
    )

    @model_validator(mode="after")
    def _enable_not_below_disable(self) -> AcceptanceGate:
        if self.enable_above < self.disable_below:
            raise ValueError(
                f"enableAbove ({self.enable_above}) must not be below disableBelow "
                f"({self.disable_below}): the hysteresis band would be inverted"
            )
        return self


class LatencyGuard(StrictModel):
    """P99 guard of canary against baseline, with the bucket-exceedance test."""

    enabled: bool = Field(
        default=True,
        description=(
            "Compare the canary's latency quantile with the baseline's; a significant regression "
            "rolls back."
        ),
    )
    metric: LatencyMetric = Field(
        default=LatencyMetric.PER_TOKEN,
        description=(
            "Which latency is compared: perToken (vllm:request_time_per_output_token_seconds, like"
            " for like, the default), perStepScaled (per-step ITL divided by measured tokens per "
            "step) or perStepAbsolute (per-step ITL against maxStepSeconds)."
        ),
    )
    quantile: float = Field(
        default=0.99, gt=0.5, lt=1.0, description="The quantile compared, e.g. 0.99 for P99."
    )
    max_regression_ratio: float = Field(
        default=0.10,
        ge=0.0,
        le=10.0,
        description=(
            "Allowed regression of the canary's quantile over the baseline's, as a fraction (0.10 "
            "= 10% slower)."
        ),
    )
    max_step_seconds: PositiveSeconds | None = Field(
        default=None,
        description=(
            "metric perStepAbsolute only (required there): the longest per-step gap, in seconds, a"
            " streaming user may see."
        ),
    )
    min_count: int = Field(
        default=100,
        ge=1,
        description="Observations each side needs in a window before latency is judged.",
    )
    significance: float = Field(
        default=0.05,
        gt=0.0,
        lt=0.5,
        description=(
            "Family-wise significance level of one window's latency tests (the mean test and "
            "one exceedance test per bucket bound, Holm-corrected); a rollback also needs "
            "consecutiveWindows disjoint failing windows."
        ),
    )
    consecutive_windows: int = Field(
        default=2,
        ge=1,
        le=100,
        description="Disjoint windows in a row with a regression before a rollback.",
    )
    batch_seconds: PositiveSeconds = Field(
        default=60.0,
        description=(
            "perToken on exact sums: shortest time block of one pod that counts as an "
            "independent batch (a stall episode slows one pod for a while); pods are always "
            "separate batches."
        ),
    )

    @model_validator(mode="after")
    def _absolute_needs_limit(self) -> LatencyGuard:
        if self.metric is LatencyMetric.PER_STEP_ABSOLUTE and self.max_step_seconds is None:
            raise ValueError("metric perStepAbsolute needs maxStepSeconds")
        return self


class Backoff(StrictModel):
    """Cooldown after a rollback: initial * factor**n, capped."""

    initial_seconds: PositiveSeconds = Field(
        default=900.0,
        description="Cooldown after the first rollback before the next probe, in seconds.",
    )
    factor: float = Field(
        default=2.0,
        ge=1.0,
        le=10.0,
        description="Each further rollback multiplies the cooldown by this.",
    )
    max_seconds: PositiveSeconds = Field(
        default=4 * 3600.0,
        description="Upper bound of the cooldown, in seconds; not below initialSeconds.",
    )
    decay_after_seconds: PositiveSeconds = Field(
        default=4 * 3600.0,
        description=(
            "The backoff steps down by one for every this many seconds spent On before a "
            "rollback (sustained stability), not on each confirmation."
        ),
    )

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Backoff:
        if self.max_seconds < self.initial_seconds:
            raise ValueError("maxSeconds must not be below initialSeconds")
        return self


class Timing(StrictModel):
    """How often to evaluate, over what window, and the budget for restarts."""

    interval_seconds: IntervalSeconds = Field(
        default=30.0, description="Seconds between evaluations of this canary (at least 0.1)."
    )
    window_seconds: IntervalSeconds = Field(
        default=300.0,
        description=(
            "Length of the metrics window each evaluation reads, in seconds; not shorter than "
            "intervalSeconds."
        ),
    )
    warmup_seconds: NonNegativeSeconds = Field(
        default=120.0,
        description=(
            "Seconds after a rollout finishes during which data is not judged (model load, cache "
            "warm-up)."
        ),
    )
    rollout_timeout_seconds: PositiveSeconds = Field(
        default=900.0,
        description=(
            "A rollout of the canary that takes longer than this raises rollout-timeout and holds."
        ),
    )
    min_dwell_seconds: NonNegativeSeconds = Field(
        default=600.0, description="Minimum seconds in a state before the next flip."
    )
    probe_seconds: PositiveSeconds = Field(
        default=900.0,
        description=(
            "How long a probe (speculation on to gather evidence) may run without a verdict before"
            " it is stopped."
        ),
    )
    # At least 2: an enable is allowed only with room for itself and its possible rollback.
    max_flips_per_hour: int = Field(
        default=4,
        ge=2,
        le=60,
        description=(
            "Flip budget: at most this many restarts of the canary per hour (at least 2, so an "
            "enable has room for its rollback)."
        ),
    )
    cooldown: Backoff = Field(
        default=Backoff(), description="Backoff between a rollback and the next probe."
    )
    # Re-probe before the cooldown ends when the traffic share of slices whose last known alpha
    # cleared the gate grew by at least this much since the rollback.
    reprobe_mix_shift: Ratio = Field(
        default=0.15,
        description=(
            "Re-probe before the cooldown ends when the traffic share of slices whose last alpha "
            "cleared the gate grew by at least this much since the rollback."
        ),
    )

    @model_validator(mode="after")
    def _window_covers_interval(self) -> Timing:
        if self.window_seconds < self.interval_seconds:
            raise ValueError("windowSeconds must not be shorter than intervalSeconds")
        return self


class ErrorPolicy(StrictModel):
    """Repeated source Errors raise an alert after `alertAfter` and may apply a fail-safe."""

    alert_after: int = Field(
        default=3,
        ge=1,
        description="Consecutive source Errors before the source-errors alert is raised.",
    )
    fail_safe: FailSafe = Field(
        default=FailSafe.HOLD,
        description=(
            "What repeated Errors do after failSafeAfter: hold the current state (default) or "
            "disable speculation."
        ),
    )
    fail_safe_after: int = Field(
        default=10, ge=1, description="Consecutive source Errors before the fail-safe applies."
    )


class Staleness(StrictModel):
    """While speculation runs under judgement (Probing, On), how long the controller may go
    without a conclusive verdict (Pass or Fail) before it tells a person, and what then.

    Endless Inconclusive windows (too little traffic, too few pods, empty increase() from a
    scrape interval too long for the window) and endless Error windows both leave speculation
    running unchecked: the verdict-stale alert, the VerdictFresh condition and
    `alphagate_verdict_age_seconds` say so."""

    after_seconds: PositiveSeconds = Field(
        default=1800.0,
        description=(
            "Seconds without a conclusive verdict (Pass or Fail) while Probing or On before the "
            "verdict-stale alert is raised; counted from the later of the last conclusive window "
            "and the enable. Keep it above windowSeconds + warmupSeconds."
        ),
    )
    fail_safe: FailSafe = Field(
        default=FailSafe.HOLD,
        description=(
            "What a stale verdict does: hold (default; alert only) or disable speculation (opt-in "
            "fail-safe rollback)."
        ),
    )


ADMIN_ONLY_SOURCE_FIELDS: Final = ("url", "bearerTokenFile", "basicAuth", "caFile", "headers")
"""Prometheus settings a SpeculativeCanary may not carry: where the controller sends queries
and with which credentials is the cluster admin's choice (the controller's `--config`)."""


class PrometheusSource(StrictModel):
    """Which Prometheus endpoint to query, by the name the controller's admin gave it: a
    policy holds no URL and no credential (the trust boundary in docs/security.md)."""

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
    # Extra label matchers added to every query, e.g. {namespace: "llm"}.
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


class ScrapeSource(StrictModel):
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description=(
            "Port of vLLM's /metrics on each pod; unset: the portAnnotation, else the container "
            "port named http."
        ),
    )
    # Pod annotation that overrides the port (as prometheus.io/port does).
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
    def _fits_in_memory(self) -> ScrapeSource:
        per_page = scrape_page_cost(self.max_body_bytes, self.max_lines)
        if self.max_concurrency * per_page > SCRAPE_MEMORY_BUDGET:
            raise ValueError(
                f"maxConcurrency ({self.max_concurrency}) pages of up to {self.max_body_bytes} "
                f"bytes and {self.max_lines} lines would need about "
                f"{self.max_concurrency * per_page >> 20} MiB, over the "
                f"{SCRAPE_MEMORY_BUDGET >> 20} MiB the controller keeps for scrapes: lower one"
            )
        return self


class Source(StrictModel):
    kind: SourceKind = Field(
        default=SourceKind.PROMETHEUS,
        description=(
            "Where metrics come from: prometheus (PromQL over the HTTP API) or podScrape (the "
            "controller scrapes pod /metrics found through the Kubernetes API)."
        ),
    )
    prometheus: PrometheusSource | None = Field(
        default=None,
        description="Settings of the prometheus source; required when kind is prometheus.",
    )
    scrape: ScrapeSource | None = Field(
        default=None, description="Settings of the podScrape source (defaults apply when omitted)."
    )

    @model_validator(mode="after")
    def _kind_has_settings(self) -> Source:
        if self.kind is SourceKind.PROMETHEUS and self.prometheus is None:
            raise ValueError(
                "kind prometheus needs a `prometheus` block naming the endpoint to query"
            )
        return self


class Promotion(StrictModel):
    """Copy the confirmed config to the stable fleet after a bake time in On."""

    enabled: bool = Field(
        default=False,
        description=(
            "Copy the confirmed speculative config to the stable fleet after bakeSeconds in On. "
            "A manual promote needs it too (or `alphagate promote --force`)."
        ),
    )
    bake_seconds: PositiveSeconds = Field(
        default=24 * 3600.0, description="Seconds in On before promotion."
    )
    stable: WorkloadRef | None = Field(
        default=None,
        description="The stable Deployment to copy the config to; required when enabled.",
    )

    @model_validator(mode="after")
    def _enabled_needs_target(self) -> Promotion:
        if self.enabled and self.stable is None:
            raise ValueError("promotion enabled needs `stable` (the Deployment to copy to)")
        return self


class OutputLength(StrictModel):
    """Output length (vllm:request_generation_tokens): below about 50 tokens a request spends
    most of its life in prefill and the draft's cost is paid for a handful of decode steps."""

    min_mean_tokens: float = Field(
        default=50.0,
        ge=1.0,
        le=100000.0,
        description="Mean output tokens per finished request below which outputs are too short "
        "for speculation to pay (the OutputsLongEnough condition says so).",
    )
    withhold_probes: bool = Field(
        default=False,
        description="Opt-in: start no probe while outputs are measured too short (a manual "
        "enable still runs).",
    )


class DraftLengthTuning(StrictModel):
    """Opt-in: let the controller change num_speculative_tokens on the canary. Each change is a
    restart, so it obeys the flip safeguards (timing.minDwellSeconds, timing.maxFlipsPerHour,
    warm-up) and needs agreeing evidence; a change that regresses is reverted to the last good K
    and further changes wait a cooldown."""

    enabled: bool = Field(
        default=False,
        description="Let the controller change num_speculative_tokens on the canary (opt-in).",
    )
    min_k: int = Field(
        default=1, ge=1, le=32, description="The controller never sets K below this."
    )
    max_k: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description=(
            "The controller never sets K above this (default: the K in speculativeConfig). Above "
            "the configured K a longer draft is tried one position at a time and reverted if it "
            "does not pay."
        ),
    )
    consecutive_windows: int = Field(
        default=3,
        ge=1,
        le=100,
        description=(
            "Disjoint judged windows that must agree on the same new K before it is applied, "
            "and that confirm a new K as good."
        ),
    )
    cooldown_seconds: PositiveSeconds = Field(
        default=3600.0,
        description=(
            "After a K change is reverted, no further change for this many seconds (doubled on "
            "each revert in a row, at most 8 times this)."
        ),
    )
    min_speedup_drop: float = Field(
        default=0.05,
        ge=0.0,
        le=0.5,
        description=(
            "A new K regresses when its measured speed-up is confidently below the last good K's "
            "by more than this fraction; it is then reverted."
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> DraftLengthTuning:
        if self.max_k is not None and self.max_k < self.min_k:
            raise ValueError(f"maxK ({self.max_k}) must not be below minK ({self.min_k})")
        return self


class DraftLength(StrictModel):
    """How the draft-length recommendation prices a draft position, and whether the controller
    may act on it (`tuning`, opt-in). The recommendation is always reported (status, metrics,
    `evaluate`)."""

    cost_per_position: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Cost of one draft position relative to a plain decode step at batch 1 "
        "(default: the method's; a cost measured from per-step latency wins).",
    )
    tuning: DraftLengthTuning = Field(
        default=DraftLengthTuning(),
        description=(
            "Opt-in: the controller moves num_speculative_tokens on the canary within [minK, "
            "maxK], with the flip safeguards, and reverts a K that regresses."
        ),
    )


class SpeculativeCanarySpec(StrictModel):
    """What the canary is, how alpha and latency are judged, and where metrics come from."""

    target: WorkloadRef = Field(
        description=(
            "The canary Deployment (or Argo Rollout, with kind: Rollout) whose "
            "--speculative-config alphagate turns on and off (per-slice Deployments may override "
            "it)."
        ),
    )
    baseline: WorkloadRef = Field(
        description="The baseline Deployment (speculation off), the latency reference."
    )
    # The JSON object given to vLLM's --speculative-config when speculation is on.
    speculative_config: dict[str, Any] = Field(
        description=(
            "The JSON object given to vLLM's --speculative-config when speculation is on; needs "
            "num_speculative_tokens (an integer of at least 1)."
        ),
    )
    mode: Mode = Field(
        default=Mode.ENFORCE,
        description="enforce patches the canary; dryRun decides and records but never patches.",
    )
    aggregation: Aggregation = Field(
        default=Aggregation.COMBINED,
        description=(
            "combined: one decision on the pooled alpha of all slices (with per-slice floors); "
            "perSlice: each slice has its own canary Deployment and flips alone."
        ),
    )
    slices: list[Slice] = Field(
        min_length=1,
        max_length=64,
        description=(
            "The traffic slices: routable pools with their own canary and baseline pods (names "
            "unique)."
        ),
    )
    acceptance: AcceptanceGate = Field(
        default=AcceptanceGate(), description="The gate on alpha, with hysteresis."
    )
    latency: LatencyGuard = Field(
        default=LatencyGuard(), description="The latency guard, canary against baseline."
    )
    timing: Timing = Field(
        default=Timing(),
        description=(
            "Evaluation interval, window, warm-up, dwell, probe length, flip budget and cooldown."
        ),
    )
    errors: ErrorPolicy = Field(
        default=ErrorPolicy(), description="What repeated source errors do."
    )
    staleness: Staleness = Field(
        default=Staleness(),
        description=(
            "How long speculation may run without a conclusive verdict before an alert (and, "
            "opt-in, a rollback)."
        ),
    )
    source: Source = Field(description="Where the controller reads vLLM's metrics.")
    promotion: Promotion = Field(
        default=Promotion(), description="Optional copy of a confirmed config to the stable fleet."
    )
    paused: bool = Field(
        default=False,
        description="Hold the current state and patch nothing until set back to false.",
    )
    outputs: OutputLength = Field(
        default=OutputLength(), description="When outputs are too short for speculation to pay."
    )
    draft_length: DraftLength = Field(
        default=DraftLength(),
        description=(
            "The draft length that pays: reported in status, metrics and evaluate; changed by "
            "the controller only when tuning.enabled."
        ),
    )

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
        # What vLLM itself would refuse never reaches a pod (the table in specconfig).
        refused = specconfig.errors(value)
        if refused:
            raise ValueError("; ".join(p.message for p in refused))
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
            # Two slices flipping one Deployment alone would flip it back and forth.
            owners: dict[tuple[str, str], list[str]] = {}
            for s in self.slices:
                if s.deployment is not None:
                    owners.setdefault(s.deployment.key, []).append(s.name)
            shared = [(key, names) for key, names in owners.items() if len(names) > 1]
            if shared:
                raise ValueError(
                    "aggregation perSlice needs its own deployment on every slice; "
                    + "; ".join(f"{k} {n} named by {', '.join(v)}" for (k, n), v in shared)
                )
        return self

    @model_validator(mode="after")
    def _tuning_holds_k(self) -> SpeculativeCanarySpec:
        t, k = self.draft_length.tuning, self.k
        if t.min_k > k or (t.max_k is not None and t.max_k < k):
            raise ValueError(
                f"draftLength.tuning: num_speculative_tokens {k} must lie within minK "
                f"{t.min_k} and maxK {t.max_k if t.max_k is not None else k}"
            )
        if t.enabled:
            # Every K the controller may set must be a config vLLM accepts (synthetic rejection
            # settings, for one, are sized by K).
            for other in range(t.min_k, (t.max_k or k) + 1):
                refused = specconfig.errors(
                    {**self.speculative_config, "num_speculative_tokens": other}
                )
                if refused:
                    raise ValueError(
                        f"draftLength.tuning: with num_speculative_tokens {other} (within minK-"
                        f"maxK) vLLM would refuse the config: {refused[0].message}"
                    )
        return self

    def canary_deployments(self, slice_name: str | None = None) -> list[WorkloadRef]:
        """The Deployments one decision flips: a slice's own (perSlice) or all (combined)."""
        if slice_name is not None:
            for s in self.slices:
                if s.name == slice_name:
                    return [s.deployment or self.target]
            raise KeyError(slice_name)
        seen: dict[tuple[str, str], WorkloadRef] = {}
        for s in self.slices:
            ref = s.deployment or self.target
            seen.setdefault(ref.key, ref)
        return list(seen.values()) or [self.target]

    @property
    def k(self) -> int:
        """Draft length K from the speculative config."""
        return int(self.speculative_config["num_speculative_tokens"])


class ObjectMeta(StrictModel):
    """Kubernetes ObjectMeta: server-side fields are accepted and ignored; anything else (a
    typo such as `namepsace:`, which would land the resource in "default") is refused, by the
    file check and the controller alike."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str = Field(
        default="default", max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    generate_name: Any = Field(default=None, alias="generateName")
    uid: Any = None
    resource_version: Any = Field(default=None, alias="resourceVersion")
    generation: Any = None
    creation_timestamp: Any = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: Any = Field(default=None, alias="deletionTimestamp")
    deletion_grace_period_seconds: Any = Field(default=None, alias="deletionGracePeriodSeconds")
    owner_references: Any = Field(default=None, alias="ownerReferences")
    finalizers: Any = None
    managed_fields: Any = Field(default=None, alias="managedFields")
    self_link: Any = Field(default=None, alias="selfLink")


class SpeculativeCanary(StrictModel):
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


def message(error: Any) -> str:
    """A pydantic error's text for people (an unknown metadata key is most likely a typo)."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "extra_forbidden" and loc[:1] == ("metadata",):
        return "not a Kubernetes ObjectMeta field (a typo?)"
    return str(error.get("msg", "")).removeprefix("Value error, ")


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
        lines = [f"{_field_path(tuple(e['loc'])) or '<root>'}: {message(e)}" for e in errors]
        raise PolicyError("; ".join(lines), where=where, path=first) from exc


def dump(canary: SpeculativeCanary) -> dict[str, Any]:
    """The resource as the YAML/JSON a user writes (camelCase, no Nones)."""
    return canary.model_dump(mode="json", by_alias=True, exclude_none=True)
