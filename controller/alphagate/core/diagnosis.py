"""The P99 trap, diagnosed: mean time per token improves while the tail regresses, or the reverse.

Exercise 4 of the lesson: mean ITL falls 25% with EAGLE-3 while P99 rises 15%. A rejected draft
still costs its draft and verify work and leaves the request one token further on; under a full
batch those extra passes serialise, so the unlucky requests (long rejection streaks, or steps
where the batch is heavy) pay twice while the lucky ones are faster. The mean hides it.

This module compares canary and baseline (per token, like for like), names the shape, the
likely causes, and ranks the mitigations by what the evidence in hand supports:

* a shorter draft: the draft-length report says the tail positions do not pay;
* capping concurrency on the speculating pool: the running batch is past the concurrency at
  which speculation stops paying on the roofline of core/speedup.py;
* n-gram for prefix-heavy traffic: prompts dwarf outputs, so prompt lookup drafts for free;
* a domain-trained head: one slice accepts far less than the others, or alpha is low overall.

Typed outputs (enums); `reason` and each mitigation's `reason` are for people. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Final

from alphagate.core import histogram
from alphagate.core.draft_length import DraftAdvice, DraftLengthReport
from alphagate.core.model import Buckets, Estimate
from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS, breakeven_concurrency

NO_CHANGE: Final = 0.05
"""Relative changes within +-5% are read as unchanged (coarse buckets, noise)."""
PREFIX_HEAVY: Final = 4.0
"""Prompt tokens per output token above which traffic is prefix-heavy (RAG, edits, summaries)."""
SLICE_GAP: Final = 0.2
"""A slice whose alpha trails the best slice by this much points at a domain mismatch."""

PROMPT_LOOKUP_METHODS: Final = frozenset({"ngram", "ngram_gpu", "suffix"})


class Shape(StrEnum):
    """How the canary's mean and tail moved against the baseline."""

    BOTH_BETTER = "bothBetter"
    BOTH_WORSE = "bothWorse"
    MEAN_BETTER_TAIL_WORSE = "meanBetterTailWorse"  # the P99 trap
    MEAN_WORSE_TAIL_BETTER = "meanWorseTailBetter"
    UNCHANGED = "unchanged"
    UNKNOWN = "unknown"  # not enough data on either side


class Cause(StrEnum):
    REJECTION_PASSES = "rejectionPasses"  # rejected drafts cost passes that serialise in a batch
    DRAFT_TOO_LONG = "draftTooLong"  # tail positions cost more than they return
    BATCH_SATURATED = "batchSaturated"  # verify cost grows with the batch past break-even
    LOW_ACCEPTANCE = "lowAcceptance"  # the draft does not match this traffic
    DRAFT_OVERHEAD = "draftOverhead"  # every step pays the draft, few steps gain


class Mitigation(StrEnum):
    SHORTER_DRAFT = "shorterDraft"
    CAP_CONCURRENCY = "capConcurrency"
    NGRAM_FOR_PREFIX_HEAVY = "ngramForPrefixHeavy"
    DOMAIN_HEAD = "domainHead"


class Support(IntEnum):
    """How strongly the measured evidence supports a mitigation (higher ranks first)."""

    NONE = 0  # plausible in general, nothing here shows it
    SOME = 1  # a sign in the data, not a proof
    STRONG = 2  # the data says so with confidence


@dataclass(frozen=True, slots=True)
class LatencyComparison:
    """Canary against baseline, per output token: exact means and the guard's quantile."""

    canary_mean: float
    baseline_mean: float
    canary_tail: float
    baseline_tail: float
    quantile: float

    @property
    def mean_change(self) -> float:
        """Relative change of the mean: -0.25 is 25% faster."""
        return _change(self.canary_mean, self.baseline_mean)

    @property
    def tail_change(self) -> float:
        return _change(self.canary_tail, self.baseline_tail)


