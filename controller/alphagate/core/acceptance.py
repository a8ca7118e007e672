"""Acceptance rate alpha with an honest confidence interval, per slice and combined.

alpha = accepted draft tokens / proposed draft tokens. Neither tokens nor drafts are
independent: acceptance stops at the first rejection inside a draft, and a request keeps its own
acceptance for its whole life, which on long outputs spans many scrapes of the same pod. So the
sample unit is an independent *batch*: each pod is one (requests never move between pods), and
a pod's window is cut into time blocks only when they are at least `batch_seconds` long (as long
as a request lives). alpha is the ratio estimator sum(accepted) / sum(draft tokens) over the
batches; its variance comes from the spread of the batches' residuals (delta method,
leverage-corrected: unbiased for two batches, like the jackknife for more) and the interval uses
a Student-t quantile on the batches' effective degrees of freedom (Kish: unequal batches count
for less).

With fewer than two batches nothing measures the spread between requests: the estimate says so
(`EstimateMethod.INSUFFICIENT`, interval [0, 1]) and the verdict is Inconclusive; no fallback
treats drafts or tokens as independent (that covered 12-36% on long requests).

Several slices combine into the pooled ratio of their counters (the effective alpha that sets
the fleet's speed-up), with each slice's drafted tokens scaled to the measured traffic.

A seeded simulation of long, per-request-correlated traffic in tests/core shows the 95%
interval covers the true alpha in 93-97% of runs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from alphagate.core.batching import Ratio, blocks, ratio
from alphagate.core.model import AcceptanceSample, Estimate, EstimateMethod, Observation, Role
from alphagate.core.spread import Prior, moderated
from alphagate.core.stats import korn_graubard, normal_quantile, t_quantile, wilson

# Shortest block of one pod that is its own batch when the caller gives none; the controller
# sizes blocks from the requests' lives (core/blocksize.py, acceptance.batchSeconds: auto).
BATCH_SECONDS: Final = 900.0
INSUFFICIENT: Final = EstimateMethod.INSUFFICIENT
# Effective finished requests per batch from which batch sums count as near normal (HC2).
HC2_MIN_REQUESTS: Final = 5.0

# increase() extrapolates each series on its own; tolerate tiny accepted > drafted excesses.
_EXCESS_TOLERANCE: Final = 1e-3
# No fleet drafts 1e15 tokens in one window: larger values are corrupt, and would overflow sums.
MAX_PLAUSIBLE: Final = 1e15


def _where(s: AcceptanceSample) -> str:
    pod = s.pod or "?"
    return f"pod {pod} [{s.start:g}, {s.end:g}]"


def _sane(s: AcceptanceSample) -> bool:
    """The plain numeric range check behind `problem`, cheap enough to run on every sample.

    Comparisons are False for NaN, so `0 <= v <= MAX_PLAUSIBLE` also rejects NaN and both
    infinities. For per-position counts, a NaN anywhere makes the sum NaN; without one, min and
    max are exact. Must agree with `_sample_problem` (a test checks it on edge values).
    """
    d, t, a = s.drafts, s.draft_tokens, s.accepted_tokens
    if not (0.0 <= d <= MAX_PLAUSIBLE and 0.0 <= t <= MAX_PLAUSIBLE and 0.0 <= a <= MAX_PLAUSIBLE):
        return False
    if (d > 0) != (t > 0) or a > t * (1 + _EXCESS_TOLERANCE) + 1e-6:
        return False
    pp = s.per_position
    return not pp or (sum(pp) >= 0.0 and min(pp) >= 0.0 and max(pp) <= MAX_PLAUSIBLE)


def _all_sane(samples: Iterable[AcceptanceSample]) -> bool:
    """The same check over a whole tuple or list at once, column by column in C-level passes.

    Only a shortcut: True means every sample passes `_sane`; False (or any other iterable, which
    could be consumed only once) sends the caller to the per-sample loop, which decides.
    """
    if type(samples) is not tuple and type(samples) is not list:
        return False
    drafts = [s.drafts for s in samples]
    tokens = [s.draft_tokens for s in samples]
    accepted = [s.accepted_tokens for s in samples]
    values = drafts + tokens + accepted + [v for s in samples for v in s.per_position]
    total = sum(values)
    # A NaN makes the sum NaN; without one, min and max are exact.
    if values and not (total == total and min(values) >= 0.0 and max(values) <= MAX_PLAUSIBLE):
        return False
    # Every value is now a number in [0, MAX_PLAUSIBLE], where bool(v) is v > 0.
    return all(map(operator.eq, map(bool, drafts), map(bool, tokens))) and all(
        map(operator.le, accepted, [t * (1 + _EXCESS_TOLERANCE) + 1e-6 for t in tokens])
    )


def _sample_problem(s: AcceptanceSample) -> str | None:
    """What is wrong with a sample, worded for a person; only called once `_sane` said so."""
    fields = {
        "drafts": s.drafts,
        "draft_tokens": s.draft_tokens,
        "accepted_tokens": s.accepted_tokens,
    }
    for i, v in enumerate(s.per_position):
        fields[f"per_position[{i}]"] = v
    for name, value in fields.items():
        if not math.isfinite(value):
            return f"{_where(s)}: {name} is {value}"
        if value < 0:
            return f"{_where(s)}: {name} is negative ({value:g}); a counter reset was not handled"
        if value > MAX_PLAUSIBLE:
            return f"{_where(s)}: {name} is implausibly large ({value:g})"
    if (s.drafts > 0) != (s.draft_tokens > 0):
        return f"{_where(s)}: drafts {s.drafts:g} but draft_tokens {s.draft_tokens:g}"
    if s.accepted_tokens > s.draft_tokens * (1 + _EXCESS_TOLERANCE) + 1e-6:
        return (
            f"{_where(s)}: accepted_tokens {s.accepted_tokens:g} exceed "
            f"draft_tokens {s.draft_tokens:g}"
        )
    return None


def problem(samples: Iterable[AcceptanceSample]) -> str | None:
    """Describe the first bad sample (NaN, negative increment, accepted > drafted), or None.

    The estimate skips bad samples; the caller turns a problem into an ERROR verdict because
    bad counters mean the source, not the traffic, is broken.
    """
    if _all_sane(samples):
        return None
    for s in samples:
        if not _sane(s):
            found = _sample_problem(s)
            if found is not None:
                return found
    return None


def _usable(samples: Iterable[AcceptanceSample]) -> list[AcceptanceSample]:
    if _all_sane(samples):
        return [s for s in samples if s.draft_tokens > 0]
    return [s for s in samples if _sane(s) and s.draft_tokens > 0]


def batches(
    samples: Iterable[AcceptanceSample], batch_seconds: float = BATCH_SECONDS
) -> list[tuple[float, float]]:
    """(accepted, draft tokens) per independent batch: per pod, consecutive samples merged
    into blocks spanning at least `batch_seconds` (core/batching.py)."""
    return [
        (
            math.fsum(min(s.accepted_tokens, s.draft_tokens) for s in block),
            math.fsum(s.draft_tokens for s in block),
        )
        for block in blocks(samples, batch_seconds)
    ]


def _jackknife(batches: int, requests: float) -> bool:
    """HC3 (the jackknife's leverage correction) rather than HC2 for these batches.

    Two batches: HC2, the unbiased variance; the t on one dof carries the small-sample margin
    (HC3 doubled the variance: 96.5-98% covered). From three, HC3 when the batches are sums of
    few requests, or when the request count is unknown: a batch of a handful of requests is
    skewed by the rare low-acceptance one (HC2 covered 92-93% on four to eight pods of long
    lognormal requests). Batches of many requests each are near normal and HC3 over-covered
    them (97.5-98.5% on one or two pods cut into blocks of real chat and code traffic).
    """
    if batches <= 2:
        return False
    return not (math.isfinite(requests) and requests / batches >= HC2_MIN_REQUESTS)


def _bounds(
    alpha: float, se: float, dof: float, batches: int, tokens: float, confidence: float
) -> tuple[float, float]:
    """The interval on (se, dof): from three batches Korn-Graubard (core/stats.py): batches of
    a few requests each are skewed toward the rare low-acceptance request, and the symmetric t
    interval missed on the low side (16 pods x ~6 requests: 93.2% covered, 3.8% of truths
    below the lower bound against 0.9% above it). With two, the t on one dof: exact for normal
    batch means, where KG's (z / t_1)^2 would shrink the effective size to 2% of itself."""
    if batches > 2:
        return korn_graubard(alpha, se, dof, tokens, confidence)
    half = t_quantile(0.5 + confidence / 2.0, dof) * se
    return alpha - half, alpha + half


def _blocks_of_one_pod(
    units: Sequence[tuple[float, float]], r: Ratio, scale: float
) -> tuple[float, float]:
    """(se, dof) for the upper bound of one pod's time blocks: the larger of the sandwich
    variance (`r`, Kish's dof) and the quasi-likelihood one, whose dof is the blocks less one.

    A block's residual a - alpha t is a sum over its requests, so its variance grows with its
    draft tokens t. Standardising each residual by its own t (the dispersion
    sum e^2 / (t (1 - h)) / m, Var = dispersion / T) gives every block one degree of freedom,
    where the sandwich (sum e^2 / (1 - h)) lets the heaviest blocks carry the spread: bursty
    traffic (the code trace: a few full blocks among near-empty ones) leaves it 1.3-4 dof of
    eight or nine blocks, a t quantile of 3-12, and a 0.45 canary undecided for windows on
    end. Equal blocks give both the same value; the larger keeps the sandwich's guard against
    blocks more variable than their weight says (requests alike within a burst).

    Only the upper bound (what a Fail needs): a window that caught few of the rare bad
    requests reads high and its near-empty blocks look calm, so the lower bound on these dof
    let the truth below it in 5.4-6.6% of one-pod code windows without a prior (Kish's:
    3.4-3.7%); above the upper one it stays at 0-1.7%. Only for one pod: pods differ by more
    than their traffic (a pod's own drift, its stalls), so across pods the heaviest one does
    carry the spread, and Kish's dof stay. `scale`: the square root of the blocks' inflation."""
    if not r.den > 0:
        return r.se * scale, r.dof
    terms = [(n - r.value * d) ** 2 / (d * (1.0 - d / r.den)) for n, d in units if d < r.den]
    if len(terms) < 2:
        return r.se * scale, r.dof
    model = math.sqrt(math.fsum(terms) / len(terms) / r.den)
    if not math.isfinite(model):
        return r.se * scale, r.dof
    return max(r.se, model) * scale, max(r.dof, float(len(terms) - 1))


def estimate(
    samples: Sequence[AcceptanceSample],
    *,
    confidence: float,
    batch_seconds: float = BATCH_SECONDS,
    inflation: float = 1.0,
    prior: Prior | None = None,
    requests: float = math.nan,
) -> Estimate | None:
    """alpha over `samples` with a two-sided interval at `confidence`; None when no drafts.

    Batches are pods cut into blocks of `batch_seconds`; `inflation` multiplies their variance
    for what adjacent blocks share (core/blocksize.py), and `prior` (a variance learned over
    the last hour, core/spread.py) moderates it. `requests`, the window's effective number of
    finished requests, says whether batches are sums of many requests (see `_jackknife`). Bad
    samples (see `problem`) are skipped here; the caller reports them.
    """
    good = _usable(samples)
    drafts = math.fsum([s.drafts for s in good])
    tokens = math.fsum([s.draft_tokens for s in good])
    accepted = math.fsum([min(s.accepted_tokens, s.draft_tokens) for s in good])
    if not (drafts > 0 and tokens > 0):
        return None
    alpha = min(1.0, max(0.0, accepted / tokens))
    units = [(a, t) for a, t in batches(good, batch_seconds) if t > 0]
    n = len(units)

    own = math.nan

    def make(lower: float, upper: float, method: EstimateMethod, se: float, dof: float) -> Estimate:
        return Estimate(
            value=alpha,
            lower=max(0.0, lower),
            upper=min(1.0, upper),
            confidence=confidence,
            drafts=drafts,
            draft_tokens=tokens,
            accepted_tokens=accepted,
            batches=n,
            method=method,
            std_error=se,
            dof=dof,
            block_seconds=batch_seconds,
            inflation=inflation,
            own_std_error=own,
            prior_dof=prior.dof if prior is not None and method is not INSUFFICIENT else 0.0,
        )

    # The ratio estimator with a leverage correction and Kish's dof (core/batching.py). With
    # two batches (two pods: the common canary) the t quantile on one dof already carries the
    # small-sample margin, and the (1 - h) correction (HC2) gives the unbiased variance; the
    # jackknife's (1 - h)^2 doubled it and covered 96.5-98% where 95% is asked. From three
    # batches on the jackknife (HC3) is kept: batch sums of few, long, lognormal requests are
    # skewed, and HC2 covered only 92-93% on four to eight such pods (docs/decisions.md).
    r = ratio(units, jackknife=_jackknife(len(units), requests))
    if r is None or not r.conclusive:  # one batch (or one with all the tokens): no spread
        return make(0.0, 1.0, INSUFFICIENT, math.nan, 0.0)
    scale = math.sqrt(max(1.0, inflation))
    se, dof = r.se * scale, r.dof
    own = se
    # the upper bound of one pod's time blocks (see `_blocks_of_one_pod`); pods stay Kish's
    fail_side = _blocks_of_one_pod(units, r, scale) if len({s.pod for s in good}) == 1 else None
    # A window whose batches all show the same ratio (alpha exactly 0 or 1 everywhere) keeps
    # Wilson below; the prior is scaled to this window's alpha (core/spread.py).
    if prior is not None and se > 0:
        se, dof = moderated(se, dof, prior, alpha)
        fail_side = moderated(*fail_side, prior, alpha) if fail_side is not None else None
    if se > 0:
        lower, upper = _bounds(alpha, se, dof, n, tokens, confidence)
        if fail_side is not None:  # kept: a fail run pools what its upper bound used
            upper = _bounds(alpha, *fail_side, n, tokens, confidence)[1]
            made = make(lower, upper, EstimateMethod.BATCH_MEANS, se, dof)
            return replace(made, fail_std_error=fail_side[0], fail_dof=fail_side[1])
        return make(lower, upper, EstimateMethod.BATCH_MEANS, se, dof)
    # Every batch shows the same ratio (alpha exactly 0 or 1 in every pod): drafts are alike
    # and Wilson over them bounds it; a zero-width interval would claim more.
    lower, upper = wilson(alpha, drafts, confidence)
    z = normal_quantile(0.5 + confidence / 2.0)
    return make(lower, upper, EstimateMethod.WILSON_DRAFTS, (upper - lower) / (2.0 * z), dof)


def drafted_per_generated(e: Estimate) -> float:
    """Draft tokens proposed per generated token on draft steps: (draft tokens / drafts) over
    the mean acceptance length; K / (1 + K alpha) when every draft has K tokens."""
    if not (e.drafts > 0 and e.draft_tokens > 0):
        return math.nan
    return (e.draft_tokens / e.drafts) / e.mean_acceptance_length


def effective_weights(
    estimates: Mapping[str, Estimate], weights: Mapping[str, float]
) -> dict[str, float]:
    """Each slice's share of the fleet's drafted tokens, from its traffic share (generated
    tokens) and its measured drafted tokens per generated token; sums to 1 when any."""
    raw = {
        name: w * drafted_per_generated(estimates[name])
        for name, w in weights.items()
        if name in estimates and math.isfinite(w) and w > 0
    }
    raw = {n: v for n, v in raw.items() if math.isfinite(v) and v > 0}
    total = math.fsum(raw.values())
    return {n: v / total for n, v in raw.items()} if total > 0 else {}


def traffic_weighted(estimates: Mapping[str, Estimate], weights: Mapping[str, float]) -> float:
    """The lesson's combined alpha, sum w_s alpha_s over traffic shares (shown beside the
    pooled one; NaN when no slice has both an estimate and a weight)."""
    parts = [
        (estimates[n].value, w)
        for n, w in weights.items()
        if n in estimates and math.isfinite(w) and w > 0
    ]
    total = math.fsum(w for _, w in parts)
    return math.fsum(a * w for a, w in parts) / total if total > 0 else math.nan


def combine(
    estimates: Mapping[str, Estimate],
    weights: Mapping[str, float],
    *,
    confidence: float,
) -> Estimate | None:
    """Effective alpha across slices: the pooled ratio accepted / drafted the fleet would see.

    `weights` are traffic shares (generated tokens). A slice's drafted tokens follow from its
    share and its drafted tokens per generated token, so the pooled ratio is sum c_s alpha_s
    with c_s its share of drafted tokens (see `effective_weights`); Var = sum c_s^2 Var_s,
    degrees of freedom by Welch-Satterthwaite. A slice without an honest interval makes the
    whole INSUFFICIENT. None when no slice has both an estimate and a weight.
    """
    c = effective_weights(estimates, weights)
    parts = [(estimates[name], share) for name, share in c.items()]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0][0]
    value = math.fsum(e.value * share for e, share in parts)

    def make(lower: float, upper: float, method: EstimateMethod, se: float, dof: float) -> Estimate:
        return Estimate(
            value=min(1.0, max(0.0, value)),
            lower=max(0.0, lower),
            upper=min(1.0, upper),
            confidence=confidence,
            drafts=math.fsum(e.drafts for e, _ in parts),
            draft_tokens=math.fsum(e.draft_tokens for e, _ in parts),
            accepted_tokens=math.fsum(e.accepted_tokens for e, _ in parts),
            batches=sum(e.batches for e, _ in parts),
            method=method,
            std_error=se,
            dof=dof,
        )

    terms = [(share**2) * (e.std_error**2) for e, share in parts]
    if any(not e.conclusive for e, _ in parts) or any(math.isnan(t) for t in terms):
        return make(0.0, 1.0, EstimateMethod.INSUFFICIENT, math.nan, 0.0)
    var = math.fsum(terms)
    denom = math.fsum(
        t * t / e.dof for t, (e, _) in zip(terms, parts, strict=True) if math.isfinite(e.dof)
    )
    dof = (var * var / denom) if denom > 0 else math.inf
    se = math.sqrt(var)
    q = 0.5 + confidence / 2.0
    half = (t_quantile(q, dof) if math.isfinite(dof) else normal_quantile(q)) * se
    return make(value - half, value + half, EstimateMethod.POOLED, se, dof)


