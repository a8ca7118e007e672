"""The policy's closed vocabularies: every choice a spec offers is one of these enums."""

from __future__ import annotations

from enum import StrEnum


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


class ConfirmOn(StrEnum):
    """What a latency Pass must show within maxRegressionRatio.

    mean: the exact mean time per token (`_sum/_count`, no bucket error); the quantile only
      fails, at the margin the bucket layout can resolve. The default: it confirms on vLLM's
      default buckets.
    meanAndQuantile: the quantile too, which needs buckets no wider than the margin where the
      baseline's quantile sits (e.g. `alphagate plan`'s --custom-histogram-buckets layout);
      where they are wider the check stays Inconclusive (unresolvable), never Pass.
    """

    MEAN = "mean"
    MEAN_AND_QUANTILE = "meanAndQuantile"


class FailSafe(StrEnum):
    """What repeated source Errors do: hold the current state (default) or turn speculation off."""

    HOLD = "hold"
    DISABLE = "disable"


class SourceKind(StrEnum):
    PROMETHEUS = "prometheus"
    POD_SCRAPE = "podScrape"


class WorkloadKind(StrEnum):
    """The kind of object whose pod template runs vLLM: a Deployment, an Argo Rollout
    (argoproj.io/v1alpha1) whose own canary steps roll the change out, or a KServe
    InferenceService (serving.kserve.io/v1beta1, raw deployment mode) whose predictor runs vLLM."""

    DEPLOYMENT = "Deployment"
    ROLLOUT = "Rollout"
    INFERENCE_SERVICE = "InferenceService"
