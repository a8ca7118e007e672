"""Observe every resource due in a cycle at once.

One read per resource, all handed to `sources.cycle.observe_each` together, so Prometheus reads
that share an endpoint, a deadline and a window become one batch of queries (one query per
family for up to 256 pools) instead of some 30 queries per canary, and pod scrapes of every
canary run as one wave of GETs instead of one wave per canary. The answers are the same as one
read at a time. A source that raises (a bug; sources report trouble as data) costs only its
own evaluation (an Error naming the exception); should the batching itself raise, the cycle
reads each resource alone (those not answered yet). Each Observation is handed on as soon as it is
known, so a canary whose read is slow holds no other's evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alphagate.core.model import Observation
from alphagate.shell.outcome import Pending
from alphagate.sources.cycle import OnDone, Read, observe_each


def observe_all(
    pending: Sequence[Pending], log: Any, on_done: OnDone | None = None
) -> list[Observation]:
    """Each pending resource's Observation over [start, now], in order, each also handed to
    `on_done` (its index) as soon as it is known. Never raises."""
    reads = [
        Read(p.source, p.spec, p.start, p.now, p.spec.timing.interval_seconds) for p in pending
    ]
    logs = {id(r): p.log for r, p in zip(reads, pending, strict=True)}
    told: dict[int, Observation] = {}

    def tell(i: int, obs: Observation) -> None:
        told[i] = obs
        if on_done is not None:
            on_done(i, obs)

    try:
        return observe_each(
            reads, on_raise=lambda r, exc: raised(r, exc, logs[id(r)]), on_done=tell
        )
    except Exception as exc:  # noqa: BLE001 - last resort: sources report failures as data, never raise
        log.error("batch_read_raised", error=repr(exc), error_type=type(exc).__name__)
    out = []
    for i, (r, p) in enumerate(zip(reads, pending, strict=True)):
        if i in told:  # read and told already: not read twice
            out.append(told[i])
            continue
        obs = observe_one(r, p.log)
        tell(i, obs)
        out.append(obs)
    return out


def observe_one(read: Read, log: Any) -> Observation:
    """One read; a source that raises anyway (a bug, a plug-in Discovery) makes this
    evaluation an Error with the exception's text."""
    try:
        return read.source.observe(
            read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
        )
    except Exception as exc:  # noqa: BLE001 - last resort: sources report failures as data, never raise
        return raised(read, exc, log)


def raised(read: Read, exc: Exception, log: Any) -> Observation:
    """What a read that raised gives: an Observation with no pools, the exception its error."""
    log.error("source_raised", error=repr(exc), error_type=type(exc).__name__)
    return Observation(
        at=read.end,
        window_seconds=max(read.end - read.start, 0.0),
        pools=(),
        source_error=f"unknown: {exc!r}",
    )
