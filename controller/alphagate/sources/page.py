"""What alphagate reads from one /metrics page: the vLLM families it needs (`Counter`, `Hist`,
`Gauge`) and the parsed page, series by label set. `exposition` parses pages into these."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from alphagate import vllm
from alphagate.core.model import Buckets


class Counter(Enum):
    """The counters alphagate reads; values are the ``vllm:`` family base names."""

    DRAFTS = vllm.SPEC_DRAFTS
    DRAFT_TOKENS = vllm.SPEC_DRAFT_TOKENS
    ACCEPTED = vllm.SPEC_ACCEPTED
    GENERATION_TOKENS = vllm.GENERATION_TOKENS

    # Members are singletons compared by identity: hash them in C, not through Enum's Python
    # __hash__ (called once per sample line, it was a tenth of the parse).
    __hash__ = object.__hash__


class Hist(Enum):
    """The histograms alphagate reads; values are the ``vllm:`` family base names."""

    ITL = vllm.ITL
    TPOT = vllm.TPOT
    OUTPUT_LENGTH = vllm.REQUEST_GENERATION_TOKENS  # tokens per finished request
    DECODE_TIME = vllm.DECODE_TIME  # seconds each finished request decoded (alpha's blocks)

    __hash__ = object.__hash__  # as for Counter


class Gauge(Enum):
    """The gauges alphagate reads (a value now, not an increment)."""

    RUNNING = vllm.RUNNING

    __hash__ = object.__hash__  # as for Counter


SPEC_COUNTERS: Final = (Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED)

LabelKey = tuple[tuple[str, str], ...]
"""A series' identity: its labels minus ``le``/``position``, sorted by name."""


@dataclass(slots=True)
class Histogram:
    """Cumulative buckets of one histogram series: ``le`` bound -> count."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float = math.nan
    sum: float = math.nan
    created: float | None = None

    def to_buckets(self) -> Buckets:
        bounds = tuple(sorted(self.buckets))
        return Buckets(bounds, tuple(self.buckets[b] for b in bounds), self.sum)


@dataclass(slots=True)
class Series:
    """Everything alphagate reads for one label set (in vLLM: one model_name and engine)."""

    labels: LabelKey
    counters: dict[Counter, float] = field(default_factory=dict)
    created: dict[Counter, float] = field(default_factory=dict)
    per_position: dict[int, float] = field(default_factory=dict)
    per_position_created: dict[int, float] = field(default_factory=dict)
    histograms: dict[Hist, Histogram] = field(default_factory=dict)
    gauges: dict[Gauge, float] = field(default_factory=dict)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def model_name(self) -> str:
        return self.label_map.get(vllm.MODEL_NAME, "")

    @property
    def engine(self) -> str:
        return self.label_map.get(vllm.ENGINE, "")

    @property
    def speculating(self) -> bool:
        """The spec-decode counters exist, i.e. the pod runs with --speculative-config."""
        return all(c in self.counters for c in SPEC_COUNTERS)


@dataclass(slots=True)
class Page:
    """The parsed page: series keyed by their label set."""

    series: dict[LabelKey, Series] = field(default_factory=dict)

    def matching(self, match_labels: Mapping[str, str]) -> list[Series]:
        """Series whose labels carry every given label with the given value."""
        items = tuple(match_labels.items())
        return [s for s in self.series.values() if all(kv in s.labels for kv in items)]
