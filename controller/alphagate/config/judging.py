"""How a policy judges and paces: the alpha gate, the latency guard, timing and cooldown, what
repeated errors and a stale verdict do."""

from __future__ import annotations

from pydantic import Field, model_validator

from alphagate.config.base import (
    IntervalSeconds,
    NonNegativeSeconds,
    PositiveSeconds,
    Ratio,
    StrictModel,
)
from alphagate.config.enums import ConfirmOn, FailSafe, LatencyMetric


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
        description=(
            "Judged windows in a row (whole, disjoint: one per windowSeconds) that must fail "
            "before a rollback, or pass before a probe is confirmed. An undecided judged "
            "window, or a gap of more than a window, starts a failing count over."
        ),
    )
    batch_seconds: PositiveSeconds | None = Field(
        default=None,
        description=(
            "Shortest time block of one pod that counts as an independent batch for alpha's "
            "interval. Absent (the default): sized every window from how long the pool's "
            "requests decode (vllm:request_decode_time_seconds) and the scrape interval, long "
            "enough that adjacent blocks share little (the rest is corrected for) and as many as "
            "the window holds, so one canary pod is judged; 900 s when decode times are not "
            "exported. A number of seconds overrides it. Pods are always separate batches; "
            "fewer than two batches is Inconclusive."
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
    """Latency of canary against baseline: confirmed on the exact mean per token, failed on the
    mean or on the quantile at the resolution of the bucket layout."""

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
            "Allowed regression of the canary over the baseline, mean and quantile, as a fraction "
            "(0.10 = 10% slower). A quantile regression is seen only as finely as the bucket "
            "layout resolves it: status prints the effective margin."
        ),
    )
    confirm_on: ConfirmOn = Field(
        default=ConfirmOn.MEAN,
        description=(
            "What a Pass must show within maxRegressionRatio: mean (the exact mean time per "
            "token; the quantile only fails) or meanAndQuantile (also the quantile, which needs "
            "buckets no wider than the margin around the baseline's quantile, e.g. the "
            "--custom-histogram-buckets layout `alphagate plan` writes; Inconclusive "
            "(unresolvable) where they are wider)."
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
        default=30.0,
        description=(
            "perToken on exact sums: shortest time block of one pod that counts as an "
            "independent batch; pods are always separate batches. A stall episode slows one "
            "pod for a while, so it must land in one or two blocks rather than count as many "
            "independent requests; 30 s gives ten blocks per pod in a 300 s window, enough for "
            "one canary pod's mean test to catch a 1.5x regression in its first window."
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
