"""Admitting requests into an engine: each one's output length, its own acceptance (drawn
around the pod's alpha, or from a mixture when a share of the traffic is bad requests), its
slowness under a tail-only regression, and when its first token comes (queueing, then
prefill). Apart from the engine's tick because it is what a request *is*; the tick is when
it runs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from alphagate_lab.sim.acceptance import draw_request_alpha
from alphagate_lab.sim.decode import Load, output_lengths
from alphagate_lab.sim.inflight import (
    ACC,
    ARR,
    DRAWN,
    FIRST,
    LEN,
    Q_LEN,
    Q_PROMPT,
    REM,
    ROWS,
    SET,
    SLOW,
    STEPS,
    FloatArray,
)


class Admitted(NamedTuple):
    """Requests just admitted: their columns, when their decoding starts (local time, capped
    at the tick's end), (queue wait, time to first token) for each, and their prompt tokens."""

    requests: FloatArray
    start: FloatArray
    waits: FloatArray
    prompt_tokens: float


def admit(
    rng: np.random.Generator,
    at: FloatArray,
    arrived: FloatArray,
    x: FloatArray,
    *,
    t0: float,
    dt: float,
    alpha: float,
    load: Load,
    prefill_one: float,
    k: int,
    alpha_offset: float,
    jitter: float,
    tail_share: float,
    tail_factor: float,
) -> Admitted:
    """New requests admitted at local times ``at`` (arrived at ``arrived``; ``x`` their
    output lengths and prompts, NaN where the model draws them)."""
    n = at.size
    sigma = jitter
    z = rng.standard_normal(2 * n)
    out = np.empty((ROWS, n))
    nan = np.isnan(x)
    # The usual case, nothing replayed: no per-row choice (ndarray.all, less its wrapper).
    model_drawn = bool(np.logical_and.reduce(nan, axis=None))
    drawn = output_lengths(z[:n], load)
    out[LEN] = drawn if model_drawn else np.where(nan[Q_LEN], drawn, np.maximum(x[Q_LEN], 1.0))
    np.subtract(out[LEN], 1.0, out=out[REM])
    set_alpha = min(max(load.alpha + alpha_offset, 0.0), 1.0)
    out[SET] = set_alpha
    out[DRAWN] = alpha
    if k:
        per_draft = load.draft_fill * k
        if load.bad_share > 0:
            _draw_mixture(rng, out, alpha, set_alpha, load, per_draft)
        else:
            out[ACC] = draw_request_alpha(rng, n, alpha, load.request_spread, per_draft)
    else:
        out[ACC] = alpha
    out[SLOW] = 1.0
    if tail_share > 0 and tail_factor != 1.0:
        out[SLOW][rng.random(n) < tail_share] = tail_factor
    pre: FloatArray | float
    if model_drawn:  # n model prompts: an exact integer sum
        pre, prompt_tokens = prefill_one, float(load.prompt_tokens * n)
    else:
        prompts, nan_p = x[Q_PROMPT], nan[Q_PROMPT]
        pre = np.where(nan_p, prefill_one, prompts * (prefill_one / load.prompt_tokens))
        prompt_tokens = float(np.where(nan_p, load.prompt_tokens, prompts).sum())
    first = z[n:] * sigma  # at + pre * exp(z * sigma - sigma^2 / 2), in place
    first -= sigma * sigma / 2
    np.exp(first, out=first)
    first = pre * first
    first += at
    out[ARR] = arrived + t0
    out[FIRST] = first + t0
    out[STEPS] = 0.0
    waits = np.empty((2, n))
    waits[0] = at - arrived
    waits[1] = first - arrived
    return Admitted(out, np.minimum(first, dt), waits, prompt_tokens)


def _draw_mixture(
    rng: np.random.Generator,
    out: FloatArray,
    alpha: float,
    set_alpha: float,
    load: Load,
    per_draft: float,
) -> None:
    """Own acceptances when a share of requests are bad ones (Beta around ``bad_alpha``):
    the good ones are drawn around the alpha that keeps the drafts' mean at ``alpha``."""
    n = out.shape[1]
    bad = np.less(rng.random(n), load.bad_share)
    nb = int(np.count_nonzero(bad))
    good_alpha = mixture_good_alpha(alpha, load.bad_share, load.bad_alpha, per_draft)
    acc = np.empty(n)
    acc[~bad] = draw_request_alpha(rng, n - nb, good_alpha, load.request_spread, per_draft)
    acc[bad] = draw_request_alpha(rng, nb, load.bad_alpha, load.bad_spread, per_draft)
    out[ACC] = acc
    good_set = mixture_good_alpha(set_alpha, load.bad_share, load.bad_alpha, per_draft)
    out[SET] = np.where(bad, load.bad_alpha, good_set)
    out[DRAWN] = np.where(bad, load.bad_alpha, good_alpha)


def mixture_good_alpha(alpha: float, share: float, bad_alpha: float, per_draft: float) -> float:
    """The good requests' alpha when a ``share`` of requests are bad (drafts-weighted mean
    ``bad_alpha``) and the drafts' overall mean must be ``alpha``.

    A request of acceptance ``a`` verifies drafts in proportion to ``1 / (1 + c*a)``
    (``c = per_draft``) and the draws are tilted so that its component's drafts follow its Beta
    (sim.acceptance), so a component's share of the drafts is its share of the requests over
    ``1 + c * mean``. Solving ``alpha = (1 - w) * good + w * bad_alpha`` for ``good``: clipped
    to [0, 1] (an alpha the mixture cannot reach gets the nearest it can)."""
    if share <= 0:
        return alpha
    b = share / (1.0 + per_draft * bad_alpha)
    g = 1.0 - share
    den = g + b * per_draft * (bad_alpha - alpha)
    if den <= 0:
        return 1.0
    return min(max((g * alpha + b * (alpha - bad_alpha)) / den, 0.0), 1.0)
