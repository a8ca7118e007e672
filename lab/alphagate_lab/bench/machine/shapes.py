"""`python -m alphagate_lab.bench.machine.shapes`: does the early re-probe on the traffic's shape
fire on ordinary traffic, and does it still find a real return? Core only, on
`traffic.py`'s two-kind traffic (long-form answers 6x longer than the rest), the shipped chat
policy, two canary pods beside two baseline pods, Poisson arrivals.

Cases (alpha falls for a reason that is not the mix in the first three: any shape re-probe
there is false):

* overdispersed: the long-form share 0.30 with a window-to-window SD of 4 points; alpha
  0.68, in the band (0.575) from 2 h, 0.48 from 2.5 h on (the last paying window is half an
  hour older than the failing ones).
* daily-cycle: the share 0.30 + 0.20 sin(2 pi t / day), SD 4 points; alpha as above from
  6 h on.
* daily-cycle-stale: as daily-cycle, alpha in the band from 2 h, 0.48 from 8 h: the last
  paying window is 6 h before the failure.
* mix-shift: long-form requests accept at 0.40, the rest at 0.70; the share goes 0 -> 0.70
  at 2 h and back at 3 h (SD 4 points on top): a real return, which should re-probe.
* mix-returns-alpha-not: as mix-shift, but the rest falls to 0.49 when the share returns, so
  alpha stays low: its cost is the probes it makes and the cooldown after them.
* mix-returns-near-gate: the same just under the gate (0.53 on the mix and after its
  return): a rollback there backs off 12 h, which a failed early re-probe must not double.

Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from alphagate.config import SpeculativeCanarySpec
from alphagate_lab.bench.machine.cli import shipped_spec
from alphagate_lab.bench.machine.loop import Run, run_day
from alphagate_lab.bench.machine.traffic import Traffic, day

H = 3600.0
BASE = Traffic(
    arrivals="poisson",
    pod_rate=3.0,
    canary_shares=(0.25, 0.25),
    long_sd=0.04,
    long_ratio=10.0,
    sigma=0.6,
    median_tokens=100.0,
)
RAMP = 300.0  # a mix shift takes five minutes


def _step(at: float, before: float, after: float) -> tuple[tuple[float, float], ...]:
    return ((0.0, before), (at, before), (at + 1.0, after))


def _falls(at: float, band_hours: float) -> tuple[tuple[float, float], ...]:
    """Alpha 0.68, in the band (0.575) from `at` for `band_hours`, then 0.48."""
    end = at + band_hours * H
    return ((0.0, 0.68), (at, 0.68), (at + 1, 0.575), (end, 0.575), (end + 1, 0.48))


MIX = ((0.0, 0.0), (2 * H, 0.0), (2 * H + RAMP, 0.7), (3 * H, 0.7), (3 * H + RAMP, 0.0))
CASES: dict[str, tuple[Traffic, float, float | None]] = {
    # name: (traffic, hours, when the real return begins: None for a false-fire case)
    "overdispersed": (
        replace(BASE, long_share=0.3, alpha_schedule=_falls(2 * H, 0.5)),
        10.0,
        None,
    ),
    "daily-cycle": (
        replace(BASE, long_share=0.3, long_cycle=0.2, alpha_schedule=_falls(6 * H, 0.5)),
        18.0,
        None,
    ),
    "daily-cycle-stale": (
        replace(BASE, long_share=0.3, long_cycle=0.2, alpha_schedule=_falls(2 * H, 6.0)),
        20.0,
        None,
    ),
    "mix-shift": (
        replace(BASE, alpha=0.70, long_alpha_delta=-0.30, mix_schedule=MIX),
        6.0,
        3 * H,
    ),
    "mix-returns-near-gate": (
        replace(
            BASE,
            alpha_schedule=_step(3 * H, 0.70, 0.53),
            long_alpha_delta=-0.24,
            mix_schedule=MIX,
        ),
        10.0,
        3 * H,
    ),
    "mix-returns-alpha-not": (
        replace(
            BASE,
            alpha_schedule=_step(3 * H, 0.70, 0.49),
            long_alpha_delta=-0.30,
            mix_schedule=MIX,
        ),
        10.0,
        3 * H,
    ),
}


def _one(args: tuple[SpeculativeCanarySpec, Traffic, int, float]) -> Run:
    spec, traffic, seed, hours = args
    return run_day(spec, day(traffic, seed, hours * H), start_on=True, rearm_seconds=None)


def _next_probe_hours(r: Run) -> float:
    """Hours from the first rollback to the next probe the last cooldown allows."""
    ends = [t + c for t, c in zip(r.rollbacks, r.cooldowns, strict=True)]
    return (ends[-1] - r.rollbacks[0]) / H if ends else math.nan


def summarise(name: str, runs: list[Run], returns_at: float | None) -> str:
    rolled = sum(1 for r in runs if r.rollbacks)
    fired = sum(1 for r in runs if any(b == "shape" for _, b in r.early))
    nexts = [_next_probe_hours(r) for r in runs if r.rollbacks]
    nxt = f"{statistics.median(nexts):.1f} h" if nexts else "-"
    rollbacks = statistics.mean(len(r.rollbacks) for r in runs)
    text = f"| {name} | {len(runs)} | {rolled} | {fired} ({fired / max(rolled, 1):.0%}) |"
    if returns_at is None:
        return f"{text} - | {rollbacks:.2f} | {nxt} |"
    delays = [
        min(t for t, b in r.early if b == "shape" and t >= returns_at) - returns_at
        for r in runs
        if any(b == "shape" and t >= returns_at for t, b in r.early)
    ]
    med = f"{statistics.median(delays) / 60:.0f} min" if delays else "-"
    return f"{text} {med} | {rollbacks:.2f} | {nxt} |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument(
        "--batch-seconds",
        type=float,
        default=60.0,
        help="acceptance.batchSeconds (short outputs: pods' blocks judge alpha)",
    )
    p.add_argument("--jobs", type=int, default=1)
    ns = p.parse_args(argv)
    spec = shipped_spec(ns.batch_seconds)
    print(f"shipped chat policy, batchSeconds {spec.acceptance.batch_seconds:g}, {ns.seeds} seeds")
    print(
        "\n| case | runs | rolled back | shape re-probes (of runs rolled back) | median delay "
        "after the return | rollbacks a run | next probe after the first rollback (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    pool = ProcessPoolExecutor(ns.jobs) if ns.jobs > 1 else None
    mapper: Callable[..., object] = pool.map if pool else map
    try:
        for name in ns.cases.split(","):
            traffic, hours, returns_at = CASES[name]
            t0 = time.monotonic()
            jobs = [(spec, traffic, 5000 + s, hours) for s in range(ns.seeds)]
            runs = list(mapper(_one, jobs))  # type: ignore[call-overload]
            print(summarise(name, runs, returns_at), flush=True)
            print(f"<!-- {time.monotonic() - t0:.0f} s -->", flush=True)
    finally:
        if pool:
            pool.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
