"""The watch loop's schedule on virtual time (tests/clocks.py): each canary is evaluated once per
its own interval, exactly, and a new generation at once; minutes of schedule cost the real time
of the reconciles alone."""

from __future__ import annotations

import contextlib
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


class SlowSource(FakeSource):
    """A read that takes `seconds` of virtual time (as a slow pod or Prometheus would)."""

    def __init__(self, clock: VirtualClock, seconds: float, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock, self.seconds = clock, seconds

    def observe(self, *args: Any, **kwargs: Any) -> Any:
        self.clock.advance(self.seconds)
        return super().observe(*args, **kwargs)


@contextlib.contextmanager
def schedule(
    apiserver: ApiServer, kube: Kube, intervals: dict[str, float], *, read_seconds: float = 0.0
) -> Iterator[tuple[VirtualClock, Heard]]:
    """A Reconciler's watch and schedule, running on a virtual clock over these canaries."""
    for name, interval in intervals.items():
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
    clock, heard = VirtualClock(), Heard()
    sources: dict[str, FakeSource] = {}

    def source(spec: Any, namespace: str, name: str) -> FakeSource:
        if name not in sources:
            sources[name] = SlowSource(
                clock,
                read_seconds,
                apiserver,
                lambda s: 0.72,
                deployment_of=lambda s, n=name: f"{n}-canary",
            )
        return sources[name]

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
    loop = threading.Thread(target=rec.loop.run, args=(stop,), daemon=True)
    loop.start()
    try:
        yield clock, heard
    finally:
        stop.set()
        rec.loop.wake()
        loop.join(15)


@pytest.fixture
def running(apiserver: ApiServer, kube: Kube) -> Iterator[tuple[VirtualClock, Heard]]:
    """Two canaries, with reads that take no virtual time."""
    with schedule(apiserver, kube, INTERVALS) as ran:
        yield ran


def test_a_canary_waits_its_interval_not_the_round_that_held_it(
    apiserver: ApiServer, kube: Kube, wait_for: WaitFor
) -> None:
    """Three canaries due together are evaluated one after another, each read taking 4 s:
    each is due again one interval after its own evaluation began. (The schedule used to
    count from the end of the round, so every gap grew by the round's length, 12 s here,
    and with 100 canaries on one replica by far more than an interval.)"""
    names = {"a": 30.0, "b": 30.0, "c": 30.0}
    with schedule(apiserver, kube, names, read_seconds=4.0) as (_, heard):
        wait_for(lambda: all(len(heard.times(n)) >= 4 for n in names), 60, "four evaluations each")
        for name in names:
            times = heard.times(name)
            gaps = [b - a for a, b in itertools.pairwise(times)]
            # the round's other reads (8 s) fit inside the interval: nothing is late
            assert gaps == pytest.approx([30.0] * len(gaps), abs=1e-6), (name, times)


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


def test_the_watch_resumes_where_it_ended_without_listing_again(
    apiserver: ApiServer, kube: Kube, wait_for: WaitFor
) -> None:
    """The server ends a watch at its timeout (1 s here); the loop watches again from the last
    version it saw, as an informer does, and lists only once: a relist re-reads every canary,
    and with hundreds per replica that was most of its API traffic."""
    for name, interval in INTERVALS.items():
        apiserver.put(canary_cr(name, timing=timing(interval)))
    rec = Reconciler(kube, namespace=NS, watch_timeout_seconds=1)
    stop = threading.Event()
    watcher = threading.Thread(target=rec.loop.watch_loop, args=(stop,), daemon=True)
    watcher.start()

    def watches() -> list[Any]:
        """The watches that ended (the double logs a request once it is answered)."""
        return [
            r
            for r in apiserver.requests_matching(method="GET", resource="speculativecanaries")
            if r.query.get("watch") == "true"
        ]

    try:
        wait_for(lambda: len(watches()) >= 3, 30, "three watches, each ended by the server")
        obj = apiserver.get("speculativecanaries", NS, "chat")
        obj["spec"]["timing"]["intervalSeconds"] = 90.0  # generation 2, seen by a later watch
        edited = int(apiserver.put(obj)["metadata"]["resourceVersion"])

        def generation() -> object:
            return (rec.loop.cached_object(NS, "chat") or {}).get("metadata", {}).get("generation")

        wait_for(lambda: generation() == 2, 30, "the edit through a resumed watch")
        # a later watch starts from the edit's version or past it, not from the list's
        wait_for(
            lambda: any(int(r.query["resourceVersion"]) >= edited for r in watches()),
            30,
            "a watch resumed from the edit's version",
        )
    finally:
        stop.set()
        watcher.join(15)
    lists = [
        r
        for r in apiserver.requests_matching(method="GET", resource="speculativecanaries")
        if r.query.get("watch") != "true"
    ]
    assert len(lists) == 1, [r.query for r in lists]
    versions = [int(r.query["resourceVersion"]) for r in watches()]
    assert versions == sorted(versions), versions
