"""The metric families the `Recorder` sets: one attribute per family, registered on creation.

Acceptance (alpha per slice, combined, gate), latency and speed-up, state and decisions
(verdicts, transitions, alerts, warnings), evaluation health (durations, source errors,
staleness), the draft length and the diagnosis. Names and label vocabularies are in
`shell.metric_names`; what is set when, in `shell.exporter`.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alphagate.shell.metric_names import (
    ALERT,
    ALPHA,
    ALPHA_GATE,
    ALPHA_LOWER,
    ALPHA_UPPER,
    API_DEFERRALS,
    CHECK_VERDICT,
    COMBINED_ALPHA,
    COMBINED_ALPHA_LOWER,
    COMBINED_ALPHA_UPPER,
    DRAFT_ADVICE,
    DRAFT_CONFIGURED_K,
    DRAFT_POSITION_RATE,
    DRAFT_RECOMMENDED_K,
    DURATION_BUCKETS,
    ERROR_STREAK,
    EVALUATION_DURATION,
    ITL_QUANTILE,
    LAST_EVALUATION,
    LAST_SUCCESS,
    LATENCY_RATIO,
    LATENCY_SHAPE,
    MEASURED_SPEEDUP,
    MEASURED_SPEEDUP_LOWER,
    MEASURED_SPEEDUP_UPPER,
    PREDICTED_SPEEDUP,
    SHORT_OUTPUTS,
    SLICE_WEIGHT,
    SPEC_INVALID,
    SPECULATION_ENABLED,
    STATE,
    TIMING_PROBLEM,
    VERDICT_AGE,
    WARNINGS,
    WINDOW_DRAFTS,
)

_CANARY: Final = ("namespace", "canary")
_SLICE: Final = ("namespace", "canary", "slice")


class MetricFamilies:
    """Every per-canary metric family, created on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._acceptance_families()
        self._latency_and_state_families()
        self._decisions_and_health_families()
        self._insights_families()

    def gauges_by_name(self) -> dict[str, Gauge]:
        """The per-canary gauges by metric name (what an evaluation sets, and may remove)."""
        return {
            DRAFT_CONFIGURED_K: self.draft_configured,
            DRAFT_RECOMMENDED_K: self.draft_recommended,
            DRAFT_ADVICE: self.draft_advice,
            DRAFT_POSITION_RATE: self.draft_position,
            LATENCY_SHAPE: self.latency_shape,
            SHORT_OUTPUTS: self.short_outputs,
            ALPHA: self.alpha,
            ALPHA_LOWER: self.alpha_lower,
            ALPHA_UPPER: self.alpha_upper,
            COMBINED_ALPHA: self.combined,
            COMBINED_ALPHA_LOWER: self.combined_lower,
            COMBINED_ALPHA_UPPER: self.combined_upper,
            ALPHA_GATE: self.gate,
            ALERT: self.alert,
            WINDOW_DRAFTS: self.window_drafts,
            SLICE_WEIGHT: self.slice_weight,
            ITL_QUANTILE: self.itl_quantile,
            LATENCY_RATIO: self.latency_ratio,
            MEASURED_SPEEDUP: self.measured_speedup,
            MEASURED_SPEEDUP_LOWER: self.measured_speedup_lower,
            MEASURED_SPEEDUP_UPPER: self.measured_speedup_upper,
            STATE: self.state,
            SPECULATION_ENABLED: self.speculation,
            CHECK_VERDICT: self.check_verdict,
            LAST_EVALUATION: self.last_evaluation,
            LAST_SUCCESS: self.last_success,
            PREDICTED_SPEEDUP: self.speedup,
            ERROR_STREAK: self.error_streak,
            VERDICT_AGE: self.verdict_age,
        }

    def _gauge(self, name: str, doc: str, labels: tuple[str, ...]) -> Gauge:
        return Gauge(name, doc, labels, registry=self._registry)

    def _acceptance_families(self) -> None:
        """Alpha per slice and combined, the gate, alerts, the window's drafts and weights."""
        gauge = self._gauge
        self.alpha = gauge(ALPHA, "Estimated acceptance rate alpha per slice.", _SLICE)
        self.alpha_lower = gauge(ALPHA_LOWER, "Lower confidence bound of alpha.", _SLICE)
        self.alpha_upper = gauge(ALPHA_UPPER, "Upper confidence bound of alpha.", _SLICE)
        self.combined = gauge(COMBINED_ALPHA, "Traffic-weighted alpha over slices.", _CANARY)
        self.combined_lower = gauge(
            COMBINED_ALPHA_LOWER, "Lower confidence bound of the combined alpha.", _CANARY
        )
        self.combined_upper = gauge(
            COMBINED_ALPHA_UPPER, "Upper confidence bound of the combined alpha.", _CANARY
        )
        self.gate = gauge(
            ALPHA_GATE,
            "Alpha thresholds of the policy: disable below, enable above.",
            (*_CANARY, "bound"),
        )
        self.alert = gauge(
            ALERT,
            "1 while the core raises a condition a person should hear about (source-errors, "
            "flip-budget, probe-stalled, rollout-timeout, verdict-stale).",
            (*_CANARY, "condition"),
        )
        self.window_drafts = gauge(
            WINDOW_DRAFTS, "Drafts (the sample unit of alpha) in the evaluation window.", _SLICE
        )
        self.slice_weight = gauge(
            SLICE_WEIGHT, "Traffic share of a slice (measured generation tokens).", _SLICE
        )
        self.itl_quantile = gauge(
            ITL_QUANTILE,
            "Latency quantile the guard compares, per role; metric says per_token or per_step.",
            (*_SLICE, "role", "metric", "quantile"),
        )

    def _latency_and_state_families(self) -> None:
        """Latency and speed-up per slice, the state, speculation and each check's verdict."""
        gauge = self._gauge
        self.latency_ratio = gauge(
            LATENCY_RATIO, "Canary P99 over baseline P99 as the latency guard compares it.", _SLICE
        )
        speedup_help = (
            "Measured speed-up: baseline over canary mean time per output token (exact sums)"
        )
        self.measured_speedup = gauge(MEASURED_SPEEDUP, f"{speedup_help}.", _SLICE)
        self.measured_speedup_lower = gauge(
            MEASURED_SPEEDUP_LOWER, f"{speedup_help}, lower 95% bound.", _SLICE
        )
        self.measured_speedup_upper = gauge(
            MEASURED_SPEEDUP_UPPER, f"{speedup_help}, upper 95% bound.", _SLICE
        )
        self.state = gauge(
            STATE,
            "1 for the canary's current state, 0 for the others.",
            (
                *_CANARY,
                "state",
            ),
        )
        self.speculation = gauge(
            SPECULATION_ENABLED, "1 when the canary runs with --speculative-config.", _CANARY
        )
        self.check_verdict = gauge(
            CHECK_VERDICT,
            "1 for each check's current verdict, 0 for the others.",
            (
                *_CANARY,
                "check",
                "verdict",
            ),
        )

    def _decisions_and_health_families(self) -> None:
        """Decisions, transitions, source errors, budgets, durations and staleness."""
        gauge = self._gauge
        r = self._registry
        self.decisions = Counter(
            "alphagate_decisions",
            "Decisions by action and a short machine reason.",
            (*_CANARY, "action", "reason"),
            registry=r,
        )
        self.transitions = Counter(
            "alphagate_transitions",
            "State transitions.",
            (*_CANARY, "from_state", "to_state"),
            registry=r,
        )
        self.source_errors = Counter(
            "alphagate_source_errors",
            "Failed reads of metrics, by kind.",
            (*_CANARY, "kind"),
            registry=r,
        )
        self.budget_exceeded_total = Counter(
            "alphagate_source_budget_exceeded",
            "Failed reads that spent one of the canary's own budgets, by budget.",
            (*_CANARY, "budget"),
            registry=r,
        )
        self.api_deferrals = Counter(
            API_DEFERRALS.removesuffix("_total"),
            "Evaluations deferred because a Kubernetes API budget (scope: canary, namespace, "
            "overall) lacked what one costs.",
            (*_CANARY, "scope"),
            registry=r,
        )
        self.duration = Histogram(
            EVALUATION_DURATION,
            "Time to observe, estimate, judge and decide for one canary.",
            _CANARY,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.last_evaluation = gauge(LAST_EVALUATION, "Unix time of the last evaluation.", _CANARY)
        self.last_success = gauge(
            LAST_SUCCESS, "Unix time of the last evaluation whose source read succeeded.", _CANARY
        )
        self.speedup = gauge(
            PREDICTED_SPEEDUP,
            "Speed-up the policy predicts at the combined alpha (K and disableBelow as the "
            "break-even).",
            _CANARY,
        )
        self.error_streak = gauge(
            ERROR_STREAK, "Consecutive evaluations with an Error verdict.", _CANARY
        )
        self.verdict_age = gauge(
            VERDICT_AGE,
            "Probing or On: seconds since the last conclusive verdict (Pass or Fail), or since "
            "the enable if later; absent while nothing is judged (staleness.afterSeconds).",
            _CANARY,
        )
        self.timing_problem = gauge(
            TIMING_PROBLEM,
            "1 per problem while the policy's timing does not fit the scrape interval "
            "(core/timing: window-too-short or interval-too-short, so increase() is empty at "
            "times and reads as no data; staleness-too-short); absent when it fits.",
            (*_CANARY, "problem"),
        )
        self.warnings = Counter(
            WARNINGS.removesuffix("_total"),
            "Warning Events the controller raised, by the object's namespace and name and the "
            "Event reason (PatchFailed, Forbidden, InvalidSpec, ...).",
            (*_CANARY, "reason"),
            registry=r,
        )

    def _insights_families(self) -> None:
        """The spec's validity, the draft length, the latency shape and short outputs."""
        gauge = self._gauge
        self.spec_invalid = gauge(
            SPEC_INVALID,
            "1 while the SpeculativeCanary's spec is invalid (nothing is done).",
            _CANARY,
        )
        self.draft_configured = gauge(
            DRAFT_CONFIGURED_K, "num_speculative_tokens the canary runs.", _CANARY
        )
        self.draft_recommended = gauge(
            DRAFT_RECOMMENDED_K,
            "The K the per-position evidence supports (shortened only on confident evidence).",
            _CANARY,
        )
        self.draft_advice = gauge(
            DRAFT_ADVICE,
            "1 for the current draft-length advice (keep, shorten, nonePays, longerMayPay, "
            "insufficient).",
            (*_CANARY, "advice"),
        )
        self.draft_position = gauge(
            DRAFT_POSITION_RATE,
            "Share of drafts accepted at each draft position (0 first) in the window.",
            (*_CANARY, "position"),
        )
        self.latency_shape = gauge(
            LATENCY_SHAPE,
            "1 for how mean and tail per-token latency moved, canary against baseline "
            "(meanBetterTailWorse is the P99 trap).",
            (*_CANARY, "shape"),
        )
        self.short_outputs = gauge(
            SHORT_OUTPUTS,
            "1 while outputs are too short for speculation to pay, 0 when long enough.",
            _CANARY,
        )
