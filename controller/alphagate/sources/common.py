"""Pieces both sources share: which pools a policy asks for, how errors are worded, and how
per-pod increments add up into one pool's observation.

Kept free of HTTP so the Prometheus and pod-scrape sources produce their `Observation`s through
the same code (the integration test compares the two).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import AcceptanceSample, Buckets, Observation, PoolObservation, Role
from alphagate.errors import SourceError, SourceErrorKind

ROLES: tuple[Role, ...] = (Role.CANARY, Role.BASELINE)

SERIES_LABELS: frozenset[str] = frozenset((vllm.MODEL_NAME, vllm.ENGINE))
"""match_labels keys that select vLLM series rather than pods in the pod-scrape source."""


@dataclass(frozen=True, slots=True)
class PoolRef:
    """One pool a policy asks about: a slice's canary or baseline with its selector."""

    slice: str
    role: Role
    match_labels: Mapping[str, str]


def pools_of(spec: SpeculativeCanarySpec) -> list[PoolRef]:
    """Every (slice, role) pool of a policy, in policy order, canary first."""
    out: list[PoolRef] = []
    for s in spec.slices:
        out.append(PoolRef(s.name, Role.CANARY, dict(s.canary.match_labels)))
        out.append(PoolRef(s.name, Role.BASELINE, dict(s.baseline.match_labels)))
    return out


def error_text(err: SourceError) -> str:
    """The string put in PoolObservation.error / Observation.source_error: kind first."""
    return str(err)


def failed_observation(
    spec: SpeculativeCanarySpec, err: SourceError, *, at: float, window: float
) -> Observation:
    """The whole read failed: every pool carries the error, none carries numbers."""
    text = error_text(err)
    pools = tuple(PoolObservation(p.slice, p.role, error=text) for p in pools_of(spec))
    return Observation(at=at, window_seconds=window, pools=pools, source_error=text)


@dataclass(slots=True)
class HistSum:
    """Sum of histogram increments by ``le``, like PromQL ``sum by (le)``."""

    counts: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    seen: bool = False

    def add(self, buckets: Mapping[float, float], total: float = 0.0) -> None:
        self.seen = True
        for le, v in buckets.items():
            self.counts[le] = self.counts.get(le, 0.0) + v
        self.sum += total

    def to_buckets(self, *, with_sum: bool = True) -> Buckets | None:
        if not self.seen or math.inf not in self.counts:
            return None
        bounds = tuple(sorted(self.counts))
        return Buckets(
            bounds, tuple(self.counts[b] for b in bounds), self.sum if with_sum else math.nan
        )


def per_position_tuple(per_pos: Mapping[int, float]) -> tuple[float, ...]:
    """Positions 0..max as a tuple, absent positions as 0."""
    if not per_pos:
        return ()
    return tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1))


def has_drafts(sample: AcceptanceSample) -> bool:
    """A batch with neither drafts nor draft tokens carries no evidence about alpha."""
    return sample.drafts > 0 or sample.draft_tokens > 0


def sorted_samples(samples: Iterable[AcceptanceSample]) -> tuple[AcceptanceSample, ...]:
    return tuple(sorted(samples, key=lambda s: (s.pod, s.end)))


def check_finite(values: Iterable[float], what: str, target: str) -> None:
    """NaN or infinite increments mean the source handed us garbage: classify, never use."""
    for v in values:
        if not math.isfinite(v):
            raise SourceError(SourceErrorKind.NAN, f"{what} is {v}", target=target)
