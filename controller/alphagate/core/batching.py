"""Independent batches of a pool's per-pod, per-interval increments, and the ratio estimator.

Counters scraped every 30 s are not independent samples: a request keeps its acceptance (and
a pod its stalls) across scrapes, and requests never move between pods. So every pod is its own
batch, and a pod's window is cut into time blocks only when each block is at least
`batch_seconds` long. A ratio sum(num) / sum(den) over the batches gets its variance from the
spread of the batches' residuals (delta method, jackknife leverage correction, HC3) and its
degrees of freedom from Kish's effective number of batches. Shared by alpha (accepted / drafted)
and the latency guard (time per token: _sum / _count, exceedance: above / count). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class Timed(Protocol):
    """An increment of one pod over [start, end]."""

    @property
    def pod(self) -> str: ...
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...


T = TypeVar("T", bound=Timed)


def blocks(items: Iterable[T], batch_seconds: float) -> list[list[T]]:
    """Per pod, consecutive items merged into blocks spanning at least `batch_seconds`; a
    shorter tail joins the block before it. Pods keep their first-seen order."""
    by_pod: dict[str, list[T]] = {}
    for item in items:
        by_pod.setdefault(item.pod, []).append(item)
    out: list[list[T]] = []
    for pod_items in by_pod.values():
        pod_items.sort(key=lambda s: (s.start, s.end))
        cut: list[list[T]] = [[]]
        for item in pod_items:
            block = cut[-1]
            if block and block[-1].end - block[0].start >= batch_seconds:
                cut.append([item])
            else:
                block.append(item)
        last = cut[-1]
        if len(cut) > 1 and last[-1].end - last[0].start < batch_seconds:
            cut[-2].extend(cut.pop())
        out.extend(cut)
    return out


@dataclass(frozen=True, slots=True)
class Ratio:
    """sum(num) / sum(den) over independent batches, with its standard error and dof.

    `se` is NaN and `dof` 0 when fewer than two batches carry weight (no spread to learn from).
    """

    value: float
    num: float
    den: float
    se: float
    dof: float
    batches: int

    @property
    def conclusive(self) -> bool:
        return self.dof > 0 and math.isfinite(self.se)


def ratio(pairs: Sequence[tuple[float, float]], *, jackknife: bool = True) -> Ratio | None:
    """The ratio estimator over (num, den) batches; None when the denominators sum to 0.

    `jackknife` divides each squared residual by (1 - h)^2 (HC3, conservative: for two equal
    batches it doubles the unbiased variance); False divides by (1 - h) (HC2, unbiased for
    equal batches with equal spread), for batches that are sums of many requests."""
    units = [(n, d) for n, d in pairs if d > 0]
    return Denominators([d for _, d in units], jackknife=jackknife)([n for n, _ in units])


class Denominators:
    """`ratio` over batches with these denominators (all > 0), for numerators given later:
    what depends on the denominators alone (their sum, the leverages, Kish's dof) is worked
    out on the first call and kept, as a latency comparison asks for every bucket bound's
    share over the same batches. The first call runs `ratio`'s float operations in its order,
    later ones the same operations on the kept values: the same result to the bit."""

    __slots__ = ("_den", "_dens", "_dof", "_levs", "_power")

    def __init__(self, dens: Sequence[float], *, jackknife: bool = True) -> None:
        self._dens = dens
        self._power = 2 if jackknife else 1
        self._den = math.nan
        self._levs: list[float] | None = None  # None: not worked out yet; []: no spread
        self._dof = math.nan

    def __call__(self, nums: Sequence[float]) -> Ratio | None:
        """The ratio of `nums` (one per denominator, in order) over the denominators."""
        dens, levs = self._dens, self._levs
        num = math.fsum(nums)
        if levs is None:
            self._den = math.fsum(dens)
        den = self._den
        if not den > 0:
            return None
        r = num / den
        k = len(dens)
        if levs is None:
            self._levs = levs = (
                []
                if k < 2 or max(dens) / den >= 1.0 - 1e-9
                # Delta method with a leverage correction: e_i = n_i - r d_i, h_i = d_i / D,
                # Var(r) = sum(e_i^2 / (1 - h_i)^p) / D^2, p = 2 (HC3, the jackknife) or 1.
                else [(1.0 - d / den) ** self._power for d in dens]
            )
        if not levs:
            return Ratio(r, num, den, math.nan, 0.0, k)
        resid = math.fsum([(n - r * d) ** 2 / h for n, d, h in zip(nums, dens, levs, strict=True)])
        se = math.sqrt(resid) / den
        if math.isnan(self._dof):
            # Kish's effective number of batches: one big pod among small ones is nearly one.
            squares = math.fsum([d * d for d in dens])
            n_eff = den * den / squares if squares > 0 else float(k)  # subnormal squares: 0
            self._dof = max(n_eff - 1.0, 1e-3)
        return Ratio(r, num, den, se, self._dof, k)


def welch_dof(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances [(variance, dof), ...]."""
    var = math.fsum(v for v, _ in terms)
    denom = math.fsum(v * v / d for v, d in terms if math.isfinite(d) and d > 0)
    return var * var / denom if denom > 0 else math.inf
