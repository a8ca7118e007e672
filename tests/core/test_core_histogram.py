"""Bucket math: histogram_quantile parity (hand-computed, and against real promtool), brackets,
deltas with counter resets, merge/scale, exceedance."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alphagate.core import histogram as h
from alphagate.core.model import Buckets

INF = math.inf
NAN = math.nan


def B(*pairs: tuple[float, float], total_sum: float = NAN) -> Buckets:
    return Buckets(
        bounds=tuple(p[0] for p in pairs), counts=tuple(p[1] for p in pairs), sum=total_sum
    )


STD = B((0.05, 10), (0.1, 60), (0.2, 90), (0.5, 99), (INF, 100))

# (id, q, buckets, expected) -- expected values worked out by hand from promql/quantile.go.
QUANTILE_CASES = [
    ("median-interpolates", 0.5, STD, 0.05 + 0.05 * 40 / 50),
    ("p99-at-bucket-top", 0.99, STD, 0.5),
    ("p995-in-inf-bucket-returns-highest-finite", 0.995, STD, 0.5),
    ("q1-returns-highest-finite", 1.0, STD, 0.5),
    ("first-bucket-interpolates-from-zero", 0.05, STD, 0.025),
    ("q0", 0.0, STD, 0.0),
    ("q-negative", -0.1, STD, -INF),
    ("q-above-one", 1.1, STD, INF),
    ("q-nan", NAN, STD, NAN),
    ("empty-window", 0.99, B((0.1, 0), (INF, 0)), NAN),
    ("no-inf-bucket", 0.5, B((0.1, 5), (0.2, 10)), NAN),
    ("only-inf-bucket", 0.5, B((INF, 10)), NAN),
    (
        "non-monotonic-fixed-up",
        0.5,
        B((0.1, 10), (0.2, 8), (0.5, 12), (INF, 12)),
        0.1 * 6 / 10,
    ),
    (
        "non-monotonic-later-bucket",
        0.9,
        B((0.1, 10), (0.2, 8), (0.5, 12), (INF, 12)),
        0.2 + 0.3 * (0.8 / 2),
    ),
    ("unsorted-input", 0.5, B((INF, 100), (0.2, 90), (0.05, 10), (0.5, 99), (0.1, 60)), 0.09),
    ("duplicate-bounds-coalesce", 0.75, B((0.1, 5), (0.1, 5), (0.2, 20), (INF, 20)), 0.15),
    ("negative-first-bound-returns-bound", 0.2, B((-1, 5), (0, 8), (INF, 10)), -1.0),
    ("zero-first-bound-returns-zero", 0.3, B((0, 5), (1, 10), (INF, 10)), 0.0),
    ("q0-empty-first-bucket-is-nan", 0.0, B((0.1, 0), (0.2, 10), (INF, 10)), NAN),
    ("all-in-inf-bucket", 0.5, B((0.1, 0), (0.2, 0), (INF, 10)), 0.2),
    ("fractional-counts", 0.5, B((1, 0.5), (2, 1.5), (INF, 2.0)), 1.5),
    ("nan-count-is-nan", 0.5, B((0.1, NAN), (INF, 10)), NAN),
]


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [c[1:] for c in QUANTILE_CASES],
    ids=[c[0] for c in QUANTILE_CASES],
)
def test_quantile_matches_prometheus_by_hand(q: float, buckets: Buckets, expected: float) -> None:
    assert _same(h.quantile(q, buckets), expected)


def test_quantile_of_missing_histogram_is_nan() -> None:
    assert math.isnan(h.quantile(0.99, None))


def test_tiny_float_noise_is_ignored_like_prometheus() -> None:
    # 10 vs 10 + 1e-15 is within smallDeltaTolerance: treated as equal, not as an increase.
    b = B((0.1, 10.0), (0.2, 10.0 + 1e-15), (INF, 20.0))
    assert h.quantile(0.5, b) == pytest.approx(0.1)


BRACKET_CASES = [
    ("median", 0.5, STD, (0.05, 0.1)),
    ("first-bucket-from-zero", 0.05, STD, (0.0, 0.05)),
    ("p99", 0.99, STD, (0.2, 0.5)),
    ("inf-bucket", 0.995, STD, (0.5, INF)),
    ("negative-first", 0.2, B((-1, 5), (0, 8), (INF, 10)), (-INF, -1)),
]


@pytest.mark.parametrize(
    ("q", "buckets", "expected"), [c[1:] for c in BRACKET_CASES], ids=[c[0] for c in BRACKET_CASES]
)
def test_bracket(q: float, buckets: Buckets, expected: tuple[float, float]) -> None:
    assert h.bracket(q, buckets) == expected


def test_bracket_unknown_is_nan() -> None:
    lo, hi = h.bracket(0.5, B((0.1, 0), (INF, 0)))
    assert math.isnan(lo) and math.isnan(hi)
    lo, hi = h.bracket(2.0, STD)
    assert math.isnan(lo) and math.isnan(hi)


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=12),
    st.floats(0, 1, allow_nan=False),
)
def test_quantile_lies_in_its_bracket(increments: list[float], q: float) -> None:
    bounds = tuple(0.01 * 2**i for i in range(len(increments)))
    counts, running = [], 0.0
    for inc in increments:
        running += inc
        counts.append(running)
    b = Buckets(bounds=(*bounds, INF), counts=(*counts, running + 1.0))
    value = h.quantile(q, b)
    lo, hi = h.bracket(q, b)
    if math.isnan(value):
        return
    assert lo <= value <= hi or (math.isinf(hi) and value == lo)


any_float = st.floats(allow_nan=True, allow_infinity=True)


@given(
    st.lists(any_float, max_size=6),
    st.lists(any_float, max_size=6),
    any_float,
    st.lists(any_float, max_size=6),
)
def test_garbage_histograms_never_raise(
    bounds: list[float], counts: list[float], q: float, prev: list[float]
) -> None:
    b = Buckets(bounds=tuple(bounds), counts=tuple(counts))
    p = Buckets(bounds=tuple(bounds), counts=tuple(prev))
    value = h.quantile(q, b)
    assert isinstance(value, float)
    lo, hi = h.bracket(q, b)
    assert isinstance(lo, float) and isinstance(hi, float)
    h.exceedance(q, b)
    h.fraction_above(q, b)
    d = h.delta(p, b)
    assert d is None or all(c >= 0 for c in d.counts)
    if h.problem(b) is not None:
        assert math.isnan(h.quantile(0.5, b))


# ---------------------------------------------------------------- delta / merge / scale


def test_delta_subtracts() -> None:
    prev = B((0.1, 5), (INF, 10), total_sum=1.0)
    cur = B((0.1, 7), (INF, 15), total_sum=1.6)
    d = h.delta(prev, cur)
    assert d is not None
    assert d.counts == (2, 5)
    assert d.sum == pytest.approx(0.6)


DELTA_RESETS = [
    ("total-dropped", B((0.1, 5), (INF, 10)), B((0.1, 1), (INF, 2))),
    ("one-bucket-dropped", B((0.1, 5), (INF, 10)), B((0.1, 4), (INF, 12))),
    ("layout-changed", B((0.1, 5), (INF, 10)), B((0.2, 6), (INF, 12))),
]


@pytest.mark.parametrize(
    ("prev", "cur"), [c[1:] for c in DELTA_RESETS], ids=[c[0] for c in DELTA_RESETS]
)
def test_delta_reset_uses_current_alone(prev: Buckets, cur: Buckets) -> None:
    assert h.is_reset(prev, cur)
    assert h.delta(prev, cur) == cur


def test_delta_without_previous_is_current() -> None:
    cur = B((0.1, 1), (INF, 2))
    assert h.delta(None, cur) == cur


def test_delta_of_bad_current_is_none() -> None:
    assert h.delta(None, B((0.1, NAN), (INF, 2))) is None
    assert h.delta(None, B((0.1, -1), (INF, 2))) is None
    assert h.delta(None, Buckets(bounds=(0.1, INF), counts=(1,))) is None


@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), min_size=1, max_size=8),
)
def test_delta_is_never_negative(pairs: list[tuple[float, float]]) -> None:
    prev_counts = sorted(p[0] for p in pairs)
    cur_counts = sorted(p[1] for p in pairs)
    bounds = (*tuple(float(i + 1) for i in range(len(pairs) - 1)), INF)
    d = h.delta(Buckets(bounds, tuple(prev_counts)), Buckets(bounds, tuple(cur_counts)))
    assert d is not None
    assert all(c >= 0 for c in d.counts)


def test_merge_sums_same_bounds() -> None:
    a = B((0.1, 1), (INF, 2), total_sum=0.5)
    b = B((0.1, 3), (INF, 5), total_sum=1.0)
    m = h.merge(a, b)
    assert m.counts == (4, 7)
    assert m.sum == 1.5


def test_merge_rejects_different_bounds_clearly() -> None:
    with pytest.raises(ValueError, match=r"different bucket bounds.*\[0\.1, inf\].*\[0\.2, inf\]"):
        h.merge(B((0.1, 1), (INF, 2)), B((0.2, 1), (INF, 2)))
    with pytest.raises(ValueError, match="at least one"):
        h.merge()


def test_scale_per_step_to_per_token() -> None:
    s = h.scale(B((0.03, 5), (0.06, 8), (INF, 10), total_sum=0.3), 1 / 3)
    assert s.bounds[:2] == pytest.approx((0.01, 0.02))
    assert s.bounds[-1] == INF
    assert s.counts == (5, 8, 10)
    assert s.sum == pytest.approx(0.1)
    with pytest.raises(ValueError, match="positive"):
        h.scale(STD, 0.0)


def test_exceedance_uses_bound_at_or_above_limit() -> None:
    ex = h.exceedance(0.15, STD)
    assert ex is not None
    assert (ex.edge, ex.above, ex.total) == (0.2, 10, 100)
    assert h.fraction_above(0.2, STD) == pytest.approx(0.1)
    # exactly on a bound uses that bound
    assert h.fraction_above(0.05, STD) == pytest.approx(0.9)
    # beyond the highest finite bound: the buckets cannot tell
    assert h.exceedance(0.7, STD) is None
    assert math.isnan(h.fraction_above(0.7, STD))


def test_problem_descriptions() -> None:
    assert h.problem(STD) is None
    assert "counts" in (h.problem(Buckets((0.1, INF), (1,))) or "")
    assert "+Inf" in (h.problem(B((0.1, 1), (0.2, 2))) or "")
    assert "negative" in (h.problem(B((0.1, -1), (INF, 2))) or "")
    assert "nan" in (h.problem(B((0.1, NAN), (INF, 2))) or "").lower()


# ---------------------------------------------------------------- against real promtool

PARITY_CASES = [c for c in QUANTILE_CASES if not math.isnan(c[1]) and 0 <= c[1] <= 1]


def _series_value(x: float) -> str:
    return repr(float(x))


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_quantile_parity_with_promtool(tmp_path: Path) -> None:
    """Our quantile and Prometheus' histogram_quantile agree on every hand-computed case."""
    lines = [
        "rule_files: []",
        "evaluation_interval: 1m",
        "tests:",
        "  - interval: 1m",
        "    input_series:",
    ]
    exprs: list[str] = []
    for i, (case, q, b, _) in enumerate(PARITY_CASES):
        if any(math.isnan(c) for c in b.counts):
            continue  # a deliberate difference: we return NaN, Prometheus an arbitrary bound
        name = f"h{i}_bucket"
        for bound, count in zip(b.bounds, b.counts, strict=True):
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            # duplicate bounds cannot be two series in one scrape; spell one with a trailing 0.
            while f'{name}{{le="{le}"}}' in "\n".join(lines):
                le += "0"
            lines.append(f"      - series: '{name}{{le=\"{le}\"}}'")
            lines.append(f"        values: '0 {_series_value(count)}'")
        ours = h.quantile(q, b)
        expr = f"histogram_quantile({q!r}, {name})"
        if math.isnan(ours):
            exprs += [
                f"      - expr: '{expr} != bool {expr}'  # {case}",
                "        eval_time: 1m",
                "        exp_samples:",
                "          - labels: '{}'",
                "            value: 1",
            ]
        else:
            val = ".inf" if ours == INF else "-.inf" if ours == -INF else repr(ours)
            exprs += [
                f"      - expr: '{expr}'  # {case}",
                "        eval_time: 1m",
                "        exp_samples:",
                "          - labels: '{}'",
                f"            value: {val}",
            ]
    lines += ["    promql_expr_test:", *exprs]
    path = tmp_path / "parity.yml"
    path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
