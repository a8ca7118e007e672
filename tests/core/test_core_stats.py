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