def weights(observation: Observation, slices: Sequence[str] | None = None) -> dict[str, float]:
    """Traffic share per slice from measured generation tokens (canary + baseline pools).

    Pools with an error or a non-finite/negative count contribute nothing. Shares sum to 1 when
    any traffic was measured, else all are 0.
    """
    names = (
        list(slices)
        if slices is not None
        else list(dict.fromkeys(p.slice for p in observation.pools))
    )
    raw = dict.fromkeys(names, 0.0)
    for pool in observation.pools:
        if pool.slice not in raw or pool.error is not None:
            continue
        if pool.role not in (Role.CANARY, Role.BASELINE):
            continue
        tokens = pool.generation_tokens
        if math.isfinite(tokens) and tokens > 0:
            raw[pool.slice] += tokens
    total = math.fsum(raw.values())
    if not total > 0:
        return dict.fromkeys(names, 0.0)
    return {name: v / total for name, v in raw.items()}


def per_position(samples: Iterable[AcceptanceSample]) -> tuple[float, ...]:
    """Acceptance rate at each draft position (accepted at position i / drafts), from the
    per-position counters; () when they are absent. Position 0 is the first drafted token."""
    good = [s for s in _usable(samples) if s.per_position]
    drafts = math.fsum(s.drafts for s in good)
    if not good or not drafts > 0:
        return ()
    width = max(len(s.per_position) for s in good)
    sums = [0.0] * width
    for s in good:
        for i, v in enumerate(s.per_position):
            sums[i] += v
    return tuple(min(1.0, v / drafts) for v in sums)
