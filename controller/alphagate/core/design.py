"""The design effect a share's exceedance test may use: the batches' overdispersion, only where
their spread shows it.

The P99 guard counts the canary's requests above an edge over independent batches (per-pod
blocks); their spread over the binomial one is the design effect that turns the request count
into an effective one (a stall episode of one pod is one batch, not hundreds of requests). With
one canary pod a window holds about five batches: their variance has four degrees of freedom,
so independent requests read a design effect of 2-4 in a quarter of windows (chi-square(4) / 4
is above 2 with probability 0.09, above 1.5 with 0.20). Taken at face value that noise took
half the P99 test's power on a tail-only 1.5x regression (8 of 20 windows failed instead of 13
at 1,200 requests; docs/decisions.md). So the spread counts only when it is significant as
overdispersion (a chi-square dispersion test at `OVERDISPERSION` over the batches' dof) on the
Fail side; a real stall episode (a design effect of 5-50) still counts in full. A claim of
"within" (the Pass side) always counts the spread. Pure.
"""

from __future__ import annotations

import math
from typing import Final

from alphagate.core.stats import normal_sf

OVERDISPERSION: Final = 0.05  # level of the dispersion test that lets the batches' spread count


def _chi2_sf(x: float, dof: float) -> float:
    """P(chi-square(dof) >= x), Wilson-Hilferty (within 0.01 from dof 2 at these tails)."""
    if x <= 0:
        return 1.0
    h = 2.0 / (9.0 * dof)
    return normal_sf(((x / dof) ** (1.0 / 3.0) - (1.0 - h)) / math.sqrt(h))


def design_effect(se: float, share: float, total: float, dof: float = math.inf) -> float:
    """The clustered variance over the binomial one (at least 1), or 1 where `dof` batches'
    spread does not show overdispersion at `OVERDISPERSION` (or there is no spread: NaN)."""
    binomial_var = share * (1.0 - share) / total if total > 0 else 0.0
    if not (binomial_var > 0 and math.isfinite(se)):
        return 1.0
    deff = max(1.0, se * se / binomial_var)
    if math.isfinite(dof) and dof > 0 and _chi2_sf(dof * deff, dof) > OVERDISPERSION:
        return 1.0
    return deff
