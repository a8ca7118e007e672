"""The speed-up model of speculative decoding: what a given alpha buys at a given draft length.

Pure arithmetic (stdlib only) shared by the planning commands and the decision core's predicted
speed-up. Conventions:

* ``alpha`` is the draft acceptance rate as vLLM's counters give it: accepted draft tokens /
  proposed draft tokens. With that definition ``1 + K*alpha`` is exactly vLLM's mean acceptance
  length (``1 + accepted/drafts``) when every draft has K tokens, i.e. the tokens one request
  gets per target forward pass. (Read as a per-position acceptance probability ``p``, as the
  lesson does, ``1 + K*p`` is an upper bound; see :func:`tokens_per_pass_from_position_rate`.)
* ``overhead`` (the lesson's epsilon) is the extra cost of one speculative step relative to a
  plain decode step: running the draft plus verifying K+1 positions instead of one.

The plain model ``S = (1 + K*alpha) / (1 + overhead)`` is the lesson's. It treats the overhead as
a constant, which only holds while decoding is memory-bound (small batches): then verifying K+1
positions costs almost the same weight reads as decoding one. :func:`overhead_at` adds the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

DEFAULT_RIDGE_TOKENS: Final = 256.0
"""Tokens per engine step at which a step's compute time equals its weight-read time.