@dataclass(frozen=True, slots=True)
class RankedMitigation:
    mitigation: Mitigation
    support: Support
    reason: str
    evidence: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    shape: Shape
    mean_change: float
    tail_change: float
    quantile: float
    causes: tuple[Cause, ...]
    mitigations: tuple[RankedMitigation, ...]  # best supported first; empty unless mixed
    reason: str

    @property
    def mixed(self) -> bool:
        """Mean and tail moved in opposite directions: the case worth explaining."""
        return self.shape in (Shape.MEAN_BETTER_TAIL_WORSE, Shape.MEAN_WORSE_TAIL_BETTER)

    def evidence(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "latency_shape": self.shape.value,
            "mean_change": self.mean_change,
            "tail_change": self.tail_change,
            "causes": ",".join(c.value for c in self.causes),
        }
        for i, m in enumerate(self.mitigations):
            out[f"mitigation:{i}"] = f"{m.mitigation.value}:{m.support.name.lower()}"
        return out


def _change(new: float, old: float) -> float:
    if not (math.isfinite(new) and math.isfinite(old) and old > 0):
        return math.nan
    return new / old - 1.0


def _mean(b: Buckets | None) -> float:
    if b is None or not b.total > 0 or not math.isfinite(b.sum):
        return math.nan
    return b.sum / b.total


def compare(canary: Buckets | None, baseline: Buckets | None, quantile: float) -> LatencyComparison:
    """Means from exact `_sum/_count`, tails by `histogram_quantile` rules (NaN when absent)."""
    bad = [b for b in (canary, baseline) if b is not None and histogram.problem(b) is not None]
    if bad:
        canary = None if canary in bad else canary
        baseline = None if baseline in bad else baseline
    return LatencyComparison(
        canary_mean=_mean(canary),
        baseline_mean=_mean(baseline),
        canary_tail=histogram.quantile(quantile, canary) if canary else math.nan,
        baseline_tail=histogram.quantile(quantile, baseline) if baseline else math.nan,
        quantile=quantile,
    )


def shape_of(mean_change: float, tail_change: float, tolerance: float = NO_CHANGE) -> Shape:
    if not (math.isfinite(mean_change) and math.isfinite(tail_change)):
        return Shape.UNKNOWN

    def sign(x: float) -> int:
        return 0 if abs(x) <= tolerance else (1 if x > 0 else -1)

    m, t = sign(mean_change), sign(tail_change)
    if m < 0 and t > 0:
        return Shape.MEAN_BETTER_TAIL_WORSE
    if m > 0 and t < 0:
        return Shape.MEAN_WORSE_TAIL_BETTER
    if m <= 0 and t <= 0 and (m or t):
        return Shape.BOTH_BETTER
    if m >= 0 and t >= 0 and (m or t):
        return Shape.BOTH_WORSE
    return Shape.UNCHANGED


@dataclass(frozen=True, slots=True)
class Context:
    """What else is known when diagnosing; every field optional (None: not measured)."""

    method: str = ""
    k: int = 1
    alpha: Estimate | None = None
    draft: DraftLengthReport | None = None
    running_per_pod: float | None = None  # vllm:num_requests_running on a canary pod
    batch1_overhead: float = 0.15  # the lesson's epsilon for K positions at batch 1
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS
    prompt_per_output: float | None = None  # prompt tokens / generation tokens
    slice_alphas: Mapping[str, float] = field(default_factory=dict)
    gate_alpha: float = 0.55  # the acceptance gate's disable threshold


def _shorter(ctx: Context) -> RankedMitigation:
    d = ctx.draft
    if d is None or d.advice is DraftAdvice.INSUFFICIENT or not d.positions:
        return RankedMitigation(
            Mitigation.SHORTER_DRAFT,
            Support.NONE,
            "a shorter draft: no per-position evidence in the window",
        )
    rates = ", ".join(f"{p.unconditional:.3f}" for p in d.positions)
    ev: dict[str, float | str] = {"recommended_k": float(d.recommended_k), "rates": rates}
    if d.advice is DraftAdvice.SHORTEN:
        return RankedMitigation(
            Mitigation.SHORTER_DRAFT,
            Support.STRONG,
            f"a shorter draft: num_speculative_tokens {d.configured_k} -> {d.recommended_k}; "
            f"the tail positions accept {rates} and cost more than they return",
            ev,
        )
    first, last = d.positions[0].unconditional, d.positions[-1].unconditional
    if d.best_k < d.configured_k or (first > 0 and last < 0.5 * first):
        return RankedMitigation(
            Mitigation.SHORTER_DRAFT,
            Support.SOME,
            f"a shorter draft: acceptance falls from {first:.3f} to {last:.3f} along the draft "
            f"(best point estimate K={d.best_k}); fewer positions mean a cheaper rejection",
            ev,
        )
    return RankedMitigation(
        Mitigation.SHORTER_DRAFT,
        Support.NONE,
        f"a shorter draft: every position still pays here ({rates})",
        ev,
    )


