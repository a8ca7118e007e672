"""Evidence from one Evaluation as status entries: each slice's alpha with its interval, the
latency checks' numbers, and the short lines (`why`, `summary`) that say what decided it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from pydantic import Field

from alphagate.core import model
from alphagate.core.model import CheckKind, CheckResult, Estimate, Evaluation, Verdict
from alphagate.kube.status.fields import StatusModel, as_text, rounded


class SliceEvidence(StatusModel):
    """One slice's acceptance evidence in the last evaluation."""

    name: str = Field(description="Slice name, from spec.slices.")
    weight: float | None = Field(
        default=None,
        description=("The slice's share of generated tokens in the window (its traffic weight)."),
    )
    alpha: float | None = Field(
        default=None,
        description=("Acceptance rate: accepted / proposed draft tokens in the window."),
    )
    lower: float | None = Field(
        default=None, description="Lower bound of alpha's confidence interval."
    )
    upper: float | None = Field(
        default=None, description="Upper bound of alpha's confidence interval."
    )
    confidence: float | None = Field(default=None, description="Confidence level of the interval.")
    drafts: float | None = Field(
        default=None, description="Drafts proposed in the window (the sample size)."
    )
    draft_tokens: float | None = Field(
        default=None, description="Draft tokens proposed in the window."
    )
    accepted_tokens: float | None = Field(
        default=None, description="Draft tokens accepted in the window."
    )
    batches: int | None = Field(
        default=None,
        description=(
            "Independent batches (pod x interval increments) the variance was estimated from."
        ),
    )
    method: str | None = Field(default=None, description="How the interval was computed.")
    mean_acceptance_length: float | None = Field(
        default=None, description="vLLM's mean acceptance length, 1 + accepted / drafts."
    )
    verdict: str | None = Field(
        default=None,
        description=("This slice's acceptance verdict: Pass, Fail, Inconclusive or Error."),
    )
    reason: str = Field(default="", description="Why, with the numbers.")


