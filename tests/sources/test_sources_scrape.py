"""ScrapeSource over real HTTP: pods are prometheus_client registries served on 127.0.0.1.

Covers increments and batches, counter resets, discovery through the API-server double with
the real kubernetes client, and every scrape failure: malformed, oversized, hanging, gone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from scrape_pods import Clock, FakePod, static

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import SourceErrorKind
from alphagate.sources.common import PoolRef
from alphagate.sources.discovery import KubeDiscovery
from alphagate.sources.pageread import read_page
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sandbox.apiserver import Rbac
from specs import SOURCE_SPEC, spec_from


@pytest.fixture
def pods() -> Iterator[list[FakePod]]:
    made: list[FakePod] = []
    yield made
    for p in made:
        p.stop()


def make_spec(**scrape: Any) -> SpeculativeCanarySpec:
    return spec_from(
        SOURCE_SPEC, source={"kind": "podScrape", "scrape": {"timeoutSeconds": 1.0, **scrape}}
    )


def step(src: ScrapeSource, clock: Clock, spec: SpeculativeCanarySpec, window: float = 100.0):  # type: ignore[no-untyped-def]
    clock.t += 10.0
    return src.observe(spec, start=clock.t - window, end=clock.t, interval_seconds=10.0)


# ------------------------------------------------------------------------- increments


def test_increments_batches_and_histograms(pods: list[FakePod]) -> None:
    c1, c2, b1 = FakePod("c1"), FakePod("c2"), FakePod("b1", speculating=False)
    pods += [c1, c2, b1]
    c1.work(100, 2)  # before the first scrape: not in any increment
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1, c2], [b1]), clock=clock) as src:
        first = step(src, clock, spec)
        canary = first.pool("chat", Role.CANARY)
        assert canary is not None and canary.error is None
        assert canary.acceptance == () and canary.pods == 2  # nothing to subtract yet
        c1.work(10, 3, itl=0.02)
        c2.work(20, 1, itl=0.2)
        b1.work(30, 0, itl=0.04)
        second = step(src, clock, spec)
        c1.work(5, 0)
        third = step(src, clock, spec)
    canary = second.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is None and canary.pods == 2
    by_pod = {s.pod: s for s in canary.acceptance}
    assert set(by_pod) == {"c1", "c2"}
    assert (by_pod["c1"].drafts, by_pod["c1"].draft_tokens, by_pod["c1"].accepted_tokens) == (
        10,
        40,
        30,
    )
    assert by_pod["c1"].per_position == (10, 10, 10)
    assert by_pod["c2"].per_position == (20,)
    assert by_pod["c1"].end - by_pod["c1"].start == pytest.approx(10.0)
    assert canary.generation_tokens == 10 * 4 + 20 * 2
    assert canary.itl is not None and canary.itl.total == 30 and canary.itl.bounds[-1] == math.inf
    assert canary.itl.counts[canary.itl.bounds.index(0.025)] == 10
    assert canary.itl.sum == pytest.approx(10 * 0.02 + 20 * 0.2)
    base = second.pool("chat", Role.BASELINE)
    assert base is not None and base.error is None and base.acceptance == ()  # spec off: fine
    assert base.generation_tokens == 30 and base.itl is not None and base.itl.total == 30
    # third window keeps both batches of c1 (and c2's zero-draft batch is dropped)
    canary3 = third.pool("chat", Role.CANARY)
    assert canary3 is not None
    assert sorted((s.pod, s.drafts) for s in canary3.acceptance) == [
        ("c1", 5),
        ("c1", 10),
        ("c2", 20),
    ]


def test_window_drops_old_increments(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        step(src, clock, spec, window=20)
        c1.work(10, 1)
        step(src, clock, spec, window=20)
        c1.work(3, 1)
        step(src, clock, spec, window=20)
        c1.work(4, 1)
        obs = step(src, clock, spec, window=20)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and sorted(s.drafts for s in canary.acceptance) == [3, 4]


def test_counter_reset_never_gives_negative_increments(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        c1.work(500, 2)
        step(src, clock, spec)
        c1.restart()  # a restart: every counter back to 0
        c1.work(7, 1)
        obs = step(src, clock, spec)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is None
    (sample,) = canary.acceptance
    assert (sample.drafts, sample.draft_tokens, sample.accepted_tokens) == (7, 28, 7)
    assert canary.generation_tokens == 14
    assert canary.itl is not None and min(canary.itl.counts) >= 0 and canary.itl.total == 7


def test_restart_detected_by_created_even_when_counters_grew_past(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        c1.work(5, 1)
        step(src, clock, spec)
        c1.restart()
        c1.work(9, 1)  # 9 > 5: only the new _created stamp tells it restarted
        obs = step(src, clock, spec)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None
    (sample,) = canary.acceptance
    assert sample.drafts == 9  # not 9 - 5


def test_since_start_counts_the_first_scrape(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.work(96, 1)
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1], []), clock=clock, since_start=True) as src:
        obs = step(src, clock, spec, window=1e9)
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None
    (sample,) = canary.acceptance
    assert sample.drafts == 96 and sample.accepted_tokens == 96


def test_series_labels_filter_series_not_pods(pods: list[FakePod]) -> None:
    a = FakePod("a", model="chat-model")
    pods.append(a)
    a.work(10, 1)
    spec = SpeculativeCanarySpec.model_validate(
        {
            **make_spec().model_dump(by_alias=True),
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"role": "canary", "model_name": "chat-model"}},
                    "baseline": {"matchLabels": {"role": "baseline", "model_name": "other"}},
                }
            ],
        }
    )
    clock = Clock()
    with ScrapeSource(static([a], [a]), clock=clock, since_start=True) as src:
        obs = step(src, clock, spec, window=1e9)
    canary, base = obs.pool("chat", Role.CANARY), obs.pool("chat", Role.BASELINE)
    assert canary is not None and len(canary.acceptance) == 1
    assert base is not None and base.acceptance == () and base.generation_tokens == 0


# ------------------------------------------------------------------------- failures


def test_malformed_page_is_a_parse_error_naming_the_line(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.mode = "garbage"
    clock = Clock()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        obs = step(src, clock, make_spec())
        canary = obs.pool("chat", Role.CANARY)
        assert canary is not None and canary.error is not None
        assert canary.error_kind is SourceErrorKind.PARSE and "line 1" in canary.error
        assert src.failures[("chat", Role.CANARY)][0].kind is SourceErrorKind.PARSE


def test_oversized_page_is_too_large(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.mode = "huge"
    clock = Clock()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        obs = step(src, clock, make_spec(maxBodyBytes=64 * 1024))
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None
    assert canary.error_kind is SourceErrorKind.TOO_LARGE


def test_http_status_failure(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.mode = "status"
    clock = Clock()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        obs = step(src, clock, make_spec())
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None and "HTTP 500" in canary.error


def test_hanging_pod_times_out_and_fails_a_small_pool(pods: list[FakePod]) -> None:
    good, stuck = FakePod("good"), FakePod("stuck")
    pods += [good, stuck]
    clock, spec = Clock(), make_spec(timeoutSeconds=0.5)
    with ScrapeSource(static([good, stuck], [good]), clock=clock) as src:
        step(src, clock, spec)
        good.work(10, 1)
        stuck.mode = "hang"
        obs = step(src, clock, spec)
        failures = src.failures[("chat", Role.CANARY)]
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is not None
    assert (
        canary.error_kind is SourceErrorKind.PARTIAL
        and "timeout" in canary.error
        and "stuck" in canary.error
    )
    assert [f.kind for f in failures] == [SourceErrorKind.TIMEOUT]
    base = obs.pool("chat", Role.BASELINE)
    assert base is not None and base.error is None  # the same good pod serves another pool


def test_one_failing_pod_in_a_large_pool_is_tolerated(pods: list[FakePod]) -> None:
    many = [FakePod(f"p{i}") for i in range(11)]
    pods += many
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static(many, []), clock=clock, max_failed_fraction=0.1) as src:
        step(src, clock, spec)
        for p in many:
            p.work(2, 1)
        many[0].mode = "garbage"
        obs = step(src, clock, spec)
        assert len(src.failures[("chat", Role.CANARY)]) == 1
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is None
    assert canary.pods == 10  # p0 failed and had no earlier increment in the window
    assert len(canary.acceptance) == 10


def test_pod_that_disappears_is_left_out(pods: list[FakePod]) -> None:
    c1, c2 = FakePod("c1"), FakePod("c2")
    pods += [c1, c2]
    clock, spec = Clock(), make_spec()
    with ScrapeSource(static([c1, c2], []), clock=clock) as src:
        step(src, clock, spec)
        c1.work(10, 1)
        c2.work(10, 1)
        c2.stop()  # still "listed", but its server is gone: connection refused
        obs = step(src, clock, spec)
        assert [f.kind for f in src.failures[("chat", Role.CANARY)]] == [SourceErrorKind.POD_GONE]
    canary = obs.pool("chat", Role.CANARY)
    assert canary is not None and canary.error is None
    assert canary.pods == 1 and [s.pod for s in canary.acceptance] == ["c1"]


def test_all_pods_gone_is_an_error_not_zeros(pods: list[FakePod]) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.stop()
    clock = Clock()
    with ScrapeSource(static([c1], []), clock=clock) as src:
        obs = step(src, clock, make_spec())
    canary, base = obs.pool("chat", Role.CANARY), obs.pool("chat", Role.BASELINE)
    assert canary is not None and canary.error is not None
    assert canary.error_kind is SourceErrorKind.POD_GONE
    assert base is not None and base.error is not None
    assert base.error_kind is SourceErrorKind.EMPTY


def test_read_page_from_file_and_url(pods: list[FakePod], tmp_path: Any) -> None:
    c1 = FakePod("c1")
    pods.append(c1)
    c1.work(3, 2)
    page = read_page(c1.url)
    assert next(iter(page.series.values())).per_position == {0: 3, 1: 3}
    f = tmp_path / "m.txt"
    f.write_bytes(c1.body())
    assert read_page(str(f)) == page
    with pytest.raises(Exception, match="cannot read"):
        read_page(str(tmp_path / "missing.txt"))


# ------------------------------------------------------------------------- Kubernetes discovery


def _pod(
    name: str, labels: dict[str, str], *, port: int, ready: bool = True, how: str = "annotation"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "llm", "labels": labels}
    container: dict[str, Any] = {"name": "vllm", "image": "vllm"}
    if how == "annotation":
        meta["annotations"] = {"prometheus.io/port": str(port)}
    elif how == "container":
        container["ports"] = [{"name": "http", "containerPort": port}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_kube_discovery_through_the_api_server_double(
    pods: list[FakePod], shipped_rbac: Rbac
) -> None:
    from kubernetes import client

    from alphagate_lab.sandbox.apiserver import ApiServer

    c1, c2, b1 = FakePod("c1"), FakePod("c2"), FakePod("b1", speculating=False)
    pods += [c1, c2, b1]
    port = lambda p: int(p.url.split(":")[2].split("/")[0])  # noqa: E731
    canary = {"role": "canary", "slice": "chat"}
    with ApiServer(rbac=shipped_rbac) as api:  # discovery runs as the controller
        api.put(_pod("c1", canary, port=port(c1)))
        api.put(_pod("c2", canary, port=port(c2), how="container"))
        api.put(_pod("c3-starting", canary, port=port(c1), ready=False))
        api.put(_pod("c4-noport", canary, port=1, how="none"))
        api.put(_pod("b1", {"role": "baseline", "slice": "chat"}, port=port(b1)))
        elsewhere = _pod("x", canary, port=port(b1))
        elsewhere["metadata"]["namespace"] = "elsewhere"
        api.put(elsewhere)
        core = client.CoreV1Api(client.ApiClient(api.configuration()))
        disc = KubeDiscovery(core, "llm")
        targets = disc.targets(make_spec(), PoolRef("chat", Role.CANARY, canary))
        assert [t.pod for t in targets] == ["c1", "c2"]
        assert targets[1].url == c2.url
        assert any("c4-noport" in s for s in disc.skipped)
        clock = Clock()
        with ScrapeSource(disc, clock=clock, since_start=True) as src:
            c1.work(4, 1)
            c2.work(6, 2)
            obs = step(src, clock, make_spec(), window=1e9)
        listed = [r for r in api.requests if r.resource == "pods" and r.verb == "list"]
        assert listed and {r.query.get("labelSelector") for r in listed} == {
            "role=canary,slice=chat",
            "role=baseline,slice=chat",
        }
        assert {r.namespace for r in listed} == {"llm"}
    pool = obs.pool("chat", Role.CANARY)
    assert pool is not None and pool.error is None and pool.pods == 2
    assert sorted(s.drafts for s in pool.acceptance) == [4, 6]
    base = obs.pool("chat", Role.BASELINE)
    assert base is not None and base.error is None and base.pods == 1


def test_kube_discovery_failure_is_classified() -> None:
    from kubernetes import client

    from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

    with ApiServer(rbac=Rbac()) as api:  # allows nothing: 403 on list pods
        core = client.CoreV1Api(client.ApiClient(api.configuration()))
        clock = Clock()
        with ScrapeSource(KubeDiscovery(core, "llm"), clock=clock) as src:
            obs = step(src, clock, make_spec())
    assert all(p.error is not None and "403" in p.error for p in obs.pools)
    assert all(p.error_kind is SourceErrorKind.UNREACHABLE for p in obs.pools)
