"""What the latency guard found, typed: each pool's quantile, the mean per token's speed-up,
the per-bound and quantile-edge tests, what the bucket layout lets it claim, and why a window
was undecided. `core/latency_check.py` fills it; status, Events and reports read it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from alphagate.config import LatencyMetric
from alphagate.core.fmt import ev
from alphagate.core.resolution import Resolution, TailWithin


@dataclass(frozen=True, slots=True)
class PoolLatency:
    """One pool's latency quantile as the guard read it: the interpolated value and the
    bucket (lo, hi] it falls in."""

    count: float
    quantile_seconds: float
    bucket_lo: float
    bucket_hi: float


class LatencyUndecided(StrEnum):
    """What a latency check could not show (its verdict is Inconclusive). A Pass needs evidence
    that the canary is within the margin, not only the absence of a significant regression."""

    # Fewer observations than latency.minCount on a side.
    FEW_OBSERVATIONS = "few-observations"
    # Fewer than two independent batches in a pool: no honest spread.
    FEW_BATCHES = "few-batches"
    # A histogram or the measured tokens per step is missing from the window.
    NO_DATA = "no-data"
    # The baseline's quantile is not a number, or no finite bucket bound reaches the limit.
    UNTESTABLE = "untestable"
    # The bucket holding the baseline's quantile is wider than 1 + maxRegressionRatio: the
    # layout cannot show the canary's quantile within the margin (vLLM's default buckets at
    # +10%); finer buckets (--custom-histogram-buckets) can. Only where the policy confirms
    # on the quantile (latency.confirmOn meanAndQuantile) or no exact means exist.
    UNRESOLVABLE = "unresolvable"
    # The measured speed-up's lower bound is below 1 / (1 + maxRegressionRatio).
    MEAN_NOT_SHOWN = "mean-not-shown"
    # The canary's share above the Pass edge is not shown to be at most 1 - quantile (too
    # few requests, or too many of them above it).
    TAIL_NOT_SHOWN = "tail-not-shown"
    # More of the canary lies above a bound than allowed there (above the Fail edge, or a
    # bound's share above the baseline's), not significantly.
    POSSIBLE_REGRESSION = "possible-regression"


@dataclass(frozen=True, slots=True)
class ExceedanceTest:
    """The bucket question: the share of canary observations above `edge` (the bucket bound
    at or above the limit) against the share a canary within the limit may have.

    Both directions: `p_value` asks "significantly above?" (a regression), `p_within` asks
    "shown at or below?" (the evidence a Pass needs), each an exact binomial test on the
    effective number of observations (`total` over the design effect of clustered batches)."""

    edge: float
    above: float
    fraction: float
    expected_fraction: float
    p_value: float
    total: float = math.nan
    effective: float = math.nan  # independent observations the batches are worth
    upper: float = math.nan  # one-sided upper confidence bound of `fraction`, at significance
    p_within: float = math.nan  # p of "fraction >= expected_fraction"; small: shown within
    needed: float = math.nan  # observations that would show it at this fraction (inf: never)


@dataclass(frozen=True, slots=True)
class SpeedUp:
    """Baseline mean time per token over the canary's, with a two-sided interval."""

    value: float
    lower: float
    upper: float
    confidence: float
    canary_mean: float
    baseline_mean: float
    canary_count: float
    baseline_count: float
    dof: float
    # one-sided p-value of "canary mean > baseline mean x (1 + margin)"
    p_regressed: float
    # one-sided p-value of "canary mean >= baseline mean x (1 + margin)": small when the
    # canary is shown within the margin (the speed-up's lower bound above 1 / (1 + margin))
    p_within: float = math.nan


@dataclass(frozen=True, slots=True)
class BoundTest:
    """Canary against baseline share of requests above one bucket bound."""

    bound: float
    canary_fraction: float  # canary share above `bound`
    baseline_bound: float  # largest bound <= bound / (1 + margin)
    baseline_fraction: float  # baseline share above `baseline_bound`
    allowed_fraction: float  # baseline_fraction + slack
    p_value: float
    rejected: bool = False  # significant after the family's correction