class LatencyEvidence(StatusModel):
    """The P99 guard's evidence: canary vs baseline, the bucket brackets, the exceedance test."""

    check: str = Field(description="Which latency check (one per slice, or one overall).")
    slice: str | None = Field(default=None, description="The slice it is about, when per slice.")
    verdict: str = Field(description="Pass, Fail, Inconclusive or Error.")
    reason: str = Field(default="", description="Why, with the numbers.")
    metric: str | None = Field(
        default=None,
        description=("Which latency was compared (perToken, perStepScaled, perStepAbsolute)."),
    )
    quantile: float | None = Field(
        default=None, description="The quantile compared (0.99 for P99)."
    )
    canary_p99_seconds: float | None = Field(
        default=None, description=("The canary's quantile, in seconds (histogram_quantile rules).")
    )
    baseline_p99_seconds: float | None = Field(
        default=None, description="The baseline's quantile, in seconds."
    )
    ratio: float | None = Field(default=None, description="Canary quantile over baseline quantile.")
    canary_bucket_lower_seconds: float | None = Field(
        default=None,
        description=("Lower bound of the histogram bucket holding the canary's quantile."),
    )
    canary_bucket_upper_seconds: float | None = Field(
        default=None,
        description=("Upper bound of the histogram bucket holding the canary's quantile."),
    )
    baseline_bucket_lower_seconds: float | None = Field(
        default=None, description="Lower bound of the bucket holding the baseline's quantile."
    )
    baseline_bucket_upper_seconds: float | None = Field(
        default=None, description="Upper bound of the bucket holding the baseline's quantile."
    )
    limit_seconds: float | None = Field(
        default=None,
        description=(
            "The Pass limit: the lower edge of the baseline quantile's bucket x (1 + "
            "maxRegressionRatio), or perStepAbsolute's maxStepSeconds (never an interpolated "
            "quantile)."
        ),
    )
    tail_within: str | None = Field(
        default=None,
        description=(
            "What the quantile showed of 'within the margin': shown, not-shown, unresolvable "
            "(the baseline quantile's bucket is wider than the margin: finer buckets can tell) "
            "or untestable."
        ),
    )
    effective_margin: float | None = Field(
        default=None,
        description=(
            "The smallest quantile regression the Fail side is sure to be able to show at this "
            "bucket layout, as a fraction (2.0 = +200%): the policy's margin or the layout's, "
            "whichever is wider. Smaller quantile regressions can go unseen."
        ),
    )
    pass_edge_seconds: float | None = Field(
        default=None,
        description="The bucket bound the canary's quantile must be shown at or below to pass.",
    )
    fail_edge_seconds: float | None = Field(
        default=None,
        description="The bucket bound above which more than 1 - quantile of requests fails.",
    )
    edge_seconds: float | None = Field(
        default=None, description="The bucket bound the exceedance is counted above."
    )
    exceedance: float | None = Field(
        default=None, description="Fraction of canary observations above the edge."
    )
    expected_exceedance: float | None = Field(
        default=None, description="The fraction allowed above the edge without a regression."
    )
    p_value: float | None = Field(default=None, description="p-value of the exceedance test.")
    measured_speedup: float | None = Field(
        default=None,
        description=(
            "Baseline over canary mean time per output token (exact _sum/_count): is "
            "speculation net positive at the live concurrency."
        ),
    )
    measured_speedup_lower: float | None = Field(
        default=None, description="Lower 95% bound of the measured speed-up."
    )
    measured_speedup_upper: float | None = Field(
        default=None, description="Upper 95% bound of the measured speed-up."
    )
    canary_mean_seconds: float | None = Field(
        default=None, description="The canary's mean time per output token, in seconds."
    )
    baseline_mean_seconds: float | None = Field(
        default=None, description="The baseline's mean time per output token, in seconds."
    )
    canary_count: float | None = Field(
        default=None, description="Canary observations in the window."
    )
    baseline_count: float | None = Field(
        default=None, description="Baseline observations in the window."
    )
    # Everything the check reported, as text (so nothing the core says is lost).
    details: dict[str, str] = Field(
        default={}, description="Further numbers behind the verdict, as text."
    )


def _slice_check(evaluation: Evaluation, name: str, only: bool) -> CheckResult | None:
    """The slice's own acceptance verdict: perSlice acceptance, a combined-mode floor, or the
    policy's only acceptance check when it has one slice."""
    for kind in (CheckKind.ACCEPTANCE, CheckKind.FLOOR):
        for c in evaluation.checks:
            if c.kind is kind and c.slice == name:
                return c
    if only:
        for c in evaluation.checks:
            if c.kind is CheckKind.ACCEPTANCE and c.slice is None:
                return c
    return None


def slice_evidence(evaluation: Evaluation) -> list[SliceEvidence]:
    names = list(dict.fromkeys([*evaluation.weights, *evaluation.estimates]))
    out = []
    for name in names:
        est: Estimate | None = evaluation.estimates.get(name)
        check = _slice_check(evaluation, name, len(names) == 1)
        out.append(
            SliceEvidence(
                name=name,
                weight=rounded(evaluation.weights.get(name)),
                alpha=rounded(est.value) if est else None,
                lower=rounded(est.lower) if est else None,
                upper=rounded(est.upper) if est else None,
                confidence=rounded(est.confidence) if est else None,
                drafts=rounded(est.drafts) if est else None,
                draft_tokens=rounded(est.draft_tokens) if est else None,
                accepted_tokens=rounded(est.accepted_tokens) if est else None,
                batches=est.batches if est else None,
                method=est.method if est else None,
                mean_acceptance_length=rounded(est.mean_acceptance_length) if est else None,
                verdict=str(check.verdict) if check else None,
                reason=check.reason if check else "",
            )
        )
    return out


