"""Pieces both sources share: which pools a policy asks for, how errors are worded, and how
per-pod increments add up into one pool's observation.

Kept free of HTTP so the Prometheus and pod-scrape sources produce their `Observation`s through
the same code (the integration test compares the two).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import AcceptanceSample, Buckets, Observation, PoolObservation, Role
from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind, redact

MAX_POSITIONS = 256
"""Draft positions accepted from a page or a query: a `position` label sizes a list, so a
huge one (a broken or hostile exporter) must not allocate that many floats. K is far below."""

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


def budget_of(err: SourceError) -> BudgetKind | None:
    """Which of the canary's budgets `err` spent (None: not a budget)."""
    return err.budget if isinstance(err, BudgetError) else None


def failed_pool(slice_name: str, role: Role, err: SourceError, *, pods: int = 0) -> PoolObservation:
    """A pool that could not be read: its error, kind and budget, no numbers."""
    return PoolObservation(
        slice_name,
        role,
        pods=pods,
        error=error_text(err),
        error_kind=err.kind,
        budget=budget_of(err),
    )


def failed_observation(
    spec: SpeculativeCanarySpec, err: SourceError, *, at: float, window: float
) -> Observation:
    """The whole read failed: every pool carries the error, none carries numbers."""
    pools = tuple(failed_pool(p.slice, p.role, err) for p in pools_of(spec))
    return Observation(
        at=at,
        window_seconds=window,
        pools=pools,
        source_error=error_text(err),
        source_error_kind=err.kind,
        source_budget=budget_of(err),
    )


class HistSum:
    """Sum of histogram increments by ``le``, like PromQL ``sum by (le)``.

    One exporter's increments carry the same bounds in the same order, so from the second add on
    the running sum is kept as that bounds tuple and a list of floats, merged by index (a few
    C-level passes instead of a dict lookup and store per bucket). Increments with other bounds
    fall back to the merge by bound. ``counts`` is the dict by bound, as before: once read (or
    passed in) it is the live dict later adds update. Same sums, bit for bit, same key order.
    """

    __slots__ = ("_bounds", "_dict", "_live", "_one", "_values", "seen", "sum")

    def __init__(
        self, counts: dict[float, float] | None = None, sum: float = 0.0, seen: bool = False
    ) -> None:
        self._bounds: tuple[float, ...] | None = None  # set: the sums live in _values
        self._values: list[float] = []
        self._dict: dict[float, float] = {} if counts is None else counts
        self._live = counts is not None  # a dict someone else holds: keep adding into it
        self._one = False  # _dict holds exactly one add: the next may switch to the list
        self.sum = sum
        self.seen = seen

    def _to_dict(self) -> dict[float, float]:
        if self._bounds is not None:
            self._dict = dict(zip(self._bounds, self._values, strict=True))
            self._bounds, self._values = None, []
        self._one = False
        return self._dict

    @property
    def counts(self) -> dict[float, float]:
        self._live = True
        return self._to_dict()

    @counts.setter
    def counts(self, value: dict[float, float]) -> None:
        self._bounds, self._values, self._dict, self._live, self._one = None, [], value, True, False

    def _by_bound(self) -> dict[float, float]:
        """The sums by bound without leaving the fast representation."""
        if self._bounds is None:
            return self._dict
        return dict(zip(self._bounds, self._values, strict=True))

    def add(self, buckets: Mapping[float, float], total: float = 0.0) -> None:
        self.seen = True
        if self._bounds is not None:
            if tuple(buckets) == self._bounds:
                self._values = list(map(operator.add, self._values, buckets.values()))
                self.sum += total
                return
        elif self._one:
            first = tuple(self._dict)
            if tuple(buckets) == first:
                self._values = list(map(operator.add, self._dict.values(), buckets.values()))
                self._bounds, self._dict, self._one = first, {}, False
                self.sum += total
                return
        elif not self._dict and not self._live:
            self._dict = {le: 0.0 + v for le, v in buckets.items()}
            self._one = True
            self.sum += total
            return
        counts = self._to_dict()
        for le, v in buckets.items():
            counts[le] = counts.get(le, 0.0) + v
        self.sum += total

    def to_buckets(self, *, with_sum: bool = True) -> Buckets | None:
        counts = self._by_bound()
        if not self.seen or math.inf not in counts:
            return None
        bounds = tuple(sorted(counts))
        return Buckets(bounds, tuple(counts[b] for b in bounds), self.sum if with_sum else math.nan)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, HistSum)
        return (self._by_bound(), self.sum, self.seen) == (other._by_bound(), other.sum, other.seen)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return f"HistSum(counts={self._by_bound()!r}, sum={self.sum!r}, seen={self.seen!r})"


def redact_url(url: str) -> str:
    """A URL fit for status, Events, logs and errors: userinfo (``user:pass@``) removed."""
    return redact(url)


def per_position_tuple(per_pos: Mapping[int, float]) -> tuple[float, ...]:
    """Positions 0..max as a tuple, absent positions as 0 (callers keep max < MAX_POSITIONS)."""
    if not per_pos:
        return ()
    if max(per_pos) >= MAX_POSITIONS:
        raise SourceError(
            SourceErrorKind.PARSE,
            f"draft position {max(per_pos)} is beyond the {MAX_POSITIONS} alphagate accepts",
        )
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
