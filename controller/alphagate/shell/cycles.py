"""Reads in flight: a cycle's canaries observed on a thread of their own, while the control loop
goes on.

The schedule used to wait for a cycle's whole read before it did anything else: a pod that
accepts and never answers, under a policy's 300 s ``timeoutSeconds``, made every canary wait,
and past 240 s of waiting `/healthz` went stale and the kubelet restarted the controller every
cycle. Now a cycle's reads run on a thread (`Cycle.run`), each Observation queued the moment its
read ends (`sources.cycle.observe_each` hands them on one by one); the control loop decides and
acts for each canary as its Observation arrives (`Reconciler.collect`), and keeps scheduling
the others meanwhile. A canary in flight is not scheduled again until it is done.

Every read ends by its own deadline (`sources.budget.read_deadline`, at most the admin's
``maxReadSeconds``), so a cycle still reading well past that is a stuck controller, not a slow
tenant: `Cycles.overdue` says so and `/healthz` fails.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate.core.model import Observation
from alphagate.shell.observing import observe_all, raised
from alphagate.shell.outcome import Outcome, Pending
from alphagate.shell.turns import Turns
from alphagate.sources.budget import budgets
from alphagate.sources.cycle import Read

OVERDUE_GRACE_SECONDS: Final = 60.0
"""A cycle reading this long past the longest read deadline is stuck (discovery's API calls
and the parse queue come on top of the deadline; this leaves room for both)."""


@dataclass(slots=True)
class Cycle:
    """The canaries read together in one cycle, and their Observations as they arrive."""

    keys: list[tuple[str, str]]
    begun: list[tuple[Outcome, Pending | None]]
    started: float = field(default_factory=time.monotonic)
    arrived: queue.SimpleQueue[tuple[int, Observation]] = field(default_factory=queue.SimpleQueue)
    waiting: set[int] = field(default_factory=set)
    unannounced: list[int] = field(default_factory=list)
    thread: threading.Thread | None = None
    ready: Turns[tuple[int, Observation]] = field(default_factory=Turns)

    def __post_init__(self) -> None:
        self.waiting = {i for i, (_, p) in enumerate(self.begun) if p is not None}
        self.unannounced = [i for i, (_, p) in enumerate(self.begun) if p is None]

    @property
    def done(self) -> bool:
        return not self.waiting and not self.unannounced

    def take(self, *, block: bool) -> tuple[int, Observation] | None:
        """The next arrived Observation to decide, namespaces in turn (`shell.turns`): of all
        that have arrived, not the first to arrive. With `block`, wait for one; else None."""
        while True:
            self._drain()
            while self.ready:
                arrival = self.ready.pop()
                if arrival[0] in self.waiting:  # told twice (a last-resort path): decided once
                    return arrival
            try:
                self._file(self.arrived.get(block=block))
            except queue.Empty:
                return None

    def _drain(self) -> None:
        while True:
            try:
                self._file(self.arrived.get_nowait())
            except queue.Empty:
                return

    def _file(self, arrival: tuple[int, Observation]) -> None:
        if arrival[0] in self.waiting:
            self.ready.push(self.keys[arrival[0]][0], arrival[0], arrival)

    def run(self, log: Any, on_arrival: Callable[[], None]) -> None:
        """Observe every pending canary (on this cycle's thread), each queued as it ends."""
        ready = [(i, p) for i, (_, p) in enumerate(self.begun) if p is not None]

        def arrive(j: int, obs: Observation) -> None:
            self.arrived.put((ready[j][0], obs))
            on_arrival()

        try:
            observe_all([p for _, p in ready], log, on_done=arrive)
        except Exception as exc:  # noqa: BLE001 - last resort: observe_all never raises; a read must arrive
            for i, p in ready:
                read = Read(p.source, p.spec, p.start, p.now, p.spec.timing.interval_seconds)
                self.arrived.put((i, raised(read, exc, p.log)))
            on_arrival()


class Cycles:
    """The cycles whose reads are in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[Cycle] = []

    def start(
        self,
        keys: Sequence[tuple[str, str]],
        begun: list[tuple[Outcome, Pending | None]],
        log: Any,
        on_arrival: Callable[[], None],
    ) -> Cycle:
        cycle = Cycle(list(keys), begun)
        if cycle.waiting:
            cycle.thread = threading.Thread(
                target=cycle.run, args=(log, on_arrival), daemon=True, name="alphagate-read"
            )
            cycle.thread.start()
        with self._lock:
            self._running.append(cycle)
        return cycle

    def running(self) -> list[Cycle]:
        with self._lock:
            self._running = [c for c in self._running if not c.done]
            return list(self._running)

    def overdue(self) -> str | None:
        """Why the control loop is stuck reading, when it is (a cycle far past its deadline)."""
        limit = budgets().max_read_seconds + OVERDUE_GRACE_SECONDS
        now = time.monotonic()
        for cycle in self.running():
            if cycle.waiting and now - cycle.started > limit:
                names = ", ".join(f"{ns}/{n}" for ns, n in (cycle.keys[i] for i in cycle.waiting))
                return (
                    f"reads of {names[:200]} in flight for {now - cycle.started:.0f}s, past every "
                    f"read deadline (at most {budgets().max_read_seconds:g}s)"
                )
        return None

    def join(self, timeout: float) -> None:
        """Wait (at most `timeout` s in all) for the reads in flight to end."""
        end = time.monotonic() + timeout
        for cycle in self.running():
            if cycle.thread is not None:
                cycle.thread.join(max(0.0, end - time.monotonic()))


__all__ = ["OVERDUE_GRACE_SECONDS", "Cycle", "Cycles"]
