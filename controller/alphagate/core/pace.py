"""How many false rollbacks a day the window rule allows, by construction.

A unit judges one whole window per `windowSeconds` (`window.judged`), N = 86,400 /
windowSeconds a day. With an honest interval, an alpha check at a truth on the gate fails a
window with probability at most a = (1 - confidence) / 2 (one-sided); with m checks that can
fail it (the combined alpha and each slice's floor), at most m a (Bonferroni). A rollback
needs n judged windows in a row to fail, which a stationary sequence completes on average
once every (1 - p^n) / ((1 - p) p^n) windows at a per-window probability p: about N p^n a day.
A decisive window (`checks.decisive`) rolls back alone when its bound clears the gate at the
level a^n x DECISIVE_SHARE, adding at most N m a^n DECISIVE_SHARE a day. The pooled evidence
of a fail run's last j = 2..n + 1 judged windows (`core.streak`: the combined alpha, one test
per j) is as strong as min(j, n) windows failing in a row when its bound clears the gate at
their joint level a^min(j, n), adding at most N (a^2 + ... + a^n + a^n) a day (`pooled_levels`).
So at a truth on the gate the shipped chat policy (one alpha check, 95%, two 300 s windows)
rolls back falsely at most 0.18 + 0.05 + 0.36 = 0.58 times a day, far fewer inside the band
(docs/decisions.md has the measured rate at 0.57). The early looks at a probe's first window
(`core.looks`) spend that window's pooled share, which it cannot spend itself, so the bound
is unchanged. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from alphagate.config import Aggregation, SpeculativeCanarySpec

DAY: Final = 86_400.0
DECISIVE_SHARE: Final = 0.25
"""A decisive window is held to a quarter of the streak's joint level: its rollbacks spend a
quarter of the streak's daily budget (0.05 of 0.22 a day at the gate, shipped chat policy)."""


def joint_level(confidence: float, windows: int) -> float:
    """One-sided level of `windows` independent windows all failing at a truth on the gate:
    ((1 - confidence) / 2) ** windows."""
    return float(((1.0 - confidence) / 2.0) ** max(1, windows))


def decisive_level(confidence: float, windows: int) -> float:
    """One-sided level at which one window's bound carries the evidence of `windows` failing
    windows: ((1 - confidence) / 2) ** windows x DECISIVE_SHARE."""
    return float(((1.0 - confidence) / 2.0) ** max(1, windows) * DECISIVE_SHARE)


def pooled_levels(confidence: float, windows: int) -> tuple[tuple[int, float], ...]:
    """(j, level) of each pooled test of a fail run (`core.streak`): its last j = 2..n + 1
    judged windows at the joint level a^min(j, n) of the n failing windows a rollback needs
    (the (n + 1)-th carries the evidence of a window that alone could not decide)."""
    n = max(1, windows)
    if n < 2:
        return ()
    return tuple((j, joint_level(confidence, min(j, n))) for j in range(2, n + 2))


def _streak_rate(p: float, n: int) -> float:
    """Completions of n failures in a row per window, at failure probability p per window
    (the inverse of the mean waiting time, the run restarting after each completion)."""
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    return float((1.0 - p) * p**n / (1.0 - p**n))


@dataclass(frozen=True, slots=True)
class Budget:
    """The rule's false rollbacks a day at a truth on the gate (an upper bound with honest
    intervals; inside the band fewer)."""

    windows_per_day: float  # judged windows a day: 86,400 / windowSeconds
    checks: int  # alpha checks that can fail a window (the combined alpha and each floor)
    window_level: float  # at most this share of judged windows fails on noise: checks x a
    consecutive: int  # failing windows in a row a rollback needs
    decisive_level: float  # one check's level for a decisive window
    pooled_level: float  # the pooled runs' levels a^2 + ... + a^n (`core.streak`)
    per_day: float  # streaks, decisive windows and pooled runs

    def fields(self) -> dict[str, float]:
        """The transition evidence a rollback carries (for people; code reads the fields)."""
        return {
            "window_level": self.window_level,
            "false_rollbacks_per_day_at_gate": self.per_day,
        }


def budget(spec: SpeculativeCanarySpec, checks: int = 1) -> Budget:
    """The per-day bound of a unit judging `checks` alpha checks a window (Bonferroni)."""
    gate = spec.acceptance
    n = gate.consecutive_windows
    m = max(1, checks)
    a = (1.0 - gate.confidence) / 2.0
    per_window = min(1.0, m * a)
    windows = DAY / spec.timing.window_seconds
    decisive = decisive_level(gate.confidence, n)
    streak = _streak_rate(per_window, n) if n > 1 else 0.0
    pooled = min(1.0, math.fsum(level for _, level in pooled_levels(gate.confidence, n)))
    alone = min(1.0, m * decisive) if n > 1 else per_window
    per_day = windows * (streak + alone + pooled)
    return Budget(windows, m, per_window, n, decisive, pooled, per_day)


def alpha_checks(spec: SpeculativeCanarySpec) -> int:
    """The alpha checks one unit judges a window: its acceptance check, and in combined
    aggregation one floor per slice with `minAlpha` (perSlice: each slice is its own unit)."""
    if spec.aggregation is Aggregation.PER_SLICE:
        return 1
    return 1 + sum(1 for s in spec.slices if s.min_alpha is not None)
