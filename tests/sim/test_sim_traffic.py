"""Traffic as it is: per-request acceptance, long outputs, stalls, drift and the scrape path."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from alphagate import vllm
from alphagate_lab.sim.acceptance import draw_request_alpha
from alphagate_lab.sim.counters import EngineCounters
from alphagate_lab.sim.decode import DecodeParams, Load, Stalls, output_lengths
from alphagate_lab.sim.fleet import Fleet, FleetSnapshot
from alphagate_lab.sim.model import Engine
from alphagate_lab.sim.pod import PodSnapshot
from alphagate_lab.sim.scenario import parse_scenario

#: The n-gram capture in tests/sources/data (K = 4): per_pos / drafts by position.
CAPTURE_RATES = (49 / 277, 17 / 277, 16 / 277, 14 / 277)


def _engine(k: int, seed: int = 1, stalls: Stalls | None = None) -> Engine:
    return Engine(DecodeParams(), np.random.default_rng(seed), k=k, stalls=stalls)


def _run(engine: Engine, load: Load, ticks: int, dt: float) -> EngineCounters:
    c = EngineCounters(k=engine.k)
    for _ in range(ticks):
        engine.tick(dt, load, c)
    return c


@pytest.mark.parametrize(
    ("alpha", "k", "spread", "fill"),
    [(0.72, 5, 6.0, 1.0), (0.42, 4, 3.0, 1.0), (0.575, 3, 1.5, 0.7)],
)
def test_long_run_accepted_over_drafted_is_the_slice_alpha(
    alpha: float, k: int, spread: float, fill: float
) -> None:
    # Requests that accept well finish in fewer steps, so the engine must draw them leaning
    # high for the drafts it verifies to average exactly alpha. Six simulated hours.
    load = Load(alpha=alpha, arrival_rate=6.0, alpha_noise=0.0, request_spread=spread,
                draft_fill=fill)  # fmt: skip
    c = _run(_engine(k), load, 6 * 240, 15.0)
    assert c.accepted / c.draft_tokens == pytest.approx(alpha, abs=0.005)
    # The plain mean of the requests' own acceptance is above alpha: the tilt is real.
    own = draw_request_alpha(np.random.default_rng(0), 200_000, alpha, spread, fill * k)
    assert own.mean() > alpha + 0.01


def _window_alphas(load: Load, windows: int, every: int, seed: int) -> np.ndarray:
    """Accepted / drafted of one pod per scrape window of ``every`` 1-s ticks."""
    engine, c = _engine(5, seed), EngineCounters(k=5)
    out = []
    for _ in range(windows):
        a0, d0 = c.accepted, c.draft_tokens
        for _ in range(every):
            engine.tick(1.0, load, c)
        out.append((c.accepted - a0) / max(c.draft_tokens - d0, 1))
    return np.asarray(out)


def _lag1(x: np.ndarray) -> float:
    x = x - x.mean()
    return float((x[1:] @ x[:-1]) / (x @ x))


def test_a_request_keeps_its_acceptance_across_scrapes() -> None:
    # Wide per-request spread, no pod-level wander: any correlation between windows comes
    # from requests that are still in flight at the next scrape.
    common = Load(alpha=0.6, alpha_noise=0.0, request_spread=2.0, output_sigma=0.3)
    long = replace(common, arrival_rate=0.6, output_tokens=4000)  # lives ~15 s
    short = replace(common, arrival_rate=40.0, output_tokens=16)  # lives ~50 ms
    r_long = _lag1(_window_alphas(long, 400, 5, seed=3))
    r_short = _lag1(_window_alphas(short, 400, 5, seed=3))
    assert r_long > 0.4
    assert abs(r_short) < 0.15


def test_output_lengths_are_log_normal_around_the_median() -> None:
    z = np.random.default_rng(0).standard_normal(100_000)
    lengths = output_lengths(z, Load(alpha=0.7, output_tokens=600, output_sigma=0.8))
    assert np.median(lengths) == pytest.approx(600, rel=0.01)
    assert np.percentile(lengths, 99) / 600 == pytest.approx(np.exp(2.326 * 0.8), rel=0.05)
    assert lengths.max() == 8192  # the default max_tokens cap
    fixed = output_lengths(z[:10], Load(alpha=0.7, output_tokens=64, output_sigma=0))
    assert set(fixed) == {64.0}
    # Mean tokens per finished request = median * exp(sigma^2 / 2) for a log-normal.
    for median, sigma in ((256, 1.0), (1500, 0.5)):
        load = Load(alpha=0.7, arrival_rate=3.0, output_tokens=median, output_sigma=sigma)
        c = _run(_engine(0, seed=2), load, 4 * 240, 15.0)
        finished = sum(c.success.values())
        mean = c.generation_tokens / finished
        assert mean == pytest.approx(median * np.exp(sigma**2 / 2), rel=0.06)
    # The cap finishes requests on "length", the rest on "stop".
    capped = Load(alpha=0.7, arrival_rate=3.0, output_tokens=256, max_output_tokens=512)
    c = _run(_engine(0, seed=2), capped, 240, 15.0)
    share = c.success["length"] / sum(c.success.values())
    assert share == pytest.approx(0.247, abs=0.04)  # P(lognormal(ln 256, 1) >= 512)


def _rates(c: EngineCounters) -> np.ndarray:
    return np.asarray(c.per_pos(), dtype=float) / c.drafts


def test_per_position_shape_like_the_real_ngram_capture() -> None:
    # The capture's acceptance drops sharply after position 0 and then hardly decays: the
    # signature of requests (and drafts) that differ. Heterogeneous requests reproduce it;
    # alike requests give a geometric decay instead.
    alpha = sum(CAPTURE_RATES) / 4
    base = Load(alpha=alpha, arrival_rate=4.0, decay=0.2, draft_fill=0.6)
    spread = _rates(_run(_engine(4, 5), replace(base, request_spread=1.5), 480, 15.0))
    alike = _rates(_run(_engine(4, 5), replace(base, request_spread=200.0), 480, 15.0))
    assert np.abs(spread - np.asarray(CAPTURE_RATES)).max() < 0.035
    cond = spread[1:] / spread[:-1]
    assert cond[0] < 0.6 and cond[0] < cond[1] and cond[0] < cond[2]
    cond_alike = alike[1:] / alike[:-1]
    assert cond_alike[0] >= cond_alike[2]  # alike requests: no flattening
    assert (np.diff(spread) < 0).all()  # still non-increasing, as vLLM's per_pos must be


STALLS = """
name: stalls
duration: 2h
stalls: {rate: 12, duration: 40s, slowdown: 5}
traffic: {rate: 8}
slices:
  chat: {alpha: 0.7}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 1}
  - name: chat-canary
    role: canary
    slice: chat
    replicas: 1
    speculative_config: {method: eagle3, num_speculative_tokens: 4}
