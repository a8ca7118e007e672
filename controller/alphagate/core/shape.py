"""Has the traffic that made speculation fail gone? Evidence for an early re-probe.

While speculation is off the canary exports no alpha, so only a probe can see acceptance
recover, and every probe restarts the canary pods twice if it fails. Time alone (the cooldown)
is the honest default. But acceptance is a property of what is generated: a head trained on
chat accepts chat well and code badly, and a mix of the two accepts at the mix of their
acceptances (pooled alpha is linear in the shares of drafts). What is generated also shows in
a shape vLLM measures on every pod, speculating or not: the output length of every finished
request (`vllm:request_generation_tokens`). Code answers, summaries and chat turns have their
own length distributions, so a shift of the mix moves the bucket shares, and moves them back
along the same line when it returns (the shares of a mixture are linear in its weights).

So the machine remembers two shapes (`Memory.shape_paid`: the last window whose alpha passed while
speculating; `Memory.shape_failed`: the window that rolled back), each with the alpha measured
on it, and `returned` asks, of the current window's shape while cooling down:

1. Did the failure come with a change of shape? The paid and failed shapes must differ
   materially (total variation >= MIN_SHIFT: that share of requests moved bucket) and beyond
   sampling noise (chi-square homogeneity at SIGNIFICANCE). Alpha that fell on an unchanged
   shape (a drift, a new model, a stationary 0.45) gives the shape no say: only time does.
2. Is the current shape on the way back along that line? Project it on the failed -> paid
   axis of the share vectors: `back` is how far along (0 at the failed shape, 1 at the paid
   one); `off_axis` the distance from the line in units of the shift. A shape that moved
   elsewhere (more than MAX_OFF_AXIS off the line) is new traffic, not the old coming back.
3. Has it come back far enough, and beyond noise? `back` >= MIN_BACK (nearer to what paid than
   to what failed), the current shape differs from the failed one at SIGNIFICANCE, and the
   alpha the mixture line predicts there (failed alpha + back x (paid alpha - failed alpha))
   clears enableAbove.

The probe that follows still has to pass: the shape only decides when to look, and a failed
one leaves a failed shape near the paid one (no shift). `core.reprobe` allows it only after
the first rollback in a row. Pure; typed findings, reasons for people.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.core import histogram
from alphagate.core.model import Buckets, Observation, TrafficShape, ev
from alphagate.core.stats import normal_sf

MIN_REQUESTS: Final = 200.0
"""Finished requests a window needs before its shape is evidence (a few per bucket)."""
MIN_SHIFT: Final = 0.05
"""Total-variation distance of a material change of mix: 5% of requests changed bucket (a
1-2-5 bucket spans a factor of 2-2.5 in length). Below it the shape did not explain a fall."""
SIGNIFICANCE: Final = 1e-3
"""Each chi-square comparison; with thousands of requests a window, noise almost never
reaches it, and a few hundred requests need a clear change."""
MAX_OFF_AXIS: Final = 0.5
"""Distance from the failed -> paid line, in units of the shift, past which the current
traffic is something new rather than the old mix coming back."""
MIN_BACK: Final = 0.5
"""The current shape must be nearer to the paid one than to the failed one."""
MIN_CELL: Final = 10.0
"""Adjacent buckets are pooled until each holds this many requests of both windows (chi-square
cells with a handful of counts overstate the evidence)."""


class Finding(StrEnum):
    """What the shape says about re-probing early (stable strings: evidence values)."""

    RETURNED = "returned"  # the failed regime's shape is gone, back toward what paid
    NO_SHAPES = "no-shapes"  # a shape is missing or has too few requests
    LAYOUT = "layout"  # the windows' bucket layouts differ
    NO_SHIFT = "no-shift"  # the failure came on an unchanged shape: only time can tell
    ELSEWHERE = "elsewhere"  # the shape moved, but not back along the line it failed on
    NOT_BACK = "not-back"  # on the line, not (significantly) back far enough


@dataclass(frozen=True, slots=True)
class Return:
    """The comparison, with its numbers (NaN where not computed)."""

    finding: Finding
    shift: float = math.nan  # total variation, paid vs failed
    back: float = math.nan  # 0 at the failed shape, 1 at the paid one
    off_axis: float = math.nan  # distance from the line, in units of the shift
    predicted_alpha: float = math.nan  # on the mixture line at `back`

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
    if math.fsum(counts) < MIN_REQUESTS:
        return None
    bounds = tuple(b for b, _ in pairs[:-1])  # the last is +Inf
    value = alpha if alpha is not None and math.isfinite(alpha) else None
    return TrafficShape(bounds=bounds, counts=tuple(counts), alpha=value)


def _shares(shape: TrafficShape) -> list[float]:
    total = shape.total
    return [c / total for c in shape.counts]


def distance(a: TrafficShape, b: TrafficShape) -> float:
    """Total variation between two shapes' bucket shares (same layout)."""
    return 0.5 * math.fsum(abs(x - y) for x, y in zip(_shares(a), _shares(b), strict=True))