def latency_evidence(checks: Iterable[CheckResult]) -> list[LatencyEvidence]:
    out = []
    for c in checks:
        ev = c.evidence
        if not isinstance(ev, model.LatencyEvidence):
            continue
        canary, baseline, sp, tail = ev.canary, ev.baseline, ev.speedup, ev.tail
        # The Fail side's strongest test: the quantile's, or the bound with the smallest p.
        test = tail.fail_test if tail is not None else None
        worst = ev.worst_bound
        if test is not None and worst is not None and worst.p_value < test.p_value:
            test = None
        out.append(
            LatencyEvidence(
                check=c.name,
                slice=c.slice,
                verdict=str(c.verdict),
                reason=c.reason,
                metric=ev.metric.value,
                quantile=rounded(ev.quantile),
                canary_p99_seconds=rounded(canary.quantile_seconds) if canary else None,
                baseline_p99_seconds=rounded(baseline.quantile_seconds) if baseline else None,
                ratio=rounded(ev.ratio),
                canary_bucket_lower_seconds=rounded(canary.bucket_lo) if canary else None,
                canary_bucket_upper_seconds=rounded(canary.bucket_hi) if canary else None,
                baseline_bucket_lower_seconds=rounded(baseline.bucket_lo) if baseline else None,
                baseline_bucket_upper_seconds=rounded(baseline.bucket_hi) if baseline else None,
                limit_seconds=rounded(ev.limit_seconds),
                tail_within=tail.within.value if tail else None,
                effective_margin=rounded(tail.effective_margin) if tail else None,
                pass_edge_seconds=rounded(tail.resolution.pass_edge) if tail else None,
                fail_edge_seconds=rounded(tail.resolution.fail_edge) if tail else None,
                edge_seconds=rounded(test.edge if test else worst.bound if worst else None),
                exceedance=rounded(
                    test.fraction if test else worst.canary_fraction if worst else None
                ),
                expected_exceedance=rounded(
                    test.expected_fraction if test else worst.allowed_fraction if worst else None
                ),
                p_value=rounded(test.p_value if test else worst.p_value if worst else None),
                measured_speedup=rounded(sp.value) if sp else None,
                measured_speedup_lower=rounded(sp.lower) if sp else None,
                measured_speedup_upper=rounded(sp.upper) if sp else None,
                canary_mean_seconds=rounded(sp.canary_mean) if sp else None,
                baseline_mean_seconds=rounded(sp.baseline_mean) if sp else None,
                canary_count=rounded(canary.count) if canary else None,
                baseline_count=rounded(baseline.count) if baseline else None,
                details={k: as_text(v) for k, v in sorted(ev.flat().items())},
            )
        )
    return out


_PARENS: Final = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)")


def decisive(evaluation: Evaluation) -> list[CheckResult]:
    """The checks whose verdict is the window's verdict (what decided it)."""
    return [c for c in evaluation.checks if c.verdict is evaluation.verdict]


def why(evaluation: Evaluation) -> str:
    """`acceptance: alpha 0.400 [0.362, 0.440] ...`."""
    return "; ".join(f"{c.name}: {c.reason}" for c in decisive(evaluation))


def summary(evaluation: Evaluation, *, dry_run: bool = False) -> str:
    """One short line for printer columns: the action and what drove it.

    A failing or erroring window names its first deciding check (`disable: alpha 0.40 [0.36,
    0.44] ...`); otherwise the state machine's reason."""
    head = f"{evaluation.action}" + (" (dry-run)" if dry_run else "")
    lead = decisive(evaluation)
    if evaluation.verdict in (Verdict.FAIL, Verdict.ERROR) and lead:
        reason = lead[0].reason
    else:
        reason = evaluation.reason
    reason = reason.strip().splitlines()[0] if reason.strip() else ""
    reason = " ".join(_PARENS.sub("", reason).split())  # "(hull(...), 600 drafts)" is detail
    text = f"{head}: {reason}" if reason else head
    return text if len(text) <= 80 else text[:77] + "..."


def p99_ratio(latency: Sequence[LatencyEvidence]) -> float | None:
    ratios = [e.ratio for e in latency if e.ratio is not None]
    return max(ratios) if ratios else None