@dataclass(frozen=True, slots=True)
class TailGuard:
    """The quantile part of the latency guard at the layout's resolution (core/resolution.py):
    the bucket bounds it may use, what it showed of "within" and the Fail side's test.

    `pass_test` counts the canary above the Pass edge (`p_within` small: its quantile is shown
    at or below it); `fail_test` counts it above the Fail edge (`p_value` small: a regression
    beyond the margin). Neither uses an interpolated quantile."""

    quantile: float
    resolution: Resolution
    within: TailWithin
    pass_test: ExceedanceTest | None = None
    fail_test: ExceedanceTest | None = None
    rejected: bool = False  # the Fail side's test, significant after the family's correction
    # the Fail side's p for `checks.decisive` (one window as strong as several): the larger of
    # the test's and a t test's over the batches' spread (few batches: heavy tails)
    decisive_p: float = math.nan
    # the Fail share's variance over its batches (never below independent requests') and its
    # degrees of freedom (NaN: fewer than two batches): what a pooled run's t test adds up
    fail_var: float = math.nan
    fail_dof: float = math.nan

    @property
    def effective_margin(self) -> float:
        """The smallest quantile regression this window's Fail side is sure to be able to show
        (the policy's margin or the layout's, whichever is wider)."""
        return self.resolution.effective_margin


@dataclass(frozen=True, slots=True)
class PooledTail:
    """The quantile's Fail test on the canary counts of the last `windows` adjacent disjoint
    judged windows added up (core/latency_run.py): effective observations above each window's
    own Fail edge against 1 - quantile, an exact binomial test rejected at `level` (the
    quantile's weight x significance ** windows: as strong as that many failing windows)."""

    windows: int
    since: float  # start of the first window pooled
    above: float
    total: float
    expected_fraction: float
    p_value: float  # the larger of the binomial's and the t test's over the batches
    level: float
    rejected: bool
    p_binomial: float = math.nan  # on the effective counts
    p_batches: float = math.nan  # t test over all the windows' batches (NaN: not available)

    @property
    def fraction(self) -> float:
        return self.above / self.total if self.total > 0 else math.nan


