"""alpha of one canary pool over one window, the way the controller judges it.

The three steps every evaluation takes for a slice, in one place so the controller, the
backtest and the coverage tests cannot drift apart: size the pods' time blocks from the
requests' lives (core/blocksize.py), estimate alpha over those batches with the slice's
learned between-request variance as a prior (core/acceptance.py, core/spread.py), and learn
from the window's own standard error. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from alphagate.core import acceptance, blocksize, spread
from alphagate.core.blocksize import BlockPlan
from alphagate.core.model import Estimate, PoolObservation
from alphagate.core.spread import Spread


@dataclass(frozen=True, slots=True)
class PoolAlpha:
    """The estimate (None: no drafts), the blocks it used and what the slice learned."""

    estimate: Estimate | None
    plan: BlockPlan
    learned: Spread | None


def estimate(
    pool: PoolObservation,
    *,
    confidence: float,
    batch_seconds: float | None,
    scrape_interval: float | None,
    learned: Spread | None,
    now: float,
    window_seconds: float,
) -> PoolAlpha:
    """alpha of `pool` over the window; `batch_seconds` None sizes blocks automatically."""
    plan = blocksize.plan(
        pool.acceptance,
        pool.lives,
        configured=batch_seconds,
        scrape_interval=scrape_interval,
        confidence=confidence,
    )
    prior = spread.prior(learned, plan.requests, now=now)
    e = acceptance.estimate(
        pool.acceptance,
        confidence=confidence,
        batch_seconds=plan.seconds,
        inflation=plan.inflation,
        prior=prior,
        requests=plan.requests,
    )
    own, alpha = (e.own_std_error, e.value) if e is not None else (math.nan, math.nan)
    after = spread.learn(learned, own, plan.requests, alpha, now=now, window_seconds=window_seconds)
    return PoolAlpha(e, plan, after)
