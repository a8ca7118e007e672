"""The names and bounded label vocabularies of the controller's own metrics (one place).

Dashboards, rules and tests check against `METRIC_NAMES`; the `Recorder`
(`shell.exporter`) sets them. Label values stay bounded: a decision's ``reason`` label is a
short machine kind (`reason_kind`) derived from typed fields, never the sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from alphagate.config import LatencyMetric
from alphagate.core.model import Alert, Cause, CheckKind, Evaluation, State, Verdict

PREFIX: Final = "alphagate_"

# ---------------------------------------------------------------- metric names (one place)
# Tests check that every name a dashboard or rule uses is listed here or in alphagate.vllm.

ALPHA: Final = "alphagate_alpha_ratio"
ALPHA_LOWER: Final = "alphagate_alpha_lower_ratio"
ALPHA_UPPER: Final = "alphagate_alpha_upper_ratio"
COMBINED_ALPHA: Final = "alphagate_combined_alpha_ratio"
COMBINED_ALPHA_LOWER: Final = "alphagate_combined_alpha_lower_ratio"
COMBINED_ALPHA_UPPER: Final = "alphagate_combined_alpha_upper_ratio"
ALPHA_GATE: Final = "alphagate_alpha_gate_ratio"
ALERT: Final = "alphagate_alert"
WINDOW_DRAFTS: Final = "alphagate_window_drafts"
SLICE_WEIGHT: Final = "alphagate_slice_weight_ratio"
ITL_QUANTILE: Final = "alphagate_itl_quantile_seconds"
LATENCY_RATIO: Final = "alphagate_latency_ratio"
MEASURED_SPEEDUP: Final = "alphagate_measured_speedup_ratio"
MEASURED_SPEEDUP_LOWER: Final = "alphagate_measured_speedup_lower_ratio"
MEASURED_SPEEDUP_UPPER: Final = "alphagate_measured_speedup_upper_ratio"
STATE: Final = "alphagate_state"
SPECULATION_ENABLED: Final = "alphagate_speculation_enabled"
CHECK_VERDICT: Final = "alphagate_check_verdict"
DECISIONS: Final = "alphagate_decisions_total"
TRANSITIONS: Final = "alphagate_transitions_total"
SOURCE_ERRORS: Final = "alphagate_source_errors_total"
# failed reads that spent one of the canary's own budgets, by budget (errors.BudgetKind)
BUDGET_EXCEEDED: Final = "alphagate_source_budget_exceeded_total"
# evaluations deferred because a Kubernetes API budget was spent, by budget (kube/apibudget:
# scope canary, namespace or overall)
API_DEFERRALS: Final = "alphagate_api_budget_deferrals_total"
EVALUATION_DURATION: Final = "alphagate_evaluation_duration_seconds"
LAST_EVALUATION: Final = "alphagate_last_evaluation_timestamp_seconds"
LAST_SUCCESS: Final = "alphagate_last_success_timestamp_seconds"
PREDICTED_SPEEDUP: Final = "alphagate_predicted_speedup_ratio"
ERROR_STREAK: Final = "alphagate_error_streak"
# Probing/On: seconds since the last conclusive verdict (the staleness guard's clock)
VERDICT_AGE: Final = "alphagate_verdict_age_seconds"
# 1 per problem while the policy's timing does not fit the scrape interval (core/timing)
TIMING_PROBLEM: Final = "alphagate_timing_problem"
LEADER: Final = "alphagate_leader"
# 1 while this replica owns nothing: the coordination Lease records another --shards or mode
OWNERSHIP_REFUSED: Final = "alphagate_ownership_refused"
BUILD_INFO: Final = "alphagate_build_info"
WARNINGS: Final = "alphagate_warnings_total"
SPEC_INVALID: Final = "alphagate_spec_invalid"
DRAFT_CONFIGURED_K: Final = "alphagate_draft_length_configured"
DRAFT_RECOMMENDED_K: Final = "alphagate_draft_length_recommended"
DRAFT_ADVICE: Final = "alphagate_draft_length_advice"
DRAFT_POSITION_RATE: Final = "alphagate_draft_position_acceptance_ratio"
LATENCY_SHAPE: Final = "alphagate_latency_shape"
SHORT_OUTPUTS: Final = "alphagate_short_outputs"
SHARDS: Final = "alphagate_shards"
SHARD_HELD: Final = "alphagate_shard_held"
SHARD_UNITS: Final = "alphagate_shard_units"
INSIGHT_NAMES: Final = frozenset(
    {DRAFT_CONFIGURED_K, DRAFT_RECOMMENDED_K, DRAFT_ADVICE, DRAFT_POSITION_RATE, LATENCY_SHAPE,
     SHORT_OUTPUTS}
)  # fmt: skip

# Every series name a scrape can show (histograms and counters with their sample suffixes).
METRIC_NAMES: Final[frozenset[str]] = frozenset(
    {
        ALPHA,
        ALPHA_LOWER,
        ALPHA_UPPER,
        COMBINED_ALPHA,
        COMBINED_ALPHA_LOWER,
        COMBINED_ALPHA_UPPER,
        ALPHA_GATE,
        ALERT,
        WINDOW_DRAFTS,
        SLICE_WEIGHT,
        ITL_QUANTILE,
        LATENCY_RATIO,
        MEASURED_SPEEDUP,
        MEASURED_SPEEDUP_LOWER,
        MEASURED_SPEEDUP_UPPER,
        STATE,
        SPECULATION_ENABLED,
        CHECK_VERDICT,
        DECISIONS,
        TRANSITIONS,
        SOURCE_ERRORS,
        BUDGET_EXCEEDED,
        API_DEFERRALS,
        EVALUATION_DURATION + "_bucket",
        EVALUATION_DURATION + "_count",
        EVALUATION_DURATION + "_sum",
        LAST_EVALUATION,
        LAST_SUCCESS,
        PREDICTED_SPEEDUP,
        ERROR_STREAK,
        VERDICT_AGE,
        TIMING_PROBLEM,
        LEADER,
        OWNERSHIP_REFUSED,
        BUILD_INFO,
        WARNINGS,
        SPEC_INVALID,
        SHARDS,
        SHARD_HELD,
        SHARD_UNITS,
        *INSIGHT_NAMES,
    }
)

# Warning Event reasons (kube.events.Reason values) whose counters start at 0 for every
# tracked canary, so the first one is visible to increase() and its alert.
WATCHED_WARNINGS: Final = (
    "PatchFailed",
    "Forbidden",
    "ConflictRetriesExhausted",
    "TargetNotFound",
    "ArgsUneditable",
    "OwnerReverted",
    "TargetClaimed",
    "InvalidSpec",
)

# The `kind` label of a failed read whose kind the source did not say (an unexpected raise).
UNKNOWN_ERROR_KIND: Final = "unknown"

DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Label values of `alphagate_itl_quantile_seconds{metric}`: which vLLM histogram the P99 is of.
METRIC_PER_TOKEN: Final = "per_token"  # vllm:request_time_per_output_token_seconds
METRIC_PER_STEP_SCALED: Final = "per_step_scaled"  # ITL divided by measured tokens per step
METRIC_PER_STEP: Final = "per_step"  # vllm:inter_token_latency_seconds, absolute

# Bounded vocabulary of the `reason` label on alphagate_decisions_total.
REASON_KINDS: Final = (
    "pass",
    "fail_acceptance",
    "fail_latency",
    "fail_other",
    "inconclusive",
    "error",
    "paused",
    "manual",
    "flip_budget",
    "probe_stalled",
    "rollout_timeout",
)

# Alerts that say why a decision held (most specific first).
_ALERT_REASONS: Final = (
    (Alert.ROLLOUT_TIMEOUT, "rollout_timeout"),
    (Alert.PROBE_STALLED, "probe_stalled"),
    (Alert.FLIP_BUDGET, "flip_budget"),
)

# Label of `alphagate_itl_quantile_seconds{metric}` for each latency metric of the policy.
_METRIC_LABELS: Final[Mapping[LatencyMetric, str]] = {
    LatencyMetric.PER_TOKEN: METRIC_PER_TOKEN,
    LatencyMetric.PER_STEP_SCALED: METRIC_PER_STEP_SCALED,
    LatencyMetric.PER_STEP_ABSOLUTE: METRIC_PER_STEP,
}


def latency_metric_label(metric: LatencyMetric) -> str:
    """The policy's latency metric (perToken, perStepScaled, perStepAbsolute) as a label."""
    return _METRIC_LABELS[metric]


def reason_kind(evaluation: Evaluation) -> str:
    """A short, bounded reason for the decisions counter, derived from typed fields.

    The sentence in `evaluation.reason` is for people (status, Events, logs); a label needs a
    small closed set, so this looks at the transition's cause, the alerts, the verdict and the
    kinds of the failing checks.
    """
    transition = evaluation.transition
    if transition is not None and (
        transition.cause in (Cause.MANUAL, Cause.REFUSED) or transition.from_state is State.PAUSED
    ):
        return "manual"
    if evaluation.memory.state is State.PAUSED:
        return "paused"
    if evaluation.transition is None:
        for alert, kind in _ALERT_REASONS:
            if alert in evaluation.alerts:
                return kind
    verdict = evaluation.verdict
    if verdict is Verdict.FAIL:
        kinds = {c.kind for c in evaluation.checks if c.verdict is Verdict.FAIL}
        if CheckKind.ACCEPTANCE in kinds:
            return "fail_acceptance"
        if CheckKind.LATENCY in kinds:
            return "fail_latency"
        return "fail_other"
    if verdict is Verdict.ERROR:
        return "error"
    if verdict is Verdict.INCONCLUSIVE:
        return "inconclusive"
    return "pass"
