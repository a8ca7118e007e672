"""A between-request variance of alpha learned over the last hour, as a prior for each window.

Most requests accept alike and a few accept badly (a prompt the drafter cannot follow). A
window's batches measure the spread only through the bad requests that happen to fall in it:
a window that caught fewer than its share reads high *and* narrow, so the truth falls below its
lower bound (the bound a Pass relies on) more often than the nominal 2.5% (6-8% on such
traffic). The remedy is the textbook one for a variance estimated from few units: shrink it
toward a pooled one (a moderated variance, as in Smyth's empirical-Bayes t, 2004). What is
pooled is the variance per effective finished request in units of alpha (1 - alpha),
V = se^2 n / (alpha (1 - alpha)) over the windows of the last hour (n: Kish's effective number
of requests the window finished, weighted by decode time); a window of n requests at alpha a
gets the prior variance V a (1 - a) / n with `PRIOR_DOF` degrees of freedom:

    se'^2 = (PRIOR_DOF V a (1 - a) / n + dof se^2) / (PRIOR_DOF + dof),   dof' = PRIOR_DOF + dof

The scale is alpha (1 - alpha) because a request's accepted share lies in [0, 1]: its spread
shrinks to nothing as alpha nears 0 or 1. Carried unscaled, a variance learned at alpha 0.97
gave a canary that then accepted nearly nothing (alpha 0.005 over 800 drafts in the real-vLLM
e2e) the interval [0, 1]: Korn-Graubard's effective size, alpha (1 - alpha) / se^2, was ~0.

It is learned only from the same slice's own conclusive windows (time-weighted: one whole
window's worth per window length of evaluations, forgetting with a one-hour time constant) and
used once at least `MIN_WINDOWS` windows' worth remains, so a new canary and one that was off
for hours start from their own windows alone. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel, ConfigDict

# Degrees of freedom the learned variance counts for in a window's interval.
PRIOR_DOF: Final = 40.0
# Windows' worth of learning before the prior is used, and the forgetting time constant.
MIN_WINDOWS: Final = 3.0
HORIZON_SECONDS: Final = 3600.0


class Spread(BaseModel):
    """What a slice learned (kept in Memory): the variance per effective request in units of
    alpha (1 - alpha), how many windows' worth of evaluations it rests on, and when it was last
    updated."""

    model_config = ConfigDict(frozen=True)

    scaled_variance: float
    windows: float
    at: float


@dataclass(frozen=True, slots=True)
class Prior:
    """The prior variance of one window's alpha in units of alpha (1 - alpha) (V / n), and the
    dof it counts for."""

    scaled_variance: float
    dof: float = PRIOR_DOF

    def variance(self, alpha: float) -> float:
        """The prior variance of a window whose alpha is `alpha`."""
        return self.scaled_variance * _pq(alpha)


def _pq(alpha: float) -> float:
    return alpha * (1.0 - alpha) if 0.0 <= alpha <= 1.0 else math.nan


def _weight(s: Spread, now: float) -> float:
    """The windows' worth `s` still carries at `now`."""
    return s.windows * math.exp(-max(0.0, now - s.at) / HORIZON_SECONDS)


def prior(learned: Spread | None, requests: float, *, now: float) -> Prior | None:
    """The prior for a window of `requests` effective finished requests; None while too
    little has been learned (or forgotten since) or the request count is unknown."""
    if learned is None or not (math.isfinite(requests) and requests > 0):
        return None
    if _weight(learned, now) < MIN_WINDOWS or not (learned.scaled_variance > 0):
        return None
    return Prior(learned.scaled_variance / requests, PRIOR_DOF)


def learn(
    learned: Spread | None,
    std_error: float,
    requests: float,
    alpha: float,
    *,
    now: float,
    window_seconds: float,
) -> Spread | None:
    """`learned` updated with one window's own standard error (before any prior), its
    effective request count and its alpha; unchanged when any is unusable (alpha 0 or 1 has
    no scale to learn on)."""
    if not (math.isfinite(std_error) and std_error > 0 and math.isfinite(requests)):
        return learned
    if not (requests > 0 and window_seconds > 0 and _pq(alpha) > 0):
        return learned
    value = std_error * std_error * requests / _pq(alpha)
    if learned is None:
        return Spread(scaled_variance=value, windows=1.0, at=now)
    # overlapping windows read every interval each add the new part of a window
    fresh = min(1.0, max(0.0, now - learned.at) / window_seconds)
    if fresh <= 0:
        return learned
    kept = _weight(learned, now)
    total = kept + fresh
    variance = (kept * learned.scaled_variance + fresh * value) / total
    return Spread(scaled_variance=variance, windows=total, at=now)


def moderated(std_error: float, dof: float, p: Prior, alpha: float) -> tuple[float, float]:
    """(se', dof') of a window at `alpha` shrunk toward the prior (the module docstring)."""
    var = (p.dof * p.variance(alpha) + dof * std_error * std_error) / (p.dof + dof)
    return math.sqrt(var), p.dof + dof
