"""Real traces replayed by a router, custom histogram bounds, rare bad requests and tail-only
slowdowns: the simulator's parts the decision benchmark's real-traffic suite stands on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from alphagate import vllm
from alphagate.errors import ScenarioError
from alphagate_lab.sim.admission import mixture_good_alpha
from alphagate_lab.sim.exposition import render
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.pod import parse_histogram_buckets
from alphagate_lab.sim.recording import read_recording, record
from alphagate_lab.sim.router import Router
from alphagate_lab.sim.scenario import Scenario, load_scenario, parse_scenario
from alphagate_lab.sim.traces import TRACES, Replay, load_trace

K3 = {"method": "eagle3", "num_speculative_tokens": 3}


def _scenario(chat: dict[str, Any], *, canary: dict[str, Any] | None = None, **kw: Any) -> Scenario:
    pools = [
        {"name": "b", "role": "baseline", "slice": "chat", "replicas": 3},
        {"name": "c", "role": "canary", "slice": "chat", "replicas": 1, "speculative_config": K3,
         **(canary or {})},
    ]  # fmt: skip
    return Scenario.model_validate({"name": "t", "slices": {"chat": chat}, "pools": pools, **kw})


# ---------------------------------------------------------------- traces


def test_the_shipped_traces_load_with_their_published_shape() -> None:
    conv, code = load_trace("azure-conv-2023"), load_trace("azure-code-2023")
    assert set(TRACES) == {"azure-conv-2023", "azure-code-2023"}
    assert conv.rate == pytest.approx(5.5, abs=0.1) and code.rate == pytest.approx(2.57, abs=0.1)
    assert np.median(conv.output) == 129 and np.median(code.output) == 13
    assert np.all(np.diff(conv.arrival) >= 0) and conv.arrival[0] == 0.0
    assert np.max(np.diff(code.arrival)) > 200  # the code service's long idle gap


def test_a_replay_loops_and_keeps_every_request_of_the_trace() -> None:
    trace = load_trace("azure-code-2023")
    replay = Replay(trace, offset=100.0, scale=1.0, seed=1)
    t, prompts, outputs = replay.between(0.0, trace.span)
    assert t.size == trace.arrival.size
    assert sorted(outputs.tolist()) == sorted(trace.output.tolist())
    assert sorted(prompts.tolist()) == sorted(trace.prompt.tolist())
    assert np.all(np.diff(t) >= 0) and t[0] >= 0 and t[-1] < trace.span
    # the second loop is the first one again, one span later
    t2, _, o2 = replay.between(trace.span, 2 * trace.span)
    assert np.allclose(t2 - trace.span, t) and np.array_equal(o2, outputs)
    # split anywhere, the pieces add up to the whole
    a = replay.between(0.0, 1234.5)[0]
    b = replay.between(1234.5, trace.span)[0]
    assert a.size + b.size == t.size


def test_scale_thins_or_superposes_the_trace() -> None:
    trace = load_trace("azure-conv-2023")
    half = Replay(trace, offset=0.0, scale=0.5, seed=2)
    double = Replay(trace, offset=0.0, scale=2.0, seed=2)
    assert half.rate == pytest.approx(trace.rate / 2, rel=0.03)
    assert double.rate == pytest.approx(trace.rate * 2, rel=1e-9)


def test_each_seed_starts_somewhere_else_in_the_trace_and_a_seed_repeats() -> None:
    chat = {"alpha": 0.6, "trace": {"name": "azure-conv-2023"}}
    first = {}
    for seed in (1, 2, 1):
        fleet = Fleet(_scenario(chat), seed=seed, tick=30)
        fleet.step()
        first.setdefault(seed, []).append(fleet.snapshot().pods[0].counters[vllm.PROMPT_TOKENS])
    assert first[1][0] == first[1][1] != first[2][0]


def test_replayed_requests_are_dealt_to_ready_pods_by_weight() -> None:
    chat = {"alpha": 0.6, "trace": {"name": "azure-conv-2023", "offset": 0}}
    sc = Scenario.model_validate(
        {
            "name": "w",
            "slices": {"chat": chat},
            "pools": [
                {"name": "a", "role": "canary", "slice": "chat", "traffic_weight": 1.4,
                 "speculative_config": K3},
                {"name": "b", "role": "canary", "slice": "chat", "traffic_weight": 0.6,
                 "speculative_config": K3},
            ],
        }
    )  # fmt: skip
    fleet = Fleet(sc, seed=1, tick=30)
    fleet.advance_to(1800)
    done = {p.name: sum(p.success.values()) for p in fleet.snapshot().pods}
    share = done["a-0"] / (done["a-0"] + done["b-0"])
    assert share == pytest.approx(0.7, abs=0.01)
    total = sum(done.values())
    assert total == pytest.approx(load_trace("azure-conv-2023").rate * 1800, rel=0.15)


def test_a_loading_pod_gets_no_requests_and_the_others_take_its_share() -> None:
    fleet = Fleet(_scenario({"alpha": 0.6, "trace": {"name": "azure-conv-2023"}}), seed=1, tick=30)
    fleet.advance_to(300)
    fleet.set_speculative_config("c-0", None)  # a restart: 30 s of model load
    before = {p.name: p.counters.prompt_tokens for p in fleet.pods.values()}
    fleet.step()
    after = {p.name: p.counters.prompt_tokens for p in fleet.pods.values()}
    assert after["c-0"] == 0
    assert all(after[n] > before[n] for n in ("b-0", "b-1", "b-2"))
    assert fleet.dropped["chat"] == 0


def test_the_routers() -> None:
    rr = Router("round-robin")
    picks = np.concatenate([rr.deal(7, ["a", "b"], [1.4, 0.6]) for _ in range(10)])
    assert np.mean(picks == 0) == pytest.approx(0.7, abs=0.02)
    assert list(Router().deal(5, ["a", "b", "c"], [1, 1, 1])) == [0, 1, 2, 0, 1]
    lo = Router("least-outstanding")
    assert list(lo.deal(4, ["busy", "idle"], [1, 1], [5, 0])) == [1, 1, 1, 1]
    assert list(lo.deal(4, ["busy", "idle"], [1, 1], [1, 0])) == [1, 0, 1, 0]


def test_a_trace_slice_refuses_other_arrivals_and_unknown_traces() -> None:
    base = "name: x\nslices:\n  chat:\n    alpha: 0.6\n"
    with pytest.raises(ScenarioError, match=r"slices\.chat\.trace: a trace is the slice's"):
        parse_scenario(base + "    arrival_rate: 3\n    trace: {name: azure-conv-2023}\n")
    with pytest.raises(ScenarioError, match=r"slices\.chat\.trace\.name: .*no-such"):
        parse_scenario(base + "    trace: {name: no-such}\n")


def test_a_trace_file_of_ones_own_replays_too(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-01-01 00:00:00.0000000,100,10\n"
        "2024-01-01 00:00:01.5000000,200,20\n"
        "2024-01-01 00:00:03.0000000,300,30\n",
        encoding="utf-8",
    )
    trace = load_trace(str(path))
    assert trace.arrival.tolist() == [0.0, 1.5, 3.0] and trace.span == pytest.approx(4.5)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="not a request trace"):
        load_trace(str(bad))


@pytest.mark.parametrize("name", ["azure-conv.yaml", "azure-code.yaml"])
def test_the_example_scenarios_replay_their_trace(
    name: str, scenarios_dir: Path, tmp_path: Path
) -> None:
    sc = load_scenario(scenarios_dir / name)
    fleet = Fleet(sc, seed=sc.seed, tick=15)
    out = tmp_path / "rec.jsonl"
    record(fleet, out, duration=600, every=15)
    rec = read_recording(out)
    last = rec.snapshots[-1]
    assert sum(sum(p.success.values()) for p in last.pods) > 500
    canary = next(p for p in last.pods if p.labels["role"] == "canary")
    # the custom layout survives a recording
    assert (
        canary.histograms[vllm.TPOT].bounds
        == fleet.pods[canary.name].snapshot(0).histograms[vllm.TPOT].bounds
    )


# ---------------------------------------------------------------- custom buckets


def test_custom_histogram_buckets_set_the_per_token_layout_as_vllm_does() -> None:
    bounds = [0.004, 0.005, 0.006, 0.008, 0.01, 0.02]
    args = ["--custom-histogram-buckets", '{"inter_token_latency": ' + str(bounds) + "}"]
    fleet = Fleet(_scenario({"alpha": 0.7, "arrival_rate": 8}, canary={"extra_args": args}),
                  seed=1, tick=15)  # fmt: skip
    fleet.advance_to(300)
    snap = fleet.snapshot()
    canary = snap.pod("c-0")
    for name in (vllm.ITL, vllm.TPOT):
        assert canary.histograms[name].bounds == tuple(bounds)
    assert canary.histograms[vllm.E2E].bounds == vllm.E2E_BUCKETS
    assert snap.pod("b-0").histograms[vllm.TPOT].bounds == vllm.TPOT_BUCKETS
    page = render(canary).decode()
    assert 'vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.006"' in page


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"inter_token_latency": [0.01, 0.005]}', "inter_token_latency: expected ascending"),
        ('{"nope": [1]}', "unknown family 'nope'"),
        ("[1, 2]", "must map bucket families"),
        ("{", "invalid JSON"),
    ],
)
def test_a_bad_layout_is_refused_with_the_family(value: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_histogram_buckets(["--custom-histogram-buckets", value])


def test_a_pod_refuses_bad_bucket_args_before_restarting() -> None:
    fleet = Fleet(_scenario({"alpha": 0.7, "arrival_rate": 8}), seed=1, tick=15)
    pod = fleet.pods["c-0"]
    with pytest.raises(ScenarioError, match="unknown family"):
        pod.apply_args(["--custom-histogram-buckets", '{"x": [1]}'], now=0.0)
    assert pod.restarts == 0 and pod.ready


# ---------------------------------------------------------------- requests


def test_rare_bad_requests_keep_the_drafts_mean_at_the_slice_alpha() -> None:
    chat = {"alpha": 0.62, "arrival_rate": 40, "output_tokens": 200,
            "bad_requests": {"share": 0.07, "alpha": 0.2, "spread": 5}}  # fmt: skip
    fleet = Fleet(_scenario(chat), seed=4, tick=15)
    fleet.advance_to(3600)
    c = fleet.snapshot().pod("c-0").counters
    assert c[vllm.SPEC_ACCEPTED] / c[vllm.SPEC_DRAFT_TOKENS] == pytest.approx(0.62, abs=0.01)
    # the good requests are drawn higher to make up for the bad ones
    assert mixture_good_alpha(0.62, 0.07, 0.2, 3.0) == pytest.approx(0.68, abs=0.01)
    assert mixture_good_alpha(0.62, 0.0, 0.2, 3.0) == 0.62


def test_a_tail_slowdown_moves_the_p99_and_barely_the_mean() -> None:
    def tpot(tail: tuple[float, float]) -> np.ndarray[Any, Any]:
        sc = _scenario({"alpha": 0.7, "arrival_rate": 8}, stalls={"rate": 0})
        fleet = Fleet(sc, seed=2, tick=30)
        pod = fleet.pods["c-0"]
        pod.spec = pod.spec.__class__(**{**pod.spec.__dict__, "tail_share": tail[0],
                                         "tail_factor": tail[1]})  # fmt: skip
        out: list[float] = []
        while fleet.now < 3600:
            fleet.step()
            out += pod.engine.finished_tpot.tolist()
        return np.asarray(out)

    plain, slow = tpot((0.0, 1.0)), tpot((0.03, 4.0))
    assert np.quantile(slow, 0.99) > 2.0 * np.quantile(plain, 0.99)
    assert slow.mean() / plain.mean() < 1.15
    assert np.median(slow) == pytest.approx(np.median(plain), rel=0.05)
