"""The speed-up model of speculative decoding: what a given alpha buys at a given draft length.

Pure arithmetic (stdlib only): the decision core's predicted speed-up and the insights'
break-even concurrency. The planning half (per-position rates, targets, the overhead at a
concurrency, traffic mixes) is the lab's `alphagate_lab.planning.speedup`. Conventions:

* ``alpha`` is the draft acceptance rate as vLLM's counters give it: accepted draft tokens /
  proposed draft tokens. With that definition ``1 + K*alpha`` is exactly vLLM's mean acceptance
  length (``1 + accepted/drafts``) when every draft has K tokens, i.e. the tokens one request
  gets per target forward pass. (Read as a per-position acceptance probability ``p``, as the
  lesson does, ``1 + K*p`` is an upper bound; see the lab's `tokens_per_pass_from_position_rate`.)
* ``overhead`` (the lesson's epsilon) is the extra cost of one speculative step relative to a
  plain decode step: running the draft plus verifying K+1 positions instead of one.

The plain model ``S = (1 + K*alpha) / (1 + overhead)`` is the lesson's. It treats the overhead as
a constant, which only holds while decoding is memory-bound (small batches): then verifying K+1
positions costs almost the same weight reads as decoding one. The lab's `overhead_at` adds the
batch.
"""

from __future__ import annotations

import math
from typing import Final

DEFAULT_RIDGE_TOKENS: Final = 256.0
"""Tokens per engine step at which a step's compute time equals its weight-read time.

The batch at which decoding turns compute-bound on the roofline: about 150-300 for a 70B model
in FP8 on an H100 once KV-cache reads are counted. 256 is also the lesson's "high concurrency"
point, and with it the practical break-even at that concurrency lands near 0.5 for any K."""


def check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"K (num_speculative_tokens) must be an integer, got {k!r}")
    if k < 1:
        raise ValueError(f"K (num_speculative_tokens) must be at least 1, got {k}")


def check_overhead(overhead: float) -> None:
    if not math.isfinite(overhead) or overhead < 0:
        raise ValueError(f"overhead must be a finite number >= 0, got {overhead}")


def check_ratio(name: str, value: float) -> None:
    if not (0.0 <= value <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be within [0, 1], got {value}")


def check_ridge(ridge_tokens: float) -> None:
    if not math.isfinite(ridge_tokens) or ridge_tokens <= 0:
        raise ValueError(f"ridge_tokens must be a finite number > 0, got {ridge_tokens}")


def tokens_per_pass(alpha: float, k: int) -> float:
    """Tokens one request gets per target pass: 1 + K*alpha (vLLM's mean acceptance length)."""
    check_ratio("alpha", alpha)
    check_k(k)
    return 1.0 + k * alpha


def speedup(alpha: float, k: int, overhead: float) -> float:
    """The lesson's S = (1 + K*alpha) / (1 + overhead): 4.09 for alpha 0.7, K 5, overhead 0.1."""
    check_overhead(overhead)
    return tokens_per_pass(alpha, k) / (1.0 + overhead)


def predicted(alpha: float, *, k: int, breakeven: float) -> float:
    """The speed-up a policy predicts at `alpha`: the lesson's S with the overhead that makes
    S = 1 at the policy's own break-even alpha (its gate, disableBelow), overhead = K *
    breakeven. The gate already carries the concurrency the policy was set for, so there is no
    separate overhead to assume (1.0 at the gate, above 1 above it)."""
    check_k(k)
    check_ratio("breakeven", breakeven)
    return speedup(alpha, k, k * breakeven)


# ------------------------------------------------------------------ concurrency-aware variant


def breakeven_concurrency(
    alpha: float,
    k: int,
    overhead: float,
    *,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
) -> float | None:
    """The concurrency above which speculation at `alpha` stops paying; None if it always pays.

    Solves overhead(c) = K*alpha for c. Returns 1.0 when it does not pay even at batch 1 (the
    model has no meaning below one request)."""
    check_ratio("alpha", alpha)
    check_k(k)
    check_overhead(overhead)
    check_ridge(ridge_tokens)
    gain = k * alpha
    if gain >= k:  # alpha = 1: overhead(c) < K for every finite c
        return None
    if gain <= overhead:
        return 1.0
    # (overhead + x*K) / (1 + x) = gain  ->  x = (gain - overhead) / (K - gain)
    c = ridge_tokens * (gain - overhead) / (k - gain)
    return max(1.0, c)
