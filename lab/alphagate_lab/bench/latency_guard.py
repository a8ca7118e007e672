"""Latency-guard benchmark: tail-only and uniform regressions on vLLM's default buckets and on
the ~10% layout `alphagate plan` writes, through the guard as shipped (P99, +10%, confirmOn
mean).

`python -m alphagate_lab.bench.latency_guard [--runs N] [--rate R] [--canary-pods N]
[--baseline-pods N] [--no-stalls] [--days D]`

Traffic is `latency_traffic`: 15 ms median per token, per-request spread 0.25, R finished
requests per second per pod, per-pod stall episodes (every ~15 min, ~20 s) on both roles. A
uniform regression slows every request; a tail-only one slows 3% of the requests by the factor
that moves the P99 by the ratio (the mean moves by +2.6% at 1.2x, +4.2% at 1.5x, +6.6% at 2x).
A run is six disjoint 300 s windows; it is caught at the end of the window where the state
machine would roll back: a second failing window since the last Pass, or a failing window
decisive alone (`checks.decisive`), each window's quantile Fail test pooled with the window
before it as `evaluate` pools it (core/latency_run.py). False rollbacks per day are counted
the same way over `--days` of equal latency. Bounded: runs x 6 windows per row, days x 288 windows.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from alphagate import histogram_layout as buckets
from alphagate.config import LatencyGuard
from alphagate.core import checks, latency_check, latency_run
from alphagate.core.latency import W_QUANTILE
from alphagate.core.latency_run import LatencyRun
from alphagate.core.model import (
    CheckResult,
    LatencyEvidence,
    LatencySample,
    PoolObservation,
    Role,
    Verdict,
)
from alphagate.core.resolution import TailWithin
from alphagate_lab.bench import latency_traffic as lt

WINDOW: Final = 300.0
GUARD: Final = LatencyGuard()  # as shipped
PLAN: Final = (*buckets.layout().bounds, math.inf)
LAYOUTS: Final = {"default": lt.VLLM_BOUNDS, "plan": PLAN}
CASES: Final = (
    ("equal", 1.0),
    ("faster", 0.85),
    ("uniform", 1.2),
    ("uniform", 1.5),
    ("uniform", 2.0),
    ("tail", 1.2),
    ("tail", 1.5),
    ("tail", 2.0),
)
QUICK_ARGS: Final = ["--runs", "2", "--days", "0"]


@dataclass
class Runs:
    """Verdicts, tail states and when each run was caught (None: never)."""

    verdicts: Counter[Verdict]
    within: Counter[TailWithin]
    caught_at: list[float | None]

    def rate(self, v: Verdict) -> float:
        return self.verdicts[v] / max(1, sum(self.verdicts.values()))

    def caught(self, seconds: float) -> float:
        hits = sum(1 for t in self.caught_at if t is not None and t <= seconds)
        return hits / max(1, len(self.caught_at))


def canary_pool(kind: str, ratio: float, base: lt.Pool) -> lt.Pool:
    """The canary of a case: `uniform`/`equal`/`faster` scale every request, `tail` 3%."""
    if kind != "tail":
        return replace(base, slowdown=ratio)
    factor = lt.tail_factor_for(ratio, lt.Pool(median=base.median, sigma=base.sigma))
    return replace(base, tail_share=0.03, tail_factor=factor)


def _window(samples: Sequence[LatencySample], w: int) -> tuple[LatencySample, ...]:
    lo, hi = w * WINDOW, (w + 1) * WINDOW
    return tuple(s for s in samples if lo <= s.start < hi)


def judge(
    canary: Sequence[LatencySample], baseline: Sequence[LatencySample], w: int
) -> CheckResult:
    """The shipped guard on disjoint window `w`."""
    return latency_check.check_latency(
        PoolObservation("chat", Role.CANARY, tpot_samples=_window(canary, w)),
        PoolObservation("chat", Role.BASELINE, tpot_samples=_window(baseline, w)),
        guard=GUARD,
    )


def pooled(run: LatencyRun, r: CheckResult, w: int) -> tuple[CheckResult, LatencyRun]:
    """Window `w`'s check with the quantile Fail test pooled over it and the window before,
    as `evaluate` does on every judged window (core/latency_run.py)."""
    out, run = latency_run.pool(
        run,
        [r],
        start=w * WINDOW,
        end=(w + 1) * WINDOW,
        window_seconds=WINDOW,
        windows=2,
        significance=GUARD.significance,
        weight=W_QUANTILE,
    )
    return out[0], run


def runs(
    kind: str,
    ratio: float,
    base: lt.Pool,
    seeds: range,
    *,
    canary_pods: int | None = None,
    windows: int = 6,
) -> Runs:
    """Each seed: `windows` disjoint windows of the case against `base`."""
    canary = canary_pool(kind, ratio, replace(base, pods=canary_pods or base.pods))
    per = int(WINDOW / base.interval)
    out = Runs(Counter(), Counter(), [])
    for seed in seeds:
        rng = np.random.default_rng(seed)
        c = lt.pool_samples(rng, canary, intervals=per * windows, prefix="c")
        b = lt.pool_samples(rng, base, intervals=per * windows, prefix="b")
        streak, caught, run = 0, None, LatencyRun()
        for w in range(windows):
            r, run = pooled(run, judge(c, b, w), w)
            out.verdicts[r.verdict] += 1
            if isinstance(r.evidence, LatencyEvidence) and r.evidence.tail is not None:
                out.within[r.evidence.tail.within] += 1
            if r.verdict is Verdict.FAIL:
                streak += 1
                if caught is None and (streak >= 2 or checks.decisive(r, 2)):
                    caught = (w + 1) * WINDOW
            elif r.verdict is Verdict.PASS:
                streak = 0
        out.caught_at.append(caught)
    return out


def false_rollbacks_per_day(base: lt.Pool, days: int, *, canary_pods: int | None = None) -> float:
    """Rollbacks over `days` of equal latency, re-armed after each."""
    canary = replace(base, pods=canary_pods or base.pods)
    windows = 288
    per = int(WINDOW / base.interval)
    rollbacks = 0
    for day in range(days):
        rng = np.random.default_rng(10_000 + day)
        c = lt.pool_samples(rng, canary, intervals=per * windows, prefix="c")
        b = lt.pool_samples(rng, base, intervals=per * windows, prefix="b")
        streak, run = 0, LatencyRun()
        for w in range(windows):
            r, run = pooled(run, judge(c, b, w), w)
            if r.verdict is Verdict.FAIL:
                streak += 1
                if streak >= 2 or checks.decisive(r, 2):
                    rollbacks, streak = rollbacks + 1, 0
            elif r.verdict is Verdict.PASS:
                streak = 0
    return rollbacks / days if days else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m alphagate_lab.bench.latency_guard")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rate", type=float, default=3.0, help="requests/s per pod")
    ap.add_argument("--canary-pods", type=int, default=2)
    ap.add_argument("--baseline-pods", type=int, default=2)
    ap.add_argument("--no-stalls", action="store_true")
    ap.add_argument("--days", type=int, default=2, help="days of equal latency per layout")
    a = ap.parse_args(list(argv) if argv is not None else None)
    every = 1e12 if a.no_stalls else 900.0
    print(
        f"latency guard (P99, +10%, confirmOn mean): {a.canary_pods} canary / "
        f"{a.baseline_pods} baseline pods at {a.rate:g} req/s each, stalls "
        f"{'off' if a.no_stalls else 'every ~15 min'}, {a.runs} runs of 6 x 300 s windows"
    )
    print(f"{'layout':8} {'case':8} {'ratio':>5} {'Pass':>6} {'Fail':>6} {'Incl':>6} "
          f"{'<=15min':>8} {'<=30min':>8}  tail within")  # fmt: skip
    t0 = time.perf_counter()
    for name, bounds in LAYOUTS.items():
        base = lt.Pool(rate=a.rate, pods=a.baseline_pods, bounds=bounds, stall_every=every)
        for kind, ratio in CASES:
            r = runs(kind, ratio, base, range(a.runs), canary_pods=a.canary_pods)
            within = ",".join(f"{k.value}:{v}" for k, v in sorted(r.within.items()))
            print(
                f"{name:8} {kind:8} {ratio:5.2f} {r.rate(Verdict.PASS):6.1%} "
                f"{r.rate(Verdict.FAIL):6.1%} {r.rate(Verdict.INCONCLUSIVE):6.1%} "
                f"{r.caught(900):8.0%} {r.caught(1800):8.0%}  {within}",
                flush=True,
            )
        if a.days:
            per_day = false_rollbacks_per_day(base, a.days, canary_pods=a.canary_pods)
            print(f"{name:8} equal latency, {a.days} simulated days: {per_day:.2f} rollbacks/day")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
