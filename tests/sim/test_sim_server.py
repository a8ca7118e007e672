"""The real-time face over real HTTP on 127.0.0.1: pages, config changes, file-SD, ports."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alphagate import vllm
from alphagate.errors import SandboxError
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.pod import PodSpec, spec_args
from alphagate_lab.sim.scenario import Scenario, parse_scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing import prometheus


class ManualClock:
    """Wall clock the test moves by hand, so simulated minutes pass instantly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "le" not in s.labels and "position" not in s.labels:
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


Served = tuple[SimServer, ManualClock, httpx.Client]


@pytest.fixture
def served(steady_chat: Scenario) -> Iterator[Served]:
    clock = ManualClock()
    server = SimServer(Fleet(steady_chat, seed=9), clock=clock)
    with server, httpx.Client(timeout=5.0) as client:
        yield server, clock, client


def test_scraped_counters_give_the_scenario_alpha_over_a_minute(
    served: Served, steady_chat: Scenario
) -> None:
    server, clock, client = served
    url = server.url("chat-canary-0")
    clock.now += 120
    a = _counters(client.get(url).text)
    clock.now += 60
    resp = client.get(url)
    assert resp.status_code == 200
    b = _counters(resp.text)
    alpha = (b[vllm.SPEC_ACCEPTED] - a[vllm.SPEC_ACCEPTED]) / (
        b[vllm.SPEC_DRAFT_TOKENS] - a[vllm.SPEC_DRAFT_TOKENS]
    )
    assert alpha == pytest.approx(steady_chat.slices["chat"].alpha, abs=0.03)


def test_page_is_text_0_0_4_with_colons_whatever_the_accept_header(served: Served) -> None:
    server, clock, client = served
    clock.now += 10
    prometheus2 = (  # Prometheus 2.42's Accept header
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    for accept in (None, "*/*", prometheus2):
        headers = {"Accept": accept} if accept else {}
        resp = client.get(server.url("chat-canary-0"), headers=headers)
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert vllm.SPEC_DRAFTS in resp.text
        assert vllm.escaped(vllm.SPEC_DRAFTS) not in resp.text
        assert "# EOF" not in resp.text


def test_turning_speculation_off_restarts_the_pod_without_spec_series(served: Served) -> None:
    server, clock, client = served
    name = "chat-canary-0"
    clock.now += 60
    before = _counters(client.get(server.url(name)).text)
    assert before[vllm.SPEC_DRAFTS] > 0
    resp = client.post(server.url(name, "/sim/args"), json={"speculative_config": None})
    assert resp.status_code == 200 and resp.json() == {"restarted": True, "k": 0}
    assert client.get(server.url(name)).status_code == 503  # loading the model
    assert client.get(server.url(name, "/health")).status_code == 503
    state = client.get(server.url(name, "/sim/state")).json()
    assert state["phase"] == "loading" and state["args"] == [] and state["restarts"] == 1
    clock.now += 35  # past the 30 s load time
    resp = client.get(server.url(name))
    assert resp.status_code == 200
    assert vllm.SPEC_PREFIX not in resp.text
    after = _counters(resp.text)
    assert 0 < after[vllm.GENERATION_TOKENS] < before[vllm.GENERATION_TOKENS]
    assert (
        after[vllm.base(vllm.GENERATION_TOKENS) + vllm.CREATED]
        > before[vllm.base(vllm.GENERATION_TOKENS) + vllm.CREATED]
    )
    # And back on through container args, as a kubelet would apply a new pod template.
    args = spec_args({"method": "eagle3", "num_speculative_tokens": 3})
    resp = client.post(server.url(name, "/sim/args"), json={"args": args})
    assert resp.json() == {"restarted": True, "k": 3}
    clock.now += 35
    text = client.get(server.url(name)).text
    assert 'position="2"' in text and 'position="3"' not in text


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{nope", "Expecting property name"),
        (b'{"args": "-sc {}"}', "list of strings"),
        (b'{"args": ["-sc", "{\\"method\\": \\"ngram\\"}"]}', "num_speculative_tokens"),
        (b"{}", "give"),
    ],
)
def test_bad_config_changes_are_400_and_change_nothing(
    served: Served, body: bytes, reason: str
) -> None:
    server, _, client = served
    resp = client.post(server.url("chat-canary-0", "/sim/args"), content=body)
    assert resp.status_code == 400
    assert reason in resp.json()["error"]
    assert client.get(server.url("chat-canary-0", "/sim/state")).json()["k"] == 5


def test_port_in_use_is_a_clear_error(steady_chat: Scenario) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = SimServer(Fleet(steady_chat), port_base=port)
        with pytest.raises(SandboxError, match=f"127.0.0.1:{port} is already in use"):
            server.start()
        assert server.ports == {}  # what did start was stopped again


SCALE = """
name: scale
slices:
  chat: {alpha: 0.6}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 1}
  - {name: chat-canary, role: canary, slice: chat, replicas: 1, namespace: llm,
     speculative_config: {num_speculative_tokens: 4}}
timeline:
  - {at: 10s, pools: {chat-canary: {replicas: 2}}}
  - {at: 20s, pools: {chat-canary: {replicas: 0}}}
"""


def test_file_sd_follows_the_pods(tmp_path: Path) -> None:
    clock = ManualClock()
    sd = tmp_path / "targets.json"
    fleet = Fleet(parse_scenario(SCALE), seed=1)
    with SimServer(fleet, clock=clock, file_sd=sd) as server, httpx.Client() as client:
        groups = json.loads(sd.read_text())
        assert [g["labels"]["pod"] for g in groups] == ["chat-baseline-0", "chat-canary-0"]
        canary = groups[1]
        assert canary["labels"] == {
            "pod": "chat-canary-0", "namespace": "llm", "deployment": "chat-canary",
            "role": "canary", "slice": "chat",
        }  # fmt: skip
        assert canary["targets"] == [f"127.0.0.1:{server.ports['chat-canary-0']}"]
        clock.now += 10
        events = server.sync()
        assert "pod_added" in [e.kind for e in events]
        assert len(json.loads(sd.read_text())) == 3
        new_port = server.ports["chat-canary-1"]
        assert client.get(f"http://127.0.0.1:{new_port}/health").status_code == 503  # loading
        # A kubelet can add its own pods too.
        port = server.add_pod(PodSpec(name="extra", deployment="x", role="baseline", slice="chat"))
        assert client.get(f"http://127.0.0.1:{port}/health").status_code == 503
        clock.now += 10
        server.sync()
        pods = [g["labels"]["pod"] for g in json.loads(sd.read_text())]
        assert pods == ["chat-baseline-0", "extra"]
        server.remove_pod("extra")
        assert [g["labels"]["pod"] for g in json.loads(sd.read_text())] == ["chat-baseline-0"]


def test_real_time_at_speed(steady_chat: Scenario) -> None:
    """With the real clock: 60x speed makes a simulated minute pass in about a second."""
    with SimServer(Fleet(steady_chat, seed=2), speed=60.0) as server, httpx.Client() as client:
        url = server.url("chat-canary-0")
        first = _counters(client.get(url).text)[vllm.SPEC_DRAFTS]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = client.get(server.url("chat-canary-0", "/sim/state")).json()
            if state["t"] >= 60:
                break
            time.sleep(0.05)
        assert state["t"] >= 60
        assert _counters(client.get(url).text)[vllm.SPEC_DRAFTS] > first


@pytest.mark.prometheus
@pytest.mark.skipif(not prometheus.available(), reason="prometheus binary not installed")
def test_real_prometheus_scrapes_vllm_names_with_pod_labels(steady_chat: Scenario) -> None:
    server = SimServer(Fleet(steady_chat, seed=3), speed=10.0)
    with server, prometheus.PrometheusServer(targets=server.targets(), scrape_interval=0.5) as prom:
        result = prom.wait_for(f'{vllm.SPEC_ACCEPTED}{{role="canary"}}', timeout=60.0)
        labels = result[0]["metric"]
        assert labels["pod"] == "chat-canary-0" and labels["slice"] == "chat"
        assert labels["__name__"] == vllm.SPEC_ACCEPTED
        assert prom.query(f"{vllm.escaped(vllm.SPEC_ACCEPTED)}") == []
        prom.wait_for(f'count({vllm.GENERATION_TOKENS}{{role="baseline"}})',
                      lambda r: bool(r) and r[0]["value"][1] == "3", timeout=30.0)  # fmt: skip