@dataclass(frozen=True, slots=True)
class LatencyEvidence:
    """What the latency guard compared; parts stay None when the check stopped before them.

    `canary`/`baseline` are the quantiles as `histogram_quantile` reads them, for people only:
    no limit is built from them. `limit_seconds` is the Pass limit (the lower edge of the
    baseline quantile's bucket x (1 + margin)) or perStepAbsolute's maxStepSeconds."""

    metric: LatencyMetric
    quantile: float
    max_regression_ratio: float
    significance: float
    min_count: int
    tokens_per_step: float | None = None
    canary: PoolLatency | None = None
    baseline: PoolLatency | None = None
    limit_seconds: float | None = None
    # perToken on exact sums (core/latency.py): the measured speed-up with the mean test, and
    # one exceedance test per bucket bound (corrected together with the quantile's Fail test)
    speedup: SpeedUp | None = None
    bounds: tuple[BoundTest, ...] = ()
    # what an Inconclusive check could not show (empty when it passed, failed or errored)
    undecided: tuple[LatencyUndecided, ...] = ()
    # the quantile at the layout's resolution: edges, "within" shown or not, the Fail test
    tail: TailGuard | None = None
    # the check's reason already says what the layout lets the quantile guard claim
    # (`resolution.describe`), so a report need not print it again
    layout_in_reason: bool = False
    # latency.confirmOn: does a Pass need the quantile shown within too (else the mean only)
    confirms_quantile: bool = False
    # the window's family-wise evidence of a regression: the smallest p-value over its weight
    # in the family (weighted Bonferroni, the quantile's at its `decisive_p`; NaN: nothing
    # tested). `checks.decisive` compares it with significance ** windows.
    p_adjusted: float = math.nan
    # the quantile's Fail test pooled over this and the previous adjacent judged windows
    # (core/latency_run.py); rejected: this check FAILs on it, as a decisive window
    pooled: PooledTail | None = None

    @property
    def worst_bound(self) -> BoundTest | None:
        """The bound test with the smallest p-value (the strongest tail evidence)."""
        tested = [b for b in self.bounds if math.isfinite(b.p_value)]
        return min(tested, key=lambda b: b.p_value) if tested else None

    @property
    def ratio(self) -> float | None:
        """Canary quantile over baseline quantile, when both are finite and the baseline > 0
        (display only: interpolated inside buckets)."""
        if self.canary is None or self.baseline is None:
            return None
        c, b = self.canary.quantile_seconds, self.baseline.quantile_seconds
        if b > 0 and math.isfinite(c) and math.isfinite(b):
            return c / b
        return None

    def flat(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "metric": self.metric.value,
            "quantile": self.quantile,
            "max_regression_ratio": self.max_regression_ratio,
            "significance": self.significance,
            "min_count": float(self.min_count),
            "confirm_on": "meanAndQuantile" if self.confirms_quantile else "mean",
        }
        if self.tokens_per_step is not None:
            out["tokens_per_step"] = self.tokens_per_step
        for role, pool in (("canary", self.canary), ("baseline", self.baseline)):
            if pool is not None:
                out |= {
                    f"{role}_count": ev(pool.count),
                    f"{role}_quantile_seconds": ev(pool.quantile_seconds),
                    f"{role}_bucket_lo": ev(pool.bucket_lo),
                    f"{role}_bucket_hi": ev(pool.bucket_hi),
                }
        ratio = self.ratio
        if ratio is not None:
            out["ratio"] = ev(ratio)
        if self.limit_seconds is not None:
            out["limit"] = ev(self.limit_seconds)
        if self.undecided:
            out["undecided"] = ",".join(u.value for u in self.undecided)
        if math.isfinite(self.p_adjusted):
            out["p_adjusted"] = self.p_adjusted
        if self.speedup is not None:
            sp = self.speedup
            out |= {
                "speedup": ev(sp.value),
                "speedup_lower": ev(sp.lower),
                "speedup_upper": ev(sp.upper),
                "canary_mean_seconds": ev(sp.canary_mean),
                "baseline_mean_seconds": ev(sp.baseline_mean),
                "p_value_mean": ev(sp.p_regressed),
                "p_within_mean": ev(sp.p_within),
            }
        worst = self.worst_bound
        if worst is not None:
            out |= {
                "edge": ev(worst.bound),
                "fraction_above": ev(worst.canary_fraction),
                "baseline_edge": ev(worst.baseline_bound),
                "baseline_fraction_above": ev(worst.baseline_fraction),
                "p_value": ev(worst.p_value),
            }
        if self.tail is not None:
            out |= _tail_flat(self.tail)
        if self.pooled is not None:
            pt = self.pooled
            out |= {
                "pooled_windows": float(pt.windows),
                "pooled_fraction_above": ev(pt.fraction),
                "pooled_total": ev(pt.total),
                "pooled_p_value": ev(pt.p_value),
                "pooled_level": pt.level,
                "pooled_rejected": "true" if pt.rejected else "false",
            }
        return out


def _tail_flat(t: TailGuard) -> dict[str, float | str]:
    r = t.resolution
    out: dict[str, float | str] = {
        "tail_within": t.within.value,
        "effective_margin": ev(r.effective_margin),
        "least_margin": ev(r.least_margin),
        "resolvable": "true" if r.resolvable else "false",
        "reference_bucket_lo": ev(r.bucket_lo),
        "reference_bucket_hi": ev(r.bucket_hi),
    }
    if r.pass_edge is not None:
        out["pass_edge"] = r.pass_edge
    if r.fail_edge is not None:
        out["fail_edge"] = r.fail_edge
    if t.pass_test is not None:
        p = t.pass_test
        out |= {
            "tail_fraction_above": ev(p.fraction),
            "tail_upper": ev(p.upper),
            "tail_p_within": ev(p.p_within),
            "tail_needed": ev(p.needed),
        }
    if t.fail_test is not None:
        f = t.fail_test
        out |= {
            "fail_above": ev(f.above),
            "fail_fraction_above": ev(f.fraction),
            "expected_fraction": f.expected_fraction,
            "fail_p_value": ev(f.p_value),
        }
    return out
