"""Coverage of alpha's interval on replayed Azure traffic, the way the controller judges it.

Each seeded run replays the trace (`tracetraffic.py`) from its own offset through disjoint 300 s
windows, one canary pool per topology, and estimates every window as `core/evaluate.py` does
(`core/poolalpha.py`: blocks sized from the decode times, the between-request variance learned
over the run's earlier windows as a prior). The first `WARM` windows of a run only teach; the
rest are judged. Coverage is counted on every interval with at least two batches.

    python tests/core/tracecoverage.py --seeds 40     # the table in docs/decisions.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tracetraffic as tt

from alphagate.core import acceptance, poolalpha
from alphagate.core.model import Estimate, PoolObservation, Role
from alphagate.core.spread import Spread

WINDOW = 300.0
SCRAPE = 15.0  # the shipped PodMonitor's
WARM = 3  # windows a run learns from before it is judged
TOPOLOGIES: dict[str, dict[str, object]] = {
    # one canary pod beside three baselines: a quarter of the trace
    "1 pod": {"shares": (0.25,)},
    # two canary pods beside two baselines, equal or 70/30 traffic
    "2 pods 50/50": {"shares": (0.25, 0.25)},
    "2 pods 70/30": {"shares": (0.35, 0.15)},
    # sixteen canary pods beside sixteen baselines on 12% of the trace: 0.01-0.02 requests/s
    # per pod, a handful of requests per pod and window
    "16 low-traffic pods": {"shares": (1 / 32,) * 16, "thin": 0.12},
}
MIXES: dict[str, tt.Mix] = {
    "Beta(9,2)": tt.Mix(),
    "5% at Beta(1,4)": tt.Mix(bad_share=0.05),
    "8% at Beta(1,4)": tt.Mix(bad_share=0.08),
}


@dataclass
class Tally:
    """Judged windows of one scenario."""

    windows: int = 0
    below: int = 0  # truth below the lower bound
    above: int = 0
    inconclusive: int = 0  # fewer than two batches
    widths: list[float] | None = None

    def add(self, e: Estimate | None, truth: float) -> None:
        if e is None:
            return
        if not e.conclusive:
            self.inconclusive += 1
            return
        self.windows += 1
        self.below += truth < e.lower
        self.above += truth > e.upper
        self.widths = (self.widths or []) + [e.upper - e.lower]

    @property
    def coverage(self) -> float:
        return 1.0 - (self.below + self.above) / max(1, self.windows)

    @property
    def below_share(self) -> float:
        return self.below / max(1, self.windows)

    @property
    def median_width(self) -> float:
        return statistics.median(self.widths) if self.widths else math.nan


@dataclass
class Result:
    """One scenario's windows under three estimators."""

    now: Tally  # as the controller judges: blocks from decode times, the learned prior
    own: Tally  # the same blocks without the prior (each window on its own)
    before: Tally  # as it judged before: 900 s blocks, no prior


def _alpha(w: tt.Window, learned: Spread | None, at: float) -> poolalpha.PoolAlpha:
    pool = PoolObservation("chat", Role.CANARY, acceptance=tuple(w.samples), lives=w.lives)
    return poolalpha.estimate(
        pool,
        confidence=0.95,
        batch_seconds=None,
        scrape_interval=SCRAPE,
        learned=learned,
        now=at,
        window_seconds=WINDOW,
    )


def judge_run(seed: int, setup: tt.Setup, windows: int, out: Result) -> None:
    """One seeded run, every window estimated three ways (see `Result`)."""
    truth = tt.true_alpha(setup.mix)
    learned: Spread | None = None
    for i, w in enumerate(tt.run(seed, setup, windows=windows)):
        got = _alpha(w, learned, (i + 1) * WINDOW)
        learned = got.learned
        if i < WARM:
            continue
        out.now.add(got.estimate, truth)
        out.own.add(_alpha(w, None, 0.0).estimate, truth)
        out.before.add(acceptance.estimate(w.samples, confidence=0.95), truth)


def scenario(
    trace: str, topology: str, mix: str, *, seeds: int, windows: int = 24, base: int = 0
) -> Result:
    setup = tt.Setup(trace=trace, mix=MIXES[mix], **TOPOLOGIES[topology])  # type: ignore[arg-type]
    out = Result(Tally(), Tally(), Tally())
    for seed in range(base, base + seeds):
        judge_run(seed, setup, windows, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--windows", type=int, default=24, help="per run, WARM of them teach")
    parser.add_argument("--traces", default="conv,code")
    args = parser.parse_args()
    print(
        "| trace | canary pods | per-request acceptance | coverage | truth below | above "
        "| median width | without the prior: below | before: below / Inconclusive |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    for trace in args.traces.split(","):
        for topology in TOPOLOGIES:
            for mix in MIXES:
                r = scenario(trace, topology, mix, seeds=args.seeds, windows=args.windows)
                now, before = r.now, r.before
                judged = before.windows + before.inconclusive
                print(
                    f"| {trace} | {topology} | {mix} | {now.coverage:.3f} "
                    f"| {now.below_share:.3f} | {now.above / max(1, now.windows):.3f} "
                    f"| {now.median_width:.3f} | {r.own.below_share:.3f} "
                    f"| {before.below_share:.3f} / {before.inconclusive / max(1, judged):.0%} |",
                    flush=True,
                )
    print(
        f"\n{args.seeds} seeds x {args.windows - WARM} judged windows per row "
        f"({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
