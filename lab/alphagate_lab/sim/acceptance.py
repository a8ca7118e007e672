"""Speculative acceptance: the chain inside one draft and the spread between requests.

**Inside a draft.** A draft proposes K tokens. Position ``i`` is accepted with probability
``p ** (1 + decay * i)`` given that all earlier ones were; the first rejection ends the
draft, as in vLLM. :class:`AcceptanceTable` solves ``p`` on a fine grid so that the expected
accepted tokens per draft is ``K * a``: a request whose own acceptance is ``a`` has an
accepted/drafted ratio of exactly ``a`` in expectation, however nonlinear ``p`` is in ``a``.

**Between requests.** Each request keeps its own ``a`` for its whole life. The drafts a
pod verifies are not a plain sample of its requests: a request emits ``1 + f*K*a`` tokens per
step (``f`` the draft fill), so a request that accepts well finishes its output in fewer
steps and verifies fewer drafts. Weighted as drafted tokens weight it, a request of
acceptance ``a`` counts ``w(a) = 1 / (1 + f*K*a)`` times. :func:`draw_request_alpha` draws
requests at admission from ``(1 + f*K*a) * Beta(a; alpha*kappa, (1-alpha)*kappa)``
(normalised), so the requests *in flight, weighted by their drafts*, follow
``Beta(alpha*kappa, (1-alpha)*kappa)`` exactly and the pod's long-run
``accepted / draft_tokens`` is ``alpha``. The tilt is a two-part mixture, because
``a * Beta(a; p, q)`` is ``p/(p+q) * Beta(a; p+1, q)``: no calibration table is needed.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _ge_exponents(k: int, decay: float) -> FloatArray:
    """Exponents e_j with P(A >= j) = p ** e_j (e_0 = 0)."""
    j = np.arange(k + 1, dtype=np.float64)
    return np.asarray(j + decay * j * (j - 1) / 2, dtype=np.float64)


class AcceptanceTable:
    """Accepted-token distributions over a fine alpha grid, for one (K, decay).

    Row ``i`` is the distribution of accepted tokens per draft whose mean is
    ``K * i / GRID``, found by bisection on the first-position acceptance ``p``.
    """

    GRID = 2000

    def __init__(self, k: int, decay: float) -> None:
        self.k = k
        self.decay = decay
        expo = _ge_exponents(k, decay)
        alphas = np.linspace(0.0, 1.0, self.GRID + 1)
        lo = np.zeros_like(alphas)
        hi = np.ones_like(alphas)
        for _ in range(50):
            mid = (lo + hi) / 2
            mean = (mid[:, None] ** expo[None, 1:]).sum(axis=1) / k
            below = mean < alphas
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        p = (lo + hi) / 2
        p[0], p[-1] = 0.0, 1.0
        ge = p[:, None] ** expo[None, :]
        ge[:, 0] = 1.0
        probs = ge - np.concatenate([ge[:, 1:], np.zeros((ge.shape[0], 1))], axis=1)
        probs = np.clip(probs, 0.0, None)
        self.rows: FloatArray = probs / probs.sum(axis=1, keepdims=True)

    def row_index(self, alpha: FloatArray) -> IntArray:
        """Grid rows of per-request acceptances (rounded to 1/GRID)."""
        # np.clip without its Python wrapper: maximum then minimum, NaN kept, in place.
        x = np.maximum(alpha, 0.0)
        np.minimum(x, 1.0, out=x)
        x *= self.GRID
        np.rint(x, out=x)
        idx: IntArray = x.astype(np.int64)
        return idx

    def probs(self, alpha: float) -> FloatArray:
        """Distribution of accepted tokens per draft whose mean is ``k * alpha`` (to 1/GRID)."""
        i = round(min(max(alpha, 0.0), 1.0) * self.GRID)
        row: FloatArray = self.rows[i]
        return row


@functools.lru_cache(maxsize=64)
def acceptance_table(k: int, decay: float) -> AcceptanceTable:
    """Shared, cached table (building one takes a few milliseconds)."""
    return AcceptanceTable(k, decay)


def draw_request_alpha(
    rng: np.random.Generator, n: int, alpha: float, kappa: float, tokens_per_draft: float
) -> FloatArray:
    """Own acceptances of ``n`` new requests, so that drafts see Beta(alpha, kappa).

    ``tokens_per_draft`` is ``f * K`` (draft fill times speculative tokens); see the module
    docstring for why new requests lean towards high acceptance.
    """
    if n <= 0:
        return np.zeros(0)
    a = min(max(alpha, 1e-4), 1.0 - 1e-4)
    p, q = a * kappa, (1.0 - a) * kappa
    c = tokens_per_draft
    # Beta(p + 1, q) is G / (G + H) with G ~ Gamma(p) + Exp(1), H ~ Gamma(q): scalar-shape
    # draws, several times cheaper than a beta with a shape per request.
    g = rng.standard_gamma(p, n)
    g += rng.standard_exponential(n) * (rng.random(n) < c * a / (1.0 + c * a))
    out: FloatArray = g / (g + rng.standard_gamma(q, n))
    return out


def drafted_mean(alpha: FloatArray, drafts: FloatArray) -> float:
    """The drafts-weighted mean acceptance (what the counters converge to over ``drafts``)."""
    total = float(drafts.sum())
    return float(alpha @ drafts) / total if total > 0 else float("nan")
