"""Benchmark: the decision core's throughput and a day-long backtest's time and memory.

Run ``python -m alphagate_lab.bench.core [--hours 24] [--repeat 7] [--rounds 3] [--quick]``. It
prints numbers and ratios measured side by side in this one run; it asserts nothing about speed.

1. ``core.evaluate`` on realistic observations: a simulated fleet of 2 slices with 8 canary and
   8 baseline pods each, read through the pod-scrape source over a 300 s window of 30 s
   intervals (10 acceptance batches per canary pod, ITL and TPOT buckets per pool). Variants,
   timed in interleaved rounds: combined aggregation judged (state On), with per-slice floors,
   per-slice aggregation (one call per slice, as the reconciler makes), and combined while
   speculation is off (nothing judged: estimates and weights only).
2. Building a pod's page from a recorded snapshot: directly vs rendering and parsing the real
   ``/metrics`` text (what ``--via-text`` costs).
3. A backtest of a ``--hours`` long recording of the chat-to-code scenario (8 pods, a snapshot
   every 15 s, evaluations every 30 s): wall time of reading the file alone, of the combined and
   the per-slice backtest (median of interleaved rounds), and peak traced memory
   (tracemalloc) of the streaming backtest against loading the whole recording.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.evaluate import evaluate
from alphagate.core.model import Memory, Observation, Rollout, State
from alphagate_lab.backtest import run_recording
from alphagate_lab.backtest.recorded import RecordingSource, page_of, page_via_text
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.pod import PodSnapshot
from alphagate_lab.sim.recording import iter_recording, read_recording, record
from alphagate_lab.sim.scenario import Scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
INTERVAL = 30.0
WINDOW = 300.0
PODS = 8
QUICK_ARGS = ["--quick"]
"""What `python -m alphagate_lab.bench --quick` passes: a smoke run."""
EAGLE: dict[str, Any] = {
    "method": "eagle3",
    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "num_speculative_tokens": 5,
}


# --------------------------------------------------------------------------- inputs


def spec(aggregation: str = "combined", *, floors: bool = False) -> SpeculativeCanarySpec:
    """A policy over the simulator's two slices (pods labelled slice/role)."""

    def sl(name: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": name,
            "canary": {"matchLabels": {"slice": name, "role": "canary"}},
            "baseline": {"matchLabels": {"slice": name, "role": "baseline"}},
            "deployment": {"name": f"{name}-canary"},
        }
        if floors:
            out["minAlpha"] = 0.35
        return out

    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "chat-canary"},
            "baseline": {"name": "chat-baseline"},
            "speculativeConfig": EAGLE,
            "aggregation": aggregation,
            "slices": [sl("chat"), sl("code")],
            # A throughput benchmark: what it measures is the cost of a decision, not which;
            # the gate is the shipped chat policy's, timing the defaults where it matters.
            "acceptance": {"minDrafts": 500},  # the chat policy's
            "timing": {
                "intervalSeconds": INTERVAL,  # = default
                "windowSeconds": WINDOW,  # = default
                "maxFlipsPerHour": 6,  # 4 shipped; the throughput does not depend on it
                "cooldown": {"initialSeconds": 3600},  # 900 s default; nor on this
            },
            "source": {"kind": "podScrape"},
        }
    )


def fleet_scenario() -> Scenario:
    """2 slices, each with 8 canary pods (EAGLE-3, K=5) and 8 baseline pods."""
    pools: list[dict[str, Any]] = []
    for name in ("chat", "code"):
        pools.append({"name": f"{name}-baseline", "role": "baseline", "slice": name,
                      "replicas": PODS})  # fmt: skip
        pools.append({"name": f"{name}-canary", "role": "canary", "slice": name,
                      "replicas": PODS, "speculative_config": EAGLE})  # fmt: skip
    return Scenario.model_validate(
        {
            "name": "bench-core",
            "seed": 1,
            "traffic": {"rate": 160},
            "slices": {
                "chat": {"share": 0.7, "alpha": 0.72},
                "code": {"share": 0.3, "alpha": 0.45, "output_tokens": 400},
            },
            "pools": pools,
        }
    )


