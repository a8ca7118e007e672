"""The watch loop's schedule on virtual time (tests/clocks.py): each canary is evaluated once per
its own interval, exactly, and a new generation at once; minutes of schedule cost the real time
of the reconciles alone."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kube_support import NS, FakeSource, canary_cr, seed

from alphagate.kube.client import Kube
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer
from clocks import VirtualClock

if TYPE_CHECKING:
    from conftest import WaitFor

INTERVALS = {"chat": 30.0, "code": 45.0}


class Heard:
    """When (on the virtual clock) each canary was evaluated, and which generation of its spec,
    as `on_outcome` tells it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[str, list[tuple[float, int | None]]] = defaultdict(list)

    def __call__(self, out: Outcome) -> None:
        generation = out.status.observed_generation if out.status is not None else None
        with self.lock:
            self.at[out.name].append((out.now, generation))

    def times(self, name: str) -> list[float]:
        with self.lock:
            return [at for at, _ in self.at[name]]

    def first_of_generation(self, name: str, generation: int) -> tuple[float, float] | None:
        """(the evaluation before it, the first evaluation of `generation`), if there was one."""
        with self.lock:
            rows = list(self.at[name])
        for (before, _), (at, gen) in itertools.pairwise(rows):
            if gen == generation:
                return before, at
        return None


def timing(interval: float) -> dict[str, Any]:
    return {
        "intervalSeconds": interval,  # compressed: the test runs minutes at most
        "windowSeconds": interval,  # compressed with the interval
        "warmupSeconds": 0,  # sandbox pods need no warm-up
        "minDwellSeconds": 0,  # flips follow the verdicts at once
        "probeSeconds": 600,  # compressed (900 shipped)
        "maxFlipsPerHour": 60,  # the flip budget is not under test here
        "rolloutTimeoutSeconds": 60,  # compressed: a sandbox rollout takes seconds
        # compressed (12-24 h in the policies)
        "cooldown": {"initialSeconds": 600, "factor": 2, "maxSeconds": 1200},
    }


@pytest.fixture
def running(apiserver: ApiServer, kube: Kube) -> Iterator[tuple[VirtualClock, Heard]]:
    """A Reconciler's watch and schedule, running on a virtual clock over two canaries."""
    for name, interval in INTERVALS.items():
        seed(
            apiserver,
            f"{name}-canary",
            f"{name}-baseline",
            cr=canary_cr(
                name,
                target={"name": f"{name}-canary", "container": "vllm"},
                baseline={"name": f"{name}-baseline", "container": "vllm"},
                timing=timing(interval),
            ),
        )
    sources: dict[str, FakeSource] = {}

    def source(spec: Any, namespace: str, name: str) -> FakeSource:
        if name not in sources:
            sources[name] = FakeSource(
                apiserver, lambda s: 0.72, deployment_of=lambda s, n=name: f"{n}-canary"
            )
        return sources[name]

    clock, heard = VirtualClock(), Heard()
    rec = Reconciler(
        kube,
        namespace=NS,
        source_factory=source,
        clock=clock.now,
        wait=clock.wait,
        on_outcome=heard,
        watch_timeout_seconds=5,
    )
    stop = threading.Event()
    loop = threading.Thread(target=rec.run, args=(stop,), daemon=True)
    loop.start()
    try:
        yield clock, heard
    finally:
        stop.set()
        rec.wake()
        loop.join(15)


def test_each_canary_is_evaluated_once_per_its_interval(
    running: tuple[VirtualClock, Heard], wait_for: WaitFor
) -> None:
    clock, heard = running
    wait_for(
        lambda: all(len(heard.times(n)) >= 6 for n in INTERVALS),
        60,
        "six evaluations of each canary",
    )
    for name, interval in INTERVALS.items():
        times = heard.times(name)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # the reconcile takes no virtual time: the next is due one interval after it began
        assert gaps == pytest.approx([interval] * len(gaps), abs=1e-6), (name, times)
    assert clock.now() - heard.times("chat")[0] >= 5 * INTERVALS["code"]


def test_a_new_generation_is_evaluated_at_once(
    running: tuple[VirtualClock, Heard], apiserver: ApiServer, wait_for: WaitFor
) -> None:
    _, heard = running
    wait_for(lambda: len(heard.times("chat")) >= 2, 60, "two evaluations of chat")

    def edit(interval: float) -> None:
        obj = apiserver.get("speculativecanaries", NS, "chat")
        obj["spec"]["timing"]["intervalSeconds"] = interval  # a new generation
        obj["spec"]["timing"]["windowSeconds"] = interval  # kept one interval long
        apiserver.put(obj)

    edit(3600.0)  # generation 2: due an hour after each evaluation
    wait_for(lambda: heard.first_of_generation("chat", 2), 30, "generation 2 evaluated")
    edit(1800.0)  # generation 3, while the next evaluation is an hour away
    pair = wait_for(lambda: heard.first_of_generation("chat", 3), 30, "generation 3 evaluated")
    before, at = pair
    # evaluated when the watch brought the change, long before the hour was up
    assert at - before < 3600.0 / 2, (before, at)
