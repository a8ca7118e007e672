"""The quantile's Fail edge on a layout whose bounds are rounded (core/resolution.py).

`alphagate plan`'s ~10% layout rounds every bound down to 3 significant digits, so two steps
are a little under 1.1 x 1.1 and the smallest bound at or above hi x 1.1 was usually the third
step (+33% over the bucket's lower edge instead of +21%): a tail-only regression whose slow
requests sit between the two passed there. The edge may sit up to FAIL_ROUNDING below
hi x (1 + margin), never below hi, and `least_margin` says what a Fail then shows.
"""

from __future__ import annotations

import itertools
import math

import pytest

from alphagate.core import resolution

MARGIN = 0.10
PLAN = resolution.resolving_layout(0.020, 0.035, MARGIN)  # 10 ms to 175 ms, rounded down


def _buckets(layout: tuple[float, ...]) -> list[tuple[float, float]]:
    # every bucket with two bounds above it (a Fail edge needs them)
    return list(itertools.pairwise(layout[:-2]))


def test_the_fail_edge_is_two_steps_above_the_buckets_lower_edge_on_the_plans_layout() -> None:
    for lo, hi in _buckets(PLAN):
        res = resolution.relative(PLAN, lo, hi, MARGIN)
        assert res.fail_edge is not None
        # two steps of at most 10%, not the third one the rounding pushed it to
        assert res.fail_edge / lo <= 1.1 * 1.1 * (1.0 + 1e-9), (lo, hi, res.fail_edge)
        # never more than the layout's rounding below hi x (1 + margin)
        assert res.fail_edge >= hi * (1.0 + MARGIN) * (1.0 - resolution.FAIL_ROUNDING)
        # what a Fail shows, printed: at least the margin less the rounding
        assert res.least_margin == pytest.approx(max(res.fail_edge / hi - 1.0, 0.089))
        assert 0.089 - 1e-9 <= res.least_margin <= MARGIN + 0.011


def test_a_bound_further_below_than_the_rounding_is_not_a_fail_edge() -> None:
    # hi x 1.1 = 0.01331; 0.0131 is 1.6% under it: the edge is the next bound
    res = resolution.relative((0.01, 0.011, 0.0121, 0.0131, 0.0145), 0.011, 0.0121, MARGIN)
    assert res.fail_edge == 0.0145
    # 0.0132 is 0.8% under it: the layout's rounding, so it is the edge
    res = resolution.relative((0.01, 0.011, 0.0121, 0.0132, 0.0145), 0.011, 0.0121, MARGIN)
    assert res.fail_edge == 0.0132
    assert res.least_margin == pytest.approx(0.0132 / 0.0121 - 1.0)


def test_with_no_margin_the_fail_edge_is_the_buckets_upper_edge() -> None:
    res = resolution.relative((0.01, 0.02, 0.03), 0.01, 0.02, 0.0)
    assert res.fail_edge == 0.02 and res.least_margin == 0.0
    assert math.isinf(resolution.relative((0.01, 0.02), 0.01, 0.02, 0.5).least_margin)