The batch at which decoding turns compute-bound on the roofline: about 150-300 for a 70B model
in FP8 on an H100 once KV-cache reads are counted. 256 is also the lesson's "high concurrency"
point, and with it the practical break-even at that concurrency lands near 0.5 for any K."""

SHARE_TOLERANCE: Final = 0.01
"""How far traffic shares may sum from 1 (people type 0.33/0.33/0.33)."""


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"K (num_speculative_tokens) must be an integer, got {k!r}")
    if k < 1:
        raise ValueError(f"K (num_speculative_tokens) must be at least 1, got {k}")


def _check_overhead(overhead: float) -> None:
    if not math.isfinite(overhead) or overhead < 0:
        raise ValueError(f"overhead must be a finite number >= 0, got {overhead}")


def _check_ratio(name: str, value: float) -> None:
    if not (0.0 <= value <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be within [0, 1], got {value}")


def _check_concurrency(concurrency: float) -> None:
    if not math.isfinite(concurrency) or concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")


def _check_ridge(ridge_tokens: float) -> None:
    if not math.isfinite(ridge_tokens) or ridge_tokens <= 0:
        raise ValueError(f"ridge_tokens must be a finite number > 0, got {ridge_tokens}")


def tokens_per_pass(alpha: float, k: int) -> float:
    """Tokens one request gets per target pass: 1 + K*alpha (vLLM's mean acceptance length)."""
    _check_ratio("alpha", alpha)
    _check_k(k)
    return 1.0 + k * alpha


def tokens_per_pass_from_position_rate(p: float, k: int) -> float:
    """Expected tokens per pass when each draft position is accepted with probability `p`
    until the first rejection: 1 + p + ... + p**K. Below 1 + K*p for p < 1."""
    _check_ratio("per-position acceptance", p)
    _check_k(k)
    return math.fsum(p**i for i in range(k + 1))


def alpha_from_position_rate(p: float, k: int) -> float:
    """The alpha vLLM's counters report (accepted/proposed) for a per-position rate `p`:
    first-rejection-stops makes it lower than `p` (p 0.8, K 5 gives 0.54)."""
    return (tokens_per_pass_from_position_rate(p, k) - 1.0) / k


def speedup(alpha: float, k: int, overhead: float) -> float:
    """The lesson's S = (1 + K*alpha) / (1 + overhead): 4.09 for alpha 0.7, K 5, overhead 0.1."""
    _check_overhead(overhead)
    return tokens_per_pass(alpha, k) / (1.0 + overhead)


def predicted(alpha: float, *, k: int, breakeven: float) -> float:
    """The speed-up a policy predicts at `alpha`: the lesson's S with the overhead that makes
    S = 1 at the policy's own break-even alpha (its gate, disableBelow), overhead = K *
    breakeven. The gate already carries the concurrency the policy was set for, so there is no
    separate overhead to assume (1.0 at the gate, above 1 above it)."""
    _check_k(k)
    _check_ratio("breakeven", breakeven)
    return speedup(alpha, k, k * breakeven)


def breakeven_alpha(k: int, overhead: float) -> float:
    """Alpha at which S = 1: overhead / K (0.03 for K 5, overhead 0.15).

    May exceed 1 when the overhead is larger than K: then no alpha pays."""
    _check_k(k)
    _check_overhead(overhead)
    return overhead / k


def alpha_for(target_speedup: float, k: int, overhead: float) -> float | None:
    """The alpha needed for `target_speedup`, or None when even alpha = 1 cannot reach it.

    Returns 0.0 when the target is met without any accepted token (target <= 1/(1+overhead))."""
    _check_k(k)
    _check_overhead(overhead)
    if not math.isfinite(target_speedup) or target_speedup <= 0:
        raise ValueError(f"target speed-up must be a finite number > 0, got {target_speedup}")
    needed = (target_speedup * (1.0 + overhead) - 1.0) / k
    if needed > 1.0 + 1e-12:
        return None
    return min(1.0, max(0.0, needed))


def max_speedup(k: int, overhead: float) -> float:
    """The ceiling at alpha = 1: (1 + K) / (1 + overhead)."""
    return speedup(1.0, k, overhead)


# ------------------------------------------------------------------ concurrency-aware variant


def overhead_at(
    concurrency: float,
    k: int,
    overhead: float,
    *,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
) -> float:
    """Effective overhead of a speculative step when `concurrency` requests share each step.

    Model (a two-term roofline, chosen because it is the lesson's argument made quantitative
    and has one physical parameter). One engine step costs the weight read ``W`` plus compute
    per token in the batch ``C``; ``ridge_tokens = W / C`` is the batch at which the two are
    equal. A plain step decodes ``c`` tokens: ``W + c*C``. A speculative step verifies ``c*(K+1)``
    positions and runs the draft (``overhead * W``, the small-batch epsilon):
    ``W*(1 + overhead) + c*(K+1)*C``. The effective overhead is their ratio minus one::

        overhead(c) = (overhead + c*K/ridge) / (1 + c/ridge)

    At small ``c`` this is the lesson's constant epsilon (verification rides on the same weight
    read). As the batch fills, the weight read is already shared by many sequences and the K
    extra verified positions cost real compute, so the overhead climbs toward K: at
    ``c = ridge`` it is about K/2, which puts the break-even alpha near 0.5 (0.515 for K 5,
    overhead 0.15, c 256): the lesson's practical 0.45-0.55. Rejected positions are paid for
    all the same, which is why the overhead does not depend on alpha. A linear
    ``overhead0 + beta*c*(K+1)`` was rejected because it grows without bound (break-even above 1
    at large batches) and its ``beta`` has no physical reading.
    """
    _check_concurrency(concurrency)
    _check_k(k)
    _check_overhead(overhead)
    _check_ridge(ridge_tokens)
    x = concurrency / ridge_tokens
    return (overhead + x * k) / (1.0 + x)


def speedup_at(
    alpha: float,
    k: int,
    overhead: float,
    concurrency: float,
    *,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
) -> float:
    """Throughput speed-up per request at `concurrency` (see :func:`overhead_at`)."""
    eff = overhead_at(concurrency, k, overhead, ridge_tokens=ridge_tokens)
    return tokens_per_pass(alpha, k) / (1.0 + eff)


def breakeven_alpha_at(
    k: int,
    overhead: float,
    concurrency: float,
    *,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
) -> float:
    """Alpha at which speculation stops paying at `concurrency` (~0.5 at c = ridge)."""
    return overhead_at(concurrency, k, overhead, ridge_tokens=ridge_tokens) / k


def alpha_for_at(
    target_speedup: float,
    k: int,
    overhead: float,
    concurrency: float,
    *,
    ridge_tokens: float = DEFAULT_RIDGE_TOKENS,
) -> float | None:
    """The alpha needed for `target_speedup` at `concurrency`, None if unreachable."""
    eff = overhead_at(concurrency, k, overhead, ridge_tokens=ridge_tokens)
    return alpha_for(target_speedup, k, eff)


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
    _check_ratio("alpha", alpha)
    _check_k(k)
    _check_overhead(overhead)
    _check_ridge(ridge_tokens)
    gain = k * alpha
    if gain >= k:  # alpha = 1: overhead(c) < K for every finite c
        return None
    if gain <= overhead:
        return 1.0
    # (overhead + x*K) / (1 + x) = gain  ->  x = (gain - overhead) / (K - gain)
    c = ridge_tokens * (gain - overhead) / (k - gain)
    return max(1.0, c)


# ------------------------------------------------------------------ traffic mixes


def _mix_items(
    mix: Mapping[str, tuple[float, float]] | Iterable[tuple[float, float]],
) -> list[tuple[str, float, float]]:
    if isinstance(mix, Mapping):
        return [(str(name), float(sa[0]), float(sa[1])) for name, sa in mix.items()]
    return [(f"#{i}", float(share), float(a)) for i, (share, a) in enumerate(mix)]


def combined_alpha(
    mix: Mapping[str, tuple[float, float]] | Iterable[tuple[float, float]],
) -> float:
    """Traffic-weighted alpha of a mix of slices: sum(share * alpha) / sum(share).

    `mix` maps a slice name to (traffic share, alpha), or is a sequence of such pairs. Shares
    must each lie in [0, 1] and sum to 1 within SHARE_TOLERANCE; they are renormalised so
    0.33/0.33/0.33 works. 70% chat at 0.7 plus 30% code at 0.4 gives 0.61. The share should be
    of draft tokens (what alpha is a ratio of), which measured generation tokens approximate.
    """
    items = _mix_items(mix)
    if not items:
        raise ValueError("the mix is empty: give at least one slice as name=share:alpha")
    for name, share, a in items:
        if not (0.0 <= share <= 1.0):
            raise ValueError(f"slice {name}: traffic share must be within [0, 1], got {share}")
        if not (0.0 <= a <= 1.0):
            raise ValueError(f"slice {name}: alpha must be within [0, 1], got {a}")
    total = math.fsum(share for _, share, _ in items)
    if abs(total - 1.0) > SHARE_TOLERANCE:
        raise ValueError(
            f"traffic shares must sum to 1 (within {SHARE_TOLERANCE}), got {total:.4g}"
        )
    return math.fsum(share * a for _, share, a in items) / total


def effective_alpha(
    mix: Mapping[str, tuple[float, float]] | Iterable[tuple[float, float]], k: int
) -> float:
    """The pooled alpha of a mix, accepted / drafted over all slices: what the fleet's drafts
    accept and what the controller gates on.

    A slice generating a share G_s of the tokens at alpha_s makes 1 + K alpha_s tokens per
    draft step, so it drafts K G_s / (1 + K alpha_s) tokens and accepts alpha_s times that.
    70% chat at 0.7 plus 30% code at 0.4 at K = 5 gives 0.583 (the traffic-weighted 0.61
    over-counts the high-alpha slice, whose drafts each carry more tokens).
    """
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
    combined_alpha(mix)  # validates shares and alphas
    items = _mix_items(mix)
    drafted = [(share / (1.0 + k * a), a) for _, share, a in items]
    total = math.fsum(d for d, _ in drafted)
    return math.fsum(d * a for d, a in drafted) / total if total > 0 else math.nan
