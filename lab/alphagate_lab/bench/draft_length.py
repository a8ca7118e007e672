"""Draft-length benchmark: regret of on/off alone vs on/off with K tuning, when the best K moves.

`python -m alphagate_lab.bench.draft_length [--seeds N] [--windows N]`

Scenarios are sequences of evaluation windows; each window has a true per-position conditional
acceptance (the traffic mix) and a running batch (which sets the cost of a draft position on the
roofline). Every window the canary drafts at its current K; per-position counters are drawn
draft by draft (acceptance stops at the first rejection) over 8 pods, as vLLM counts them, and
only for the positions the current K drafts.

Arms, all with a perfect on/off gate (speculation on only when it truly pays at the arm's K), so
the difference is the draft length alone:

* on/off alone: K stays at the configured value;
* on/off + tuning: K follows `core.draft_length.recommend` (conservative: shorten only when the
  dropped positions' upper bounds are below break-even; lengthen by one when the last position
  clearly pays), after `consecutive` agreeing windows and `dwell` windows since the last change;
  every change is a restart and loses `restart_loss` of that window's output;
* oracle: the best K (or off) in every window, free changes.

Regret = lost output against the oracle, as a share of the oracle's output. Speed-ups are over
draft steps (`T(K) / C(K)`); tokens are compared, not wall time. Bounded: seeds x windows x
drafts, all fixed by the arguments.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from alphagate.core.draft_length import (
    CostSource,
    DraftAdvice,
    DraftCost,
    policy_cost,
    recommend,
)
from alphagate.core.model import AcceptanceSample

QUICK_ARGS: Final = ["--seeds", "3", "--windows", "30"]
K_MAX: Final = 5
PODS: Final = 8
DRAFT_COST: Final = 0.05  # EAGLE-3's default cost per position at batch 1

CHAT: Final = (0.85, 0.8, 0.75, 0.7, 0.65)
CODE: Final = (0.75, 0.35, 0.2, 0.1, 0.1)


@dataclass(frozen=True)
class Window:
    cond: tuple[float, ...]  # conditional acceptance per position (true)
    running: float  # requests per pod in the batch


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    configured_k: int

    def windows(self, n: int) -> list[Window]:
        third = max(1, n // 3)
        if self.name == "steady-chat":
            return [Window(CHAT, 24.0)] * n
        if self.name == "chat-to-code":
            return [Window(CHAT if i < third or i >= 2 * third else CODE, 24.0) for i in range(n)]
        if self.name == "load-spike":
            return [Window(CHAT, 200.0 if third <= i < 2 * third else 16.0) for i in range(n)]
        if self.name == "code-from-start":
            return [Window(CODE, 24.0)] * n
        raise ValueError(self.name)


SCENARIOS: Final = (
    Scenario("steady-chat", "general chat, every position pays at K=5", K_MAX),
    Scenario("chat-to-code", "chat, then a third of the run code (best K 2), then chat", K_MAX),
    Scenario("load-spike", "chat; a third of the run at 200 running per pod (best K falls)", K_MAX),
    Scenario("code-from-start", "code all along: K=5 configured, best K 2", K_MAX),
)


def true_rates(cond: Sequence[float]) -> list[float]:
    out, acc = [], 1.0
    for c in cond:
        acc *= c
        out.append(acc)
    return out


def true_speedup(w: Window, k: int) -> float:
    """T(k) / C(k) with the true rates and the roofline cost at the window's batch."""
    if k == 0:
        return 1.0
    d = policy_cost(DRAFT_COST, concurrency=w.running).per_position
    return (1.0 + sum(true_rates(w.cond)[:k])) / (1.0 + k * d)


def best(w: Window) -> tuple[int, float]:
    return max(((k, true_speedup(w, k)) for k in range(K_MAX + 1)), key=lambda kv: kv[1])


