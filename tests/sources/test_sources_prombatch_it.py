"""The Prometheus path at fleet size, against the real Prometheus (1 s scrapes) over simulated
pods: batched queries answer every canary as its own queries do, and the shipped recording
rules load and are what the source reads when the endpoint says they are installed.

Tolerances: batched against per-canary, 1e-9 relative (the same series summed in another
order). Recorded rates against raw counters: 0.05 alpha and 25% tokens (a rate over 3 s
recorded every 1 s against increase() extrapolated over the step: both estimate the same
counters, with different edges).
"""

from __future__ import annotations

import re
import threading
import time
from urllib.parse import parse_qs

import httpx
import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Observation, Role
from alphagate.errors import BudgetKind, SourceErrorKind
from alphagate.sources.cycle import Read, observe_each
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.prombatch import observe_many, union_matchers
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.testing.prometheus import PrometheusServer, available
from fleets import BATCH_INTERVAL, BATCH_SLICES, slice_spec

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

INTERVAL = BATCH_INTERVAL
SLICES = BATCH_SLICES


def spec_for(slice_name: str) -> SpeculativeCanarySpec:
    return slice_spec(slice_name, interval=INTERVAL, window=4 * INTERVAL)


@pytest.fixture
def stack(fleet_prometheus: PrometheusServer) -> PrometheusServer:
    """The session's Prometheus over BATCH_FLEET, with the shipped rules at 1 s scrapes."""
    return fleet_prometheus


def same(a: Observation, b: Observation) -> None:
    """Two observations of one canary agree on every typed field."""
    assert a.source_error == b.source_error and len(a.pools) == len(b.pools)
    assert a.scrape_interval_seconds == b.scrape_interval_seconds
    for pa, pb in zip(a.pools, b.pools, strict=True):
        assert (pa.slice, pa.role, pa.pods, pa.error_kind) == (
            pb.slice,
            pb.role,
            pb.pods,
            pb.error_kind,
        )
        assert [(s.pod, s.end) for s in pa.acceptance] == [(s.pod, s.end) for s in pb.acceptance]
        for sa, sb in zip(pa.acceptance, pb.acceptance, strict=True):
            assert (sa.drafts, sa.draft_tokens, sa.accepted_tokens) == pytest.approx(
                (sb.drafts, sb.draft_tokens, sb.accepted_tokens), rel=1e-9
            )
            assert sa.per_position == pytest.approx(sb.per_position, rel=1e-9)
        assert (pa.spec_series, pa.no_data) == (pb.spec_series, pb.no_data)
        assert pa.running == pytest.approx(pb.running, rel=1e-9)
        assert (pa.output_lengths is None) == (pb.output_lengths is None)
        assert pa.generation_tokens == pytest.approx(pb.generation_tokens, rel=1e-9)
        for ha, hb in (
            (pa.itl, pb.itl),
            (pa.tpot, pb.tpot),
            (pa.lives and pa.lives.histogram, pb.lives and pb.lives.histogram),
        ):
            assert (ha is None) == (hb is None)
            if ha is not None and hb is not None:
                assert ha.bounds == hb.bounds
                assert ha.counts == pytest.approx(hb.counts, rel=1e-9)
        assert len(pa.tpot_samples) == len(pb.tpot_samples)


def alpha(obs: Observation) -> float:
    pool = obs.pools[0]  # the canary pool
    assert pool.role is Role.CANARY and pool.error is None, pool
    drafted = sum(s.draft_tokens for s in pool.acceptance)
    return sum(s.accepted_tokens for s in pool.acceptance) / drafted


class Counting(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/v1/query"):  # not the targets probe
            self.queries.append(request.content.decode())
        return super().handle_request(request)


def test_one_query_per_family_answers_every_canary_as_its_own_queries(
    stack: PrometheusServer,
) -> None:
    specs = [spec_for(s) for s in SLICES]
    end = time.time() - 1.5  # Prometheus has scraped past it
    start = end - 4 * INTERVAL
    counting, one, each = Counting(), Counting(), Counting()
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=counting) as batched:
        together = observe_many(batched, specs, start=start, end=end, interval_seconds=INTERVAL)
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=one) as batched:
        observe_many(batched, specs[:1], start=start, end=end, interval_seconds=INTERVAL)
    # one query per family (and one for whether spec series exist), however many canaries:
    # 17 with the canaries' decode times (buckets and sum), which size alpha's blocks
    assert len(counting.queries) == len(one.queries) <= 17
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=each) as alone:
        one_by_one = [
            alone.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in specs
        ]
    assert len(each.queries) > 3 * len(counting.queries) / 2
    for a, b in zip(together, one_by_one, strict=True):
        same(a, b)
    assert all(len(o.pools[0].acceptance) >= 4 for o in together)
    assert [round(alpha(o), 1) for o in together] == [0.7, 0.5, 0.6]


