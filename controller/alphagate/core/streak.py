"""A fail streak judged on the pooled evidence of its disjoint windows.

Two failing windows in a row (`core.machine`) ask each window to clear the gate alone. On thin,
bursty traffic (one canary pod on the code-completion trace: 1,000-4,000 drafts a window in a
few bursts, 3-8 degrees of freedom) a window at a true 0.45 often cannot: its upper bound lands
at 0.55-0.60, the window is Inconclusive and the streak starts over, though its alpha (0.47,
say) is evidence against the canary all the same. Here the judged windows of the current
*run* (back to back, no judged Pass between them, at most `consecutiveWindows` + 1 of them:
one more than the streak needs, to carry a window that could not decide) are pooled, as one
longer window would be: the ratio over their draft tokens, the variance sum (w_i se_i)^2
with w_i a window's share of the tokens (disjoint windows share no draft; a request
straddling their boundary is the blocks' inflation, already in each se; each se is the one
its window's upper bound used), and Welch-Satterthwaite degrees of freedom. One pod's windows
of time blocks rest on one dispersion across their blocks (`acceptance._blocks_of_one_pod`),
so pooled, their blocks share it: the dof add up (a thin window of one or two dof no longer
holds the run to Welch's two), on the larger of the two variances. The last j windows
(j = 2..n + 1) fail together when their pooled upper bound at the joint level a^min(j, n)
(`pace.pooled_levels`, a = (1 - confidence) / 2) is below disableBelow: the evidence of
min(j, n) failing windows, weighed once. Each j spends at most N a^min(j, n) a day at a
truth on the gate (`pace.budget` counts them); inside the band far less.

A window without an interval (too few batches) adds nothing and breaks nothing: it holds no
evidence either way. A judged Pass, a gap of more than a window, or any move of the state
machine (`moves.move`) ends the run. The windows live in `Memory.run`. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

from alphagate.config import AcceptanceGate
from alphagate.core import pace
from alphagate.core.model import AlphaWindow, Estimate, Verdict
from alphagate.core.stats import t_quantile

MIN_DOF: Final = 3.0
"""Degrees of freedom the pooled run needs, as a decisive window does (`checks.MIN_DECISIVE_DOF`:
a t far in its tail on one or two dof rests on pods agreeing by chance)."""


def window_of(e: Estimate | None, *, end: float, min_drafts: float) -> AlphaWindow | None:
    """What a run keeps of one window's alpha: None without an honest interval (no evidence)
    or with fewer than `min_drafts` drafts (acceptance.minDrafts: too little to weigh)."""
    if e is None or not e.conclusive or not e.drafts >= min_drafts:
        return None
    se, dof = e.fail_side
    if not (math.isfinite(e.value) and math.isfinite(se) and se >= 0 and dof > 0):
        return None
    if not e.draft_tokens > 0:
        return None
    prior = e.prior_dof if math.isfinite(e.prior_dof) and 0 <= e.prior_dof <= dof else 0.0
    blocks = math.isfinite(e.fail_std_error)  # one pod's time blocks (`acceptance`)
    return AlphaWindow(
        end=end,
        value=e.value,
        tokens=e.draft_tokens,
        se=se,
        dof=dof,
        prior_dof=prior,
        blocks=blocks,
    )


def extend(
    run: tuple[AlphaWindow, ...],
    verdict: Verdict,
    window: AlphaWindow | None,
    *,
    adjacent: bool,
    keep: int,
) -> tuple[AlphaWindow, ...]:
    """The run after one judged window: a Pass ends it, an Error leaves it as it is, a gap
    since the last judged window starts it over; a window with evidence joins it (the last
    `keep` stay)."""
    if verdict is Verdict.PASS:
        return ()
    if verdict is Verdict.ERROR:
        return run
    kept = run if adjacent else ()
    if window is None:
        return kept
    return (*kept, window)[-max(1, keep) :]


@dataclass(frozen=True, slots=True)
class Pooled:
    """The pooled alpha of the run's last `windows` windows, its upper bound at `level`
    (one-sided) and whether that bound is below the gate."""

    windows: int
    value: float
    std_error: float
    dof: float
    level: float
    upper: float
    fails: bool
    shortfall: float = 0.0  # bands (enableAbove - disableBelow) the pooled alpha lies below
    look: float = 0.0  # an early look's share of a probe's first window (`core.looks`); 0: a run

    def fields(self) -> dict[str, float]:
        """The transition evidence (for people; code reads the fields)."""
        if self.look > 0:
            return {
                "look_fraction": self.look,
                "look_alpha": self.value,
                "look_upper": self.upper,
                "look_level": self.level,
            }
        return {
            "pooled_windows": float(self.windows),
            "pooled_alpha": self.value,
            "pooled_upper": self.upper,
            "pooled_level": self.level,
        }

    def text(self, to_fail: int) -> str:
        """Why it fails, for people."""
        if self.look > 0:
            return (
                f"an early look at {self.look:.0%} of the first window: alpha {self.value:.3f}, "
                f"its bound at the look's spent level {self.level:.2g} {self.upper:.3f} clears "
                f"the gate"
            )
        return (
            f"the last {self.windows} windows pooled: alpha {self.value:.3f}, its bound at the "
            f"joint level of {to_fail} windows {self.upper:.3f} clears the gate"
        )


def _one_dispersion(windows: tuple[AlphaWindow, ...], total: float) -> tuple[float, float]:
    """(variance, dof) of the pooled alpha of one pod's block windows under one dispersion:
    each window's dispersion se^2 T weighed by its own dof, over the run's tokens, on the
    dof of all their blocks (the learned prior's counted once)."""
    own = [max(0.0, w.dof - w.prior_dof) for w in windows]
    prior = max(w.prior_dof for w in windows)
    weights = [d + prior / len(windows) for d in own]
    mass = math.fsum(weights)
    if not mass > 0:
        return math.nan, 0.0
    dispersion = math.fsum(
        k * w.se * w.se * w.tokens for k, w in zip(weights, windows, strict=True)
    )
    return dispersion / mass / total, math.fsum(own) + prior


def pool(windows: tuple[AlphaWindow, ...], *, level: float, gate: float) -> Pooled | None:
    """The pooled estimate of `windows` and its one-sided upper bound at `level`; None when
    they hold no tokens.

    Welch-Satterthwaite over the windows' own variances; for one pod's time blocks (the
    window's bound already rests on one dispersion across its blocks, `acceptance`) the
    blocks of all the windows share that dispersion, so their dof add up (one window of two
    dof no longer holds the run to two), on the larger of the two variances."""
    total = math.fsum(w.tokens for w in windows)
    if not windows or not total > 0:
        return None
    value = math.fsum(w.value * w.tokens for w in windows) / total
    terms = [(w.tokens / total * w.se) ** 2 for w in windows]
    var = math.fsum(terms)
    denom = math.fsum(t * t / w.dof for t, w in zip(terms, windows, strict=True))
    dof = var * var / denom if denom > 0 else math.inf
    if all(w.blocks for w in windows):
        common, blocks = _one_dispersion(windows, total)
        if math.isfinite(common) and blocks > dof:
            var, dof = max(var, common), blocks
    se = math.sqrt(var)
    q = t_quantile(1.0 - level, dof) if math.isfinite(dof) else t_quantile(1.0 - level, 1e9)
    upper = value + q * se
    ok = dof >= MIN_DOF and math.isfinite(upper)
    return Pooled(len(windows), value, se, dof, level, upper, ok and upper < gate)


def test(
    run: tuple[AlphaWindow, ...], *, confidence: float, windows: int, gate: float
) -> Pooled | None:
    """The first failing pooled test over the run's last j windows (`pace.pooled_levels`:
    j = 2..`windows` + 1), else the last one tried; None with fewer than two windows in the
    run. The last window alone is `checks.decisive`'s."""
    if len(run) < 2 or windows < 2:
        return None
    last: Pooled | None = None
    for j, level in pace.pooled_levels(confidence, windows):
        if j > len(run):
            break
        last = pool(run[-j:], level=level, gate=gate)
        if last is not None and last.fails:
            return last
    return last


def after(
    run: tuple[AlphaWindow, ...],
    verdict: Verdict,
    window: AlphaWindow | None,
    adjacent: bool,
    gate: AcceptanceGate,
) -> tuple[tuple[AlphaWindow, ...], Pooled | None]:
    """The run after one judged window, and its pooled test when that fails (else None)."""
    n = gate.consecutive_windows
    run = extend(run, verdict, window, adjacent=adjacent, keep=n + 1)
    if verdict is Verdict.PASS or window is None:
        return run, None
    pooled = test(run, confidence=gate.confidence, windows=n, gate=gate.disable_below)
    if pooled is None or not pooled.fails:
        return run, None
    band = gate.enable_above - gate.disable_below
    below = (gate.disable_below - pooled.value) / band if band > 0 else 0.0
    return run, replace(pooled, shortfall=max(0.0, below))