def draw(rng: random.Random, w: Window, k: int, drafts: int) -> list[AcceptanceSample]:
    """Per-pod counters for one window at length k (acceptance stops at the first rejection)."""
    out = []
    per_pod = drafts // PODS
    for p in range(PODS):
        per = [0] * k
        for _ in range(per_pod):
            for i in range(k):
                if rng.random() >= w.cond[i]:
                    break
                per[i] += 1
        out.append(
            AcceptanceSample(
                drafts=float(per_pod),
                draft_tokens=float(per_pod * k),
                accepted_tokens=float(sum(per)),
                per_position=tuple(float(v) for v in per),
                pod=f"pod-{p}",
            )
        )
    return out


@dataclass
class Tuner:
    """The opt-in tuning rule: agreeing windows, a dwell, one restart per change."""

    k: int
    consecutive: int = 2
    dwell: int = 6
    streak: int = 0
    pending: int = 0
    since_change: int = 10**6
    changes: int = 0

    def step(self, samples: list[AcceptanceSample], w: Window) -> bool:
        """Feed one window; True when K changes (a restart) for the next window."""
        self.since_change += 1
        cost = policy_cost(DRAFT_COST, concurrency=w.running)
        r = recommend(samples, k=self.k, cost=DraftCost(cost.per_position, CostSource.POLICY))
        want = self.k
        if r.advice is DraftAdvice.SHORTEN:
            want = r.recommended_k
        elif r.advice is DraftAdvice.LONGER_MAY_PAY and self.k < K_MAX:
            want = self.k + 1
        if want == self.k:
            self.streak, self.pending = 0, 0
            return False
        self.streak = self.streak + 1 if want == self.pending else 1
        self.pending = want
        if self.streak >= self.consecutive and self.since_change >= self.dwell:
            self.k, self.streak, self.since_change = want, 0, 0
            self.changes += 1
            return True
        return False


def run(
    s: Scenario, *, seed: int, windows: int, drafts: int, restart_loss: float
) -> dict[str, float]:
    rng = random.Random(seed)
    ws = s.windows(windows)
    tuner = Tuner(k=s.configured_k)
    fixed = oracle = tuned = 0.0
    restarting = False
    for w in ws:
        oracle += best(w)[1]
        fixed += max(1.0, true_speedup(w, s.configured_k))
        got = max(1.0, true_speedup(w, tuner.k))
        tuned += got * (1.0 - restart_loss) if restarting else got
        restarting = tuner.step(draw(rng, w, tuner.k, drafts), w)
    return {
        "regret_fixed": (oracle - fixed) / oracle,
        "regret_tuned": (oracle - tuned) / oracle,
        "changes": float(tuner.changes),
        "final_k": float(tuner.k),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--windows", type=int, default=90)
    parser.add_argument("--drafts", type=int, default=1600, help="drafts per window (all pods)")
    parser.add_argument("--restart-loss", type=float, default=0.5)
    args = parser.parse_args(argv)
    if not (1 <= args.seeds <= 500 and 3 <= args.windows <= 2000 and PODS <= args.drafts <= 1e6):
        parser.error("seeds 1-500, windows 3-2000, drafts 8-1e6")
    print(
        f"{args.seeds} seeds x {args.windows} windows x {args.drafts} drafts; K configured "
        f"{K_MAX}; restart loses {args.restart_loss:.0%} of a window; perfect on/off gate in "
        f"every arm"
    )
    print(f"{'scenario':<16} {'best K':>9} {'regret on/off':>14} {'with tuning':>12} "
          f"{'K changes':>10}  about")  # fmt: skip
    for s in SCENARIOS:
        runs = [
            run(s, seed=seed, windows=args.windows, drafts=args.drafts,
                restart_loss=args.restart_loss)
            for seed in range(args.seeds)
        ]  # fmt: skip
        ks = sorted({best(w)[0] for w in s.windows(args.windows)})

        def stat(key: str, runs: list[dict[str, float]] = runs) -> str:
            vals = [r[key] for r in runs]
            sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
            return f"{statistics.fmean(vals):.1%}±{sd:.1%}" if "regret" in key else (
                f"{statistics.fmean(vals):.1f}"
            )  # fmt: skip

        print(
            f"{s.name:<16} {'/'.join(map(str, ks)):>9} {stat('regret_fixed'):>14} "
            f"{stat('regret_tuned'):>12} {stat('changes'):>10}  {s.about}"
        )
    if not math.isfinite(args.restart_loss):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
