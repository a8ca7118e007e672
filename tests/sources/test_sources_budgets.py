"""Every canary's read has budgets of its own (sources/budget.py): buckets, memory kept, memory
in flight, a parse worker taken in turn. Spending one fails that canary's pods, typed with the
budget, and never another's. Pods are real HTTP servers on 127.0.0.1; the reads go through the
wave (`sources.cycle.observe_each`) as in the controller.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from loopback import Handler, Loopback
from scrape_pods import FakePod, static

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation, PoolObservation, Role
from alphagate.errors import BudgetError, BudgetKind, SourceErrorKind
from alphagate.sources import budget, pageread, parsepool
from alphagate.sources.budget import IN_FLIGHT, MAX_BUCKETS, MiB, ScrapeBudgets
from alphagate.sources.cycle import Read, observe_each
from alphagate.sources.discovery import StaticDiscovery
from alphagate.sources.parsepool import FairPool
from alphagate.sources.scrape import ScrapeSource
from specs import SOURCE_SPEC, spec_from

WINDOW = 100.0
INTERVAL = 10.0


class Pages(Loopback):
    """A 127.0.0.1 server answering `/<name>/metrics` with `page(name)`."""

    def __init__(self, page: Callable[[str], bytes]) -> None:
        self.served = 0
        outer = self

        class PageHandler(Handler):
            def do_GET(self) -> None:
                body = page(self.path.strip("/").split("/")[0])
                outer.served += 1
                self.answer(body)

        super().__init__(PageHandler)


def histogram_page(buckets: int, *, series: int = 1, tag: str = "") -> bytes:
    """`series` label sets of a counter and an ITL histogram of `buckets` buckets."""
    out = []
    for s in range(series):
        labels = f'engine="{s}",model_name="m{tag}"'
        out.append(f"vllm:generation_tokens_total{{{labels}}} {100 + s}")
        for i in range(buckets - 1):
            le = f"{0.001 * (i + 1):.6f}"
            out.append(f'vllm:inter_token_latency_seconds_bucket{{{labels},le="{le}"}} {i}')
        out.append(f'vllm:inter_token_latency_seconds_bucket{{{labels},le="+Inf"}} {buckets}')
        out.append(f"vllm:inter_token_latency_seconds_count{{{labels}}} {buckets}")
        out.append(f"vllm:inter_token_latency_seconds_sum{{{labels}}} 1.5")
    return ("\n".join(out) + "\n").encode()


def spec(**scrape_settings: Any) -> SpeculativeCanarySpec:
    return spec_from(
        SOURCE_SPEC,
        source={"kind": "podScrape", "scrape": {"timeoutSeconds": 5.0, **scrape_settings}},
    )


@pytest.fixture
def pods() -> Iterator[list[FakePod]]:
    made: list[FakePod] = []
    yield made
    for p in made:
        p.stop()


@pytest.fixture
def opened() -> Iterator[list[ScrapeSource]]:
    made: list[ScrapeSource] = []
    yield made
    for src in made:
        src.close()


@pytest.fixture
def budgets() -> Iterator[Callable[..., None]]:
    """Install budgets for one test; the defaults come back after it."""
    before = budget.budgets()

    def install(**kw: Any) -> None:
        budget.configure(ScrapeBudgets(**kw))

    yield install
    budget.configure(before)


def canary(obs: Observation) -> PoolObservation:
    pool = obs.pool("chat", Role.CANARY)
    assert pool is not None
    return pool


def healthy(obs: Observation) -> bool:
    return all(p.error is None for p in obs.pools)


def cycle(sources: list[tuple[SpeculativeCanarySpec, ScrapeSource]]) -> list[Observation]:
    now = time.time()
    return observe_each([Read(src, s, now - WINDOW, now, INTERVAL) for s, src in sources])


def test_a_histogram_with_too_many_buckets_fails_its_canary_only(
    pods: list[FakePod], opened: list[ScrapeSource]
) -> None:
    # 19,000 `le` buckets would be kept per pod per interval: refused, named, typed.
    server = Pages(lambda name: histogram_page(MAX_BUCKETS + 1 if name == "wide" else 20))
    base = FakePod("base")
    pods.append(base)
    try:
        wide = StaticDiscovery(
            {("chat", Role.CANARY): server.targets("wide"), ("chat", Role.BASELINE): [base.url]}
        )
        fine = StaticDiscovery(
            {("chat", Role.CANARY): server.targets("fine"), ("chat", Role.BASELINE): [base.url]}
        )
        fleet = [(spec(), ScrapeSource(wide)), (spec(), ScrapeSource(fine))]
        opened += [src for _, src in fleet]
        attacker, victim = cycle(fleet)
    finally:
        server.stop()
    pool = canary(attacker)
    assert pool.error_kind is SourceErrorKind.BUDGET and pool.budget is BudgetKind.BUCKETS
    assert pool.error is not None and f"{MAX_BUCKETS + 1} buckets" in pool.error
    assert "inter_token_latency" in pool.error
    assert healthy(victim)


def test_a_canary_keeps_at_most_its_share(
    pods: list[FakePod], opened: list[ScrapeSource], budgets: Callable[..., None]
) -> None:
    # 4 MiB kept between the canaries: pages of 600 series (some 26,000 numbers, 2.6 MB each
    # with its increment) are more than any share; the vLLM-like canary keeps its pages.
    budgets(kept_bytes=4 * MiB)
    server = Pages(lambda name: histogram_page(20, series=600))
    good, base = FakePod("good"), FakePod("base")
    pods += [good, base]
    try:
        heavy = StaticDiscovery(
            {("chat", Role.CANARY): server.targets("h0", "h1"), ("chat", Role.BASELINE): []}
        )
        fleet = [(spec(), ScrapeSource(heavy)), (spec(), ScrapeSource(static([good], [base])))]
        opened += [src for _, src in fleet]
        for _ in range(2):
            good.work(10, 2)
            attacker, victim = cycle(fleet)
    finally:
        server.stop()
    pool = canary(attacker)
    assert pool.budget is BudgetKind.MEMORY and pool.error is not None
    assert "over its share" in pool.error and "kept for pages and increments" in pool.error
    assert healthy(victim) and canary(victim).acceptance  # its increments kept and read
    assert budget.KEPT.canaries() >= 2  # both still share the budget after their reads
    share = 4 * MiB // budget.KEPT.canaries()
    assert all(budget.KEPT.cells_of(src) * budget.CELL_BYTES <= share for _, src in fleet)


def test_pages_in_flight_past_a_canarys_share_fail_that_canary_only(
    pods: list[FakePod], opened: list[ScrapeSource], budgets: Callable[..., None]
) -> None:
    # Each canary's share is 1 MiB of pages in flight and it may borrow the budget's idle room
    # beyond it: three 1.5 MB pages do not all fit (MEMORY), the other canary's pages are read,
    # and the controller never held more than twice the budget (the documented bound).
    budgets(in_flight_bytes=4 * MiB, per_canary_bytes=1 * MiB)
    pad = b"# " + b"x" * 998 + b"\n"
    server = Pages(lambda name: pad * 1500 + histogram_page(20))
    good, base = FakePod("good"), FakePod("base")
    pods += [good, base]
    IN_FLIGHT.peak = 0
    try:
        big = StaticDiscovery(
            {("chat", Role.CANARY): server.targets("b0", "b1", "b2"), ("chat", Role.BASELINE): []}
        )
        fleet = [(spec(), ScrapeSource(big)), (spec(), ScrapeSource(static([good], [base])))]
        opened += [src for _, src in fleet]
        attacker, victim = cycle(fleet)
    finally:
        server.stop()
    pool = canary(attacker)
    assert pool.budget is BudgetKind.MEMORY and pool.error is not None
    assert "pages in flight" in pool.error
    assert healthy(victim)
    assert IN_FLIGHT.peak <= 2 * 4 * MiB
    assert IN_FLIGHT.used == 0


def test_pages_are_parsed_off_the_fetch_loop(
    pods: list[FakePod], opened: list[ScrapeSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    parse = pageread.parse_page

    def recording(*args: Any, **kw: Any) -> Any:
        threads.append(threading.current_thread().name)
        return parse(*args, **kw)

    monkeypatch.setattr(pageread, "parse_page", recording)
    good, base = FakePod("good"), FakePod("base")
    pods += [good, base]
    src = ScrapeSource(static([good], [base]))
    opened.append(src)
    (obs,) = cycle([(spec(), src)])
    assert healthy(obs) and len(threads) == 2
    assert all(t.startswith("alphagate-parse") for t in threads), threads


def test_the_parse_pool_takes_canaries_in_turn() -> None:
    # One worker; a canary queues 20 pages, another then queues 1: the second's page is
    # parsed second, not twenty-first.
    order: list[str] = []
    gate = threading.Event()

    def job(owner: str, n: int) -> str:
        gate.wait(5)
        order.append(f"{owner}{n}")
        return owner

    async def run() -> None:
        pool = FairPool(ThreadPoolExecutor(1), 1)
        heavy = [asyncio.ensure_future(pool.run("heavy", job, "heavy", n)) for n in range(20)]
        await asyncio.sleep(0)
        light = asyncio.ensure_future(pool.run("light", job, "light", 0))
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*heavy, light)
        pool.executor.shutdown()

    asyncio.run(run())
    assert order[:3] == ["heavy0", "light0", "heavy1"]
    assert len(order) == 21


def test_a_parse_cancelled_before_its_turn_is_never_run() -> None:
    ran: list[int] = []
    gate = threading.Event()

    def job(n: int) -> int:
        gate.wait(5)
        ran.append(n)
        return n

    async def run() -> None:
        pool = FairPool(ThreadPoolExecutor(1), 1)
        first = asyncio.ensure_future(pool.run("a", job, 0))
        queued = asyncio.ensure_future(pool.run("a", job, 1))
        await asyncio.sleep(0)
        queued.cancel()
        gate.set()
        assert await first == 0
        with pytest.raises(asyncio.CancelledError):
            await queued
        pool.executor.shutdown(wait=True)
        assert pool.stats.dropped == 1

    asyncio.run(run())
    assert ran == [0]


def test_a_namespace_past_its_share_of_the_parse_workers_is_refused_before_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One namespace's pages that need more parsing than its share (the workers' time over the
    namespaces parsing) are refused before a worker takes them, typed PARSE_TIME; another
    namespace's never are; a namespace alone may use every worker."""
    monkeypatch.setattr(parsepool, "SPEND_WINDOW", 0.5)
    parsed: list[str] = []

    def job(owner: str) -> str:
        time.sleep(0.005 if owner.startswith("llm/") else 0.05)  # a victim's page is light
        parsed.append(owner)
        return owner

    async def run() -> tuple[int, int, int]:
        pool = FairPool(ThreadPoolExecutor(1), 1)
        alone = 0
        for _ in range(12):  # alone: 0.6 s of parsing, more than half the window, never refused
            await pool.run("hostile/a", job, "hostile/a")
            alone += 1
        refused = victims = 0
        for _ in range(12):  # now beside a victim namespace: share 0.25 s each
            for owner in ("hostile/a", "hostile/b", "llm/v"):
                try:
                    await pool.run(owner, job, owner)
                    victims += owner.startswith("llm/")
                except BudgetError as err:
                    assert err.budget is BudgetKind.PARSE_TIME and "hostile" in str(err)
                    refused += 1
        pool.executor.shutdown()
        return alone, refused, victims

    alone, refused, victims = asyncio.run(run())
    assert alone == 12 and victims == 12  # the victim was never refused
    assert refused >= 6  # hostile/a and hostile/b are one tenant: its share is half the time


