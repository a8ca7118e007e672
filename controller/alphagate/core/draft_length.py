"""Which draft length K pays: per-position acceptance, tokens per step and speed-up for K' <= K.

vLLM counts, per draft position i, the drafts with at least i+1 accepted tokens
(`vllm:spec_decode_num_accepted_tokens_per_pos_total`). Acceptance stops at the first rejection
and truncating a draft to K' tokens does not change whether its first K' tokens are accepted,
so with u_i = per_pos[i] / drafts the expected tokens per draft step at length K' is exactly

    T(K') = 1 + u_0 + ... + u_{K'-1}

for every K' <= K, with no independence assumption. Positions beyond K are never observed:
the counters can say "shorter pays", never "longer pays" (at most that the last position still
accepts well). A draft step of K' positions costs C(K') = 1 + K' * d plain steps, with d the
cost of one draft position relative to a plain decode step (draft forward plus one more verified
position). d comes from the policy (a per-method default adjusted for the batch on the roofline
of core/speedup.py) or is measured from the canary's per-step latency against the baseline's.

Position k (0-based) pays when u_k > d * S(k), where S(k) = T(k) / C(k) is the speed-up without
it: the marginal token must buy more than the marginal cost at the current rate. The conservative
recommendation drops a tail position only when the upper confidence bound of u_k is below that
break-even, so noise never moves K (every change restarts pods).

Intervals reuse the acceptance estimator (batch means over (pod, interval) samples, Wilson over
drafts when few): per-position counts are ratios of counters with the draft as the unit, the same
shape as alpha. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.core import acceptance
from alphagate.core.model import AcceptanceSample, Buckets, Estimate

DEFAULT_MIN_DRAFTS: Final = 200.0
"""Drafts needed before the per-position rates are read as evidence (the acceptance gate's)."""
FULL_LENGTH: Final = 0.9
"""Share of full-length drafts above which the conditional rate of the last position is read."""


class CostSource(StrEnum):
    """Where the per-position draft cost came from; said in every recommendation."""

    POLICY = "policy"  # a configured or per-method default, adjusted for the batch
    MEASURED = "measured"  # canary per-step latency against the baseline's


class DraftAdvice(StrEnum):
    """What the per-position evidence says about K (stable strings; usable as metric labels)."""

    KEEP = "keep"  # every configured position pays, or the evidence cannot tell
    SHORTEN = "shorten"  # the tail positions cost more than they return, with confidence
    NONE_PAYS = "nonePays"  # even K' = 1 does not pay: an on/off question, not a K question
    LONGER_MAY_PAY = "longerMayPay"  # the last position clearly pays: a longer K might too
    INSUFFICIENT = "insufficient"  # too few drafts, or no per-position counters


@dataclass(frozen=True, slots=True)
class PositionRate:
    """Acceptance at one draft position (0-based) with intervals.

    `unconditional` is u_i = drafts with >= i+1 accepted / drafts (vLLM's per-position rate);
    `conditional` is u_i / u_{i-1}: the chance position i is accepted given i-1 was. The
    conditional is exact only when every draft had full length (see `full_length_share`)."""

    position: int
    accepted: float
    unconditional: float
    unconditional_lower: float
    unconditional_upper: float
    conditional: float
    conditional_lower: float
    conditional_upper: float


@dataclass(frozen=True, slots=True)
class LengthOption:
    """What a draft of `k` positions would give on this traffic."""

    k: int
    tokens_per_step: float  # T(k) = 1 + sum of u_i for i < k, per draft step
    tokens_lower: float
    tokens_upper: float
    step_cost: float  # C(k) = 1 + k*d, in plain decode steps
    speedup: float  # T(k) / C(k) over draft steps
    speedup_lower: float
    speedup_upper: float
    breakeven_rate: float  # u_{k-1} must exceed this for position k-1 to pay: d * S(k-1)


@dataclass(frozen=True, slots=True)
class DraftCost:
    """Cost of one draft position relative to a plain decode step, and its provenance."""

    per_position: float
    source: CostSource
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DraftLengthReport:
    """The recommendation and everything behind it."""

    configured_k: int
    advice: DraftAdvice
    recommended_k: int  # conservative: only shortened on confident evidence
    best_k: int  # point-estimate argmax of the speed-up (may differ from recommended_k)
    positions: tuple[PositionRate, ...]
    options: tuple[LengthOption, ...]
    cost: DraftCost
    drafts: float
    draft_tokens: float
    full_length_share: float  # draft_tokens / (K * drafts): 1 when every draft had K tokens
    confidence: float
    reason: str

    def option(self, k: int) -> LengthOption | None:
        for o in self.options:
            if o.k == k:
                return o
        return None

    def evidence(self) -> dict[str, float | str]:
        """Flat numbers for status, Events and logs."""
        out: dict[str, float | str] = {
            "draft_length_advice": self.advice.value,
            "configured_k": float(self.configured_k),
            "recommended_k": float(self.recommended_k),
            "best_k": float(self.best_k),
            "draft_cost_per_position": self.cost.per_position,
            "draft_cost_source": self.cost.source.value,
            "drafts": self.drafts,
            "full_length_share": self.full_length_share,
        }
        for p in self.positions:
            out[f"position_rate:{p.position}"] = p.unconditional
            out[f"position_rate_upper:{p.position}"] = p.unconditional_upper
        for o in self.options:
            out[f"speedup_at_k:{o.k}"] = o.speedup
        return out


# ------------------------------------------------------------------ cost


def policy_cost(
    per_position: float,
    *,
    concurrency: float = 1.0,
    ridge_tokens: float = 256.0,
    detail: str = "",
) -> DraftCost:
    """The per-position cost at `concurrency` on the two-term roofline of core/speedup.py.

    A step costs W + c*C plain; a K-position draft adds K*d*W of drafting and c*K*C of
    verification, so the relative cost per position is (d + x) / (1 + x) with x = c / ridge:
    the small-batch d at low concurrency, rising toward 1 (a full extra pass) as the batch fills.
    """
    if not math.isfinite(per_position) or per_position < 0:
        raise ValueError(f"draft cost per position must be a finite number >= 0: {per_position}")
    if not math.isfinite(concurrency) or concurrency < 1:
        concurrency = 1.0
    x = concurrency / ridge_tokens
    eff = (per_position + x) / (1.0 + x)
    why = detail or f"{per_position:g} per position at batch 1"
    return DraftCost(eff, CostSource.POLICY, f"{why}; {eff:.3g} at {concurrency:g} running")


def _mean(b: Buckets | None) -> float:
    if b is None or not b.total > 0 or not math.isfinite(b.sum) or b.sum < 0:
        return math.nan
    return b.sum / b.total


def measured_cost(
    canary_itl: Buckets | None,
    baseline_itl: Buckets | None,
    *,
    draft_tokens: float,
) -> DraftCost | None:
    """Per-position cost from per-step latency (exact `_sum/_count`), or None without data.

    vLLM observes `inter_token_latency_seconds` once per engine step per request. The canary's
    mean step is the baseline's times (1 + d * draft tokens per step), so
    d = (canary step / baseline step - 1) * canary steps / draft tokens. A canary step faster
    than the baseline's (noise, or a lighter batch) gives d = 0, never a negative cost.
    """
    on, off = _mean(canary_itl), _mean(baseline_itl)
    if not (math.isfinite(on) and math.isfinite(off) and off > 0 and draft_tokens > 0):
        return None
    assert canary_itl is not None
    steps = canary_itl.total
    per_step = draft_tokens / steps
    d = max(0.0, (on / off - 1.0) / per_step)
    return DraftCost(
        d,
        CostSource.MEASURED,
        f"canary step {on * 1e3:.3g} ms vs baseline {off * 1e3:.3g} ms, "
        f"{per_step:.3g} draft tokens per step",
    )


# ------------------------------------------------------------------ estimates


def _ratio(
    samples: Sequence[AcceptanceSample],
    num: Sequence[float],
    den: Sequence[float],
    *,
    scale: float,
    confidence: float,
) -> Estimate | None:
    """num/den over samples as an acceptance-shaped estimate (den units, num <= scale*den)."""
    shaped = [
        AcceptanceSample(
            drafts=d, draft_tokens=d * scale, accepted_tokens=min(n, d * scale), pod=s.pod
        )
        for s, n, d in zip(samples, num, den, strict=True)
        if d > 0
    ]
    return acceptance.estimate(shaped, confidence=confidence)


def _usable(samples: Sequence[AcceptanceSample], k: int) -> list[AcceptanceSample]:
    """Samples with drafts and a per-position vector; bad samples are the caller's ERROR."""
    if acceptance.problem(samples) is not None:
        samples = [s for s in samples if acceptance.problem((s,)) is None]
    return [s for s in samples if s.drafts > 0 and s.per_position and len(s.per_position) <= k]


def _pos(s: AcceptanceSample, i: int) -> float:
    return s.per_position[i] if i < len(s.per_position) else 0.0


def position_rates(
    samples: Sequence[AcceptanceSample], *, k: int, confidence: float
) -> tuple[PositionRate, ...]:
    """u_i and u_i/u_{i-1} with intervals for i < k; () without per-position counters."""
    good = _usable(samples, k)
    if not good:
        return ()
    drafts = [s.drafts for s in good]
    out: list[PositionRate] = []
    for i in range(k):
        acc = [min(_pos(s, i), s.drafts) for s in good]
        u = _ratio(good, acc, drafts, scale=1.0, confidence=confidence)
        prev = [min(_pos(s, i - 1), s.drafts) for s in good] if i else drafts
        c = _ratio(good, acc, prev, scale=1.0, confidence=confidence)
        nan = math.nan
        out.append(
            PositionRate(
                position=i,
                accepted=math.fsum(acc),
                unconditional=u.value if u else 0.0,
                unconditional_lower=u.lower if u else 0.0,
                unconditional_upper=u.upper if u else 0.0,
                conditional=c.value if c else nan,
                conditional_lower=c.lower if c else nan,
                conditional_upper=c.upper if c else nan,
            )
        )
    return tuple(out)


def _option(good: Sequence[AcceptanceSample], k: int, d: float, confidence: float) -> LengthOption:
    drafts = [s.drafts for s in good]
    accepted = [min(math.fsum(_pos(s, i) for i in range(k)), k * s.drafts) for s in good]
    e = _ratio(good, accepted, drafts, scale=float(k), confidence=confidence)
    mean, lo, hi = (e.value, e.lower, e.upper) if e else (0.0, 0.0, 0.0)
    tokens, t_lo, t_hi = 1.0 + k * mean, 1.0 + k * lo, 1.0 + k * hi
    cost = 1.0 + k * d
    prev_tokens = tokens - (
        math.fsum(_pos(s, k - 1) for s in good) / math.fsum(drafts) if drafts else 0.0
    )
    return LengthOption(
        k=k,
        tokens_per_step=tokens,
        tokens_lower=t_lo,
        tokens_upper=t_hi,
        step_cost=cost,
        speedup=tokens / cost,
        speedup_lower=t_lo / cost,
        speedup_upper=t_hi / cost,
        breakeven_rate=d * prev_tokens / (1.0 + (k - 1) * d),
    )


def _insufficient(
    good: Sequence[AcceptanceSample],
    positions: Sequence[PositionRate],
    drafts: float,
    min_drafts: float,
) -> str | None:
    """Why these counters cannot support a recommendation, or None."""
    if not positions:
        return "no per-position acceptance counters in the window"
    if drafts < min_drafts:
        return f"{drafts:.0f} drafts, fewer than the {min_drafts:.0f} needed"
    if len(acceptance.batches(good)) < 2:
        # One pod in one window: its requests share their acceptance, so no interval is honest.
        return "one independent batch (one pod, one window); rates need two"
    return None


def _paying_length(
    positions: Sequence[PositionRate], options: Sequence[LengthOption], k: int
) -> int:
    """K with the tail positions dropped while even their upper bound cannot pay for them."""
    rec = k
    while rec > 1:
        if positions[rec - 1].unconditional_upper >= options[rec - 1].breakeven_rate:
            break
        rec -= 1
    return rec


def _longer_may_pay(last: PositionRate, next_breakeven: float, full: float) -> str | None:
    """Why one more position may pay, or None.

    The position after K is never observed. Acceptance does not rise along a draft, so its
    rate is at most u_{K-1} times the last conditional rate; read with both lower bounds, it
    is what a longer draft can be expected to get at the least. It may pay when that clears
    the break-even position K would face, d * S(K). Only full-length drafts make the
    conditional rate meaningful (n-gram drafts often stop short, which inflates it)."""
    next_rate = last.unconditional_lower * last.conditional_lower
    if not (next_rate > next_breakeven and last.conditional_lower > 0.5 and full >= FULL_LENGTH):
        return None
    return (
        f"the last position still accepts {last.unconditional:.3f} (at least "
        f"{last.unconditional_lower:.3f}, {last.conditional_lower:.2f} of the drafts that "
        f"reached it): one more position would get at least {next_rate:.3f}, above the "
        f"{next_breakeven:.3f} it needs, which these counters cannot show"
    )


def recommend(
    samples: Sequence[AcceptanceSample],
    *,
    k: int,
    cost: DraftCost,
    confidence: float = 0.95,
    min_drafts: float = DEFAULT_MIN_DRAFTS,
) -> DraftLengthReport:
    """The draft-length recommendation for a canary running K = `k`, with its evidence."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"K (num_speculative_tokens) must be an integer >= 1, got {k!r}")
    good = _usable(samples, k)
    drafts = math.fsum(s.drafts for s in good)
    tokens = math.fsum(s.draft_tokens for s in good)
    d = cost.per_position
    positions = position_rates(good, k=k, confidence=confidence)
    options = tuple(_option(good, kk, d, confidence) for kk in range(1, k + 1)) if good else ()
    full = tokens / (k * drafts) if drafts > 0 else math.nan

    def report(advice: DraftAdvice, rec: int, best: int, reason: str) -> DraftLengthReport:
        return DraftLengthReport(
            configured_k=k,
            advice=advice,
            recommended_k=rec,
            best_k=best,
            positions=positions,
            options=options,
            cost=cost,
            drafts=drafts,
            draft_tokens=tokens,
            full_length_share=full,
            confidence=confidence,
            reason=reason,
        )

    why = _insufficient(good, positions, drafts, min_drafts)
    if why is not None:
        return report(DraftAdvice.INSUFFICIENT, k, k, f"K={k} kept: {why}")

    best = max(options, key=lambda o: (round(o.speedup, 12), -o.k)).k
    rates = ", ".join(f"{p.unconditional:.3f}" for p in positions)
    rec = _paying_length(positions, options, k)
    one = options[0]
    if one.speedup_upper < 1.0:
        return report(
            DraftAdvice.NONE_PAYS,
            k,
            best,
            f"no draft length pays: even K=1 gives at most {one.speedup_upper:.2f}x "
            f"(position rates {rates}; cost {d:.3g} per position, {cost.source.value})",
        )
    if rec < k:
        dropped = positions[rec:]
        worst = max(dropped, key=lambda p: p.unconditional_upper)
        return report(
            DraftAdvice.SHORTEN,
            rec,
            best,
            f"K={rec} instead of {k}: positions {rec}-{k - 1} accept at most "
            f"{worst.unconditional_upper:.3f} (upper {confidence:.0%} bound), below the "
            f"{options[rec].breakeven_rate:.3f} they need at {d:.3g} cost per position "
            f"({cost.source.value}); predicted {options[rec - 1].speedup:.2f}x vs "
            f"{options[k - 1].speedup:.2f}x over draft steps (position rates {rates})",
        )
    longer = _longer_may_pay(positions[k - 1], d * options[k - 1].speedup, full)
    if longer is not None:
        return report(
            DraftAdvice.LONGER_MAY_PAY, k, best, f"K={k} kept; {longer} (position rates {rates})"
        )
    return report(
        DraftAdvice.KEEP,
        k,
        best,
        f"K={k} kept: no tail position is confidently below its break-even "
        f"(position rates {rates}; cost {d:.3g} per position, {cost.source.value}; "
        f"best point estimate K={best})",
    )