def test_a_failing_batched_query_fails_every_canary_of_the_batch(stack: PrometheusServer) -> None:
    end = time.time()
    with PrometheusSource(PrometheusEndpoint(url=stack.url + "/nowhere")) as bad:
        got = observe_many(
            bad,
            [spec_for("chat"), spec_for("code")],
            start=end - 12,
            end=end,
            interval_seconds=INTERVAL,
        )
    assert all(o.source_error is not None for o in got)


class RefusesBatches(Counting):
    """Prometheus refusing every query that matches more than `most` values of a label (a
    batch's union), as it refuses a query over too many samples: 422, errorType execution."""

    def __init__(self, most: int = 1) -> None:
        super().__init__()
        self.most = most
        self.refused = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode()).get("query", [""])[0]
        unions = re.findall(r'=~"([^"]*)"', query)
        if any(len(u.split("|")) > self.most for u in unions):
            self.refused += 1
            body = {
                "status": "error",
                "errorType": "execution",
                "error": "query processing would load too many samples into memory",
            }
            return httpx.Response(422, json=body)
        return super().handle_request(request)


@pytest.mark.parametrize("most", [1, 2])
def test_a_batch_refused_for_its_size_is_asked_again_in_halves(
    stack: PrometheusServer, most: int
) -> None:
    """Refused for matching three slices, a shared query is asked of each half of the batch:
    with two slices allowed, the halves answer (a few queries, not one per pool); with none,
    the halves go down to single pools. Either way every pool's answer is its own."""
    specs = [spec_for(s) for s in SLICES]
    end = time.time() - 1.5
    start = end - 4 * INTERVAL
    refusing = RefusesBatches(most)
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=refusing) as batched:
        together = observe_many(batched, specs, start=start, end=end, interval_seconds=INTERVAL)
    with PrometheusSource(PrometheusEndpoint(url=stack.url)) as alone:
        one_by_one = [
            alone.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in specs
        ]
    for a, b in zip(together, one_by_one, strict=True):
        same(a, b)
    assert all(o.source_error is None and not any(p.error for p in o.pools) for o in together)
    if most == 2:  # each shared query refused once, then answered by its two halves
        assert 10 <= refusing.refused <= 17
        assert len(refusing.queries) <= 3 * refusing.refused + 2
    else:  # refused at every level down to single pools: far more refusals than queries' names
        assert refusing.refused >= 3 * 10
        assert len(refusing.queries) > 6 * 10


def test_union_matchers_escape_values() -> None:
    m = union_matchers([{"app": "a.b", "role": "canary"}, {"app": "c|d", "role": "canary"}])
    assert m == 'app=~"a\\\\.b|c\\\\|d",role="canary"'