def test_a_namespaces_many_canaries_wait_behind_another_namespaces_page() -> None:
    """Twenty canaries of one namespace are one tenant in the parse queue: once it has parsed,
    another namespace's page goes next, not after a turn of each of its canaries."""
    order: list[str] = []
    gate = threading.Event()

    def job(owner: str) -> str:
        gate.wait(5)
        time.sleep(0.01)
        order.append(owner)
        return owner

    async def run() -> None:
        pool = FairPool(ThreadPoolExecutor(1), 1)
        hostile = [
            asyncio.ensure_future(pool.run(f"hostile/c{n}", job, f"hostile/c{n}"))
            for n in range(10)
        ]
        await asyncio.sleep(0)
        victim = asyncio.ensure_future(pool.run("llm/v", job, "llm/v"))
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*hostile, victim)
        pool.executor.shutdown()

    asyncio.run(run())
    assert order.index("llm/v") == 1, order  # right after the page already being parsed


def test_a_namespace_holds_its_part_of_the_workers_while_another_parses() -> None:
    """Two workers, and `llm` parsed a moment ago: `hostile`'s twenty canaries hold one worker,
    not both, even with the other idle, so `llm`'s next page is taken at once, not after a
    1.6 MB page ends."""
    release = threading.Event()
    started: list[str] = []

    def job(owner: str) -> str:
        started.append(owner)
        if owner.startswith("hostile/"):
            release.wait(5)  # a heavy page, parsing
        else:
            time.sleep(0.05)  # a victim's page: light, but it counts as parsing
        return owner

    async def run() -> tuple[int, float]:
        pool = FairPool(ThreadPoolExecutor(2), 2)
        await pool.run("llm/v", job, "llm/v")  # `llm` parses too (its pages every interval)
        hostile = [
            asyncio.ensure_future(pool.run(f"hostile/c{n}", job, f"hostile/c{n}"))
            for n in range(20)
        ]
        await asyncio.sleep(0.1)
        busy = sum(o.startswith("hostile/") for o in started)
        began = time.monotonic()
        await asyncio.wait_for(pool.run("llm/v", job, "llm/v"), 2)
        waited = time.monotonic() - began
        release.set()
        await asyncio.gather(*hostile)
        pool.executor.shutdown()
        return busy, waited

    busy, waited = asyncio.run(run())
    assert busy == 1  # one worker of two while `llm` parses
    assert waited < 1.0  # taken at once (a worker was kept for it), not after `release`
