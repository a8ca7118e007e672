"""Small, exact statistical functions the core needs, written out so the core stays stdlib-only.

Student-t quantiles (for batch-means intervals with few batches), the Wilson score interval,
the Korn-Graubard interval (Clopper-Pearson on a design-effect sample size, for a proportion
from clustered data), and the binomial upper tail (for the bucket-exceedance test). All go
through the regularised incomplete beta function, evaluated with the Lentz continued fraction
(Numerical Recipes §6.4). The t quantile starts from Hill's closed-form approximation and
refines it on that function: two or three evaluations where a bisection needs fifty.
Pure functions: no state, no randomness.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import Final

_STD_NORMAL: Final = NormalDist()
_EPS: Final = 1e-15
_TINY: Final = 1e-300
_MAX_ITER: Final = 20_000
_HALF_PI: Final = math.pi / 2.0
_REFINE_ITER: Final = 30
_T_TOL: Final = 1e-13
_NORMAL_DOF: Final = 1e12
"""Past it the t is the normal to ~1e-12, and dof / (dof + t^2) rounds to 1 (a Welch dof from
hostile spreads reached 6.6e307: lgamma overflowed)."""
_T_NOISE: Final = 1e-8


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction for I_x(a, b); converges fast for x < (a + 1) / (a + b + 2).

    Lentz's method, written out for speed (the suite's hottest loop): `v if v > tiny or
    v < -tiny else tiny` is `v if abs(v) > tiny else tiny`, NaN included."""
    tiny, eps = _TINY, _EPS
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if d > tiny or d < -tiny else tiny)
    h = d
    for m in range(1, _MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        if not (c > tiny or c < -tiny):
            c = tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        if not (c > tiny or c < -tiny):
            c = tiny
        delta = d * c
        h *= delta
        if -eps < delta - 1.0 < eps:
            break
    return h


@lru_cache(maxsize=4096, typed=True)
def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0. Memoised: binomial tests on whole
    counts (a pooled tail test over two windows of 400 requests has a few dozen) and a t at
    the same few statistics recur; a miss costs a dictionary lookup beside a continued
    fraction."""
    if not (a > 0 and b > 0) or math.isnan(x):
        return math.nan
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    try:
        log_front = (
            math.lgamma(a + b)
            - math.lgamma(a)
            - math.lgamma(b)
            + a * math.log(x)
            + b * math.log1p(-x)
        )
    except OverflowError:  # a or b near the float limit: no answer, not an exception
        return math.nan
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def normal_quantile(p: float) -> float:
    """Inverse standard normal CDF."""
    if not 0.0 < p < 1.0:
        return math.nan if math.isnan(p) or p < 0 or p > 1 else math.copysign(math.inf, p - 0.5)
    return _STD_NORMAL.inv_cdf(p)


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z, accurate in the far tail."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def t_cdf(t: float, dof: float) -> float:
    """Student-t CDF with `dof` degrees of freedom (inf -> normal)."""
    if math.isnan(t) or not dof > 0:
        return math.nan
    if dof > _NORMAL_DOF:
        return _STD_NORMAL.cdf(t)
    tail = 0.5 * betainc(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t >= 0 else tail


def _t_tail(t: float, dof: float) -> float:
    """P(T > t) for t >= 0: the same incomplete beta `t_cdf` uses, so both agree exactly."""
    if dof > _NORMAL_DOF:
        return _STD_NORMAL.cdf(-t)
    return 0.5 * betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def _t_start(two_tail: float, dof: float) -> float:
    """Hill's approximation to the t with P(|T| > t) = `two_tail` (CACM Algorithm 396, 1970):
    a few correct digits, enough for the refinement to converge in two or three steps.
    NaN when the formula breaks down (the caller then bisects)."""
    if dof == 1.0:
        return math.tan(_HALF_PI * (1.0 - two_tail))
    if dof == 2.0:
        return math.sqrt(2.0 / (two_tail * (2.0 - two_tail)) - 2.0)
    try:
        a = 1.0 / (dof - 0.5)
        b = 48.0 / (a * a)
        c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
        d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * _HALF_PI) * dof
        y = (d * two_tail) ** (2.0 / dof)
        if (dof < 2.1 and two_tail > 0.5) or y > 0.05 + a:
            # Inverse expansion about the normal quantile.
            x = normal_quantile(0.5 * two_tail)
            y = x * x
            if dof < 5.0:
                c += 0.3 * (dof - 4.5) * (x + 0.6)
            c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
            y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
            y = math.expm1(a * y * y)
        else:
            # Far tail: expansion in (d * P) ** (2 / dof).
            y = (
                (1.0 / (((dof + 6.0) / (dof * y) - 0.089 * d - 0.822) * (dof + 2.0) * 3.0)
                 + 0.5 / (dof + 4.0)) * y - 1.0
            ) * (dof + 1.0) / (dof + 2.0) + 1.0 / y  # fmt: skip
        return math.sqrt(dof * y)
    except (ArithmeticError, ValueError):
        return math.nan


def _t_upper(q: float, dof: float) -> float | None:
    """The t > 0 with P(T > t) = q: Hill's start refined by second-order Newton steps on the
    exact tail (Hill's 1981 remark on the algorithm; cubic convergence), kept inside a bracket.
    None when it does not settle, so the caller can bisect."""
    t = _t_start(2.0 * q, dof)
    if not 0.0 < t < math.inf:
        return None
    log_pdf_scale = (
        math.lgamma((dof + 1.0) / 2.0) - math.lgamma(dof / 2.0) - 0.5 * math.log(dof * math.pi)
    )
    lo, hi = 0.0, math.inf
    last = math.inf
    for _ in range(_REFINE_ITER):
        g = _t_tail(t, dof) - q
        if g == 0.0:
            return t
        if g > 0.0:
            lo = t
        else:
            hi = t
        pdf = math.exp(log_pdf_scale - (dof + 1.0) / 2.0 * math.log1p(t * t / dof))
        if not pdf > 0.0:
            return None
        x = g / pdf
        step = abs(x * (1.0 + x * t * (dof + 1.0) / (2.0 * (t * t + dof))))
        new = t + step if g > 0.0 else t - step
        # Done when the step is below the tolerance, or when it stops shrinking while already
        # tiny: the tail's own rounding noise (large dof, p near 1/2) is then reached.
        if step <= _T_TOL * t or (step >= last and step <= _T_NOISE * t):
            return new if lo <= new <= hi else t
        if not lo < new < hi:
            if not hi < math.inf:
                return None
            new = 0.5 * (lo + hi)
        last = step
        t = new
    return None


def _t_bisect(p: float, dof: float) -> float:
    """Bisection on `t_cdf` for p > 0.5: slow but sure; used where the refinement gives up."""
    hi = 1.0
    while t_cdf(hi, dof) < p:
        hi *= 2.0
        if hi > 1e300:
            return math.inf
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@lru_cache(maxsize=1024)
def t_quantile(p: float, dof: float) -> float:
    """Inverse Student-t CDF, to ~1e-13 relative wherever `t_cdf` is that exact (dof up to
    ~1e4). Memoised: the same few confidence levels and batch counts recur every evaluation;
    the Welch dof of a combined estimate does not, so a miss must be cheap too."""
    if math.isnan(p) or not dof > 0 or p < 0 or p > 1:
        return math.nan
    if dof > _NORMAL_DOF:
        return normal_quantile(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    if p == 1.0:
        return math.inf
    if dof >= 1.0:
        t = _t_upper(1.0 - p, dof)
        if t is not None:
            return t
    return _t_bisect(p, dof)


def wilson(p: float, n: float, confidence: float) -> tuple[float, float]:
    """Wilson score interval for a proportion `p` observed over `n` units (n may be fractional).

    Valid for any [0, 1]-valued mean, not only Bernoulli: the variance of such a variable with
    mean p is at most p(1 - p), so the interval is conservative there.
    """
    if not 1e-9 <= n < math.inf or math.isnan(p):
        return (0.0, 1.0)
    p = min(1.0, max(0.0, p))
    z = normal_quantile(0.5 + confidence / 2.0)
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def beta_quantile(q: float, a: float, b: float, *, upper_tail: bool = False) -> float:
    """The x with I_x(a, b) = q, for a, b > 0: Newton steps on `betainc` (its derivative is
    the Beta density) from the normal approximation, kept inside a shrinking bracket and
    halving it whenever a step leaves it; a few evaluations where bisection needs sixty.
    `upper_tail`: the x with 1 - I_x(a, b) = q, solved on that tail (I_{1-x}(b, a)), so a
    small q keeps its digits (1 - 1e-12 has four)."""
    if not (a > 0 and b > 0) or math.isnan(q) or not 0.0 <= q <= 1.0:
        return math.nan
    if q in (0.0, 1.0):
        return 1.0 - q if upper_tail else q
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    mean = a / (a + b)
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    z = normal_quantile(q)
    x = min(1.0 - 1e-12, max(1e-12, mean + (-z if upper_tail else z) * sd))
    lo, hi = 0.0, 1.0
    for _ in range(100):
        g = q - betainc(b, a, 1.0 - x) if upper_tail else betainc(a, b, x) - q
        if g == 0.0:
            return x
        if g < 0.0:
            lo = x
        else:
            hi = x
        log_pdf = log_norm + (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x)
        pdf = math.exp(log_pdf) if log_pdf < 700.0 else math.inf
        new = x - g / pdf if pdf > 0.0 else math.nan
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if abs(new - x) <= 1e-14 * max(x, 1e-300) or hi - lo <= 1e-15:
            return new
        x = new
    return x


def korn_graubard(
    p: float, se: float, dof: float, n_max: float, confidence: float
) -> tuple[float, float]:
    """Korn-Graubard interval for a proportion `p` with design-based standard error `se` on
    `dof` degrees of freedom (Survey Methodology 24:193, 1998; NCHS's standard for survey
    proportions).

    The effective sample size p(1 - p) / se^2 (at most `n_max`, the units actually observed),
    shrunk by (z / t_dof)^2 so the few-cluster margin carries over, feeds a Clopper-Pearson
    interval. Unlike p +- t se it is asymmetric the way a proportion's sampling law is: a
    window of a few requests per batch is skewed toward the rare low-acceptance request, and
    the symmetric interval missed mostly on that side. (0, 1) when it cannot be formed.
    """
    if not (0.0 < p < 1.0 and se > 0 and dof > 0) or not math.isfinite(se):
        return (0.0, 1.0)
    q = 0.5 + confidence / 2.0
    z = normal_quantile(q)
    t = t_quantile(q, dof) if math.isfinite(dof) else z
    n = min(p * (1.0 - p) / (se * se), n_max) * (z / t) ** 2
    x = p * n
    if not (n > 0 and math.isfinite(n)):
        return (0.0, 1.0)
    lower = beta_quantile(1.0 - q, x, n - x + 1.0)
    upper = beta_quantile(q, x + 1.0, n - x)
    return (lower, upper)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): exact (incomplete beta) for moderate n, normal with
    continuity correction when n is large and n p (1 - p) >= 25."""
    if n < 0 or math.isnan(p) or not 0.0 <= p <= 1.0:
        return math.nan
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    var = n * p * (1.0 - p)
    if n > 100_000 and var >= 25.0:
        return normal_sf((k - 0.5 - n * p) / math.sqrt(var))
    return betainc(float(k), float(n - k + 1), p)
