"""A between-request variance of alpha learned over the last hour, as a prior for each window.

Most requests accept alike and a few accept badly (a prompt the drafter cannot follow). A
window's batches measure the spread only through the bad requests that happen to fall in it:
a window that caught fewer than its share reads high *and* narrow, so the truth falls below its
lower bound (the bound a Pass relies on) more often than the nominal 2.5% (6-8% on such
traffic). The remedy is the textbook one for a variance estimated from few units: shrink it
toward a pooled one (a moderated variance, as in Smyth's empirical-Bayes t, 2004). What is
pooled is the variance per effective finished request, se^2 x n over the windows of the last
hour (n: Kish's effective number of requests the window finished, weighted by decode time); a
window of n requests gets the prior variance V / n with `PRIOR_DOF` degrees of freedom:

    se'^2 = (PRIOR_DOF V / n + dof se^2) / (PRIOR_DOF + dof),   dof' = PRIOR_DOF + dof

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
    """What a slice learned (kept in Memory): the variance per effective request, how many
    windows' worth of evaluations it rests on, and when it was last updated."""

    model_config = ConfigDict(frozen=True)

    variance: float
    windows: float
    at: float


@dataclass(frozen=True, slots=True)
class Prior:
    """The prior variance of one window's alpha (V / n) and the dof it counts for."""

    variance: float
    dof: float = PRIOR_DOF


def _weight(s: Spread, now: float) -> float:
    """The windows' worth `s` still carries at `now`."""
    return s.windows * math.exp(-max(0.0, now - s.at) / HORIZON_SECONDS)


def prior(learned: Spread | None, requests: float, *, now: float) -> Prior | None:
    """The prior for a window of `requests` effective finished requests; None while too
    little has been learned (or forgotten since) or the request count is unknown."""
    if learned is None or not (math.isfinite(requests) and requests > 0):
        return None
    if _weight(learned, now) < MIN_WINDOWS or not (learned.variance > 0):
        return None
    return Prior(learned.variance / requests, PRIOR_DOF)


def learn(
    learned: Spread | None,
    std_error: float,
    requests: float,
    *,
    now: float,
    window_seconds: float,
) -> Spread | None:
    """`learned` updated with one window's own standard error (before any prior) and its
    effective request count; unchanged when either is unusable."""
    if not (math.isfinite(std_error) and std_error > 0 and math.isfinite(requests)):
        return learned
    if not (requests > 0 and window_seconds > 0):
        return learned
    value = std_error * std_error * requests
    if learned is None:
        return Spread(variance=value, windows=1.0, at=now)
    # overlapping windows read every interval each add the new part of a window
    fresh = min(1.0, max(0.0, now - learned.at) / window_seconds)
    if fresh <= 0:
        return learned
    kept = _weight(learned, now)
    total = kept + fresh
    return Spread(variance=(kept * learned.variance + fresh * value) / total, windows=total, at=now)


def moderated(std_error: float, dof: float, p: Prior) -> tuple[float, float]:
    """(se', dof') of a window shrunk toward the prior (see the module docstring)."""
    var = (p.dof * p.variance + dof * std_error * std_error) / (p.dof + dof)
    return math.sqrt(var), p.dof + dof
