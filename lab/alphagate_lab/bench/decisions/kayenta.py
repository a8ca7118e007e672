"""Kayenta's judge, as its NetflixACAJudge classifies and scores: enough to render it fairly.

Per metric, a Mann-Whitney (Wilcoxon rank-sum) comparison of the experiment's per-step values
with the control's: the Hodges-Lehmann shift estimate and its 98% confidence interval (the
normal-approximation rank interval over all pairwise differences, as R's ``wilcox.test`` gives
for samples with ties). The metric is High when the interval's lower bound is above a quarter
of |estimate| and the mean ratio reaches ``allowed_increase``; Low mirror-wise; identical
samples Pass; an empty side is Nodata (``nanStrategy: remove`` drops NaN steps first).
The score is the weighted sum of per-group pass percentages; half or more metrics without data
score 0 (``WeightedSumScorer``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from statistics import NormalDist
from typing import Final

import numpy as np

CONFIDENCE: Final = 0.98  # NetflixACAJudge: confLevel
TOLERANCE: Final = 0.25  # NetflixACAJudge: tolerance (fraction of |estimate|)


class Classification(StrEnum):
    PASS = "Pass"
    HIGH = "High"
    LOW = "Low"
    NODATA = "Nodata"


class Direction(StrEnum):
    INCREASE = "increase"
    DECREASE = "decrease"
    EITHER = "either"


def shift_interval(
    experiment: Sequence[float], control: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(estimate, lower, upper) of the location shift experiment - control."""
    x = np.asarray(experiment, dtype=np.float64)
    y = np.asarray(control, dtype=np.float64)
    d = np.sort((x[:, None] - y[None, :]).ravel())
    n, m = x.size, y.size
    nm = n * m
    estimate = float(np.median(d))
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    k = math.floor(nm / 2 - z * math.sqrt(nm * (n + m + 1) / 12.0))
    k = min(max(k, 0), nm - 1)
    return estimate, float(d[k]), float(d[nm - 1 - k])


def classify(
    experiment: Sequence[float],
    control: Sequence[float],
    *,
    direction: Direction,
    allowed_increase: float = 1.0,
    allowed_decrease: float = 1.0,
) -> Classification:
    x = [v for v in experiment if math.isfinite(v)]
    y = [v for v in control if math.isfinite(v)]
    if not x or not y:
        return Classification.NODATA
    if x == y:
        return Classification.PASS
    estimate, lower, upper = shift_interval(x, y)
    bound = TOLERANCE * abs(estimate)
    mean_y = sum(y) / len(y)
    ratio = (sum(x) / len(x)) / mean_y if mean_y != 0 else math.inf
    up = direction in (Direction.INCREASE, Direction.EITHER)
    if up and lower > bound and ratio >= allowed_increase:
        return Classification.HIGH
    down = direction in (Direction.DECREASE, Direction.EITHER)
    if down and upper < -bound and ratio <= allowed_decrease:
        return Classification.LOW
    return Classification.PASS


def score(results: Sequence[tuple[str, Classification]], weights: dict[str, float]) -> float:
    """WeightedSumScorer: per-group pass percentage, weighted; 0 when >= half have no data."""
    if not results:
        return 0.0
    nodata = sum(1 for _, c in results if c is Classification.NODATA)
    if nodata / len(results) >= 0.5:
        return 0.0
    total = 0.0
    weight_sum = 0.0
    for group, weight in weights.items():
        counted = [c for g, c in results if g == group and c is not Classification.NODATA]
        group_score = (
            100.0 * sum(c is Classification.PASS for c in counted) / len(counted)
            if counted
            else 100.0
        )
        total += weight * group_score
        weight_sum += weight
    return total / weight_sum if weight_sum > 0 else 0.0
