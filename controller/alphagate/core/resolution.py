"""What a bucket layout can resolve of a quantile guard "canary within (1 + margin) x the
baseline": the bucket bounds a Pass and a Fail may use, and a layout that would resolve it.

A quantile read from buckets is only known to lie inside its bucket (lo, hi]; the value
`histogram_quantile` interpolates there is a guess, so it is never a limit here:

* a **Pass** ("within") may use the largest bound at or below lo x (1 + margin): a canary
  share above it shown at most 1 - q puts the canary's quantile at or below it, hence below
  (1 + margin) x the baseline's. When the baseline's bucket is wider than 1 + margin, even a
  canary identical to the baseline cannot be shown within: the layout cannot **resolve** the
  margin there, and the guard says so instead of passing.
* a **Fail** may use the smallest bound at or above hi x (1 + margin) (less 1% for the
  layout's printed digits, FAIL_ROUNDING): a canary share above it significantly over 1 - q
  puts the canary's quantile above (1 + margin) x the baseline's (x 0.99).
  A regression smaller than that bound over lo may go unseen: the **effective margin**.

vLLM's default per-token bounds (… 0.025, 0.05, 0.075, 0.1 …) are 1.33-2.5x wide where chat
models live, so a +10% margin is never resolvable there; `geometric` builds the ~10% layout
`--custom-histogram-buckets` takes. Pure, and imports nothing of the core (the evidence
types carry a `Resolution`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.core.fmt import number as _number

# Relative float tolerance when comparing a bound with a product of bounds (0.1 * 1.1 ...).
REL_TOL: Final = 1e-9
# A Fail edge may sit this far below hi x (1 + margin): layouts print their bounds at 3-4
# significant digits (the plan's rounded down), so two 10% steps are 1.2079-1.21x, rarely
# exactly 1.1 x 1.1. Without it the edge skipped a whole step in about half of the windows on
# a ~10% layout (+33% instead of +21%), and a tail-only 1.5x canary, whose slow requests sit
# between the two, passed there and broke its fail streak. A Fail then shows at least
# (1 + margin) x 0.99 (+8.9% at +10%): `least_margin` prints what it shows.
FAIL_ROUNDING: Final = 0.01
# Bounds of a generated layout keep this many significant digits (vLLM prints them as given).
_DIGITS: Final = 3
_MAX_BOUNDS: Final = 400  # a generated layout longer than this is a mistake in its inputs


class TailWithin(StrEnum):
    """What the tail part of a latency guard showed of "the canary's quantile is within the
    margin" (a Pass needs SHOWN only where the policy confirms on the quantile)."""

    # The canary's share above the Pass edge is shown at most 1 - quantile.
    SHOWN = "shown"
    # Resolvable, but not shown: too few requests, or too many above the edge.
    NOT_SHOWN = "not-shown"
    # The bucket holding the baseline's quantile is wider than 1 + margin: no canary can be
    # shown within at this layout (finer buckets can).
    UNRESOLVABLE = "unresolvable"
    # No baseline quantile, or no finite bound to test at.
    UNTESTABLE = "untestable"


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where the reference quantile sits in a layout and what a guard may claim there.

    `bucket_lo` < reference quantile <= `bucket_hi` (for an absolute limit both are the
    limit and `margin` is 0). `pass_edge` and `fail_edge` are bounds of the layout the canary
    is counted in (None when it has none there)."""

    margin: float
    bucket_lo: float
    bucket_hi: float
    pass_edge: float | None
    fail_edge: float | None
    resolvable: bool

    @property
    def effective_margin(self) -> float:
        """The smallest regression of the quantile a Fail is sure to be able to show (with
        enough requests): fail edge / bucket_lo - 1, never below the policy's margin; inf when
        no bound can show one or the quantile lies in the first bucket."""
        if self.fail_edge is None or not self.bucket_lo > 0:
            return math.inf
        return max(self.margin, self.fail_edge / self.bucket_lo - 1.0)

    @property
    def least_margin(self) -> float:
        """The smallest regression a Fail can show at all (the reference quantile at the top
        of its bucket): fail edge / bucket_hi - 1, never below the policy's margin less the
        layout's rounding (FAIL_ROUNDING); inf when there is no fail edge."""
        if self.fail_edge is None or not (self.bucket_hi > 0 and math.isfinite(self.bucket_hi)):
            return math.inf
        floor = (1.0 + self.margin) * (1.0 - FAIL_ROUNDING) - 1.0
        return max(floor, self.fail_edge / self.bucket_hi - 1.0)

    @property
    def resolution(self) -> float:
        """How wide the reference quantile's bucket is, as a ratio minus 1 (inf: unbounded)."""
        if not (self.bucket_lo > 0 and math.isfinite(self.bucket_hi)):
            return math.inf
        return self.bucket_hi / self.bucket_lo - 1.0


