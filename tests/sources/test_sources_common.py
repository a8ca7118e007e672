"""HistSum (the shared ``sum by (le)``) against the plain per-bound dict merge it replaced: same
sums bit for bit, same key order, same buckets, whatever mix of bounds arrives."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from alphagate.core.model import Buckets
from alphagate.sources.common import HistSum

VLLM = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, math.inf)


class DictMerge:
    """The reference: what HistSum did before it kept a bounds tuple and a list."""

    def __init__(self) -> None:
        self.counts: dict[float, float] = {}
        self.sum = 0.0
        self.seen = False

    def add(self, buckets: Mapping[float, float], total: float = 0.0) -> None:
        self.seen = True
        for le, v in buckets.items():
            self.counts[le] = self.counts.get(le, 0.0) + v
        self.sum += total

    def to_buckets(self) -> Buckets | None:
        if not self.seen or math.inf not in self.counts:
            return None
        bounds = tuple(sorted(self.counts))
        return Buckets(bounds, tuple(self.counts[b] for b in bounds), self.sum)


def same(a: object, b: object) -> bool:
    """Equal, bit for bit (repr tells -0.0 from 0.0 and shows NaN as nan)."""
    return repr(a) == repr(b)


def increments(rng: random.Random, n: int) -> list[dict[float, float]]:
    out: list[dict[float, float]] = []
    for _ in range(n):
        kind = rng.random()
        bounds: tuple[float, ...] = VLLM
        if kind < 0.1:
            bounds = tuple(reversed(VLLM))  # same set, other order
        elif kind < 0.2:
            bounds = VLLM[:5] + VLLM[6:]  # one bucket missing
        elif kind < 0.25:
            bounds = (*VLLM[:-1], 7.5, math.inf)  # an extra bound
        # float(repr(.)): new key objects, as each parsed page brings
        out.append({float(repr(le)): rng.choice([0, 1, 2.5, 1e-3, 1e12, -0.0]) for le in bounds})
    return out


@pytest.mark.parametrize("seed", range(40))
def test_histsum_matches_the_dict_merge(seed: int) -> None:
    rng = random.Random(seed)
    ref, acc = DictMerge(), HistSum()
    read_at = rng.randrange(-1, 12)  # sometimes read `counts` midway, then keep adding
    for i, inc in enumerate(increments(rng, rng.randrange(0, 12))):
        total = rng.random()
        ref.add(inc, total)
        acc.add(inc, total)
        if i == read_at:
            assert same(list(acc.counts.items()), list(ref.counts.items()))
    assert same(list(acc.counts.items()), list(ref.counts.items()))
    assert acc.seen == ref.seen and same(acc.sum, ref.sum)
    assert same(acc.to_buckets(), ref.to_buckets())


def test_histsum_keeps_the_first_key_objects_like_a_dict() -> None:
    """Equal keys of another type (1 and 1.0, 0.0 and -0.0) merge; the first one stays."""
    ref, acc = DictMerge(), HistSum()
    for inc in ({1: 1.0, -0.0: 2.0, math.inf: 3.0}, {1.0: 1.0, 0.0: 1.0, math.inf: 1.0}) * 2:
        ref.add(inc)
        acc.add(inc)
    assert same(list(acc.counts.items()), list(ref.counts.items()))
    assert same(acc.to_buckets(), ref.to_buckets())


def test_histsum_same_bounds_are_summed_by_index() -> None:
    acc = HistSum()
    for k in range(3):
        acc.add({0.1: 1.0 + k, 0.5: 2.0, math.inf: 4.0}, 0.5)
    assert acc.to_buckets() == Buckets((0.1, 0.5, math.inf), (6.0, 6.0, 12.0), 1.5)
    assert acc.to_buckets(with_sum=False) is not None
    assert math.isnan(acc.to_buckets(with_sum=False).sum)  # type: ignore[union-attr]
    assert list(acc.counts) == [0.1, 0.5, math.inf]


def test_histsum_without_inf_bucket_or_data_has_no_buckets() -> None:
    assert HistSum().to_buckets() is None
    acc = HistSum()
    acc.add({0.1: 1.0, 0.5: 2.0})
    assert acc.to_buckets() is None


def test_histsum_counts_stays_the_live_dict() -> None:
    """As with the dataclass it replaced: a dict handed out (or passed in) sees later adds."""
    given: dict[float, float] = {}
    acc = HistSum(given)
    acc.add({0.1: 1.0, math.inf: 2.0})
    assert given == {0.1: 1.0, math.inf: 2.0}
    fresh = HistSum()
    view = fresh.counts
    fresh.add({0.1: 1.0, math.inf: 2.0})
    fresh.add({0.1: 1.0, math.inf: 2.0})
    assert view == {0.1: 2.0, math.inf: 4.0}
    acc.sum = 3.0  # the Prometheus source sets the sum from its own query
    assert acc.to_buckets() == Buckets((0.1, math.inf), (1.0, 2.0), 3.0)


def test_histsum_equality_and_repr_by_value() -> None:
    a, b = HistSum(), HistSum()
    for h in (a, b):
        h.add({0.1: 1.0, math.inf: 2.0}, 1.0)
    assert a == b and a != HistSum() and a != "HistSum"
    assert repr(a) == "HistSum(counts={0.1: 1.0, inf: 2.0}, sum=1.0, seen=True)"
