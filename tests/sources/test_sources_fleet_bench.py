"""The fleet benchmark runs small under --quick and reports every number in the right shape
(never how fast: speed is what the benchmark prints, not what a test asserts)."""

from __future__ import annotations

import gzip
import itertools
import math

import pytest

from alphagate.sources import exposition
from alphagate_lab.bench import fleet, fleet_cycle
from alphagate_lab.sandbox.pageserver import Pages
from alphagate_lab.testing import client_parse
from alphagate_lab.testing import prometheus as promtest

pytestmark = [pytest.mark.slow]


def test_pages_grow_like_counters_and_stay_parseable() -> None:
    """The served page is the capture's shape; counters and buckets grow, never shrink."""
    text = fleet.CAPTURE.read_text()
    pages = Pages(text, variants=2, tick_seconds=10)
    before = exposition.parse(pages.render(1, 1))
    after = exposition.parse(pages.render(1, 2))
    assert before == client_parse.parse(pages.render(1, 1))
    (b,) = before.series.values()
    (a,) = after.series.values()
    assert set(a.counters) == set(b.counters) and a.speculating
    assert all(a.counters[c] > b.counters[c] for c in b.counters)
    for h, hist in a.histograms.items():
        bounds = sorted(hist.buckets)
        assert bounds[-1] == math.inf
        assert all(hist.buckets[x] <= hist.buckets[y] for x, y in itertools.pairwise(bounds))
        assert all(hist.buckets[le] >= b.histograms[h].buckets[le] for le in bounds)
    assert a.created == b.created  # no false resets
    plain, zipped = pages.page(3, pages.start + 25)
    assert gzip.decompress(zipped) == plain and len(zipped) < len(plain) / 4


def test_layout_gives_every_pod_one_canary_and_role() -> None:
    groups = fleet_cycle.layout(103, 50)
    pods = [i for _, canary, baseline in groups for i in canary + baseline]
    assert sorted(pods) == list(range(103))
    assert all(canary and baseline for _, canary, baseline in groups)


@pytest.mark.prometheus
@pytest.mark.skipif(not promtest.available(), reason="needs Debian's prometheus")
def test_quick_run_reports_every_number(capsys: pytest.CaptureFixture[str]) -> None:
    got = fleet.main(list(fleet.QUICK_ARGS))
    assert got is not None
    parser = got["parser"]
    assert set(parser) >= {"prometheus_client", "alphagate", "str.splitlines (ceiling)"}
    assert all(v > 0 for v in parser.values())
    steps = got["page_costs"]  # what a page costs after its GET: inflate, decode, parse
    assert {"inflate gzip (zlib)", "decode UTF-8", "parse (alphagate)"} <= set(steps)
    assert all(v > 0 for v in steps.values())
    kinds = {(c["source"], c["pods"]) for c in got["cycles"]}
    assert kinds == {("scrape", 20), ("scrape", 40), ("prometheus", 20), ("prometheus", 40)}
    # The Prometheus path: up to 17 queries a pool one canary at a time (15, and the
    # speculating canary's decode times), up to 17 for every pool batched (one canary, two
    # pools, one batch), the same through the recorded rates.
    how = {(c["pods"], c["how"]): c["median"]["queries"] for c in got["cycles"] if "how" in c}
    assert set(how) == {(20, "batched"), (20, "per canary"), (40, "batched"), (40, "recorded")}
    assert how[(20, "batched")] < how[(20, "per canary")] <= 32
    assert all(0 < how[k] <= 17 for k in how if k[1] != "per canary")
    for c in got["cycles"]:
        assert len(c["cycles"]) == 2 and c["canaries"] == 1, c
        assert c["errors"] == {}  # every pool read, by both paths
        assert sum(c["actions"].values()) == 2  # one decision per canary and cycle
        # every row judges a covered window of the same pages (alpha 0.14, far below the
        # gate): a Fail, never a hold for want of data (sparse scrapes, one increment)
        assert c["verdicts"].get("Fail", 0) >= 1, c
        m = c["median"]
        assert m["cpu"] > 0 and m["wall"] > 0 and m["bytes"] > 0 and c["peak_rss_mb"] > 0
    # so pod scraping, raw queries and recorded rates decide alike, row for row
    assert len({tuple(sorted(c["actions"].items())) for c in got["cycles"]}) == 1, got["cycles"]
    prom = got["prometheus_scrape"]
    assert prom["cpu_per_interval"] > 0 and prom["scrapes_per_interval"] > 0
    assert "ratio: alphagate cycle CPU / Prometheus scrape CPU" in capsys.readouterr().out
