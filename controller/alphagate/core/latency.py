"""The latency guard's statistics on exact sums: measured speed-up and tail exceedance.

vLLM's histograms carry exact `_sum` and `_count`, so per pod and interval the mean time per
output token (`vllm:request_time_per_output_token_seconds`, one observation per request) has no
bucket error. Over independent batches (pods, or per-pod blocks of `batch_seconds`: a stall
episode hits one pod for a while) the pooled means of canary and baseline give

* the **measured speed-up**, baseline mean over canary mean, with an interval (delta method on
  the log ratio, Welch degrees of freedom): the direct answer to "is speculation net positive
  at the live concurrency?";
* the **mean test**: is the canary's mean significantly above the baseline's times
  (1 + maxRegressionRatio)? Its reverse (the speed-up's lower bound at or above
  1 / (1 + margin)) is what confirms a canary;
* the **quantile at the layout's resolution** (core/resolution.py): the canary's share above
  the Fail edge (the first bound >= the upper edge of the baseline quantile's bucket x (1 +
  margin); the median pod's with 3+ baseline pods, core/reference.py) tested against 1 -
  quantile, and its share above the Pass edge (the last bound <= the lower edge x (1 + margin))
  shown at most 1 - quantile where the layout resolves the margin. No interpolated limit;
* the **tail tests**: a canary at most (1 + maxRegressionRatio) times slower than the
  baseline at every quantile has, at any bucket bound b, no larger share of requests above b
  than the baseline has above b / (1 + margin), hence above the largest bound b' <= that. So
  at every finite bound b the test asks whether the canary's share above b is significantly
  above the baseline's share above b' (plus a slack of maxRegressionRatio of the (1 - q) tail
  budget, so a few stray requests cannot matter). Exact under that null with any bucket
  layout, no interpolation; finer buckets (vLLM's --custom-histogram-buckets) make it sharper.

The regression tests form one family at `significance`, corrected by weighted Holm: the mean
test and the quantile's Fail test carry 45% of the weight each, the bounds share the last 10%
(so twenty bounds do not take the policy's own tests' power away).

A speculating canary is usually faster on average with a wider spread: that is not a
regression unless its tail is slower by more than the margin. Pure.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from alphagate.core import histogram
from alphagate.core.batching import Ratio, blocks, ratio, welch_dof
from alphagate.core.bound_shares import MIN_COUNT, Indexes, SharesAbove, common_bounds, pooled
from alphagate.core.exceedance import binomial_cdf as binomial_cdf
from alphagate.core.exceedance import within_test as within_test
from alphagate.core.model import (
    BoundTest,
    Buckets,
    ExceedanceTest,
    LatencySample,
    SpeedUp,
    TailGuard,
)
from alphagate.core.reference import references
from alphagate.core.resolution import Resolution, TailWithin
from alphagate.core.stats import t_cdf, t_quantile

BATCH_SECONDS: Final = 30.0  # for direct callers; the policy's is latency.batchSeconds (30 s)
MAX_SECONDS_PER_TOKEN: Final = 1e6  # a mean time per token beyond this is a corrupt counter
_Z_975: Final = 1.959963984540054
_MAX_EXP: Final = 709.0  # math.exp overflows a float just above this
# Weights of the regression family (weighted Holm): the mean, the quantile's Fail test, and
# all bounds together, so that a fine layout's many bounds do not dilute the policy's own tests
# (docs/decisions.md, "Latency guard on exact sums").
W_MEAN: Final = 0.45
W_QUANTILE: Final = 0.45
W_BOUNDS: Final = 0.10


@dataclass(frozen=True, slots=True)
class TailReport:
    speedup: SpeedUp | None
    bounds: tuple[BoundTest, ...]
    mean_rejected: bool
    # Both pools pooled over the common layout (for people, and for the baseline's bucket).
    canary_hist: Buckets | None = None
    baseline_hist: Buckets | None = None
    # The quantile at the layout's resolution (None without a baseline quantile).
    tail: TailGuard | None = None
    # The family's smallest weighted-Bonferroni p-value (NaN: nothing tested).
    p_adjusted: float = math.nan

    @property
    def regressed(self) -> bool:
        return (
            self.mean_rejected
            or any(b.rejected for b in self.bounds)
            or (self.tail is not None and self.tail.rejected)
        )

    @property
    def worst(self) -> BoundTest | None:
        """The bound with the smallest p-value (the strongest tail evidence)."""
        tested = [b for b in self.bounds if math.isfinite(b.p_value)]
        return min(tested, key=lambda b: b.p_value) if tested else None


def _sf(t: float, dof: float) -> float:
    """P(T > t) for Student t (normal at infinite dof)."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    return 1.0 - t_cdf(t, dof)


