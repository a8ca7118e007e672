"""One cycle's reads, every canary due at once: batched by kind of source, answered per read,
each read on its own budgets and none waiting for another.

The reconciler hands every canary due in a cycle to :func:`observe_each` together:

* Prometheus reads that share an endpoint, a deadline and a window become one batch of queries
  (:func:`alphagate.sources.prombatch.observe_many`, never mixing namespaces); batches of
  different windows are read side by side, each within one read deadline
  (`sources.budget.read_deadline`), so 24 distinct windows cost one deadline, not 24, and
  the namespaces take the read threads in turn (`_in_turn`): another namespace's 24 batches
  never hold a victim's one batch back;
* pod-scrape reads discover their pods, then GET every canary's pages side by side, each
  canary within its own deadline (:func:`alphagate.sources.scrapebatch.observe_scrapes`);
* any other read is its source's own ``observe``.

Every Observation is the one its source gives one read at a time, handed to `on_done` as soon as
it is known (a slow canary holds no other's result). One canary's trouble stays its own: sources
report failures as data, and a read that raises anyway (a bug, a plug-in Discovery) is handed to
`on_raise` for that read alone while the others are answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation
from alphagate.sources import Source, http
from alphagate.sources.budget import describe_deadline, read_deadline
from alphagate.sources.prombatch import observe_many
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.scrapebatch import ScrapeRead, batchable, observe_scrapes

OnRaise = Callable[["Read", Exception], Observation]
"""What a read that raised gives instead (the shell logs it and reports an Error)."""
OnDone = Callable[[int, Observation], None]
"""Told each read's Observation (its index in the call) as soon as it is known."""

PROMETHEUS_THREADS: Final = 8
"""Prometheus batches read at once (each its own window; more wait for a thread)."""


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


def _name(read: Read) -> str | None:
    """The canary whose Prometheus query budget pays a read's own queries (its source's)."""
    assert isinstance(read.source, PrometheusSource)
    return read.source.name


def _alone(read: Read, on_raise: OnRaise | None) -> Observation:
    try:
        return read.source.observe(
            read.spec, start=read.start, end=read.end, interval_seconds=read.interval_seconds
        )
    except Exception as exc:
        if on_raise is None:
            raise
        return on_raise(read, exc)


class _Results:
    """The cycle's Observations as they come, from any thread."""

    def __init__(self, n: int, on_done: OnDone | None) -> None:
        self.out: list[Observation | None] = [None] * n
        self.raised: list[Exception] = []
        self._on_done = on_done
        self._lock = threading.Lock()

    def put(self, i: int, obs: Observation) -> None:
        with self._lock:
            self.out[i] = obs
        if self._on_done is not None:
            self._on_done(i, obs)


def observe_each(
    reads: Sequence[Read], *, on_raise: OnRaise | None = None, on_done: OnDone | None = None
) -> list[Observation]:
    """Each read's Observation, in order (and each to `on_done` as soon as it is known). A
    read that raises gives ``on_raise(read, exc)`` while the others are still answered;
    without `on_raise` the first such exception is raised once every read is done (so no
    source's memory is left half-way)."""
    results = _Results(len(reads), on_done)
    prometheus: dict[tuple[object, ...], list[int]] = {}
    scrapes: list[tuple[int, ScrapeRead]] = []
    alone: list[int] = []
    for i, read in enumerate(reads):
        key = _prometheus_key(read)
        src = read.source
        if key is not None:
            prometheus.setdefault(key, []).append(i)
        elif batchable(src):
            scrape = ScrapeRead(src, read.spec, read.start, read.end, read.interval_seconds)
            scrapes.append((i, scrape))
        else:
            alone.append(i)
    groups = _in_turn(reads, list(prometheus.values()))
    with ThreadPoolExecutor(
        max(1, min(PROMETHEUS_THREADS, len(groups))), thread_name_prefix="alphagate-prom"
    ) as pool:
        futures = [pool.submit(_batch, reads, g, on_raise, results) for g in groups]
        if scrapes:
            _scrapes(reads, scrapes, on_raise, results)
        for i in alone:
            try:
                results.put(i, _alone(reads[i], on_raise))
            except Exception as exc:  # noqa: BLE001 - one read's bug is that read's error, raised once all are done
                results.raised.append(exc)
        for f in futures:
            f.result()
    if results.raised:
        raise results.raised[0]
    assert all(o is not None for o in results.out)
    return [o for o in results.out if o is not None]


def _in_turn(reads: Sequence[Read], groups: list[list[int]]) -> list[list[int]]:
    """The batches in the order the read threads take them: the namespaces in turn (every
    namespace's first batch, then every namespace's second...), not in the order of the reads.
    A namespace of 24 canaries with distinct windows has 24 batches (each one query set): in
    the reads' order they took the 8 threads before another namespace's one batch, which
    then waited for a thread with no deadline running yet. A batch of several namespaces
    goes in the earliest turn any of them is owed."""
    turns: dict[str | None, int] = {}
    ranked: list[tuple[int, int, list[int]]] = []
    for position, group in enumerate(groups):
        spaces = {_namespace(reads[i]) for i in group}
        ranked.append((min(turns.get(ns, 0) for ns in spaces), position, group))
        for ns in spaces:
            turns[ns] = turns.get(ns, 0) + 1
    return [group for _, _, group in sorted(ranked, key=lambda r: r[:2])]


def _scrapes(
    reads: Sequence[Read],
    scrapes: Sequence[tuple[int, ScrapeRead]],
    on_raise: OnRaise | None,
    results: _Results,
) -> None:
    """The pod-scrape reads, each result put as soon as its read is finished."""

    def done(k: int, obs: Observation | Exception) -> None:
        i = scrapes[k][0]
        if isinstance(obs, Exception):
            if on_raise is None:
                results.raised.append(obs)
                return
            obs = on_raise(reads[i], obs)
        results.put(i, obs)

    observe_scrapes([r for _, r in scrapes], on_done=done)


def _batch(
    reads: Sequence[Read], members: Sequence[int], on_raise: OnRaise | None, results: _Results
) -> None:
    """One Prometheus batch (one endpoint and window), within one read deadline."""
    first = reads[members[0]]
    source = first.source
    assert isinstance(source, PrometheusSource)
    seconds = read_deadline(source.timeout_seconds, first.interval_seconds)
    why = describe_deadline(seconds, source.timeout_seconds, first.interval_seconds)
    try:
        with http.deadline(seconds, budget=why):
            many = observe_many(
                source,
                [reads[i].spec for i in members],
                start=first.start,
                end=first.end,
                interval_seconds=first.interval_seconds,
                namespaces=[_namespace(reads[i]) for i in members],
                names=[_name(reads[i]) for i in members],
            )
    except Exception as exc:  # noqa: BLE001 - the batch's bug: each read again alone, or raised later
        if on_raise is None:
            results.raised.append(exc)
            return
        many = []
        for i in members:  # each read alone, as before
            try:
                many.append(_alone(reads[i], on_raise))
            except Exception as again:  # noqa: BLE001 - on_raise answered it  # pragma: no cover
                results.raised.append(again)
                return
    for i, obs in zip(members, many, strict=True):
        results.put(i, obs)


__all__ = ["OnDone", "OnRaise", "Read", "observe_each"]
