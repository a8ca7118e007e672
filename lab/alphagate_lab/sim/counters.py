"""What a vLLM process counts: its histograms and counters since it (re)started.

The histograms keep per-bucket weights because a tick observes a sample of its steps and
requests, each standing for several; exposure rounds the cumulative counts.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from alphagate import vllm

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Histograms:
    """The state of a pod's vLLM histograms: per-bucket weights (``le`` buckets, then +Inf)
    and sums, for several families kept in one array.

    Weights are floats because a tick observes a sample of its steps and requests, each
    standing for several; exposure rounds the cumulative counts, which keeps them integral,
    monotone in ``le`` and non-decreasing over time. Observations are binned lazily, once
    per read and for all families at once, because binning dominated the cost of a tick.
    """

    def __init__(self, families: dict[str, tuple[float, ...]]) -> None:
        self.names = list(families)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.bounds = [np.asarray(b, dtype=np.float64) for b in families.values()]
        self.layout: dict[str, tuple[float, ...]] = {n: tuple(b) for n, b in families.items()}
        self.sizes = [len(b) + 1 for b in families.values()]
        self.offsets = [0, *itertools.accumulate(self.sizes)][:-1]
        self._starts = np.asarray(self.offsets, dtype=np.int64)
        total = sum(self.sizes)
        self.counts: FloatArray = np.zeros(total, dtype=np.float64)
        self.sums: FloatArray = np.zeros(len(self.names), dtype=np.float64)
        self._pending: list[tuple[int, FloatArray, float]] = []
        self._cache: dict[str, tuple[list[int], float]] | None = None

    def observe(self, name: str, values: FloatArray, weight: float = 1.0) -> None:
        """Add each value ``weight`` times (a value equal to a bound falls in that bucket)."""
        if values.size and weight > 0:
            self._pending.append((self.index[name], values, weight))
            self._cache = None

    def observe_constant(self, name: str, value: float, n: float) -> None:
        """Add ``value`` ``n`` times, without sampling."""
        if n <= 0:
            return
        h = self.index[name]
        i = bisect.bisect_left(self.bounds[h].tolist(), value)
        self.counts[self.offsets[h] + i] += n
        self.sums[h] += value * n
        self._cache = None

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        # Binned family by family (one search each, not one per observation), and every
        # bucket and sum still gets its family's observations in the order they came: the
        # weighted sums are the same floats.
        by_family: dict[int, list[tuple[int, FloatArray, float]]] = {}
        for entry in pending:
            by_family.setdefault(entry[0], []).append(entry)
        ordered = [entry for group in by_family.values() for entry in group]
        idx = []
        for h, group in by_family.items():
            vals = group[0][1] if len(group) == 1 else np.concatenate([v for _, v, _ in group])
            idx.append(self.bounds[h].searchsorted(vals, side="left") + self.offsets[h])
        sizes = [v.size for _, v, _ in ordered]
        weights = np.repeat([w for _, _, w in ordered], sizes)
        values = np.concatenate([v for _, v, _ in ordered])
        hist_ids = np.repeat([h for h, _, _ in ordered], sizes)
        self.counts += np.bincount(np.concatenate(idx), weights=weights, minlength=self.counts.size)
        self.sums += np.bincount(hist_ids, weights=values * weights, minlength=self.sums.size)
        pending.clear()

    def read(self) -> dict[str, tuple[list[int], float]]:
        """Per family: cumulative bucket counts as exposed (last is ``+Inf``) and the sum."""
        if self._cache is None:
            self._flush()
            cum = np.cumsum(self.counts)
            before = np.concatenate(([0.0], cum))[self._starts]
            flat = np.rint(cum - np.repeat(before, self.sizes)).astype(np.int64).tolist()
            sums = self.sums.tolist()
            self._cache = {
                name: (flat[off : off + size], sums[h])
                for h, (name, off, size) in enumerate(
                    zip(self.names, self.offsets, self.sizes, strict=True)
                )
            }
        return self._cache


def default_bounds() -> dict[str, tuple[float, ...]]:
    """vLLM's default bucket bounds of every histogram the simulator exports."""
    return {
        vllm.TTFT: vllm.TTFT_BUCKETS,
        vllm.ITL: vllm.ITL_BUCKETS,
        vllm.TPOT: vllm.TPOT_BUCKETS,
        vllm.E2E: vllm.E2E_BUCKETS,
        vllm.QUEUE_TIME: vllm.QUEUE_TIME_BUCKETS,
        vllm.DECODE_TIME: vllm.DECODE_TIME_BUCKETS,
        vllm.REQUEST_GENERATION_TOKENS: vllm.GENERATION_LENGTH_BUCKETS,
    }


def _histograms(custom: dict[str, tuple[float, ...]] | None = None) -> Histograms:
    return Histograms({**default_bounds(), **(custom or {})})


@dataclass
class EngineCounters:
    """Everything a vLLM process counts since it started; a restart makes a fresh one.

    ``accept_counts[j]`` counts drafts with exactly ``j`` accepted tokens; vLLM's per-position
    counter is its reverse cumulative sum (:meth:`per_pos`).
    """

    k: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accept_counts: IntArray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(vllm.FINISH_REASONS, 0))
    running: int = 0
    waiting: int = 0
    histograms: Histograms = field(default_factory=_histograms)
    #: Bounds set by --custom-histogram-buckets, per histogram (the others keep vLLM's).
    custom_bounds: dict[str, tuple[float, ...]] | None = None

    def __post_init__(self) -> None:
        if self.custom_bounds:
            self.histograms = _histograms(self.custom_bounds)
        if self.accept_counts.size != self.k + 1:
            self.accept_counts = np.zeros(self.k + 1, dtype=np.int64)

    def per_pos(self) -> list[int]:
        """``per_pos[i]`` = drafts with at least ``i + 1`` accepted tokens."""
        out: list[int] = np.cumsum(self.accept_counts[::-1])[::-1][1:].tolist()
        return out