def mean_per_token(samples: Sequence[LatencySample], batch_seconds: float) -> Ratio | None:
    """Pooled mean of the histogram (sum / count) over independent batches."""
    batches = blocks([s for s in samples if _usable(s)], batch_seconds)
    return ratio([(math.fsum(s.sum for s in b), math.fsum(s.count for s in b)) for b in batches])


def _usable(s: LatencySample) -> bool:
    """Finite, positive and plausible: no pool finishes 1e15 requests in a window, nor spends
    more than MAX_SECONDS_PER_TOKEN on a token (larger numbers are corrupt counters)."""
    return (
        math.isfinite(s.count)
        and math.isfinite(s.sum)
        and MIN_COUNT <= s.count <= histogram.MAX_PLAUSIBLE
        and 0 <= s.sum <= s.count * MAX_SECONDS_PER_TOKEN
    )


def _exp(x: float) -> float:
    """math.exp that saturates at inf instead of raising OverflowError."""
    if math.isnan(x):
        return math.nan
    return math.inf if x > _MAX_EXP else math.exp(x)


def speedup(canary: Ratio, baseline: Ratio, *, margin: float, confidence: float) -> SpeedUp | None:
    """Measured speed-up and the one-sided mean test; None without an honest spread. Never
    raises: a Welch dof near zero gives an interval as wide as it is ([0, inf]), not an
    overflow."""
    values = (canary.value, baseline.value, canary.se, baseline.se, margin, confidence)
    if not (canary.conclusive and baseline.conclusive and all(map(math.isfinite, values))):
        return None
    if not (canary.value > 0 and baseline.value > 0 and margin > -1.0):
        return None
    rel_c, rel_b = canary.se / canary.value, baseline.se / baseline.value
    # products, not **: a float power raises OverflowError where a product gives inf
    var_c, var_b = rel_c * rel_c, rel_b * rel_b
    var = var_c + var_b
    if not math.isfinite(var):
        return None
    dof = welch_dof([(var_c, canary.dof), (var_b, baseline.dof)])
    if not dof > 0:
        return None
    se = math.sqrt(var)
    log_s = math.log(baseline.value) - math.log(canary.value)
    q = t_quantile(0.5 + confidence / 2.0, dof) if math.isfinite(dof) else _Z_975
    half = q * se if se > 0 else 0.0
    if math.isnan(half):
        half = math.inf
    # H0: log(canary / baseline) <= log(1 + margin) (a regression if rejected); the reverse
    # H0': log(canary / baseline) >= log(1 + margin) (within the margin if rejected)
    gap = -log_s - math.log1p(margin)
    stat = gap / se if se > 0 else (math.copysign(math.inf, gap) if gap != 0 else 0.0)
    return SpeedUp(
        value=_exp(log_s),
        lower=_exp(log_s - half),
        upper=_exp(log_s + half),
        confidence=confidence,
        canary_mean=canary.value,
        baseline_mean=baseline.value,
        canary_count=canary.den,
        baseline_count=baseline.den,
        dof=dof,
        p_regressed=_sf(stat, dof),
        p_within=_sf(-stat, dof),
    )


def _var(r: Ratio) -> float:
    """The clustered variance, never below the variance of independent requests."""
    p = min(1.0, max(0.0, r.value))
    floor = max(p * (1.0 - p), 1.0 / r.den) / r.den
    return max(r.se * r.se if math.isfinite(r.se) else 0.0, floor)