def test_the_shipped_rules_load_and_the_source_reads_them(stack: PrometheusServer) -> None:
    groups = httpx.get(f"{stack.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 9 and all(r["health"] == "ok" for r in rules), rules
    spec = spec_for("chat")
    end = time.time() - 1.5
    start = end - 4 * INTERVAL
    endpoint = PrometheusEndpoint(url=stack.url, recorded_rules_interval_seconds=1)
    counting = Counting()
    with PrometheusSource(endpoint, transport=counting) as recorded:
        assert recorded.reads_recorded(INTERVAL) == 1
        got = recorded.observe(spec, start=start, end=end, interval_seconds=INTERVAL)
    # the recorded families come from the recorded rates, never from raw increases (what the
    # rules do not record, such as output lengths and running requests, is read raw)
    recorded_reads = [q for q in counting.queries if "alphagate%3Avllm_" in q]
    assert len(recorded_reads) >= 9
    raw = ("spec_decode", "generation_tokens_total", "inter_token", "time_per_output")
    assert not [q for q in counting.queries for r in raw if f"increase%28vllm%3A{r}" in q]
    with PrometheusSource(PrometheusEndpoint(url=stack.url)) as raw:
        want = raw.observe(spec, start=start, end=end, interval_seconds=INTERVAL)
    assert got.source_error is None and got.pools[0].error is None
    assert len(got.pools[0].acceptance) >= 3
    assert alpha(got) == pytest.approx(alpha(want), abs=0.05)
    assert got.pools[0].generation_tokens == pytest.approx(
        want.pools[0].generation_tokens, rel=0.25
    )
    assert got.pools[0].itl is not None and got.pools[1].itl is not None


class TimesOutBatches(RefusesBatches):
    """Prometheus giving up on every query that matches more than one value of a label (a
    batch's union) as it gives up on a query past its timeout: 503, errorType timeout."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode()).get("query", [""])[0]
        if any(len(u.split("|")) > self.most for u in re.findall(r'=~"([^"]*)"', query)):
            self.refused += 1
            body = {"status": "error", "errorType": "timeout", "error": "query timed out"}
            return httpx.Response(503, json=body)
        return Counting.handle_request(self, request)


def test_a_batch_the_server_gives_up_on_is_asked_per_pool(stack: PrometheusServer) -> None:
    """One tenant's pools that push a shared query past the server's timeout cost a few
    queries more, never the answers of the pools batched with them."""
    specs = [spec_for(s) for s in SLICES]
    end = time.time() - 1.5
    start = end - 4 * INTERVAL
    timing_out = TimesOutBatches()
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=timing_out) as batched:
        together = observe_many(batched, specs, start=start, end=end, interval_seconds=INTERVAL)
    with PrometheusSource(PrometheusEndpoint(url=stack.url)) as alone:
        one_by_one = [
            alone.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in specs
        ]
    for a, b in zip(together, one_by_one, strict=True):
        same(a, b)
    assert timing_out.refused >= 10  # every shared query timed out, then its halves answered


class Answers(Counting):
    """Counts each answer's points as the decode budget counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.points: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        if request.url.path.startswith("/api/v1/query"):
            resp.read()
            self.points.append(resp.content.count(b"["))
        return resp


def test_answers_past_the_decode_budget_are_split_then_refused_typed(
    stack: PrometheusServer,
) -> None:
    specs = [spec_for(s) for s in SLICES]
    end = time.time() - 1.5
    start = end - 4 * INTERVAL
    sizes = Answers()
    with PrometheusSource(PrometheusEndpoint(url=stack.url), transport=sizes) as alone:
        one_by_one = [
            alone.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in specs
        ]
    largest = max(sizes.points)  # a pool's own answers fit; the batch's union ones do not
    endpoint = PrometheusEndpoint(url=stack.url, max_answer_points=largest + 10)
    counting = Counting()
    with PrometheusSource(endpoint, transport=counting) as batched:
        together = observe_many(batched, specs, start=start, end=end, interval_seconds=INTERVAL)
    for a, b in zip(together, one_by_one, strict=True):
        same(a, b)
    assert len(counting.queries) > 15  # some shared answers were refused and asked in halves
    # an answer too large for the budget even for one pool: that pool fails, typed
    tiny = PrometheusEndpoint(url=stack.url, max_answer_points=10)
    with PrometheusSource(tiny) as small:
        got = small.observe(specs[0], start=start, end=end, interval_seconds=INTERVAL)
    assert got.source_error is None
    for pool in got.pools:
        assert pool.error_kind is SourceErrorKind.BUDGET and pool.budget is BudgetKind.ANSWER
        assert pool.error is not None and "decodes at most 10 points" in pool.error


class Slow(Counting):
    """Every query answered after `delay` s; the most queries seen in flight at once."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(self.delay)
            return super().handle_request(request)
        finally:
            with self.lock:
                self.now -= 1


def reads_of_distinct_windows(url: str, transport: httpx.BaseTransport, n: int) -> list[Read]:
    end = time.time() - 1.5
    out = []
    for k in range(n):  # each its own window: one batch each
        src = PrometheusSource(PrometheusEndpoint(url=url), transport=transport)
        spec = spec_for(SLICES[k % len(SLICES)])
        out.append(Read(src, spec, end - 4 * INTERVAL - k * 0.5, end, INTERVAL))
    return out


def test_batches_of_distinct_windows_are_read_side_by_side(stack: PrometheusServer) -> None:
    slow = Slow(0.05)
    reads = reads_of_distinct_windows(stack.url, slow, 4)
    try:
        got = observe_each(reads)
    finally:
        for r in reads:
            assert isinstance(r.source, PrometheusSource)
            r.source.close()
    assert all(o.source_error is None for o in got)
    assert slow.peak >= 2  # windows read in series would never have two queries in flight


def test_batches_read_within_one_deadline_fail_typed_when_it_passes(
    stack: PrometheusServer,
) -> None:
    # Every query takes 1 s: a read's 15-odd queries cannot end within its deadline (twice
    # the 5 s timeout, at most 80% of the 3 s interval: 2.4 s). Every canary ends there, typed,
    # each window beside the others rather than one after another.
    slow = Slow(1.0)
    reads = reads_of_distinct_windows(stack.url, slow, 3)
    try:
        got = observe_each(reads)
    finally:
        for r in reads:
            assert isinstance(r.source, PrometheusSource)
            r.source.close()
    for obs in got:
        assert obs.source_error_kind is SourceErrorKind.BUDGET, obs.source_error
        assert obs.source_budget is BudgetKind.READ_TIME
        assert obs.source_error is not None and "2.4s (80% of its 3s interval)" in obs.source_error
    assert slow.peak >= 2