"""


def _mean_increase(a: PodSnapshot, b: PodSnapshot, family: str) -> float:
    ha, hb = a.histograms[family], b.histograms[family]
    return (hb.sum - ha.sum) / max(hb.count - ha.count, 1)


def test_stall_episodes_slow_both_roles_on_their_own_clock() -> None:
    fleet = Fleet(parse_scenario(STALLS), seed=4, tick=5.0)
    snaps: list[FleetSnapshot] = list(fleet.run(every=5.0))
    for role in ("baseline", "canary"):
        name = f"chat-{role}-0"
        stalled, calm = [], []
        for a, b in itertools.pairwise(snaps):
            itl = _mean_increase(a.pod(name), b.pod(name), vllm.ITL)
            frac = b.truth.pods[name].stalled
            if frac >= 0.99:
                stalled.append(itl)
            elif frac == 0.0:
                calm.append(itl)
        assert len(stalled) >= 10, role  # ~24 episodes of ~40 s in 2 h
        assert np.median(stalled) > 3.0 * np.median(calm), role
    # Each pod stalls on its own: the episodes do not coincide.
    marks = {
        role: np.asarray([s.truth.pods[f"chat-{role}-0"].stalled > 0 for s in snaps[1:]])
        for role in ("baseline", "canary")
    }
    both = (marks["baseline"] & marks["canary"]).sum()
    assert both < 0.5 * min(marks["baseline"].sum(), marks["canary"].sum())


def test_stalls_lengthen_the_per_token_latency_the_truth_reports() -> None:
    engine = _engine(5, seed=6, stalls=Stalls(rate_per_hour=30, duration=60, slowdown=4))
    c = EngineCounters(k=5)
    load = Load(alpha=0.7, arrival_rate=4.0)
    truths = [engine.tick(5.0, load, c) for _ in range(720)]
    in_stall = [t.time_per_token for t in truths if t.stalled >= 0.99]
    calm = [t.time_per_token for t in truths if t.stalled == 0.0]
    assert in_stall and calm
    assert np.median(in_stall) > 2.5 * np.median(calm)


DRIFT = """
name: drift
duration: 3h
stalls: {rate: 0}
traffic: {rate: 6}
slices:
  chat: {alpha: 0.70, output_tokens: 200}
pools:
  - name: chat-canary
    role: canary
    slice: chat
    speculative_config: {method: eagle3, num_speculative_tokens: 5}
