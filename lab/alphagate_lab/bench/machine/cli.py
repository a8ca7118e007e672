"""`python -m alphagate_lab.bench.machine`: false rollbacks per simulated day at an in-band truth,
and the time to roll back a canary below the gate, for the shipped chat policy on the
topologies and traffic users run. Core only (`evaluate` + the state machine over generated
counters, `traffic.py`): minutes, not hours, so a change to the rule can be rerun at once.

    python -m alphagate_lab.bench.machine [--days 8] [--alpha 0.57] [--detect-alpha 0.45]
        [--topologies 1+3,2x50,2x70/30,16-low] [--traffic poisson,conv,code]
        [--batch-seconds S] [--hard-share 0.06] [--jobs 1]

Each case runs `--days` seeds of one day, speculation confirmed On at the start and re-armed
600 s after every rollback (so each day is a day of chances to roll back). A rollback at the
in-band truth is false. Detection: a canary at `--detect-alpha` probed from off, re-armed after
every rollback over `--detect-hours`; the time from the enable (its restart and warm-up
included) to the rollback. Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from alphagate import config
from alphagate.config import SpeculativeCanarySpec
from alphagate_lab.bench.machine import shadow
from alphagate_lab.bench.machine.loop import ROLLOUT_SECONDS, Run, run_day
from alphagate_lab.bench.machine.traffic import Traffic, day

POLICY = Path(__file__).resolve().parents[4] / "policies" / "general-chat-eagle3.yaml"
TOPOLOGIES: dict[str, tuple[tuple[float, ...], float]] = {
    # name: (canary pods' shares of the service's traffic, requests/s of one canary pod)
    "1+3": ((0.25,), 0.5),  # one canary pod beside three baseline pods
    "2x50": ((0.25, 0.25), 0.5),  # two canary pods, equal traffic
    "2x70/30": ((0.35, 0.15), 0.5),  # two canary pods, unequal traffic
    "16-low": ((1 / 32,) * 16, 0.05),  # sixteen low-traffic canary pods
}
TRAFFIC = ("poisson", "conv", "code")
QUICK_ARGS = ["--days", "1", "--topologies", "2x50", "--traffic", "conv", "--detect-hours", "1"]
"""What `python -m alphagate_lab.bench --quick` passes: a smoke run."""


@dataclass(frozen=True)
class Case:
    topology: str
    traffic: Traffic


def shipped_spec(batch_seconds: float | None) -> SpeculativeCanarySpec:
    """The shipped chat policy unmodified (its selectors are not read here), apart from
    `--batch-seconds` when given."""
    spec = config.parse(yaml.safe_load(POLICY.read_text(encoding="utf-8")), where=POLICY.name).spec
    if batch_seconds is None:
        return spec
    gate = spec.acceptance.model_copy(update={"batch_seconds": batch_seconds})
    return spec.model_copy(update={"acceptance": gate})


def shipped_never_fails(spec: SpeculativeCanarySpec) -> SpeculativeCanarySpec:
    """The policy with a gate nothing fails (disableBelow 0): the shadow rule's own view of a
    canary the machine never rolls back."""
    gate = spec.acceptance.model_copy(update={"disable_below": 0.0})
    return spec.model_copy(update={"acceptance": gate})


def _one(args: tuple[SpeculativeCanarySpec, Case, int, bool, float]) -> Run:
    spec, case, seed, start_on, span = args
    return run_day(spec, day(case.traffic, seed, span), start_on=start_on, keep_judged=True)


def _cases(ns: argparse.Namespace, alpha: float) -> list[Case]:
    out = []
    for name in ns.topologies.split(","):
        shares, rate = TOPOLOGIES[name]
        for arrivals in ns.traffic.split(","):
            t = Traffic(
                arrivals=arrivals,
                pod_rate=rate * ns.rate_scale,
                canary_shares=shares,
                alpha=alpha,
                k=ns.k,
                hard_share=ns.hard_share,
            )
            out.append(Case(name, t))
    return out


def _poisson_upper(events: int, exposure: float) -> float:
    """One-sided 95% upper bound of a Poisson rate (Garwood via Wilson-Hilferty)."""
    k = events + 1
    z = 1.6448536269514722
    return k * (1 - 1 / (9 * k) + z / (3 * math.sqrt(k))) ** 3 / exposure


def false_rollbacks(
    ns: argparse.Namespace, spec: SpeculativeCanarySpec, pool: ProcessPoolExecutor | None
) -> None:
    print(f"\n## False rollbacks per day at a true alpha of {ns.alpha} ({ns.days} days a case)\n")
    print(
        "| topology | traffic | req/s per canary pod | days speculating | rollbacks | per day "
        "(95% upper) | FAIL windows | shadow CUSUM per day |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in _cases(ns, ns.alpha):
        t0 = time.monotonic()
        jobs = [(spec, case, 1000 + s, True, 86400.0) for s in range(ns.days)]
        runs = list(pool.map(_one, jobs) if pool else map(_one, jobs))
        exposure = sum(r.speculating_seconds for r in runs) / 86400.0
        n = sum(len(r.rollbacks) for r in runs)
        fails = sum(r.verdicts.get("Fail", 0) for r in runs)
        alarms = sum(len(shadow.cusum_alarms(r.judged, spec)) for r in runs)
        print(
            f"| {case.topology} | {case.traffic.arrivals} | {case.traffic.pod_rate:g} | "
            f"{exposure:.1f} | {n} | {n / exposure:.2f} ({_poisson_upper(n, exposure):.2f}) | "
            f"{fails} | {alarms / exposure:.2f} |",
            flush=True,
        )
        print(f"<!-- {time.monotonic() - t0:.0f} s -->", flush=True)


def detection(
    ns: argparse.Namespace, spec: SpeculativeCanarySpec, pool: ProcessPoolExecutor | None
) -> None:
    print(
        f"\n## Rollback of a canary at a true alpha of {ns.detect_alpha} "
        f"({ns.detect_seeds} seeds x {ns.detect_hours} h, re-armed after each)\n"
    )
    print(
        "| topology | traffic | episodes | rolled back | median s | within 900 s | shadow CUSUM "
        "median s |"
    )
    print("|---|---|---|---|---|---|---|")
    span = ns.detect_hours * 3600.0
    for case in _cases(ns, ns.detect_alpha):
        jobs = [(spec, case, 2000 + s, False, span) for s in range(ns.detect_seeds)]
        runs = list(pool.map(_one, jobs) if pool else map(_one, jobs))
        times = [d for r in runs for d in r.detections]
        episodes = sum(len(r.enables) for r in runs)
        within = sum(1 for d in times if d <= 900.0)
        med = f"{statistics.median(times):.0f}" if times else "-"
        blind = shipped_never_fails(spec)
        shadow_jobs = [(blind, case, 2000 + s, True, span) for s in range(ns.detect_seeds)]
        shadows = list(pool.map(_one, shadow_jobs) if pool else map(_one, shadow_jobs))
        restart = ROLLOUT_SECONDS + spec.timing.warmup_seconds
        cus = [d for r in shadows for d in shadow.cusum_delays(r.judged, spec, restart)]
        cmed = f"{statistics.median(cus):.0f}" if cus else "-"
        share = f"{within / episodes:.0%}" if episodes else "-"
        print(
            f"| {case.topology} | {case.traffic.arrivals} | {episodes} | {len(times)} | {med} | "
            f"{share} | {cmed} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--days", type=int, default=8)
    p.add_argument("--alpha", type=float, default=0.57)
    p.add_argument("--detect-alpha", type=float, default=0.45)
    p.add_argument("--detect-seeds", type=int, default=8)
    p.add_argument("--detect-hours", type=float, default=3.0)
    p.add_argument("--topologies", default=",".join(TOPOLOGIES))
    p.add_argument("--traffic", default=",".join(TRAFFIC))
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiplies every pod's rate")
    p.add_argument("--k", type=int, default=3, help="draft length (the shipped policy's 3)")
    p.add_argument("--hard-share", type=float, default=0.0, help="requests at Beta(1, 4)")
    p.add_argument("--batch-seconds", type=float, default=None, help="override the policy's")
    p.add_argument("--skip", choices=("false", "detect"), default=None)
    p.add_argument("--jobs", type=int, default=1)
    ns = p.parse_args(argv)
    spec = shipped_spec(ns.batch_seconds)
    print(
        f"policy {POLICY.name}, acceptance.batchSeconds {spec.acceptance.batch_seconds:g}, "
        f"window {spec.timing.window_seconds:g} s every {spec.timing.interval_seconds:g} s"
    )
    pool = ProcessPoolExecutor(ns.jobs) if ns.jobs > 1 else None
    try:
        if ns.skip != "false":
            false_rollbacks(ns, spec, pool)
        if ns.skip != "detect":
            detection(ns, spec, pool)
    finally:
        if pool:
            pool.shutdown()
    return 0
