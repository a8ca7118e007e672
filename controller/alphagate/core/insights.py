"""Beyond on and off, for one evaluation: the draft length that pays, the P99 trap diagnosis, and
whether outputs are too short to speculate at all.

The shell calls `analyse` after `evaluate` with the same observation: it reads the canary's
per-position counters, the canary and baseline per-step and per-token histograms, and (when the
source has them) the running-request gauge (the live batch: what a draft position costs, whether
the batch is past break-even) and the output-length histogram (short outputs). Nothing here
changes a decision by itself; the state machine and the opt-in draft-length tuning consume it.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alphagate import specconfig
from alphagate.config import SpeculativeCanarySpec
from alphagate.core import acceptance, histogram
from alphagate.core.diagnosis import Cause, Context, Diagnosis, compare, diagnose
from alphagate.core.draft_length import (
    DraftAdvice,
    DraftCost,
    DraftLengthReport,
    measured_cost,
    policy_cost,
    recommend,
)
from alphagate.core.model import (
    AcceptanceSample,
    Buckets,
    Estimate,
    Observation,
    PoolObservation,
    Role,
)
from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS
from alphagate.core.suitability import Suitability, output_length


@dataclass(frozen=True, slots=True)
class Insights:
    """What the evaluation's data says beyond the gate; each part None when not computable."""

    draft: DraftLengthReport | None  # needs speculation on and per-position counters
    diagnosis: Diagnosis | None  # needs per-token histograms on both pools
    outputs: Suitability  # short outputs (UNKNOWN without the output-length histogram)

    def findings(self) -> tuple[Cause, ...]:
        """The typed causes this window points at, for the diagnosis Event: the diagnosis's
        (mean and tail moved apart) and DRAFT_TOO_LONG when the tail positions confidently cost
        more than they return. Empty when nothing is wrong or nothing can be told."""
        out = list(self.diagnosis.causes) if self.diagnosis is not None else []
        if self.draft is not None and self.draft.advice is DraftAdvice.SHORTEN:
            out.append(Cause.DRAFT_TOO_LONG)
        return tuple(dict.fromkeys(out))

    def explain(self) -> str:
        """The sentence behind `findings` (for people)."""
        parts = []
        if self.diagnosis is not None and self.diagnosis.causes:
            parts.append(self.diagnosis.reason)
        if self.draft is not None and self.draft.advice is DraftAdvice.SHORTEN:
            parts.append(self.draft.reason)
        return "; ".join(parts)

    def evidence(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {"short_outputs": self.outputs.finding.value}
        if self.draft is not None:
            out |= self.draft.evidence()
        if self.diagnosis is not None:
            out |= self.diagnosis.evidence()
        return out


def _merge(hists: Sequence[Buckets | None]) -> Buckets | None:
    good = [h for h in hists if h is not None and histogram.problem(h) is None]
    if not good:
        return None
    try:
        return histogram.merge(*good)
    except ValueError:  # different bucket layouts: cannot be added
        return None


def live_running(pools: Sequence[PoolObservation]) -> float | None:
    """Requests running per canary pod over the window (vllm:num_requests_running), weighted
    by each pool's pods; None when no pool exported the gauge."""
    got = [(p.running, max(p.pods, 1)) for p in pools if p.running is not None]
    if not got:
        return None
    total = math.fsum(w for _, w in got)
    return math.fsum(r * w for r, w in got) / total


def _policy_cost(
    spec: SpeculativeCanarySpec,
    cost_per_position: float | None,
    running_per_pod: float | None,
    ridge_tokens: float,
) -> DraftCost:
    """The draft cost when no measured one is at hand: the policy's, else the method's."""
    d = (
        cost_per_position
        if cost_per_position is not None
        else specconfig.default_cost(spec.speculative_config)
    )
    method = specconfig.resolved_method(spec.speculative_config)
    return policy_cost(
        d,
        concurrency=running_per_pod or 1.0,
        ridge_tokens=ridge_tokens,
        detail=f"{d:g} per position for {method}"
        + (" (policy)" if cost_per_position is not None else " (method default)"),
    )


def analyse(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    *,
    estimates: Mapping[str, Estimate] | None = None,
    combined: Estimate | None = None,
    slices: Sequence[str] | None = None,
    running_per_pod: float | None = None,
    output_lengths: Buckets | None = None,
    cost_per_position: float | None = None,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
    k: int | None = None,
) -> Insights:
    """Draft-length report, diagnosis and short-output condition for `slices` (default: all).

    `cost_per_position` overrides the method's default draft cost (specconfig); a measured cost
    from per-step latency wins over both when canary and baseline histograms carry sums. `k` is
    the K the canary runs (default: the spec's; the draft-length tuner may have moved it)."""
    names = list(slices) if slices is not None else [s.name for s in spec.slices]
    canaries = [observation.pool(n, Role.CANARY) for n in names]
    baselines = [observation.pool(n, Role.BASELINE) for n in names]
    good_c = [p for p in canaries if p is not None and p.error is None]
    good_b = [p for p in baselines if p is not None and p.error is None]
    samples: list[AcceptanceSample] = [s for p in good_c for s in p.acceptance]
    if running_per_pod is None:
        running_per_pod = live_running(good_c)
    if combined is None and samples and acceptance.problem(samples) is None:
        combined = acceptance.estimate(samples, confidence=spec.acceptance.confidence)
    if output_lengths is None:
        output_lengths = _merge([p.output_lengths for p in (*good_c, *good_b)])
    k = k if k is not None else spec.k

    draft: DraftLengthReport | None = None
    if samples and observation.source_error is None:
        tokens = math.fsum(s.draft_tokens for s in samples)
        cost = measured_cost(
            _merge([p.itl for p in good_c]), _merge([p.itl for p in good_b]), draft_tokens=tokens
        )
        if cost is None:
            cost = _policy_cost(spec, cost_per_position, running_per_pod, ridge_tokens)
        draft = recommend(
            samples,
            k=k,
            cost=cost,
            confidence=spec.acceptance.confidence,
            min_drafts=float(spec.acceptance.min_drafts),
        )

    diag: Diagnosis | None = None
    if good_c and good_b and observation.source_error is None:
        cmp = compare(
            _merge([p.tpot for p in good_c]),
            _merge([p.tpot for p in good_b]),
            spec.latency.quantile,
        )
        if math.isfinite(cmp.mean_change) and math.isfinite(cmp.tail_change):
            ctx = Context(
                method=specconfig.resolved_method(spec.speculative_config),
                k=k,
                alpha=combined,
                draft=draft,
                running_per_pod=running_per_pod,
                ridge_tokens=ridge_tokens,
                slice_alphas={n: e.value for n, e in (estimates or {}).items()},
                gate_alpha=spec.acceptance.disable_below,
            )
            diag = diagnose(cmp, ctx)

    return Insights(
        draft=draft,
        diagnosis=diag,
        outputs=output_length(output_lengths, min_mean_tokens=spec.outputs.min_mean_tokens),
    )