def _finite(layout: Sequence[float]) -> list[float]:
    return sorted({b for b in layout if math.isfinite(b) and b > 0})


def _at_or_below(bounds: Sequence[float], x: float) -> float | None:
    below = [b for b in bounds if b <= x * (1.0 + REL_TOL)]
    return below[-1] if below else None


def _at_or_above(bounds: Sequence[float], x: float) -> float | None:
    return next((b for b in bounds if b >= x * (1.0 - REL_TOL)), None)


def relative(layout: Sequence[float], lo: float, hi: float, margin: float) -> Resolution:
    """The edges for "canary quantile within (1 + margin) x a reference in (lo, hi]", counting
    the canary in `layout` (its finite bounds). NaN or negative edges give no edges."""
    bounds = _finite(layout)
    m = margin if math.isfinite(margin) and margin >= 0 else math.nan
    pass_edge = fail_edge = None
    if lo > 0 and math.isfinite(lo) and not math.isnan(m):
        pass_edge = _at_or_below(bounds, lo * (1.0 + m))
    if hi > 0 and math.isfinite(hi) and not math.isnan(m):
        # never below hi itself: a Fail shows the canary above the whole bucket
        fail_edge = _at_or_above(bounds, max(hi * (1.0 + m) * (1.0 - FAIL_ROUNDING), hi))
    # The reference is pinned to a bucket no wider than the margin, and the canary's layout
    # has a bound between its lower edge and that x (1 + margin). On one common layout that is
    # "the Pass edge reaches the bucket's upper edge": a canary like the baseline can pass.
    resolvable = (
        pass_edge is not None
        and math.isfinite(hi)
        and hi <= lo * (1.0 + m) * (1.0 + REL_TOL)
        and pass_edge >= lo * (1.0 - REL_TOL)
    )
    return Resolution(m, lo, hi, pass_edge, fail_edge, resolvable)


def absolute(layout: Sequence[float], limit: float) -> Resolution:
    """The edges for "canary quantile at most `limit`": the largest bound at or below it for
    a Pass, the smallest at or above it for a Fail."""
    bounds = _finite(layout)
    ok = limit > 0 and math.isfinite(limit)
    pass_edge = _at_or_below(bounds, limit) if ok else None
    fail_edge = _at_or_above(bounds, limit) if ok else None
    return Resolution(0.0, limit, limit, pass_edge, fail_edge, pass_edge is not None)


@dataclass(frozen=True, slots=True)
class Survey:
    """What a quantile guard at `margin` can resolve on a layout, bucket by bucket, for a
    reference quantile anywhere between `low` and `high` (`alphagate policy check` on vLLM's
    default buckets, `alphagate inspect`)."""

    margin: float
    low: float
    high: float
    buckets: tuple[Resolution, ...]

    @property
    def resolvable(self) -> bool:
        """Some bucket in the range is no wider than 1 + margin."""
        return any(r.resolvable for r in self.buckets)

    @property
    def least_margin(self) -> float:
        """The smallest regression a Fail can show anywhere in the range (inf: none)."""
        return min((r.least_margin for r in self.buckets), default=math.inf)

    @property
    def widths(self) -> tuple[float, float]:
        """The narrowest and widest bucket in the range, as ratios hi / lo."""
        ratios = [r.resolution + 1.0 for r in self.buckets if math.isfinite(r.resolution)]
        return (min(ratios), max(ratios)) if ratios else (math.inf, math.inf)