def observation() -> tuple[Observation, list[PodSnapshot]]:
    """One realistic Observation, through the same pod-scrape code the controller runs."""
    fleet = Fleet(fleet_scenario(), tick=15.0)
    source = RecordingSource()
    policy = spec()
    obs: Observation | None = None
    snap = None
    for snap in fleet.run(WINDOW + INTERVAL, every=INTERVAL):
        source.feed(snap.pods, snap.time)
        obs = source.observe(
            policy, start=snap.time - WINDOW, end=snap.time, interval_seconds=INTERVAL
        )
    assert obs is not None and snap is not None
    return obs, snap.pods


# --------------------------------------------------------------------------- timing


def _time(fn: Callable[[], object], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def interleaved(
    contenders: dict[str, Callable[[], object]], *, repeat: int, round_seconds: float = 0.2
) -> dict[str, float]:
    """Median seconds per call of each contender, measured in interleaved rounds."""
    numbers = {}
    for name, fn in contenders.items():
        once = _time(fn, 1)
        numbers[name] = max(1, int(round_seconds / max(once, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            samples[name].append(_time(fn, numbers[name]))
    return {name: statistics.median(v) for name, v in samples.items()}


def bench_evaluate(
    repeat: int, round_seconds: float = 0.2, *, observed: tuple[Observation, list[PodSnapshot]]
) -> list[tuple[str, float, float]]:
    """(variant, seconds per decision, decisions per second) on `observation()`'s result."""
    obs, _ = observed
    now = obs.at
    on = Memory(state=State.ON, since=now - 3600)
    off = Memory(state=State.ROLLED_BACK, since=now - 600, cooldown_until=now + 3600)
    judged = Rollout(speculation_on=True, completed_at=now - 3600)
    stopped = Rollout(speculation_on=False, completed_at=now - 600)
    combined, floors, per = spec(), spec(floors=True), spec("perSlice")
    for name in ("chat", "code"):  # every variant must really judge both slices
        assert name in evaluate(combined, obs, on, judged, now=now).estimates

    def per_slice() -> None:
        for name in ("chat", "code"):
            evaluate(per, obs, on, judged, now=now, slices=(name,))

    contenders: dict[str, Callable[[], object]] = {
        "combined, On (judged)": lambda: evaluate(combined, obs, on, judged, now=now),
        "combined + per-slice floors, On": lambda: evaluate(floors, obs, on, judged, now=now),
        "perSlice, On (2 calls)": per_slice,
        "combined, RolledBack (not judged)": lambda: evaluate(combined, obs, off, stopped, now=now),
    }
    result = interleaved(contenders, repeat=repeat, round_seconds=round_seconds)
    return [(name, secs, 1.0 / secs) for name, secs in result.items()]


def bench_pages(
    repeat: int, round_seconds: float = 0.2, *, observed: tuple[Observation, list[PodSnapshot]]
) -> dict[str, float]:
    _, pods = observed
    pod = next(p for p in pods if p.spec_k is not None)
    return interleaved(
        {
            "page from snapshot": lambda: page_of(pod),
            "render + parse text": lambda: page_via_text(pod),
        },
        repeat=repeat,
        round_seconds=round_seconds,
    )


# --------------------------------------------------------------------------- day-long backtest


def make_day(path: Path, hours: float) -> tuple[float, float]:
    """A chat-to-code recording `hours` long; returns (wall seconds, simulated seconds)."""
    from alphagate_lab.sim.scenario import load_scenario

    sc = load_scenario(SCENARIOS / "chat-to-code.yaml")
    sc = sc.model_copy(update={"duration": hours * 3600.0})
    t0 = time.perf_counter()
    record(Fleet(sc, tick=15.0), path, every=15.0)
    return time.perf_counter() - t0, sc.duration


def _traced(fn: Callable[[], object]) -> float:
    """Peak bytes traced by tracemalloc while `fn` runs."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return float(peak)


def bench_backtest(path: Path, *, rounds: int = 3) -> dict[str, float]:
    """Median wall times of reading alone, the combined and the perSlice backtest (interleaved
    rounds, so a busy machine slows all alike), and peak traced memory (streaming vs load)."""
    combined, per = spec(), spec("perSlice")
    runs: dict[str, Callable[[], object]] = {
        "read only": lambda: sum(1 for _ in iter_recording(path)),
        "backtest combined": lambda: run_recording(combined, path),
        "backtest perSlice": lambda: run_recording(per, path),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    last: dict[str, Any] = {}  # what each run returned (the same every round): the counts below
    for _ in range(rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            last[name] = fn()
            times[name].append(time.perf_counter() - t0)
    out = {name: statistics.median(v) for name, v in times.items()}
    result = last["backtest combined"]
    out["evaluations"] = float(sum(len(u.points) for u in result.units))
    out["lines"] = float(last["read only"])
    out["simulated"] = float(result.source["duration_seconds"])
    out["flips"] = float(result.to_json()["flips"])
    out["peak streaming backtest"] = _traced(lambda: run_recording(combined, path))
    out["peak load whole recording"] = _traced(lambda: read_recording(path))
    return out


# --------------------------------------------------------------------------- report


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--hours", type=float, default=24.0, help="recording length (default 24)")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--quick", action="store_true", help="30 min recording, 2 short rounds")
    parser.add_argument("--rounds", type=int, default=3, help="backtest rounds (default 3)")
    parser.add_argument("--recording", help="reuse this recording instead of simulating one")
    args = parser.parse_args(argv)
    hours = 0.5 if args.quick else args.hours
    repeat = 2 if args.quick else max(1, args.repeat)
    round_seconds = 0.05 if args.quick else 0.2
    rounds = 1 if args.quick else max(1, args.rounds)
    load = os.getloadavg()[0]

    batches = int(WINDOW / INTERVAL)
    print(f"core.evaluate: 2 slices x {PODS} canary + {PODS} baseline pods, "
          f"{batches} batches per canary pod (median of {repeat} rounds)")  # fmt: skip
    observed = observation()  # one simulated fleet for both: it is deterministic
    rows = bench_evaluate(repeat, round_seconds, observed=observed)
    base = rows[0][1]
    print(f"  {'variant':<36} {'us/decision':>12} {'decisions/s':>12} {'x combined':>11}")
    for name, secs, rate in rows:
        print(f"  {name:<36} {secs * 1e6:>12.0f} {rate:>12,.0f} {secs / base:>11.2f}")

    pages = bench_pages(repeat, round_seconds, observed=observed)
    direct = pages["page from snapshot"]
    print("recorded snapshot -> page (one speculating pod)")
    print(f"  {'way':<36} {'us/page':>12} {'x direct':>12}")
    for name, secs in pages.items():
        print(f"  {name:<36} {secs * 1e6:>12.1f} {secs / direct:>12.1f}")

    with tempfile.TemporaryDirectory(prefix="alphagate-bench-") as tmp:
        if args.recording:
            path = Path(args.recording)
            sim_wall, sim_seconds = float("nan"), float("nan")
        else:
            path = Path(tmp) / "day.jsonl"
            sim_wall, sim_seconds = make_day(path, hours)
        size = path.stat().st_size
        b = bench_backtest(path, rounds=rounds)
    simulated = b["simulated"]
    print(
        f"backtest of a {simulated / 3600:g} h chat-to-code recording "
        f"({b['lines']:.0f} lines, {_mib(size)}; simulated in {sim_wall:.1f} s, "
        f"{sim_seconds / sim_wall:,.0f}x real time): {b['evaluations']:.0f} evaluations, "
        f"{b['flips']:.0f} flips; median of {rounds} interleaved rounds"
    )
    read = b["read only"]
    print(f"  {'run':<36} {'wall s':>9} {'x read only':>12} {'x real time':>12} {'evals/s':>9}")
    for name in ("read only", "backtest combined", "backtest perSlice"):
        secs = b[name]
        evals = b["evaluations"] * (2 if "perSlice" in name else 1) if "backtest" in name else 0
        shown = f"{evals / secs:>9,.0f}" if evals else f"{'-':>9}"
        print(f"  {name:<36} {secs:>9.2f} {secs / read:>12.2f} {simulated / secs:>12,.0f} {shown}")
    stream, whole = b["peak streaming backtest"], b["peak load whole recording"]
    print(f"  {'peak traced memory':<36} {'':>9} {'x streaming':>12}")
    print(f"  {'streaming backtest':<36} {_mib(stream):>9} {1.0:>12.2f}")
    print(f"  {'load whole recording (read only)':<36} {_mib(whole):>9} {whole / stream:>12.2f}")
    print(
        f"load average (1 min) at start {load:.2f}, at end {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs: compare ratios, not absolute times, across runs"
    )


if __name__ == "__main__":
    main()
