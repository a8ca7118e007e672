"""The speed-up model: the lesson's figures, its inverse functions, and the concurrency variant."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alphagate.core import speedup as sp
from alphagate_lab.planning import speedup as plan_sp

alphas = st.floats(0.0, 1.0)
ks = st.integers(1, 16)
overheads = st.floats(0.0, 3.0)
concurrencies = st.floats(1.0, 4096.0)


def test_lesson_figures() -> None:
    assert round(sp.speedup(0.7, 5, 0.1), 2) == 4.09
    assert round(plan_sp.breakeven_alpha(5, 0.15), 2) == 0.03
    assert round(plan_sp.combined_alpha({"chat": (0.7, 0.7), "code": (0.3, 0.4)}), 2) == 0.61
    assert plan_sp.combined_alpha([(0.7, 0.7), (0.3, 0.4)]) == pytest.approx(0.61)


def test_alpha_for_2x_and_3x_at_k5() -> None:
    # (S*(1+eps) - 1) / K
    assert plan_sp.alpha_for(2.0, 5, 0.1) == pytest.approx(0.24)
    assert plan_sp.alpha_for(3.0, 5, 0.1) == pytest.approx(0.46)
    assert plan_sp.alpha_for(6.0, 5, 0.1) is None  # ceiling is 6/1.1 = 5.45x
    assert plan_sp.alpha_for(0.5, 5, 0.1) == 0.0


def test_practical_breakeven_lands_near_half_at_high_concurrency() -> None:
    # The lesson: pure math says 0.03, but at high concurrency the break-even is ~0.45-0.55.
    be = plan_sp.breakeven_alpha_at(5, 0.15, 256)
    assert 0.45 <= be <= 0.55
    assert plan_sp.breakeven_alpha_at(5, 0.15, 1) < 0.05
    # With the 0.61 mix speculation still pays at 256; at 0.4 (code alone) it does not.
    assert plan_sp.speedup_at(0.61, 5, 0.15, 256) > 1.0
    assert plan_sp.speedup_at(0.4, 5, 0.15, 256) < 1.0


def test_tokens_per_pass_first_rejection() -> None:
    assert plan_sp.tokens_per_pass_from_position_rate(0.0, 5) == 1.0
    assert plan_sp.tokens_per_pass_from_position_rate(1.0, 5) == 6.0
    assert plan_sp.alpha_from_position_rate(0.8, 5) == pytest.approx(0.537856)


@given(alphas, ks, overheads)
def test_speedup_is_one_at_breakeven(alpha: float, k: int, eps: float) -> None:
    be = plan_sp.breakeven_alpha(k, eps)
    if be <= 1.0:
        assert sp.speedup(be, k, eps) == pytest.approx(1.0)
    # monotone in alpha
    assert sp.speedup(alpha, k, eps) <= sp.speedup(min(1.0, alpha + 0.01), k, eps) + 1e-12


@given(st.floats(0.01, 0.99), ks)
def test_predicted_is_one_at_the_policys_breakeven(gate: float, k: int) -> None:
    assert sp.predicted(gate, k=k, breakeven=gate) == pytest.approx(1.0)
    assert sp.predicted(min(1.0, gate + 0.01), k=k, breakeven=gate) > 1.0
    assert sp.predicted(max(0.0, gate - 0.01), k=k, breakeven=gate) < 1.0


@given(st.floats(0.5, 8.0), ks, overheads)
def test_alpha_for_inverts_speedup(target: float, k: int, eps: float) -> None:
    a = plan_sp.alpha_for(target, k, eps)
    if a is None:
        assert plan_sp.max_speedup(k, eps) < target
    elif a > 0.0:
        assert sp.speedup(a, k, eps) == pytest.approx(target)
    else:
        assert sp.speedup(0.0, k, eps) >= target - 1e-9


@given(concurrencies, ks, overheads)
def test_overhead_grows_with_batch_toward_k(c: float, k: int, eps: float) -> None:
    lo = min(eps, float(k))
    hi = max(eps, float(k))
    o = plan_sp.overhead_at(c, k, eps)
    assert lo - 1e-9 <= o <= hi + 1e-9
    o2 = plan_sp.overhead_at(c * 2, k, eps)
    assert (o2 >= o - 1e-12) if eps <= k else (o2 <= o + 1e-12)


@given(alphas, ks, st.floats(0.0, 0.5))
def test_breakeven_concurrency_is_where_speedup_crosses_one(
    alpha: float, k: int, eps: float
) -> None:
    c = sp.breakeven_concurrency(alpha, k, eps)
    if c is None:
        assert plan_sp.speedup_at(alpha, k, eps, 1e6) >= 1.0 - 1e-9
    elif c > 1.0:
        assert plan_sp.speedup_at(alpha, k, eps, c) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: sp.speedup(0.7, 0, 0.1), "at least 1"),
        (lambda: sp.speedup(0.7, 5, -0.1), "overhead"),
        (lambda: sp.speedup(1.2, 5, 0.1), "alpha"),
        (lambda: sp.speedup(math.nan, 5, 0.1), "alpha"),
        (lambda: plan_sp.breakeven_alpha(0, 0.1), "K"),
        (lambda: plan_sp.alpha_for(2.0, 5, -1.0), "overhead"),
        (lambda: plan_sp.alpha_for(-2.0, 5, 0.1), "target"),
        (lambda: plan_sp.overhead_at(0, 5, 0.1), "concurrency"),
        (lambda: plan_sp.combined_alpha({"a": (0.7, 0.7), "b": (0.2, 0.4)}), "sum to 1"),
        (lambda: plan_sp.combined_alpha({"a": (1.2, 0.7)}), "share"),
        (lambda: plan_sp.combined_alpha({"a": (1.0, -0.1)}), "alpha"),
        (lambda: plan_sp.combined_alpha({}), "empty"),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        call()  # type: ignore[operator]


def test_core_speedup_imports_stdlib_only() -> None:
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sp))
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in (n.names if isinstance(n, ast.Import) else [n])  # type: ignore[attr-defined]
    }
    assert imported <= {"__future__", "math", "collections", "typing"}
