"""The hand-written statistics against published table values and exact sums."""

from __future__ import annotations

import math

import pytest

from alphagate.core import stats

T_TABLE = [
    # (p, dof, t) from standard Student-t tables
    (0.975, 1, 12.7062),
    (0.975, 2, 4.3027),
    (0.975, 7, 2.3646),
    (0.975, 30, 2.0423),
    (0.995, 10, 3.1693),
    (0.95, 5, 2.0150),
    (0.9, 15, 1.3406),
]


@pytest.mark.parametrize(("p", "dof", "t"), T_TABLE, ids=[f"p{p}-dof{d}" for p, d, _ in T_TABLE])
def test_t_quantile_matches_tables(p: float, dof: int, t: float) -> None:
    assert stats.t_quantile(p, dof) == pytest.approx(t, abs=5e-4)
    assert stats.t_quantile(1 - p, dof) == pytest.approx(-t, abs=5e-4)
    assert stats.t_cdf(stats.t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-10)


# (p, dof, t) to 15 significant digits, computed independently with mpmath at 40 digits
# (bisection on 0.5 * I_{dof/(dof+t^2)}(dof/2, 1/2) = 1 - p). Fractional dof included: the
# Welch-Satterthwaite dof of a combined estimate is rarely an integer.
T_REFERENCE = [
    (0.975, 1, 12.7062047361747),
    (0.975, 1.5, 6.01666310442793),
    (0.995, 2, 9.92484320091829),
    (0.9, 2.5, 1.73025092880718),
    (0.975, 3, 3.18244630528371),
    (0.95, 4.37, 2.08102789284327),
    (0.975, 7, 2.36462425159278),
    (0.99, 9, 2.82143792502581),
    (0.975, 15.5, 2.12547665923094),
    (0.8, 30, 0.853767261471298),
    (0.975, 61.8, 1.99910020975202),
    (0.9995, 120, 3.37345376856253),
    (0.975, 1000.5, 1.96233789245935),
    (0.99, 1000.5, 2.33008080542466),
    (0.6, 12.25, 0.258915442614314),
    (0.999999, 5, 24.7710297203725),
]


@pytest.mark.parametrize(
    ("p", "dof", "t"), T_REFERENCE, ids=[f"p{p}-dof{d}" for p, d, _ in T_REFERENCE]
)
def test_t_quantile_matches_high_precision_reference(p: float, dof: float, t: float) -> None:
    stats.t_quantile.cache_clear()
    assert stats.t_quantile(p, dof) == pytest.approx(t, rel=1e-12)
    assert stats.t_quantile(1 - p, dof) == pytest.approx(-t, rel=1e-12)


@pytest.mark.parametrize("dof", [1, 1.0001, 1.7, 2, 2.05, 3.3, 6, 11.9, 47.25, 333.3, 4096])
def test_t_quantile_agrees_with_bisection(dof: float) -> None:
    """The fast path (Hill's start + refinement) lands where bisection on t_cdf does."""
    stats.t_quantile.cache_clear()
    for p in (0.55, 0.75, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995, 0.99999):
        fast = stats.t_quantile(p, dof)
        slow = stats._t_bisect(p, dof)
        assert fast == pytest.approx(slow, rel=1e-11), (p, dof)
        assert stats.t_cdf(fast, dof) == pytest.approx(p, rel=1e-13)


