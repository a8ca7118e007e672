"""The planning half of the speed-up model: per-position acceptance rates, the alpha a target
needs, the overhead at a concurrency (a two-term roofline) and traffic mixes.

The controller's half (tokens per pass, the plain speed-up, the policy's predicted speed-up,
the break-even concurrency) stays in `alphagate.core.speedup`; this module builds on it for
`plan`, `whatif` and the decode simulator. Same conventions as there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

from alphagate.core.speedup import (
    DEFAULT_RIDGE_TOKENS,
    check_k,
    check_overhead,
    check_ratio,
    check_ridge,
    speedup,
    tokens_per_pass,
)


def _check_concurrency(concurrency: float) -> None:
    if not math.isfinite(concurrency) or concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")


SHARE_TOLERANCE: Final = 0.01
"""How far traffic shares may sum from 1 (people type 0.33/0.33/0.33)."""


def tokens_per_pass_from_position_rate(p: float, k: int) -> float:
    """Expected tokens per pass when each draft position is accepted with probability `p`
    until the first rejection: 1 + p + ... + p**K. Below 1 + K*p for p < 1."""
    check_ratio("per-position acceptance", p)
    check_k(k)
    return math.fsum(p**i for i in range(k + 1))


def alpha_from_position_rate(p: float, k: int) -> float:
    """The alpha vLLM's counters report (accepted/proposed) for a per-position rate `p`:
    first-rejection-stops makes it lower than `p` (p 0.8, K 5 gives 0.54)."""
    return (tokens_per_pass_from_position_rate(p, k) - 1.0) / k


def breakeven_alpha(k: int, overhead: float) -> float:
    """Alpha at which S = 1: overhead / K (0.03 for K 5, overhead 0.15).

    May exceed 1 when the overhead is larger than K: then no alpha pays."""
    check_k(k)
    check_overhead(overhead)
    return overhead / k


def alpha_for(target_speedup: float, k: int, overhead: float) -> float | None:
    """The alpha needed for `target_speedup`, or None when even alpha = 1 cannot reach it.

    Returns 0.0 when the target is met without any accepted token (target <= 1/(1+overhead))."""
    check_k(k)
    check_overhead(overhead)
    if not math.isfinite(target_speedup) or target_speedup <= 0:
        raise ValueError(f"target speed-up must be a finite number > 0, got {target_speedup}")
    needed = (target_speedup * (1.0 + overhead) - 1.0) / k
    if needed > 1.0 + 1e-12:
        return None
    return min(1.0, max(0.0, needed))


def max_speedup(k: int, overhead: float) -> float:
    """The ceiling at alpha = 1: (1 + K) / (1 + overhead)."""
    return speedup(1.0, k, overhead)


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
    check_k(k)
    check_overhead(overhead)
    check_ridge(ridge_tokens)
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
