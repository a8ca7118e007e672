"""Has the traffic that made speculation fail gone? Evidence for an early re-probe.

While speculation is off the canary exports no alpha, so only a probe can see acceptance
recover, and every probe restarts the canary pods twice if it fails. Time alone (the cooldown)
is the honest default. But acceptance is a property of what is generated: a head trained on
chat accepts chat well and code badly, and a mix of the two accepts at the mix of their
acceptances (pooled alpha is linear in the shares of drafts). What is generated also shows in
a shape vLLM measures on every pod, speculating or not: the output length of every finished
request (`vllm:request_generation_tokens`). A shift of the mix moves the bucket shares along a
line, and back along it when it returns (the shares of a mixture are linear in its weights).

Real traffic moves its shares from window to window far beyond multinomial noise (the share of
long answers wanders by several points every five minutes, and follows a daily cycle), so
nothing here is judged against sampling noise. The machine keeps the shares of its last
MAX_RECENT disjoint windows, with the alpha measured on each while speculating
(`ShapeMemory.recent`), and at a rollback on alpha `learn`s from them:

1. The line: the mean shape of the windows whose alpha paid (at least MIN_PAID of them among
   the recent windows: a shape that paid hours ago explains nothing) against the mean shape of
   the failing ones. x = 0 at the failed shape, 1 at the paid one.
2. The noise: the window-to-window standard deviation of x over the recent windows, from
   successive differences (robust: the median absolute difference, so the shift itself does
   not inflate it). The shift must be material (total variation >= MIN_SHIFT) and far beyond
   that noise (Z_SHIFT standard errors of the two means).
3. The relation: alpha against x over the speculating windows (at least MIN_RELATION), a
   positive slope at T_RELATION standard errors. Alpha that fell on an unchanged shape (a
   drift, a new model) gives the shape no say: only time does.

While cooling down, each disjoint window is placed on the line (`position`): it has returned
when it lies at least MIN_BACK of the way back, Z_BACK noise units from the failed shape, at
most MAX_OFF_AXIS off the line (else it is new traffic), and the fitted relation predicts an
alpha that clears enableAbove there. `core.reprobe` re-probes after RETURNED_WINDOWS such
windows in a row. The probe still has to pass: the shape only decides when to look. Pure.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.core import histogram
from alphagate.core.model import (
    Buckets,
    Observation,
    ShapeAxis,
    ShapeMemory,
    ShapeWindow,
    TrafficShape,
    ev,
)

MIN_REQUESTS: Final = 200.0
"""Finished requests a window needs before its shape is evidence (a few per bucket)."""
MAX_RECENT: Final = 24
"""Disjoint windows remembered: two hours of 300 s windows."""
MIN_PAID: Final = 2
"""Paying windows among the recent ones a line needs at its paid end."""
MIN_SHIFT: Final = 0.05
"""Total-variation distance of a material change of mix: 5% of requests changed bucket."""
Z_SHIFT: Final = 4.0
"""The paid and failed means must lie this many standard errors apart along the line."""
MIN_PAIRS: Final = 4
"""Successive window pairs the noise needs."""
MIN_RELATION: Final = 5
"""Speculating windows with an alpha the relation is fitted on."""
T_RELATION: Final = 3.0
"""The slope of alpha against x, in standard errors."""
MIN_BACK: Final = 0.5
"""A returned window lies nearer to the paid shape than to the failed one."""
Z_BACK: Final = 3.0
"""... and this many noise units from the failed shape."""
MAX_OFF_AXIS: Final = 0.5
"""Distance from the line, in units of the shift, past which the traffic is something new."""
RETURNED_WINDOWS: Final = 2
"""Disjoint returned windows in a row before an early re-probe."""
DIGITS: Final = 5
"""Shares are remembered rounded (the memory is written to the resource's status)."""


class Finding(StrEnum):
    """What the shape says about re-probing early (stable strings: evidence values)."""

    RETURNED = "returned"  # back toward what paid, beyond the measured noise
    NO_SHAPES = "no-shapes"  # too few recent windows (paying, failing, or at all)
    LAYOUT = "layout"  # the windows' bucket layouts differ
    NO_SHIFT = "no-shift"  # the failure came on a shape within the window-to-window noise
    NO_RELATION = "no-relation"  # alpha did not move with the shape
    ELSEWHERE = "elsewhere"  # the shape moved, but not back along the line it failed on
    NOT_BACK = "not-back"  # on the line, not (beyond noise) back far enough


@dataclass(frozen=True, slots=True)
class Learned:
    """What a rollback learned: the axis, or why there is none."""

    finding: Finding
    axis: ShapeAxis | None = None


@dataclass(frozen=True, slots=True)
class Return:
    """One cooling-down window placed on the line, with its numbers (NaN where not computed)."""

    finding: Finding
    shift: float = math.nan  # total variation, paid vs failed
    back: float = math.nan  # x: 0 at the failed shape, 1 at the paid one
    off_axis: float = math.nan  # distance from the line, in units of the shift
    predicted_alpha: float = math.nan  # the fitted relation at `back`
    noise: float = math.nan  # window-to-window standard deviation of x

    @property
    def fires(self) -> bool:
        return self.finding is Finding.RETURNED

    def evidence(self) -> dict[str, float | str]:
        return {
            "shape": self.finding.value,
            "shape_shift": ev(self.shift),
            "shape_back": ev(self.back),
            "shape_off_axis": ev(self.off_axis),
            "shape_predicted_alpha": ev(self.predicted_alpha),
            "shape_noise": ev(self.noise),
        }


def of(observation: Observation, names: Sequence[str], alpha: float | None) -> TrafficShape | None:
    """The window's shape over every readable pool of the slices `names` (canary and baseline
    serve the same traffic), with `alpha` measured on it; None without an output-length
    histogram, with differing layouts, or with fewer than MIN_REQUESTS finished requests."""
    hists = [
        p.output_lengths
        for p in observation.pools
        if p.slice in names
        and p.error is None
        and p.output_lengths is not None
        and histogram.problem(p.output_lengths) is None
    ]
    if not hists:
        return None
    try:
        merged: Buckets = histogram.merge(*hists)
    except ValueError:  # different bucket layouts
        return None
    pairs = sorted(zip(merged.bounds, merged.counts, strict=True))
    counts, below = [], 0.0
    for _, cumulative in pairs:
        counts.append(max(0.0, cumulative - below))
        below = max(below, cumulative)
    if not math.fsum(counts) >= MIN_REQUESTS:
        return None
    bounds = tuple(b for b, _ in pairs[:-1])  # the last is +Inf
    value = alpha if alpha is not None and math.isfinite(alpha) else None
    return TrafficShape(bounds=bounds, counts=tuple(counts), alpha=value)


def shares(shape: TrafficShape) -> tuple[float, ...]:
    """Each bucket's share of the window's finished requests."""
    total = shape.total
    return tuple(c / total for c in shape.counts)


def distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Total variation between two share vectors."""
    return 0.5 * math.fsum(abs(x - y) for x, y in zip(a, b, strict=True))


def record(
    track: ShapeMemory, shape: TrafficShape, *, at: float, paid: bool, failed: bool
) -> ShapeMemory:
    """`track` with the window ending `at` appended (the oldest dropped past MAX_RECENT); a
    new bucket layout starts the record over."""
    window = ShapeWindow(
        at=at,
        shares=tuple(round(s, DIGITS) for s in shares(shape)),
        alpha=shape.alpha,
        paid=paid,
        failed=failed,
    )
    kept = track.recent if track.bounds == shape.bounds else ()
    recent = (*kept, window)[-MAX_RECENT:]
    return track.model_copy(update={"bounds": shape.bounds, "recent": recent, "last_end": at})


def _valid(vector: Sequence[float], size: int) -> bool:
    """Shares the core could have written: `size` of them, each in [0, 1] (a memory read back
    from the resource may carry anything)."""
    return len(vector) == size and all(0.0 <= x <= 1.0 for x in vector)


def _mean(vectors: Sequence[Sequence[float]]) -> tuple[float, ...]:
    return tuple(math.fsum(col) / len(vectors) for col in zip(*vectors, strict=True))


def position(
    paid: Sequence[float], failed: Sequence[float], now: Sequence[float]
) -> tuple[float, float]:
    """(x, off-axis) of the shares `now` on the line failed (x = 0) -> paid (x = 1); the
    off-axis distance in units of the line's length. NaN when the two ends coincide."""
    axis = [p - f for p, f in zip(paid, failed, strict=True)]
    norm2 = math.fsum(d * d for d in axis)
    if not norm2 > 0:
        return math.nan, math.nan
    moved = [c - f for c, f in zip(now, failed, strict=True)]
    x = math.fsum(m * d for m, d in zip(moved, axis, strict=True)) / norm2
    off = math.sqrt(math.fsum((m - x * d) ** 2 for m, d in zip(moved, axis, strict=True)) / norm2)
    return x, off


def _noise(xs: Sequence[float]) -> float:
    """Window-to-window standard deviation from successive differences, robustly (the median
    absolute difference: a shift or two among them does not inflate it)."""
    diffs = [abs(b - a) for a, b in itertools.pairwise(xs)]
    if len(diffs) < MIN_PAIRS:
        return math.nan
    return 1.4826 * statistics.median(diffs) / math.sqrt(2.0)


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """(intercept, slope, slope t) of alpha against x by least squares."""
    n = len(points)
    mx = math.fsum(x for x, _ in points) / n
    my = math.fsum(y for _, y in points) / n
    sxx = math.fsum((x - mx) ** 2 for x, _ in points)
    if not sxx > 0:
        return my, 0.0, 0.0
    slope = math.fsum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    rss = math.fsum((y - intercept - slope * x) ** 2 for x, y in points)
    se = math.sqrt(rss / (n - 2) / sxx) if n > 2 else math.inf
    t = math.inf if se == 0 and slope > 0 else (slope / se if se > 0 else 0.0)
    return intercept, slope, t


def learn(track: ShapeMemory) -> Learned:
    """At a rollback on alpha: the line from the failing windows' shape to the paying ones',
    its noise and the alpha-shape relation, from the recent windows (see the module doc)."""
    size = len(track.bounds) + 1
    recent = [w for w in track.recent if _valid(w.shares, size)]
    paid = [w.shares for w in recent if w.paid]
    failed = [w.shares for w in recent if w.failed]
    if len(paid) < MIN_PAID or not failed:
        return Learned(Finding.NO_SHAPES)
    p, f = _mean(paid), _mean(failed)
    shift = distance(p, f)
    xs = [position(p, f, w.shares)[0] for w in recent]
    noise = _noise(xs)
    if not (shift >= MIN_SHIFT and math.isfinite(noise)):
        return Learned(Finding.NO_SHIFT if math.isfinite(noise) else Finding.NO_SHAPES)
    se = noise * math.sqrt(1.0 / len(paid) + 1.0 / len(failed))
    if not (se == 0 or 1.0 / se >= Z_SHIFT):
        return Learned(Finding.NO_SHIFT)
    points = [
        (x, w.alpha)
        for x, w in zip(xs, recent, strict=True)
        if w.alpha is not None and 0.0 <= w.alpha <= 1.0
    ]
    if len(points) < MIN_RELATION:
        return Learned(Finding.NO_SHAPES)
    intercept, slope, t = _fit(points)
    if not (slope > 0 and t >= T_RELATION):
        return Learned(Finding.NO_RELATION)
    axis = ShapeAxis(
        paid=p,
        failed=f,
        intercept=intercept,
        slope=slope,
        slope_t=min(t, 1e9),
        noise=noise,
        shift=shift,
        windows=len(points),
    )
    return Learned(Finding.RETURNED, axis)


def returned(axis: ShapeAxis, now: TrafficShape, *, enable_above: float) -> Return:
    """Is this cooling-down window back toward the shape that paid, beyond the noise, with an
    alpha the relation predicts clears enableAbove? (see the module docstring)."""
    if not now.total >= MIN_REQUESTS:
        return Return(Finding.NO_SHAPES, shift=axis.shift, noise=axis.noise)
    current = shares(now)
    size = len(current)
    if not (_valid(axis.paid, size) and _valid(axis.failed, size) and _valid(current, size)):
        return Return(Finding.LAYOUT, shift=axis.shift, noise=axis.noise)
    x, off = position(axis.paid, axis.failed, current)
    predicted = axis.intercept + axis.slope * min(1.0, max(0.0, x))
    found = Return(Finding.NOT_BACK, axis.shift, x, off, predicted, axis.noise)
    if not (math.isfinite(x) and math.isfinite(off)):
        return found
    if off > MAX_OFF_AXIS:
        return Return(Finding.ELSEWHERE, axis.shift, x, off, predicted, axis.noise)
    beyond = axis.noise == 0 or x / axis.noise >= Z_BACK
    if x >= MIN_BACK and beyond and predicted >= enable_above:
        return Return(Finding.RETURNED, axis.shift, x, off, predicted, axis.noise)
    return found
