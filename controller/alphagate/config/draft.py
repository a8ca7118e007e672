"""Beyond on and off: output length that makes speculation worth probing, and the draft length
(K) the controller may tune."""

from __future__ import annotations

from pydantic import Field, model_validator

from alphagate.config.base import PositiveSeconds, StrictModel


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