timeline:
  - {at: 30m, ramp: 2h, slices: {chat: {alpha: 0.40}}, note: slow drift across the gate}
  - {at: 40m, ramp: 20m, traffic: {rate: 12}}
"""


def test_drift_ramps_alpha_and_the_counters_follow() -> None:
    fleet = Fleet(parse_scenario(DRIFT), seed=2, tick=15.0)
    seen: dict[int, float] = {}
    alphas: list[float] = []
    window: dict[int, float] = {}
    prev = None
    for snap in fleet.run(every=300.0):
        seen[round(snap.t)] = snap.truth.slices["chat"].alpha
        alphas.append(snap.truth.slices["chat"].alpha)
        pod = snap.pod("chat-canary-0")
        if prev is not None:
            drafted = pod.counters[vllm.SPEC_DRAFT_TOKENS] - prev.counters[vllm.SPEC_DRAFT_TOKENS]
            accepted = pod.counters[vllm.SPEC_ACCEPTED] - prev.counters[vllm.SPEC_ACCEPTED]
            window[round(snap.t)] = accepted / drafted
        prev = pod
    assert seen[1800] == pytest.approx(0.70, abs=0.01)
    assert seen[1800 + 3600] == pytest.approx(0.55, abs=0.01)  # halfway
    assert seen[1800 + 7200] == pytest.approx(0.40, abs=0.002)
    assert seen[3 * 3600] == pytest.approx(0.40)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(alphas))
    assert window[1800 + 3600 + 300] == pytest.approx(0.55, abs=0.04)
    assert window[3 * 3600] == pytest.approx(0.40, abs=0.03)
    assert fleet.truth().slices["chat"].arrival_rate == pytest.approx(12.0)


PROM = """
name: prom
duration: 30m
prometheus: {scrape_interval: 30s, lag: 60s}
slices:
  chat: {alpha: 0.7}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 2}
"""


def test_the_prometheus_path_sees_scrapes_at_their_interval_after_the_lag() -> None:
    fleet = Fleet(parse_scenario(PROM), seed=1, tick=15.0, scrapes=True)
    assert (fleet.scrape_interval, fleet.prometheus_lag) == (30.0, 60.0)
    fleet.advance_to(900.0)
    for name in fleet.pods:
        times = [s.t for s in fleet.scraped(name)]
        assert times[-1] <= 900.0 - 60.0
        assert times[-1] > 900.0 - 60.0 - 30.0
        assert set(np.diff(times)) == {30.0}
    view = fleet.prometheus_snapshot()
    live = fleet.snapshot()
    for p in view.pods:
        assert (
            p.counters[vllm.GENERATION_TOKENS] < live.pod(p.name).counters[vllm.GENERATION_TOKENS]
        )
    fleet.restart("chat-baseline-0")  # loading pods fail their scrapes: a gap, then new life
    fleet.advance_to(1200.0)
    times = [s.t for s in fleet.scraped("chat-baseline-0")]
    assert max(np.diff(times)) >= 60.0
    with pytest.raises(Exception, match="scrapes=True"):
        Fleet(parse_scenario(PROM)).scraped("chat-baseline-0")


def test_truth_counts_tokens_across_restarts_and_reports_latency() -> None:
    fleet = Fleet(parse_scenario(STALLS.replace("rate: 12", "rate: 0")), seed=3, tick=15.0)
    batch_alphas = []
    for t in range(15, 615, 15):
        fleet.advance_to(float(t))
        batch_alphas.append(fleet.truth().pods["chat-canary-0"].batch_alpha)
    before = fleet.truth()
    canary = before.pods["chat-canary-0"]
    assert canary.speculating and not before.pods["chat-baseline-0"].speculating
    assert canary.tpot_p99 > canary.time_per_token > 0
    # One tick's requests stray from the slice alpha (a handful in flight); ticks average out.
    assert np.std(batch_alphas) > 0.02
    assert np.mean(batch_alphas) == pytest.approx(0.7, abs=0.04)
    snap = fleet.snapshot()
    pod_total = sum(p.counters[vllm.GENERATION_TOKENS] for p in snap.pods)
    assert before.slices["chat"].generated_tokens == pod_total  # no restart yet: equal
    fleet.set_speculative_config("chat-canary-0", None)  # restart: counters start over
    fleet.advance_to(900.0)
    after = fleet.truth()
    assert after.pods["chat-canary-0"].generated_tokens > canary.generated_tokens
    assert not after.pods["chat-canary-0"].speculating
    live = sum(p.counters[vllm.GENERATION_TOKENS] for p in fleet.snapshot().pods)
    assert after.slices["chat"].generated_tokens > live
