"""The exceedance test on effective counts: a share of observations above a bucket bound
against the share a quantile allows, both ways (a regression; shown within), an exact binomial
on the request count over the batches' design effect (core/design.py). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from alphagate.core.design import design_effect
from alphagate.core.model import ExceedanceTest
from alphagate.core.stats import beta_quantile, betainc, binomial_sf

_MAX_NEEDED: Final = 1e9  # observations: beyond this "needed" reads as never
_BISECT: Final = 60


def binomial_cdf(k: float, n: float, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), continuous in k and n through the incomplete beta
    (exact at integers): the test on effective counts, which are rarely whole."""
    if math.isnan(k) or math.isnan(n) or math.isnan(p) or not 0.0 <= p <= 1.0 or n < 0:
        return math.nan
    if k < 0:
        return 0.0
    if k >= n or p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    return betainc(n - k, k + 1.0, 1.0 - p)


def _bisect(f: Callable[[float], bool], lo: float, hi: float) -> float:
    """The point in [lo, hi] where f turns from False to True (f(hi) True), in log space when
    both are positive; a bounded number of steps."""
    logs = lo > 0
    a, b = (math.log(lo), math.log(hi)) if logs else (lo, hi)
    for _ in range(_BISECT):
        mid = (a + b) / 2.0
        if f(math.exp(mid) if logs else mid):
            b = mid
        else:
            a = mid
    return math.exp(b) if logs else b


def _upper(k: float, n: float, share: float, significance: float) -> float:
    """The one-sided upper bound of the share: the smallest x with P(X <= k | n, x) <=
    `significance`, i.e. the Beta(k + 1, n - k) quantile with `significance` above it
    (Clopper-Pearson, in Newton steps: a few incomplete betas where bisecting on the binomial
    took sixty, and that was a sixth of the latency check's time). Never below the share."""
    try:
        x = beta_quantile(significance, k + 1.0, n - k, upper_tail=True)
    except OverflowError:  # counts near the float limit: its normal start overflows
        x = math.nan
    if math.isnan(x):
        return _bisect(lambda v: binomial_cdf(k, n, v) <= significance, share, 1.0)
    return max(share, x)


def within_test(
    edge: float,
    above: float,
    total: float,
    *,
    expected: float,
    significance: float,
    se: float = math.nan,
    dof: float = math.inf,
) -> ExceedanceTest:
    """Both one-sided tests of a share of observations above a bucket bound against
    `expected` (1 - quantile): significantly above (a regression), and shown at or below
    (non-inferiority, what a Pass needs). `se` is the share's clustered standard error over
    independent batches (`dof`): its ratio to the binomial one (the design effect, at least 1)
    turns `total` into the effective number of independent observations (`effective`); the
    Fail side's `p_value` counts the spread only where it shows overdispersion (core/design.py).
    NaN means independent.
    `needed` is how many observations, at the same share and design effect, would show it
    within (inf: the share itself is above `expected`)."""
    nan = math.nan
    if not (total > 0 and math.isfinite(total) and math.isfinite(above)):
        return ExceedanceTest(edge, above, nan, expected, nan, total, nan, nan, nan, nan)
    share = min(1.0, max(0.0, above / total))
    # the Fail side counts the spread where it shows overdispersion; a claim of "within"
    # always counts it (any spread: a Pass is never made on a lucky variance estimate)
    fail_deff, deff = design_effect(se, share, total, dof), design_effect(se, share, total)
    n_fail = total / fail_deff
    k_fail = share * n_fail
    p_value = 1.0 if k_fail <= 0 else 1.0 - binomial_cdf(k_fail - 1.0, n_fail, expected)
    if abs(k_fail - round(k_fail)) < 1e-9 and fail_deff == 1.0:
        p_value = binomial_sf(round(k_fail), round(n_fail), expected)  # exact at whole counts
    n = total / deff
    k = share * n
    p_within = binomial_cdf(k, n, expected)
    upper = 1.0 if share >= 1.0 else _upper(k, n, share, significance)
    needed = math.inf
    if share < expected:
        if p_within <= significance:
            needed = total
        else:
            n_min = _bisect(
                lambda m: binomial_cdf(share * m, m, expected) <= significance, n, _MAX_NEEDED
            )
            needed = n_min * deff if n_min < 0.5 * _MAX_NEEDED else math.inf
    return ExceedanceTest(
        edge=edge,
        above=above,
        fraction=share,
        expected_fraction=expected,
        p_value=p_value,
        total=total,
        effective=n,
        upper=upper,
        p_within=p_within,
        needed=needed,
    )