def test_t_quantile_miss_costs_a_few_incomplete_beta_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache miss (every Welch dof is new) refines Hill's start, it does not bisect: counted
    in incomplete-beta evaluations, not timed."""
    calls = 0
    real = stats.betainc

    def counting(a: float, b: float, x: float) -> float:
        nonlocal calls
        calls += 1
        return real(a, b, x)

    monkeypatch.setattr(stats, "betainc", counting)
    stats.t_quantile.cache_clear()
    for dof in (1.3, 4.8, 17.26, 95.1, 2500.7):
        for p in (0.9, 0.95, 0.975, 0.995):
            calls = 0
            stats.t_quantile(p, dof)
            assert calls <= 5, (p, dof, calls)
    stats.t_quantile.cache_clear()


def test_t_quantile_below_one_dof_still_inverts_the_cdf() -> None:
    # The approximation is not made for dof < 1: bisection takes over, the answer stays right.
    for dof in (0.3, 0.7):
        for p in (0.6, 0.975):
            assert stats.t_cdf(stats.t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-10)


def test_t_quantile_edges() -> None:
    assert stats.t_quantile(0.5, 3) == 0.0
    assert stats.t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert math.isnan(stats.t_quantile(0.975, 0))
    assert math.isnan(stats.t_quantile(1.5, 3))


@pytest.mark.parametrize(
    ("k", "n", "p"), [(0, 10, 0.3), (3, 10, 0.5), (5, 250, 0.01), (7, 7, 0.9), (11, 10, 0.5)]
)
def test_binomial_tail_exact(k: int, n: int, p: float) -> None:
    exact = math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k, 0), n + 1))
    assert stats.binomial_sf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-15)


def test_binomial_tail_large_n_uses_normal_and_stays_close() -> None:
    # 1.2% above where 1% is allowed, n = 200k: overwhelming evidence.
    assert stats.binomial_sf(2400, 200_000, 0.01) < 1e-9
    # exactly at the allowed rate: about one half
    assert stats.binomial_sf(2000, 200_000, 0.01) == pytest.approx(0.5, abs=0.02)


def test_wilson_known_value() -> None:
    lo, hi = stats.wilson(0.5, 100, 0.95)
    assert lo == pytest.approx(0.4038, abs=1e-4)
    assert hi == pytest.approx(0.5962, abs=1e-4)
    assert stats.wilson(0.0, 0, 0.95) == (0.0, 1.0)
    lo, hi = stats.wilson(1.0, 50, 0.95)
    assert hi == 1.0 and 0.9 < lo < 1.0


def test_betainc_symmetry() -> None:
    for a, b, x in [(2.0, 3.0, 0.4), (0.5, 7.5, 0.9), (50.0, 60.0, 0.45)]:
        assert stats.betainc(a, b, x) + stats.betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    ("q", "a", "b"), [(0.025, 5.0, 6.0), (0.975, 6.0, 5.0), (0.5, 0.7, 3.0), (0.01, 4e5, 2e5)]
)
def test_beta_quantile_inverts_betainc(q: float, a: float, b: float) -> None:
    x = stats.beta_quantile(q, a, b)
    assert 0.0 < x < 1.0
    assert stats.betainc(a, b, x) == pytest.approx(q, rel=1e-9)


@pytest.mark.parametrize(
    ("q", "a", "b"),
    [(1e-12, 1.0, 123332.8), (0.05, 3.5, 40.0), (1e-6, 900.0, 1e5), (0.7, 1.0, 5e8)],
)
def test_beta_quantile_on_the_upper_tail_keeps_a_small_tail_s_digits(
    q: float, a: float, b: float
) -> None:
    # 1 - I_x(a, b) = q, solved on I_{1-x}(b, a): 1 - 1e-12 would keep four digits of q.
    x = stats.beta_quantile(q, a, b, upper_tail=True)
    assert 0.0 < x < 1.0
    assert stats.betainc(b, a, 1.0 - x) == pytest.approx(q, rel=1e-6)
    if a == 1.0:  # 1 - I_x(1, b) = (1 - x)^b: closed form
        assert x == pytest.approx(-math.expm1(math.log(q) / b), rel=1e-6)


def test_korn_graubard_is_clopper_pearson_at_the_effective_size() -> None:
    # se^2 = p(1 - p) / 10 on unlimited dof: Clopper-Pearson for 5 of 10, (0.1871, 0.8129).
    lo, hi = stats.korn_graubard(0.5, math.sqrt(0.025), math.inf, 1e9, 0.95)
    assert (lo, hi) == pytest.approx((0.187086, 0.812914), abs=1e-6)
    # Few degrees of freedom shrink the effective size by (z / t)^2: wider.
    lo4, hi4 = stats.korn_graubard(0.5, math.sqrt(0.025), 4.0, 1e9, 0.95)
    assert lo4 < lo and hi4 > hi
    # The effective size never exceeds the units observed.
    assert stats.korn_graubard(0.5, 1e-9, math.inf, 10, 0.95) == pytest.approx((lo, hi))


def test_korn_graubard_leans_the_way_a_proportion_does() -> None:
    # Above 1/2 the interval reaches further down than up (a symmetric one would not).
    lo, hi = stats.korn_graubard(0.9, 0.04, 15.0, 1e9, 0.95)
    assert 0.9 - lo > hi - 0.9 > 0
    assert stats.korn_graubard(1.0, 0.01, 10.0, 1e9, 0.95) == (0.0, 1.0)
    assert stats.korn_graubard(0.5, math.nan, 10.0, 1e9, 0.95) == (0.0, 1.0)


@pytest.mark.parametrize("dof", [1e13, 6.6e307, math.inf])
def test_a_huge_dof_is_the_normal_not_an_overflow(dof: float) -> None:
    # A Welch dof from hostile spreads reached 6.6e307: lgamma overflowed in betainc (found by
    # test_core_props), and dof / (dof + t^2) rounding to 1 had made t_cdf(1) read 0.5.
    assert stats.t_cdf(1.0, dof) == pytest.approx(0.8413447, abs=1e-6)
    assert stats.t_quantile(0.975, dof) == pytest.approx(1.959964, abs=1e-6)


def test_betainc_near_the_float_limit_answers_nan() -> None:
    assert math.isnan(stats.betainc(3.3e307, 0.5, 0.9))