def _bound_test(bound: float, lower: float, c: Ratio, b: Ratio, *, slack: float) -> BoundTest:
    allowed = b.value + slack
    vc, vb = _var(c), _var(b)
    dof = welch_dof([(vc, c.dof or math.inf), (vb, b.dof or math.inf)])
    gap = c.value - allowed
    sd = math.sqrt(vc + vb)
    stat = gap / sd if sd > 0 else (math.copysign(math.inf, gap) if gap != 0 else 0.0)
    return BoundTest(bound, c.value, lower, b.value, allowed, _sf(stat, dof))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level `alpha`."""
    return weighted_holm(p_values, [1.0] * len(p_values), alpha)


def weighted_holm(p_values: Sequence[float], weights: Sequence[float], alpha: float) -> list[bool]:
    """Holm's weighted step-down (Holm 1979): at each step the hypothesis with the smallest
    p / weight is rejected when p <= alpha x weight / (the weights still in play). NaN
    p-values and non-positive weights take no part."""
    live = [
        i
        for i, (p, w) in enumerate(zip(p_values, weights, strict=True))
        if math.isfinite(p) and w > 0
    ]
    out = [False] * len(p_values)
    while live:
        total = math.fsum(weights[i] for i in live)
        best = min(live, key=lambda i: p_values[i] / weights[i])
        if not p_values[best] <= alpha * weights[best] / total:
            break
        out[best] = True
        live.remove(best)
    return out


def adjusted(p_values: Sequence[float], weights: Sequence[float]) -> float:
    """The family's smallest weighted-Bonferroni p-value, min p x (sum of weights) / weight
    (NaN when nothing was tested): at or below a level, the family rejects at that level."""
    live = [(p, w) for p, w in zip(p_values, weights, strict=True) if math.isfinite(p) and w > 0]
    if not live:
        return math.nan
    total = math.fsum(w for _, w in live)
    return min(1.0, min(p * total / w for p, w in live))


def _bound_tests(
    canary_above: SharesAbove,
    baseline_above: SharesAbove,
    layout: Sequence[float],
    *,
    quantile: float,
    margin: float,
) -> list[BoundTest]:
    """One test per common bound b: the canary's share above b against the baseline's above
    the largest bound <= b / (1 + margin), plus a slack of margin x (1 - quantile)."""
    slack = margin * (1.0 - quantile)
    tests: list[BoundTest] = []
    for bound in layout:
        # the largest bound <= bound / (1 + margin) (the layout is sorted, finite, unique)
        below = bound / (1.0 + margin) * (1.0 + 1e-12)
        i = bisect_right(layout, below) if below == below else 0  # NaN: none is below
        if not i:
            continue  # the baseline's share above anything below the first bound is all
        c = canary_above(bound)
        if c is None or not c.conclusive or c.num == 0:
            continue  # (nothing of the canary above it)
        lower = layout[i - 1]
        b = baseline_above(lower)
        if b is None or not b.conclusive or b.num == b.den:
            continue  # (everything of the baseline above it)
        tests.append(_bound_test(bound, lower, c, b, slack=slack))
    return tests


def compare(
    canary: Sequence[LatencySample],
    baseline: Sequence[LatencySample],
    *,
    quantile: float,
    margin: float,
    significance: float,
    confidence: float = 0.95,
    batch_seconds: float = BATCH_SECONDS,
) -> TailReport:
    """The mean test, the quantile's Fail test and one test per bucket bound, corrected
    together (weighted Holm); the quantile's Pass side at the layout's resolution."""
    canary = _valid(canary)
    baseline = _valid(baseline)
    c_mean = mean_per_token(canary, batch_seconds)
    b_mean = mean_per_token(baseline, batch_seconds)
    s = (
        speedup(c_mean, b_mean, margin=margin, confidence=confidence)
        if c_mean is not None and b_mean is not None
        else None
    )
    layout = common_bounds(canary, baseline)
    index = Indexes()
    canary_above = SharesAbove(canary, batch_seconds, index)
    tests = _bound_tests(
        canary_above,
        SharesAbove(baseline, batch_seconds, index),
        layout,
        quantile=quantile,
        margin=margin,
    )
    c_hist, b_hist = pooled(canary, layout, index), pooled(baseline, layout, index)
    res = _resolution(baseline, quantile, margin, layout, index, b_hist)
    tail = None
    if res is not None:
        tail = tail_guard(
            res,
            canary_above,
            quantile=quantile,
            significance=significance,
        )
    fail_p = tail.fail_test.p_value if tail is not None and tail.fail_test else math.nan
    mean_p = s.p_regressed if s is not None else math.nan
    p_values = [mean_p, fail_p, *(t.p_value for t in tests)]
    weights = [W_MEAN, W_QUANTILE, *(W_BOUNDS / len(tests) for _ in tests)]
    rejected = weighted_holm(p_values, weights, significance)
    decisive_p = tail.decisive_p if tail is not None else math.nan
    bounds = tuple(replace(t, rejected=r) for t, r in zip(tests, rejected[2:], strict=True))
    if tail is not None:
        tail = replace(tail, rejected=rejected[1])
    return TailReport(
        speedup=s,
        bounds=bounds,
        mean_rejected=rejected[0],
        canary_hist=c_hist,
        baseline_hist=b_hist,
        tail=tail,
        p_adjusted=adjusted([mean_p, decisive_p, *p_values[2:]], weights),
    )


def _resolution(
    baseline: Sequence[LatencySample],
    quantile: float,
    margin: float,
    layout: Sequence[float],
    index: Indexes,
    b_hist: Buckets | None,
) -> Resolution | None:
    """The quantile's edges: the Fail edge around the median baseline pod's bucket, the Pass
    edge (and whether the margin is resolvable) around the lowest pod's (core/reference.py).
    `b_hist` is the baseline pooled over `layout`."""

    def pool(group: Sequence[LatencySample]) -> Buckets | None:
        return pooled(group, layout, index)

    fail_ref, pass_ref = references(baseline, quantile, pool, b_hist)
    res = histogram.resolution_at(quantile, fail_ref, margin, layout)
    low = res
    if pass_ref is not fail_ref:
        low = histogram.resolution_at(quantile, pass_ref, margin, layout)
    if res is None or low is None or low.bucket_hi >= res.bucket_hi:
        return res
    return replace(res, pass_edge=low.pass_edge, resolvable=low.resolvable)


def _valid(samples: Sequence[LatencySample]) -> list[LatencySample]:
    """Samples whose buckets, when present, are a usable histogram (bad buckets are dropped,
    their exact sums kept)."""
    return [
        s if s.buckets is None or histogram.problem(s.buckets) is None else replace(s, buckets=None)
        for s in samples
    ]


def tail_guard(
    res: Resolution,
    share_above: Callable[[float], Ratio | None],
    *,
    quantile: float,
    significance: float,
) -> TailGuard:
    """The quantile's two sides at the resolution `res`: the canary's share above the Pass
    edge tested "at most 1 - quantile" (only where the layout resolves the margin does it
    make "within" SHOWN), and its share above the Fail edge tested "above 1 - quantile".
    `share_above(edge)` gives the canary's share above a bound over independent batches."""
    expected = 1.0 - quantile
    pass_share = share_above(res.pass_edge) if res.pass_edge is not None else None
    fail_share = share_above(res.fail_edge) if res.fail_edge is not None else None
    pass_test = _exceeds(res.pass_edge, pass_share, expected, significance)
    fail_test = _exceeds(res.fail_edge, fail_share, expected, significance)
    if not res.resolvable:
        within = TailWithin.UNRESOLVABLE
    elif pass_test is None or math.isnan(pass_test.p_within):
        within = TailWithin.UNTESTABLE
    elif pass_test.p_within <= significance:
        within = TailWithin.SHOWN
    else:
        within = TailWithin.NOT_SHOWN
    decisive_p = fail_var = fail_dof = math.nan
    if fail_test is not None and fail_share is not None:
        decisive_p = fail_test.p_value
        if fail_share.conclusive:
            decisive_p = max(decisive_p, _t_above(fail_share, expected))
            fail_var, fail_dof = _var(fail_share), fail_share.dof
    return TailGuard(
        quantile,
        res,
        within,
        pass_test,
        fail_test,
        decisive_p=decisive_p,
        fail_var=fail_var,
        fail_dof=fail_dof,
    )


def _exceeds(
    edge: float | None, share: Ratio | None, expected: float, significance: float
) -> ExceedanceTest | None:
    if edge is None or share is None:
        return None
    return within_test(
        edge,
        share.num,
        share.den,
        expected=expected,
        significance=significance,
        se=share.se,
        dof=share.dof,
    )


def _t_above(share: Ratio, expected: float) -> float:
    """p of "the share is above `expected`" on a t test over the batches' spread (their dof),
    the variance never below that of independent requests: what one window may claim at the
    level of several (a stall episode of one pod is one batch, not hundreds of requests)."""
    gap = share.value - expected
    sd = math.sqrt(_var(share))
    stat = gap / sd if sd > 0 else (math.copysign(math.inf, gap) if gap != 0 else 0.0)
    return _sf(stat, share.dof)
