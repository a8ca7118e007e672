"""The latency guard's statistics on exact sums: measured speed-up and tail exceedance.

vLLM's histograms carry exact `_sum` and `_count`, so per pod and interval the mean time per
output token (`vllm:request_time_per_output_token_seconds`, one observation per request) has no
bucket error. Over independent batches (pods, or per-pod blocks of `batch_seconds`: a stall
episode hits one pod for a while) the pooled means of canary and baseline give

* the **measured speed-up**, baseline mean over canary mean, with an interval (delta method on
  the log ratio, Welch degrees of freedom): the direct answer to "is speculation net positive
  at the live concurrency?";
* the **mean test**: is the canary's mean significantly above the baseline's times
  (1 + maxRegressionRatio)?
* the **tail tests**: a canary at most (1 + maxRegressionRatio) times slower than the
  baseline at every quantile has, at any bucket bound b, no larger share of requests above b
  than the baseline has above b / (1 + margin), hence above the largest bound b' <= that. So
  at every finite bound b the test asks whether the canary's share above b is significantly
  above the baseline's share above b' (plus a slack of maxRegressionRatio of the (1 - q) tail
  budget, so a few stray requests cannot matter). Exact under that null with any bucket
  layout, no interpolation; finer buckets (vLLM's --custom-histogram-buckets) make it sharper.
  One test per bound, corrected together with the mean test by Holm's step-down at
  `significance`.

A speculating canary is usually faster on average with a wider spread: that is not a
regression unless its tail is slower by more than the margin. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from alphagate.core.batching import Ratio, blocks, ratio, welch_dof
from alphagate.core.model import BoundTest, LatencySample, SpeedUp
from alphagate.core.stats import t_cdf, t_quantile

BATCH_SECONDS: Final = 60.0


@dataclass(frozen=True, slots=True)
class TailReport:
    speedup: SpeedUp | None
    bounds: tuple[BoundTest, ...]
    mean_rejected: bool

    @property
    def regressed(self) -> bool:
        return self.mean_rejected or any(b.rejected for b in self.bounds)

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
    return math.isfinite(s.count) and math.isfinite(s.sum) and s.count > 0 and s.sum >= 0


def speedup(canary: Ratio, baseline: Ratio, *, margin: float, confidence: float) -> SpeedUp | None:
    """Measured speed-up and the one-sided mean test; None without an honest spread."""
    if not (canary.conclusive and baseline.conclusive and canary.value > 0 and baseline.value > 0):
        return None
    rel_c, rel_b = canary.se / canary.value, baseline.se / baseline.value
    var = rel_c**2 + rel_b**2
    dof = welch_dof([(rel_c**2, canary.dof), (rel_b**2, baseline.dof)])
    se = math.sqrt(var)
    log_s = math.log(baseline.value) - math.log(canary.value)
    q = t_quantile(0.5 + confidence / 2.0, dof) if math.isfinite(dof) else 1.959963984540054
    # H0: log(canary / baseline) <= log(1 + margin)
    stat = (-log_s - math.log1p(margin)) / se if se > 0 else math.copysign(math.inf, -log_s)
    return SpeedUp(
        value=math.exp(log_s),
        lower=math.exp(log_s - q * se),
        upper=math.exp(log_s + q * se),
        confidence=confidence,
        canary_mean=canary.value,
        baseline_mean=baseline.value,
        canary_count=canary.den,
        baseline_count=baseline.den,
        dof=dof,
        p_regressed=_sf(stat, dof),
    )


def _above(samples: Sequence[LatencySample], bound: float, batch_seconds: float) -> Ratio | None:
    """Share of observations above `bound` over independent batches of samples."""
    usable = [s for s in samples if s.buckets is not None and s.buckets.total > 0]
    pairs = []
    for b in blocks(usable, batch_seconds):
        total = above = 0.0
        for s in b:
            assert s.buckets is not None
            at = _cum_at(s.buckets.bounds, s.buckets.counts, bound)
            total += s.buckets.total
            above += max(0.0, s.buckets.total - at)
        pairs.append((above, total))
    return ratio(pairs)


def _cum_at(bounds: Sequence[float], counts: Sequence[float], bound: float) -> float:
    for b, c in zip(bounds, counts, strict=True):
        if b == bound:
            return c
    return math.nan


def _var(r: Ratio) -> float:
    """The clustered variance, never below the variance of independent requests."""
    p = min(1.0, max(0.0, r.value))
    floor = max(p * (1.0 - p), 1.0 / r.den) / r.den
    return max(r.se**2 if math.isfinite(r.se) else 0.0, floor)


def _bound_test(bound: float, lower: float, c: Ratio, b: Ratio, *, slack: float) -> BoundTest:
    allowed = b.value + slack
    vc, vb = _var(c), _var(b)
    dof = welch_dof([(vc, c.dof or math.inf), (vb, b.dof or math.inf)])
    stat = (c.value - allowed) / math.sqrt(vc + vb)
    return BoundTest(bound, c.value, lower, b.value, allowed, _sf(stat, dof))


def common_bounds(
    canary: Sequence[LatencySample], baseline: Sequence[LatencySample]
) -> list[float]:
    """Finite bucket bounds every sample of both pools carries (the layouts must agree)."""
    layouts = [
        frozenset(x for x in s.buckets.bounds if math.isfinite(x))
        for s in (*canary, *baseline)
        if s.buckets is not None and s.buckets.total > 0
    ]
    if not layouts:
        return []
    return sorted(frozenset.intersection(*layouts))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level `alpha`."""
    order = sorted(
        (i for i, p in enumerate(p_values) if math.isfinite(p)), key=lambda i: p_values[i]
    )
    m = len(order)
    out = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] <= alpha / (m - rank):
            out[i] = True
        else:
            break
    return out


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
    """The mean test and one tail test per bucket bound, Holm-corrected together."""
    c_mean = mean_per_token(canary, batch_seconds)
    b_mean = mean_per_token(baseline, batch_seconds)
    s = (
        speedup(c_mean, b_mean, margin=margin, confidence=confidence)
        if c_mean is not None and b_mean is not None
        else None
    )
    slack = margin * (1.0 - quantile)
    tests: list[BoundTest] = []
    layout = common_bounds(canary, baseline)
    for bound in layout:
        lower = [x for x in layout if x <= bound / (1.0 + margin) * (1.0 + 1e-12)]
        if not lower:
            continue  # the baseline's share above anything below the first bound is all
        c = _above(canary, bound, batch_seconds)
        b = _above(baseline, lower[-1], batch_seconds)
        if c is None or b is None or not (c.conclusive and b.conclusive):
            continue
        if c.num == 0 or b.num == b.den:
            continue  # nothing of the canary above it, or everything of the baseline
        tests.append(_bound_test(bound, lower[-1], c, b, slack=slack))
    p_values = [s.p_regressed if s is not None else math.nan, *(t.p_value for t in tests)]
    rejected = holm(p_values, significance)
    bounds = tuple(replace(t, rejected=r) for t, r in zip(tests, rejected[1:], strict=True))
    return TailReport(speedup=s, bounds=bounds, mean_rejected=rejected[0])
