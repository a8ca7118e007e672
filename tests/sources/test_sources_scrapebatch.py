"""One cycle's pod scrapes in one wave (`sources.cycle.observe_each`) against one read at a time.

Every canary has its own ScrapeSource, as in the controller; a twin fleet of sources reads the
same pods one canary at a time at the same (test-clock) times. The wave must give the same
Observations field by field, over cycles (the increments memory), and one canary's trouble
(a bad page, a pod gone, a timeout, a discovery error, a source that raises) must stay its own.
Pods are real HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from loopback import Handler, Loopback
from scrape_pods import Clock, FakePod, static

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation, PoolObservation, Role
from alphagate.errors import BudgetKind, SourceErrorKind
from alphagate.sources.common import PoolRef
from alphagate.sources.cycle import Read, observe_each
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.pageread import Scraped
from alphagate.sources.scrape import Plan, ScrapeSource
from specs import SOURCE_SPEC, spec_from

WINDOW = 100.0


@pytest.fixture
def pods() -> Iterator[list[FakePod]]:
    made: list[FakePod] = []
    yield made
    for p in made:
        p.stop()


@pytest.fixture
def opened() -> Iterator[list[ScrapeSource]]:
    """Sources closed after the test, passed or failed (their aiohttp sessions)."""
    made: list[ScrapeSource] = []
    yield made
    for src in made:
        src.close()


def spec(**scrape: Any) -> SpeculativeCanarySpec:
    return spec_from(
        SOURCE_SPEC, source={"kind": "podScrape", "scrape": {"timeoutSeconds": 5.0, **scrape}}
    )


class BrokenDiscovery:
    """A plug-in Discovery with a bug."""

    def targets(self, spec: SpeculativeCanarySpec, pool: PoolRef) -> list[Target]:
        raise RuntimeError("discovery bug")


class AssemblyBug(ScrapeSource):
    """A source whose assembly raises (after its pods were fetched in the wave)."""

    def finish(self, plan: Plan, scraped: Mapping[str, Scraped]) -> Observation:
        raise RuntimeError("assembly bug")


class PlanBug(ScrapeSource):
    """A source whose read raises before it has anything to fetch."""

    def plan(self, spec: SpeculativeCanarySpec, **kw: Any) -> Plan:
        raise RuntimeError("plan bug")


Fleet = list[tuple[SpeculativeCanarySpec, ScrapeSource]]


def cycle_alone(fleet: Fleet, now: float) -> list[Observation]:
    return [src.observe(s, start=now - WINDOW, end=now, interval_seconds=10.0) for s, src in fleet]


def cycle_batched(fleet: Fleet, now: float, **kw: Any) -> list[Observation]:
    return observe_each([Read(src, s, now - WINDOW, now, 10.0) for s, src in fleet], **kw)


def drafts(obs: Observation, role: Role = Role.CANARY) -> list[tuple[str, float]]:
    pool = obs.pool("chat", role)
    assert pool is not None
    return sorted((a.pod, a.drafts) for a in pool.acceptance)


def test_one_wave_equals_one_canary_at_a_time_over_cycles(
    pods: list[FakePod], opened: list[ScrapeSource]
) -> None:
    p = [FakePod(f"p{i}") for i in range(5)] + [FakePod("p5", speculating=False)]
    pods += p
    clock = Clock()

    def fleet() -> Fleet:
        # A and B share pods (p1 canary, p4 baseline); C shares none and scrapes one at a
        # time with its own deadline; D has an empty pool; A is read twice in a cycle.
        a = (spec(), ScrapeSource(static([p[0], p[1]], [p[4]]), clock=clock))
        b = (spec(), ScrapeSource(static([p[1], p[2]], [p[4]]), clock=clock))
        c = (
            spec(maxConcurrency=1, timeoutSeconds=2.0),
            ScrapeSource(static([p[3]], [p[5]]), clock=clock),
        )
        d = (spec(), ScrapeSource(static([], [p[5]]), clock=clock))
        return [a, b, c, d, a]

    alone, batched = fleet(), fleet()
    opened += [src for _, src in alone + batched]
    seen: list[list[Observation]] = []
    for n in range(3):
        if n == 1:
            p[0].work(10, 3)
            p[1].work(20, 1)
            p[3].work(5, 2)
            p[5].work(7, 0)
        if n == 2:
            p[1].work(4, 2)
            p[2].restart()  # counters from zero: the reset is read the same way
            p[2].work(3, 1)
        clock.t += 10.0
        one = cycle_alone(alone, clock.t)
        wave = cycle_batched(batched, clock.t)
        assert wave == one  # every Observation, field by field
        for (_, x), (_, y) in zip(alone, batched, strict=True):
            assert x.failures == y.failures and x.bytes_read == y.bytes_read
        seen.append(wave)
    # The increments are real, so the equality above is not one of empty reads.
    assert drafts(seen[1][0]) == [("p0", 10), ("p1", 20)]
    assert drafts(seen[1][1]) == [("p1", 20)]  # p2 did nothing yet
    assert drafts(seen[2][1]) == [("p1", 4), ("p1", 20), ("p2", 3)]
    assert drafts(seen[2][2]) == [("p3", 5)]  # still in the window
    assert drafts(seen[2][0]) == [("p0", 10), ("p1", 4), ("p1", 20)]
    assert drafts(seen[2][4]) == drafts(seen[2][0])  # A again at once: nothing moved since
    base = seen[1][2].pool("chat", Role.BASELINE)
    assert base is not None and base.generation_tokens == 7
    empty = seen[1][3].pool("chat", Role.CANARY)
    assert empty is not None and empty.error_kind is SourceErrorKind.EMPTY


def test_one_canarys_trouble_never_touches_another(
    pods: list[FakePod], opened: list[ScrapeSource]
) -> None:
    good, other, bad, gone, hang = (FakePod(n) for n in ("good", "other", "bad", "gone", "hang"))
    pods += [good, other, bad, gone, hang]
    bad.mode, hang.mode = "garbage", "hang"
    gone.stop()  # refuses connections: deleted after listing
    clock = Clock()

    def fleet() -> Fleet:
        return [
            (spec(), ScrapeSource(static([good], [other]), clock=clock)),
            (spec(), ScrapeSource(static([bad], [other]), clock=clock)),
            (spec(), ScrapeSource(static([gone, good], [other]), clock=clock)),
            # only the hanging pod under the short deadline: a busy machine slows the others.
            # 1 s, not less: its read deadline (twice that) must stay a whole timeout after the
            # GET's own, or a GET started late beside the suite ends on the deadline (typed
            # read_time) in one path and on its timeout in the other
            (spec(timeoutSeconds=1.0), ScrapeSource(static([hang], []), clock=clock)),
            (spec(), ScrapeSource(BrokenDiscovery(), clock=clock)),
            (spec(), AssemblyBug(static([good], [other]), clock=clock)),
            (spec(), PlanBug(static([good], [other]), clock=clock)),
            (spec(), ScrapeSource(static([other], [good]), clock=clock)),
        ]

    alone, batched = fleet(), fleet()
    opened += [src for _, src in alone + batched]
    raised: list[tuple[int, str]] = []

    def on_raise(read: Read, exc: Exception) -> Observation:
        raised.append((next(i for i, (_, s) in enumerate(batched) if s is read.source), str(exc)))
        return Observation(at=read.end, window_seconds=0.0, pools=(), source_error="raised")

    for n in range(2):
        if n:
            good.work(10, 2)
            other.work(6, 1)
        clock.t += 10.0
        one: list[Observation] = []
        for s, src in alone[:5] + alone[7:]:
            one.append(src.observe(s, start=clock.t - WINDOW, end=clock.t, interval_seconds=10.0))
        wave = cycle_batched(batched, clock.t, on_raise=on_raise)
        assert wave[:5] + wave[7:] == one
    assert sorted(raised) == [(5, "assembly bug")] * 2 + [(6, "plan bug")] * 2
    assert [o.source_error for o in wave[5:7]] == ["raised", "raised"]
    ok = wave[0].pool("chat", Role.CANARY)
    assert ok is not None and ok.error is None and drafts(wave[0]) == [("good", 10)]
    kinds = [
        (o.pool("chat", Role.CANARY) or PoolObservation("", Role.CANARY)).error_kind
        for o in wave[1:5]
    ]
    assert kinds == [
        SourceErrorKind.PARSE,  # the bad page fails its own pool only
        None,  # the pod gone is left out
        SourceErrorKind.TIMEOUT,
        SourceErrorKind.UNREACHABLE,  # discovery failed
    ]
    left = wave[2].pool("chat", Role.CANARY)
    assert left is not None and left.pods == 1 and drafts(wave[2]) == [("good", 10)]
    base = wave[1].pool("chat", Role.BASELINE)
    assert base is not None and base.error is None and base.generation_tokens == 12
    assert drafts(wave[7], Role.BASELINE) == [("good", 10)]


def test_a_read_that_raises_without_on_raise_raises_after_the_wave(
    pods: list[FakePod], opened: list[ScrapeSource]
) -> None:
    good = FakePod("good")
    pods.append(good)
    clock = Clock()
    fine = ScrapeSource(static([good], []), clock=clock)
    fleet = [(spec(), AssemblyBug(static([good], []), clock=clock)), (spec(), fine)]
    opened += [src for _, src in fleet]
    clock.t += 10.0
    with pytest.raises(RuntimeError, match="assembly bug"):
        cycle_batched(fleet, clock.t)
    assert fine.bytes_read > 0  # the other read was done before the raise


# --------------------------------------------------------------------------- the bound


class Gate(Loopback):
    """A 127.0.0.1 server whose GETs wait until `want` have come (at most `wait` s), then
    hold `hold` s: the most GETs seen in flight at once is `peak`.

    A GET leaves the count before its answer is written: the client's next GET can only follow
    the whole answer, and counted after the write it could arrive first (a peak of 2 seen at
    maxConcurrency 1)."""

    def __init__(self, page: bytes, *, want: int, wait: float, hold: float) -> None:
        self.peak = self.now = self.came = 0
        self.served = 0
        cond = threading.Condition()
        gate = self

        class GateHandler(Handler):
            def do_GET(self) -> None:
                with cond:
                    gate.now += 1
                    gate.came += 1
                    gate.peak = max(gate.peak, gate.now)
                    cond.notify_all()
                    cond.wait_for(lambda: gate.came >= want, timeout=wait)
                time.sleep(hold)
                with cond:
                    gate.now -= 1
                    gate.served += 1
                self.answer(page)

        super().__init__(GateHandler)
        self.base = f"{self.url}/metrics"


@pytest.fixture
def gate_page(pods: list[FakePod]) -> bytes:
    p = FakePod("page")
    pods.append(p)
    p.work(3, 1)
    return p.body()


def gated_fleet(gate: Gate, sources: int, per_source: int, **scrape: Any) -> Fleet:
    fleet = []
    for j in range(sources):
        urls = [Target(f"{gate.base}?s={j}&p={i}", pod=f"s{j}p{i}") for i in range(per_source)]
        discovery = StaticDiscovery({("chat", Role.CANARY): urls})
        fleet.append((spec(**scrape), ScrapeSource(discovery)))
    return fleet


def test_every_canarys_gets_are_in_flight_together(gate_page: bytes) -> None:
    # Four canaries that each scrape one pod at a time: one canary after another would never
    # have two GETs in flight; one wave has all four.
    gate = Gate(gate_page, want=4, wait=2.0, hold=0.0)
    fleet = gated_fleet(gate, 4, 1, maxConcurrency=1, timeoutSeconds=5.0)
    try:
        got = cycle_batched(fleet, time.time())
    finally:
        gate.stop()
        for _, src in fleet:
            src.close()
    assert gate.peak == 4 and gate.served == 4
    assert all(o.pool("chat", Role.CANARY) is not None for o in got)
    assert all(src.failures == {} for _, src in fleet)


def test_one_policys_concurrency_never_lowers_anothers(gate_page: bytes) -> None:
    # A canary scraping one pod at a time with pages of up to 64 MiB (the wave bound it made
    # for everyone was 1) beside a canary of 8 pods at the default concurrency: the second
    # still has all its 8 GETs in flight at once.
    slow = Gate(gate_page, want=99, wait=0.5, hold=0.0)
    fast = Gate(gate_page, want=8, wait=2.0, hold=0.0)
    big = {"maxConcurrency": 1, "maxBodyBytes": 64 << 20, "maxLines": 100}
    fleet = gated_fleet(slow, 1, 4, timeoutSeconds=5.0, **big)
    fleet += gated_fleet(fast, 1, 8, timeoutSeconds=5.0)
    try:
        cycle_batched(fleet, time.time())
    finally:
        slow.stop()
        fast.stop()
        for _, src in fleet:
            src.close()
    assert fast.peak == 8 and fast.served == 8
    assert slow.peak == 1 and slow.served == 4  # its own maxConcurrency, kept
    assert all(src.failures == {} for _, src in fleet)


def test_a_pod_that_never_answers_delays_only_its_own_canary(
    pods: list[FakePod], opened: list[ScrapeSource]
) -> None:
    # The schema lets a policy wait 300 s for a pod; its read still ends at its own deadline
    # (80% of its 2 s interval here) and the other canary's result is handed over first.
    good, base, hang = FakePod("good"), FakePod("base"), FakePod("hang")
    pods += [good, base, hang]
    hang.mode = "hang"
    victim = (spec(), ScrapeSource(static([good], [base])))
    attacker = (spec(timeoutSeconds=300.0), ScrapeSource(static([hang], [base])))
    opened += [victim[1], attacker[1]]
    order: list[int] = []
    now = time.time()
    reads = [Read(src, s, now - WINDOW, now, 2.0) for s, src in (attacker, victim)]
    got = observe_each(reads, on_done=lambda i, obs: order.append(i))
    assert order == [1, 0]  # the victim's read did not wait for the attacker's deadline
    pool = got[0].pool("chat", Role.CANARY)
    assert pool is not None and pool.error_kind is SourceErrorKind.BUDGET
    assert pool.budget is BudgetKind.READ_TIME
    assert pool.error is not None and "deadline of 1.6s (80% of its 2s interval)" in pool.error
    assert got[1].pool("chat", Role.CANARY) is not None
    assert all(p.error is None for p in got[1].pools)