def _cap(ctx: Context) -> RankedMitigation:
    c = ctx.running_per_pod
    a = ctx.alpha.value if ctx.alpha is not None else None
    if c is None or not math.isfinite(c) or a is None or not math.isfinite(a) or ctx.k < 1:
        return RankedMitigation(
            Mitigation.CAP_CONCURRENCY,
            Support.NONE,
            "cap concurrency on the speculating pool: running requests or alpha not measured",
        )
    limit = breakeven_concurrency(
        min(1.0, max(0.0, a)), ctx.k, ctx.batch1_overhead, ridge_tokens=ctx.ridge_tokens
    )
    ev: dict[str, float | str] = {"running_per_pod": c}
    if limit is not None:
        ev["breakeven_concurrency"] = limit
    if limit is not None and c >= limit:
        cap = max(1, math.floor(limit * 0.8))
        return RankedMitigation(
            Mitigation.CAP_CONCURRENCY,
            Support.STRONG,
            f"cap concurrency on the speculating pool (e.g. --max-num-seqs {cap}): {c:.0f} "
            f"running per pod is past the {limit:.0f} at which alpha {a:.2f} with K={ctx.k} "
            f"stops paying; the extra passes of rejected drafts serialise in the full batch",
            ev,
        )
    if c >= 0.25 * ctx.ridge_tokens or (limit is not None and c >= 0.5 * limit):
        return RankedMitigation(
            Mitigation.CAP_CONCURRENCY,
            Support.SOME,
            f"cap concurrency on the speculating pool: {c:.0f} running per pod fills the batch "
            f"toward compute-bound, where verifying rejected drafts costs real time",
            ev,
        )
    return RankedMitigation(
        Mitigation.CAP_CONCURRENCY,
        Support.NONE,
        f"cap concurrency: {c:.0f} running per pod is a light batch; not the cause here",
        ev,
    )


def _ngram(ctx: Context) -> RankedMitigation:
    r = ctx.prompt_per_output
    if ctx.method in PROMPT_LOOKUP_METHODS:
        return RankedMitigation(
            Mitigation.NGRAM_FOR_PREFIX_HEAVY,
            Support.NONE,
            f"n-gram for prefix-heavy traffic: already using {ctx.method}",
        )
    if r is None or not math.isfinite(r):
        return RankedMitigation(
            Mitigation.NGRAM_FOR_PREFIX_HEAVY,
            Support.NONE,
            "n-gram for prefix-heavy traffic: prompt/output ratio not measured",
        )
    ev: dict[str, float | str] = {"prompt_per_output": r}
    support = Support.STRONG if r >= 2 * PREFIX_HEAVY else Support.SOME
    if r < PREFIX_HEAVY:
        support = Support.NONE
    return RankedMitigation(
        Mitigation.NGRAM_FOR_PREFIX_HEAVY,
        support,
        f"n-gram (prompt lookup) for prefix-heavy traffic: {r:.1f} prompt tokens per output "
        f"token; outputs that copy from the prompt draft for free, with no draft model in the "
        f"batch",
        ev,
    )


def _domain(ctx: Context) -> RankedMitigation:
    ev: dict[str, float | str] = {}
    if ctx.slice_alphas:
        best = max(ctx.slice_alphas.items(), key=lambda kv: kv[1])
        worst = min(ctx.slice_alphas.items(), key=lambda kv: kv[1])
        ev |= {"best_slice": best[0], "worst_slice": worst[0], "worst_alpha": worst[1]}
        if best[1] - worst[1] >= SLICE_GAP and worst[1] < ctx.gate_alpha:
            return RankedMitigation(
                Mitigation.DOMAIN_HEAD,
                Support.STRONG,
                f"a domain-trained draft for slice {worst[0]}: it accepts {worst[1]:.2f} against "
                f"{best[1]:.2f} on {best[0]}; a head trained on its traffic (or no speculation "
                f"there) removes the rejections",
                ev,
            )
    a = ctx.alpha
    if a is not None and math.isfinite(a.upper) and a.upper < ctx.gate_alpha:
        ev["alpha_upper"] = a.upper
        return RankedMitigation(
            Mitigation.DOMAIN_HEAD,
            Support.SOME,
            f"a domain-trained draft: alpha is at most {a.upper:.2f}, below {ctx.gate_alpha:.2f}; "
            f"a general head rarely matches specialised traffic",
            ev,
        )
    return RankedMitigation(
        Mitigation.DOMAIN_HEAD,
        Support.NONE,
        "a domain-trained draft: acceptance does not single out a domain here",
        ev,
    )