def survey(layout: Sequence[float], margin: float, low: float, high: float) -> Survey:
    """The resolution of every bucket (lo, hi] of `layout` that overlaps [low, high]."""
    bounds = _finite(layout)
    edges = list(zip([0.0, *bounds[:-1]], bounds, strict=True))
    picked = [(lo, hi) for lo, hi in edges if hi > low and lo < high]
    return Survey(margin, low, high, tuple(relative(bounds, lo, hi, margin) for lo, hi in picked))


# ---------------------------------------------------------------- words


def quantile_name(quantile: float) -> str:
    """0.99 -> P99."""
    return f"P{quantile * 100:g}"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds for people (inf and None say so)."""
    if seconds is None or not math.isfinite(seconds):
        return "inf" if seconds is not None and seconds > 0 else "n/a"
    return f"{_number(seconds * 1e3)} ms"


def _pct(ratio: float) -> str:
    return f"+{ratio:.0%}" if math.isfinite(ratio) else "unbounded"


def describe(res: Resolution, quantile: float, *, absolute: bool = False) -> str:
    """What the layout lets the quantile guard claim, for people: where the reference sits,
    the Fail edge with the effective margin, and whether "within" can be resolved."""
    q = quantile_name(quantile)
    if absolute:
        where = f"limit {ms(res.bucket_hi)}"
    else:
        where = f"baseline {q} in bucket ({ms(res.bucket_lo)}, {ms(res.bucket_hi)}]"
    if res.fail_edge is None:
        fail = f"{q} cannot fail at these buckets (no bound that high)"
    else:
        fail = f"{q} fails above {ms(res.fail_edge)}, effective margin {_pct(res.effective_margin)}"
    if res.resolvable:
        within = f"within resolvable at {ms(res.pass_edge)}"
    elif absolute:
        within = "within unresolvable: no bound at or below the limit"
    else:
        within = (
            f"within {_pct(res.margin)} unresolvable (the bucket is "
            f"{_number(res.resolution + 1.0, 3)}x wide; finer --custom-histogram-buckets "
            "resolve it)"
        )
    return f"{where}; {fail}; {within}"


def geometric(low: float, high: float, step: float = 0.10) -> tuple[float, ...]:
    """Bounds from `low` to at least `high`, each at most (1 + step) x the one before (3
    significant digits, rounded down so no bucket is wider than the step). ValueError on
    bounds that are not positive and finite, high below low, or a step outside (0, 10]."""
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise ValueError(f"layout range must be 0 < low <= high, got {low:g} to {high:g}")
    if not (math.isfinite(step) and 0 < step <= 10):
        raise ValueError(f"layout step must be within (0, 10], got {step:g}")
    out = [_round_down(low)]
    while out[-1] < high * (1.0 - REL_TOL):
        nxt = _round_down(out[-1] * (1.0 + step))
        if nxt <= out[-1]:  # the step is below the rounding: one unit in the last digit
            nxt = _next_up(out[-1])
        out.append(nxt)
        if len(out) > _MAX_BOUNDS:
            raise ValueError(
                f"a {step:.0%} layout from {low:g} to {high:g} needs over {_MAX_BOUNDS} bounds"
            )
    return tuple(out)


def _round_down(x: float) -> float:
    exp = math.floor(math.log10(x)) - (_DIGITS - 1)
    unit = 10.0**exp
    return float(f"{math.floor(x / unit * (1.0 + 1e-12)) * unit:.{_DIGITS}g}")


def _next_up(x: float) -> float:
    exp = math.floor(math.log10(x)) - (_DIGITS - 1)
    unit = 10.0**exp
    return float(f"{(round(x / unit) + 1) * unit:.{_DIGITS + 1}g}")


def resolving_layout(median: float, tail: float, margin: float = 0.10) -> tuple[float, ...]:
    """The per-token layout the plan proposes: steps of `margin` (at most 10%) from half the
    expected median to five times the expected tail quantile, so a quantile anywhere in that
    range sits in a bucket no wider than the margin."""
    step = min(margin, 0.10) if margin > 0 else 0.10
    return geometric(0.5 * median, 5.0 * max(tail, median), step)
