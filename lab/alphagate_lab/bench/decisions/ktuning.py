"""Draft-length tuning in the closed loop: alphagate with and without spec.draftLength.tuning on
the suite's cases whose best K moves (``suite.Case.chain``).

`python -m alphagate_lab.bench.decisions.ktuning [--seeds N] [--hours H] [--max-minutes M]`

Both arms are the same controller core on the same seeded fleets (the loop shares a fleet until a
policy acts); the only difference is the opt-in tuner. Printed per case: canary tokens of the
tuned arm over the fixed-K arm (mean, min, max over seeds), regret of each against the on/off
oracle (negative: more tokens than the oracle, which cannot change K), K changes and reverts per
run, and the K the tuned arm ends on. Bounded by seeds x hours and a wall-time limit.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from typing import Final

from alphagate_lab.bench.decisions import loop, suite

POLICIES: Final = ("oracle", "alphagate", loop.K_TUNING)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--hours", type=float, default=6.0, help="simulated hours per run")
    p.add_argument("--max-minutes", type=float, default=20.0, help="wall-time bound")
    args = p.parse_args(argv)
    if not (1 <= args.seeds <= 100 and 0 < args.hours <= 48 and args.max_minutes > 0):
        p.error("--seeds 1-100, --hours in (0, 48], --max-minutes > 0")
    cases = [c for c in suite.SUITE if c.chain]
    deadline = time.monotonic() + args.max_minutes * 60.0
    print(
        f"draft-length tuning: {len(cases)} case(s) x {args.seeds} seeds, {args.hours:g} h per "
        f"run; tokens are the canary's; regret against the on/off oracle"
    )
    print(
        f"{'case':<14} {'seeds':>5} {'tuned/fixed':>22} {'regret fixed':>13} "
        f"{'regret tuned':>13} {'K changes':>10} {'reverts':>8}  final K"
    )
    for case in cases:
        ratios, reg_fixed, reg_tuned, changes, reverts = [], [], [], [], []
        finals: Counter[int] = Counter()
        for seed in range(1, args.seeds + 1):
            if time.monotonic() > deadline:
                print(f"  stopped at --max-minutes {args.max_minutes:g} after {seed - 1} seeds")
                break
            oracle, fixed, tuned = loop.run_group(case.name, seed, POLICIES, args.hours)
            o, f, t = (math.fsum(r.tokens) for r in (oracle, fixed, tuned))
            ratios.append(t / f)
            reg_fixed.append((o - f) / o)
            reg_tuned.append((o - t) / o)
            moves = tuned.extra.get("k_changes", [])
            changes.append(sum(1 for _, cause, _ in moves if cause != "confirmed"))
            reverts.append(sum(1 for _, cause, _ in moves if cause == "revert"))
            last = [k for _, cause, k in moves if cause != "confirmed"]
            finals[last[-1] if last else case.k] += 1
        if not ratios:
            continue
        spread = f"{statistics.fmean(ratios):.4f} [{min(ratios):.3f}, {max(ratios):.3f}]"
        print(
            f"{case.name:<14} {len(ratios):>5} {spread:>22} "
            f"{statistics.fmean(reg_fixed):>12.2%} {statistics.fmean(reg_tuned):>12.2%} "
            f"{statistics.fmean(changes):>10.1f} {statistics.fmean(reverts):>8.1f}  "
            + ", ".join(f"K={k}: {n}" for k, n in sorted(finals.items()))
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