_ORDER: Final = {
    Mitigation.SHORTER_DRAFT: 0,
    Mitigation.CAP_CONCURRENCY: 1,
    Mitigation.NGRAM_FOR_PREFIX_HEAVY: 2,
    Mitigation.DOMAIN_HEAD: 3,
}


def rank(ctx: Context) -> tuple[RankedMitigation, ...]:
    """Every mitigation with its support, strongest first (ties: cheapest change first)."""
    ms = [_shorter(ctx), _cap(ctx), _ngram(ctx), _domain(ctx)]
    return tuple(sorted(ms, key=lambda m: (-int(m.support), _ORDER[m.mitigation])))


def diagnose(comparison: LatencyComparison, ctx: Context) -> Diagnosis:
    """Name the shape, the likely causes and the ranked mitigations, with the numbers."""
    return diagnose_changes(
        comparison.mean_change, comparison.tail_change, ctx, quantile=comparison.quantile
    )


def diagnose_changes(
    mean_change: float, tail_change: float, ctx: Context, *, quantile: float = 0.99
) -> Diagnosis:
    """The same from relative changes alone (a person's report: mean -25%, P99 +15%)."""
    shape = shape_of(mean_change, tail_change)
    q = f"P{quantile * 100:g}"
    numbers = f"mean {mean_change:+.0%}, {q} {tail_change:+.0%} per token against the baseline"
    if shape not in (Shape.MEAN_BETTER_TAIL_WORSE, Shape.MEAN_WORSE_TAIL_BETTER):
        text = {
            Shape.BOTH_BETTER: f"speculation helps mean and tail ({numbers})",
            Shape.BOTH_WORSE: f"speculation hurts mean and tail ({numbers}); the gate decides",
            Shape.UNCHANGED: f"no material change ({numbers})",
            Shape.UNKNOWN: "not diagnosed: mean or tail not measured on both pools",
        }[shape]
        return Diagnosis(shape, mean_change, tail_change, quantile, (), (), text)
    ranked = rank(ctx)
    causes: list[Cause] = []
    by = {m.mitigation: m.support for m in ranked}
    if shape is Shape.MEAN_BETTER_TAIL_WORSE:
        causes.append(Cause.REJECTION_PASSES)
        if by[Mitigation.CAP_CONCURRENCY] >= Support.SOME:
            causes.append(Cause.BATCH_SATURATED)
        if by[Mitigation.SHORTER_DRAFT] >= Support.SOME:
            causes.append(Cause.DRAFT_TOO_LONG)
        if by[Mitigation.DOMAIN_HEAD] >= Support.SOME:
            causes.append(Cause.LOW_ACCEPTANCE)
        head = (
            f"the {q} trap: {numbers}. Rejected drafts still cost their passes, and under a "
            f"full batch those passes serialise: most requests get faster, the unlucky ones wait"
        )
    else:
        causes.append(Cause.DRAFT_OVERHEAD)
        if by[Mitigation.DOMAIN_HEAD] >= Support.SOME:
            causes.append(Cause.LOW_ACCEPTANCE)
        if by[Mitigation.SHORTER_DRAFT] >= Support.SOME:
            causes.append(Cause.DRAFT_TOO_LONG)
        head = (
            f"{numbers}: every step pays for the draft while few gain from it; the tail is "
            f"shorter only because long stalls are rarer"
        )
    useful = [m for m in ranked if m.support > Support.NONE]
    tail = (
        "; try: " + " | ".join(f"{m.reason} [{m.support.name.lower()}]" for m in useful)
        if useful
        else "; no mitigation is singled out by the data in hand"
    )
    return Diagnosis(shape, mean_change, tail_change, quantile, tuple(causes), ranked, head + tail)
