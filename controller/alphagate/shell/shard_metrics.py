"""Scrape-time shard gauges and the process collectors of a fresh registry.

Shards are computed when scraped, from the Leases held and the units exported, so a
rebalance never leaves a stale series.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from alphagate.shell.metric_names import SHARD_HELD, SHARD_UNITS, SHARDS


class ShardSource(Protocol):
    """What the shard gauges read: total shards and units per held shard, or None."""

    def shard_units(self) -> tuple[int, dict[int, int]] | None: ...


class ShardCollector(Collector):
    """Per-shard gauges, computed at scrape time from the Leases held and the units exported:
    never stale after a rebalance."""

    def __init__(self, recorder: ShardSource) -> None:
        self.recorder = recorder

    def describe(self) -> Iterable[GaugeMetricFamily]:
        """The families by name, without samples: the registry then knows them, so a
        scrape restricted to them (``name[]=``) reads only this collector."""
        return _families(0)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        got = self.recorder.shard_units()
        if got is None:
            return
        total, units = got
        shards, held, count = _families(total)
        yield shards
        for shard in sorted(units):
            held.add_metric([str(shard)], 1.0)
            count.add_metric([str(shard)], float(units[shard]))
        yield held
        yield count


def _families(total: int) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    """The shards gauge (set to `total`), and the held and units families, still empty."""
    return (
        GaugeMetricFamily(SHARDS, "Shards the canaries are split into (--shards).", total),
        GaugeMetricFamily(SHARD_HELD, "1 for each shard this replica holds.", labels=["shard"]),
        GaugeMetricFamily(
            SHARD_UNITS, "Decision units this replica evaluates, per shard held.", labels=["shard"]
        ),
    )


def new_registry(*, process: bool = True) -> CollectorRegistry:
    """A fresh registry, with the process/platform/GC collectors when `process` is set."""
    registry = CollectorRegistry()
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry
