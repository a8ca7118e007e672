"""The in-process fleet: alpha from counters, restarts, timeline, kubelet API, determinism."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from alphagate import vllm
from alphagate.errors import ScenarioError
from alphagate_lab.sim.fleet import Fleet, FleetSnapshot
from alphagate_lab.sim.pod import PodSpec, parse_speculative_args, spec_args
from alphagate_lab.sim.scenario import Scenario, parse_scenario


def _alpha(a: FleetSnapshot, b: FleetSnapshot, role: str = "canary") -> float:
    acc = drafted = 0
    for pb in b.pods:
        if pb.labels["role"] != role or pb.spec_k is None:
            continue
        pa = a.pod(pb.name)
        acc += pb.counters[vllm.SPEC_ACCEPTED] - pa.counters[vllm.SPEC_ACCEPTED]
        drafted += pb.counters[vllm.SPEC_DRAFT_TOKENS] - pa.counters[vllm.SPEC_DRAFT_TOKENS]
    return acc / drafted


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_alpha_over_a_minute_matches_the_scenario(steady_chat: Scenario, seed: int) -> None:
    fleet = Fleet(steady_chat, seed=seed)
    fleet.advance_to(120.0)  # settle
    a = fleet.snapshot()
    fleet.advance_to(180.0)
    b = fleet.snapshot()
    assert _alpha(a, b) == pytest.approx(steady_chat.slices["chat"].alpha, abs=0.03)


def test_speculation_off_removes_spec_series_and_resets_counters(steady_chat: Scenario) -> None:
    fleet = Fleet(steady_chat, seed=4)
    fleet.advance_to(60.0)
    before = fleet.snapshot().pod("chat-canary-0")
    assert before.spec_k == 5 and before.counters[vllm.GENERATION_TOKENS] > 10_000
    assert fleet.set_speculative_config("chat-canary-0", None) is True
    loading = fleet.snapshot().pod("chat-canary-0")
    assert loading.phase == "loading" and loading.spec_k is None
    assert not any(k.startswith(vllm.SPEC_PREFIX) for k in loading.counters)
    assert loading.counters[vllm.GENERATION_TOKENS] == 0
    assert loading.started > before.started and loading.restarts == 1
    fleet.advance_to(60.0 + 30.0 + 10.0)  # default load time is 30 s
    after = fleet.snapshot().pod("chat-canary-0")
    assert after.ready
    assert 0 < after.counters[vllm.GENERATION_TOKENS] < before.counters[vllm.GENERATION_TOKENS]
    assert after.per_pos == ()
    # Same args again: no restart.
    assert fleet.set_speculative_config("chat-canary-0", None) is False


def test_traffic_moves_to_other_pods_while_one_loads(steady_chat: Scenario) -> None:
    fleet = Fleet(steady_chat, seed=5)
    fleet.restart("chat-baseline-0")
    assert fleet.truth().slices["chat"].ready_pods == 3
    fleet.advance_to(20.0)
    snap = fleet.snapshot()
    assert snap.pod("chat-baseline-0").counters[vllm.GENERATION_TOKENS] == 0
    assert snap.pod("chat-baseline-1").counters[vllm.GENERATION_TOKENS] > 0
    events = [e.kind for e in fleet.drain_events()]
    assert "restart" in events
    fleet.advance_to(31.0)
    assert "ready" in [e.kind for e in fleet.drain_events()]


@pytest.mark.parametrize(
    ("args", "k"),
    [
        ([], 0),
        (
            [
                "--model",
                "m",
                "--speculative-config",
                '{"method":"ngram","num_speculative_tokens":3}',
            ],
            3,
        ),
        (['--speculative-config={"num_speculative_tokens": 4}'], 4),
        (["-sc", '{"method": "eagle3", "num_speculative_tokens": 2}'], 2),
        (["--speculative_config", '{"num_speculative_tokens": 6}'], 6),
        (["-sc", '{"num_speculative_tokens": 2}', "-sc", '{"num_speculative_tokens": 7}'], 7),
        (["--speculative-config", "null"], 0),
    ],
)
def test_container_args_set_k(args: list[str], k: int) -> None:
    config = parse_speculative_args(args)
    assert (config.k if config else 0) == k


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--speculative-config"], "needs a JSON value"),
        (["-sc", "{not json"], "invalid JSON"),
        (["-sc", '{"method": "eagle3"}'], "num_speculative_tokens"),
        (["-sc", '{"num_speculative_tokens": 0}'], "num_speculative_tokens"),
        (["-sc", "[1, 2]"], "JSON object"),
    ],
)
def test_bad_container_args_are_refused(args: list[str], reason: str) -> None:
    with pytest.raises(ScenarioError, match=reason):
        parse_speculative_args(args)


def test_kubelet_api_creates_restarts_and_stops_pods(steady_chat: Scenario) -> None:
    fleet = Fleet(steady_chat, seed=6, create_pools=False)
    assert fleet.pods == {}
    args = [
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        *spec_args({"num_speculative_tokens": 3}),
    ]
    spec = PodSpec(
        name="chat-canary-7d9f-abcde", deployment="chat-canary", role="canary", slice="chat",
        namespace="llm", args=tuple(args), load_time=10.0,
    )  # fmt: skip
    pod = fleet.add_pod(spec)
    assert pod.phase == "loading" and pod.k == 3
    fleet.advance_to(15.0)
    assert pod.ready and pod.snapshot(fleet.now).counters[vllm.SPEC_DRAFTS] > 0
    with pytest.raises(ScenarioError, match="invalid JSON"):
        fleet.apply_args(pod.name, ["-sc", "{"])
    assert pod.ready and pod.k == 3  # a refused config leaves the pod alone
    assert fleet.apply_args(pod.name, ["--model", "meta-llama/Llama-3.1-8B-Instruct"]) is True
    assert pod.phase == "loading" and pod.k == 0
    with pytest.raises(ScenarioError, match="unknown slice"):
        fleet.add_pod(PodSpec(name="x", deployment="x", role="baseline", slice="nope"))
    with pytest.raises(ScenarioError, match="already exists"):
        fleet.add_pod(spec)
    fleet.remove_pod(pod.name)
    assert fleet.snapshot().pods == []


SCALING = """
name: scaling
slices:
  chat: {alpha: 0.6}
  code: {alpha: 0.4, share: 0.0}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 1}
  - {name: chat-canary, role: canary, slice: chat, replicas: 1, load_time: 5s,
     speculative_config: {num_speculative_tokens: 4}}
  - {name: code-baseline, role: baseline, slice: code, replicas: 1}
timeline:
  - {at: 10s, pools: {chat-canary: {replicas: 3}}, slices: {chat: {alpha: 0.5}}}
  - {at: 20s, traffic: {rate: 40}, slices: {chat: {share: 0.5}, code: {share: 0.5}}}
  - {at: 30s, pools: {chat-canary: {replicas: 1, speculative_config: null}}}
"""


def test_timeline_scales_pools_and_moves_traffic() -> None:
    fleet = Fleet(parse_scenario(SCALING), seed=1)
    fleet.advance_to(10.0)
    assert sorted(fleet.pods) == [
        "chat-baseline-0", "chat-canary-0", "chat-canary-1", "chat-canary-2", "code-baseline-0",
    ]  # fmt: skip
    truth = fleet.truth()
    assert truth.slices["chat"].alpha == 0.5 and truth.slices["chat"].ready_pods == 2
    assert truth.slices["code"].arrival_rate == 0.0
    fleet.advance_to(20.0)
    truth = fleet.truth()
    assert truth.slices["code"].arrival_rate == pytest.approx(20.0)
    assert truth.slices["chat"].ready_pods == 4
    fleet.advance_to(30.0)
    assert sorted(fleet.pods) == ["chat-baseline-0", "chat-canary-0", "code-baseline-0"]
    assert fleet.pods["chat-canary-0"].k == 0 and fleet.pods["chat-canary-0"].phase == "loading"
    kinds = [e.kind for e in fleet.drain_events()]
    assert kinds.count("timeline") == 3 and "pod_removed" in kinds


def _digest(
    fleet: Fleet, every: float, *, upto: float | None = None
) -> tuple[str, FleetSnapshot, str | None]:
    """Digest of every snapshot of the run, its last snapshot, and the digest of the
    snapshots up to ``upto`` (that of the same run stopped there)."""
    h = hashlib.sha256()
    last = None
    prefix = None
    for snap in fleet.run(every=every):
        for p in snap.pods:
            h.update(json.dumps(p.to_json(), sort_keys=True).encode())
        if snap.t == upto:
            prefix = h.hexdigest()
        last = snap
    assert last is not None
    return h.hexdigest(), last, prefix


def test_24h_runs_fast_and_is_deterministic_for_a_seed(steady_chat: Scenario) -> None:
    day = steady_chat.model_copy(update={"duration": 24 * 3600.0})
    started = time.perf_counter()
    # the day's first 3 hours are one of the two runs compared (a run is the same whatever
    # the scenario's duration: it only says where `run` stops), so the check of determinism
    # is still two fleets of their own, for one 3-hour run less
    _, last, once = _digest(Fleet(day, seed=42, tick=15.0), every=600.0, upto=3 * 3600.0)
    elapsed = time.perf_counter() - started
    print(f"\n24 h of {len(last.pods)} pods simulated in {elapsed:.2f}s "
          f"({24 * 3600 / elapsed:,.0f}x real time)")  # fmt: skip
    assert last.t == 24 * 3600
    hours = day.model_copy(update={"duration": 3 * 3600.0})
    again, _, _ = _digest(Fleet(hours, seed=42, tick=15.0), every=600.0)
    assert once is not None and again == once
    other, _, _ = _digest(Fleet(hours, seed=43, tick=15.0), every=600.0)
    assert other != once


def test_kubelet_mode_takes_pool_defaults_and_owns_replicas() -> None:
    fleet = Fleet(parse_scenario(SCALING), seed=1, create_pools=False)
    args = ["--model", "m", "-sc", '{"num_speculative_tokens": 2}']
    spec = fleet.spec_for("chat-canary-5c7d-x1", deployment="chat-canary", args=args)
    assert (spec.role, spec.slice, spec.load_time, spec.args) == (
        "canary",
        "chat",
        5.0,
        tuple(args),
    )
    fleet.add_pod(spec, ready=True)
    other = fleet.spec_for("web-0", deployment="web", args=[], role="baseline", slice="code")
    fleet.add_pod(other, ready=True)
    with pytest.raises(ScenarioError, match="give its role and slice"):
        fleet.spec_for("z", deployment="z", args=[])
    with pytest.raises(ScenarioError, match="invalid JSON"):
        fleet.spec_for("y", deployment="chat-canary", args=["-sc", "{"])
    fleet.advance_to(40.0)  # the timeline scales chat-canary to 3, then 1 and turns it off
    assert sorted(fleet.pods) == ["chat-canary-5c7d-x1", "web-0"]  # replicas: the kubelet's
    assert fleet.pods["chat-canary-5c7d-x1"].k == 2  # its args too
    assert fleet.truth().slices["chat"].alpha == 0.5  # slices and traffic still follow
