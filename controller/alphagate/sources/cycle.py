"""One cycle's reads, every canary due at once: batched by kind of source, answered per read.

The reconciler hands every canary due in a cycle to :func:`observe_each` together:

* Prometheus reads that share an endpoint, a deadline and a window become one batch of queries
  (:func:`alphagate.sources.prombatch.observe_many`);
* pod-scrape reads discover their pods, then GET every canary's pages in one wave, then
  assemble each canary's Observation (:func:`alphagate.sources.scrapebatch.observe_scrapes`);
* any other read is its source's own ``observe``.

Every Observation is the one its source gives one read at a time. One canary's trouble stays
its own: sources report failures as data, and a read that raises anyway (a bug, a plug-in
Discovery) is handed to `on_raise` for that read alone while the others are answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.sources import Source
from alphagate.sources.prombatch import observe_many
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.scrapebatch import ScrapeRead, batchable, observe_scrapes

OnRaise = Callable[["Read", Exception], Observation]
"""What a read that raised gives instead (the shell logs it and reports an Error)."""


@dataclass(frozen=True, slots=True)
class Read:
    """One canary's read in a cycle: its source, its policy, its window."""

    source: Source
    spec: SpeculativeCanarySpec
    start: float
    end: float
    interval_seconds: float


def _prometheus_key(read: Read) -> tuple[object, ...] | None:
    """Prometheus reads that may share queries have equal keys; None: not a Prometheus read."""
    src = read.source
    if not isinstance(src, PrometheusSource):
        return None
    endpoint = src.endpoint.model_dump_json()
    return (endpoint, src.timeout_seconds, read.start, read.end, read.interval_seconds)


def _namespace(read: Read) -> str | None:
    """The namespace a Prometheus read's queries are bound to (its source's)."""
    assert isinstance(read.source, PrometheusSource)
    return read.source.namespace


def _alone(read: Read, on_raise: OnRaise | None) -> Observation:
    try:
        return read.source.observe(
            read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
        )
    except Exception as exc:
        if on_raise is None:
            raise
        return on_raise(read, exc)


def observe_each(reads: Sequence[Read], *, on_raise: OnRaise | None = None) -> list[Observation]:
    """Each read's Observation, in order. A read that raises gives ``on_raise(read, exc)``
    while the others are still answered; without `on_raise` the first such exception is raised
    once the pod-scrape wave is done (so no source's memory is left half-way)."""
    out: list[Observation | None] = [None] * len(reads)
    prometheus: dict[tuple[object, ...], list[int]] = {}
    scrapes: list[tuple[int, ScrapeRead]] = []
    for i, read in enumerate(reads):
        key = _prometheus_key(read)
        src = read.source
        if key is not None:
            prometheus.setdefault(key, []).append(i)
        elif batchable(src):
            scrape = ScrapeRead(src, read.spec, read.start, read.end, read.interval_seconds)
            scrapes.append((i, scrape))
        else:
            out[i] = _alone(read, on_raise)
    if scrapes:
        got = observe_scrapes([r for _, r in scrapes])
        raised = [obs for obs in got if isinstance(obs, Exception)]
        if raised and on_raise is None:
            raise raised[0]
        for (i, _), obs in zip(scrapes, got, strict=True):
            if isinstance(obs, Exception):
                assert on_raise is not None
                obs = on_raise(reads[i], obs)
            out[i] = obs
    for members in prometheus.values():
        first = reads[members[0]]
        assert isinstance(first.source, PrometheusSource)
        try:
            many = observe_many(
                first.source,
                [reads[i].spec for i in members],
                start=first.start,
                end=first.end,
                interval_seconds=first.interval_seconds,
                namespaces=[_namespace(reads[i]) for i in members],
            )
        except Exception:
            if on_raise is None:
                raise
            many = [_alone(reads[i], on_raise) for i in members]  # each read alone, as before
        for i, obs in zip(members, many, strict=True):
            out[i] = obs
    assert all(o is not None for o in out)
    return [o for o in out if o is not None]


__all__ = ["OnRaise", "Read", "observe_each"]
