"""Observe every resource due in a cycle at once.

One read per resource, all handed to `sources.prombatch.observe_each` together, so Prometheus
reads that share an endpoint, a deadline and a window become one batch of queries (one query
per family for up to 256 pools) instead of some 30 queries per canary. The answers are the
same as one read at a time. A source that raises (a bug; sources report trouble as data) costs
only its own evaluation: the cycle then reads each resource alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alphagate.core.model import Observation
from alphagate.shell.outcome import Pending
from alphagate.sources.prombatch import Read, observe_each


def observe_all(pending: Sequence[Pending], log: Any) -> list[Observation]:
    """Each pending resource's Observation over [start, now], in order. Never raises."""
    reads = [
        Read(p.source, p.spec, p.start, p.now, p.spec.timing.interval_seconds) for p in pending
    ]
    try:
        return observe_each(reads)
    except Exception as exc:  # last resort: sources report failures as data, never raise
        log.error("batch_read_raised", error=repr(exc), error_type=type(exc).__name__)
    return [observe_one(r, p.log) for r, p in zip(reads, pending, strict=True)]


def observe_one(read: Read, log: Any) -> Observation:
    """One read; a source that raises anyway (a bug, a plug-in Discovery) makes this
    evaluation an Error with the exception's text."""
    try:
        return read.source.observe(
            read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
        )
    except Exception as exc:  # last resort: sources report failures as data, never raise
        log.error("source_raised", error=repr(exc), error_type=type(exc).__name__)
        return Observation(
            at=read.end,
            window_seconds=max(read.end - read.start, 0.0),
            pools=(),
            source_error=f"unknown: {exc!r}",
        )
