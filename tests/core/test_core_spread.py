"""The between-request variance learned over the last hour (core/spread.py): when it is used,
how it forgets, how it moderates a window, and that Memory keeps it."""

from __future__ import annotations

import math

import pytest

from alphagate.core import spread
from alphagate.core.model import Memory
from alphagate.core.spread import Prior, Spread

W = 300.0


A = 0.8  # the windows' alpha
PQ = A * (1 - A)


def test_no_prior_until_three_windows_worth_were_learned() -> None:
    s = None
    for i in range(3):
        assert spread.prior(s, 100.0, now=i * W) is None
        s = spread.learn(s, 0.02, 100.0, A, now=i * W, window_seconds=W)
    # the first window counts whole, the next two each add a window: 3 windows' worth
    assert s is not None and s.windows == pytest.approx(1 + 2 * math.exp(-W / 3600), rel=0.1)
    s = spread.learn(s, 0.02, 100.0, A, now=3 * W, window_seconds=W)
    p = spread.prior(s, 400.0, now=3 * W)
    assert p is not None
    # the variance per effective request (0.02^2 x 100), over this window's 400 requests
    assert p.variance(A) == pytest.approx(0.02**2 * 100 / 400)
    assert p.dof == spread.PRIOR_DOF


def test_overlapping_evaluations_add_only_the_new_part_of_a_window() -> None:
    s = spread.learn(None, 0.02, 100.0, A, now=0.0, window_seconds=W)
    for i in range(1, 11):  # every 30 s for 300 s: one more window's worth, not ten
        s = spread.learn(s, 0.02, 100.0, A, now=30.0 * i, window_seconds=W)
    assert s is not None and 1.8 < s.windows < 2.0
    assert spread.learn(s, 0.05, 100.0, A, now=300.0, window_seconds=W) == s  # same instant


def test_it_forgets_a_canary_that_was_off_for_hours() -> None:
    s = Spread(scaled_variance=0.04, windows=12.0, at=0.0)
    assert spread.prior(s, 100.0, now=3600.0) is not None  # 12 / e = 4.4 windows' worth
    assert spread.prior(s, 100.0, now=3 * 3600.0) is None
    # and a window after that starts almost afresh
    after = spread.learn(s, 0.01, 100.0, A, now=10 * 3600.0, window_seconds=W)
    assert after is not None
    assert after.scaled_variance == pytest.approx(0.01**2 * 100 / PQ, rel=0.01)


@pytest.mark.parametrize(
    ("se", "requests", "alpha"),
    [
        (math.nan, 10.0, A),
        (0.0, 10.0, A),
        (0.02, math.nan, A),
        (0.02, 0.0, A),
        (0.02, 10.0, 0.0),  # alpha 0 or 1: no scale to learn on
        (0.02, 10.0, 1.0),
        (0.02, 10.0, math.nan),
    ],
)
def test_unusable_windows_teach_nothing(se: float, requests: float, alpha: float) -> None:
    s = Spread(scaled_variance=0.04, windows=5.0, at=0.0)
    assert spread.learn(s, se, requests, alpha, now=300.0, window_seconds=W) == s
    assert spread.learn(None, se, requests, alpha, now=300.0, window_seconds=W) is None
    assert spread.prior(s, requests, now=300.0) is None or requests > 0


def test_a_window_is_shrunk_toward_the_prior_by_its_degrees_of_freedom() -> None:
    # a window that caught none of the rare hard requests: its own se is small
    se, dof = spread.moderated(0.01, 9.0, Prior(scaled_variance=0.03**2 / PQ, dof=40.0), A)
    assert se == pytest.approx(math.sqrt((40 * 0.03**2 + 9 * 0.01**2) / 49))
    assert dof == 49.0
    assert 0.01 < se < 0.03


def test_memory_keeps_what_was_learned() -> None:
    m = Memory(spread={"chat": Spread(scaled_variance=0.04, windows=4.0, at=12.0)})
    again = Memory.model_validate_json(m.model_dump_json())
    assert again.spread == m.spread
    assert Memory.model_validate_json("{}").spread == {}  # an older record has none


def test_a_variance_learned_near_one_is_scaled_down_for_a_window_near_zero() -> None:
    # learned at alpha 0.97 (se 0.01 over 100 requests), applied to a window at 0.005: the
    # prior shrinks with alpha (1 - alpha); carried unscaled it was 6x the window's own
    # variance there and made the interval [0, 1] (the real-vLLM e2e, 2026-12-04)
    s = None
    for i in range(4):
        s = spread.learn(s, 0.01, 100.0, 0.97, now=i * W, window_seconds=W)
    p = spread.prior(s, 100.0, now=4 * W)
    assert p is not None
    assert p.variance(0.97) == pytest.approx(0.01**2, rel=1e-6)
    assert p.variance(0.005) == pytest.approx(0.01**2 * 0.005 * 0.995 / (0.97 * 0.03), rel=1e-6)
    se, _ = spread.moderated(0.002, 7.0, p, 0.005)
    assert se < 0.01 / 2  # not pulled up to the near-one spread