def _chi2_sf(x: float, dof: int) -> float:
    """Upper tail of chi-square (Wilson-Hilferty: within a few % of the exact tail, plenty for
    a 1e-3 threshold)."""
    if dof <= 0:
        return 1.0
    if x <= 0:
        return 1.0
    k = float(dof)
    z = ((x / k) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * k))) / math.sqrt(2.0 / (9.0 * k))
    return normal_sf(z)


def differ(a: TrafficShape, b: TrafficShape) -> float:
    """p-value of chi-square homogeneity between two windows' output lengths, over adjacent
    buckets pooled to at least MIN_CELL requests each."""
    cells: list[tuple[float, float]] = []
    acc_a = acc_b = 0.0
    for x, y in zip(a.counts, b.counts, strict=True):
        acc_a, acc_b = acc_a + x, acc_b + y
        if acc_a + acc_b >= MIN_CELL:
            cells.append((acc_a, acc_b))
            acc_a = acc_b = 0.0
    if cells and acc_a + acc_b > 0:
        last_a, last_b = cells[-1]
        cells[-1] = (last_a + acc_a, last_b + acc_b)
    n_a, n_b = math.fsum(c[0] for c in cells), math.fsum(c[1] for c in cells)
    n = n_a + n_b
    if len(cells) < 2 or n_a <= 0 or n_b <= 0:
        return 1.0
    stat = 0.0
    for x, y in cells:
        col = x + y
        ea, eb = n_a * col / n, n_b * col / n
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    return _chi2_sf(stat, len(cells) - 1)


def returned(
    paid: TrafficShape | None,
    failed: TrafficShape | None,
    now: TrafficShape | None,
    *,
    enable_above: float,
) -> Return:
    """Is the shape the failure came with gone, back toward the shape that paid? (see the
    module docstring for the three questions)."""
    shapes = (paid, failed, now)
    if paid is None or failed is None or now is None:
        return Return(Finding.NO_SHAPES)
    if any(s.total < MIN_REQUESTS for s in shapes if s is not None):
        return Return(Finding.NO_SHAPES)
    if not (paid.bounds == failed.bounds == now.bounds):
        return Return(Finding.LAYOUT)
    shift = distance(paid, failed)
    if shift < MIN_SHIFT or differ(paid, failed) >= SIGNIFICANCE:
        return Return(Finding.NO_SHIFT, shift=shift)
    p, f, c = _shares(paid), _shares(failed), _shares(now)
    axis = [x - y for x, y in zip(p, f, strict=True)]
    norm2 = math.fsum(d * d for d in axis)
    moved = [x - y for x, y in zip(c, f, strict=True)]
    back = math.fsum(m * d for m, d in zip(moved, axis, strict=True)) / norm2
    off = math.sqrt(
        math.fsum((m - back * d) ** 2 for m, d in zip(moved, axis, strict=True)) / norm2
    )
    predicted = math.nan
    if paid.alpha is not None and failed.alpha is not None:
        predicted = failed.alpha + min(1.0, max(0.0, back)) * (paid.alpha - failed.alpha)
    if off > MAX_OFF_AXIS:
        return Return(Finding.ELSEWHERE, shift, back, off, predicted)
    if back < MIN_BACK or differ(now, failed) >= SIGNIFICANCE:
        return Return(Finding.NOT_BACK, shift, back, off, predicted)
    if math.isfinite(predicted) and predicted < enable_above:
        return Return(Finding.NOT_BACK, shift, back, off, predicted)
    return Return(Finding.RETURNED, shift, back, off, predicted)
