"""Scores: what each number in the table means, computed from runs.

The truth at a step says whether the oracle would speculate: true alpha >= 0.55 and no
injected latency regression ("should be on").

* **false flip**: a rollback (or an engine gating itself) while the truth said "on" over the
  5 minutes before it (``WINDOW``), or an enable (a probe included) while it said "off".
* **rollouts**: the policy's flips of the canary Deployment's config (each is one rollout);
  an engine gating itself counts too (it restarts nothing).
* **pod restarts**: canary pod restarts caused by the policy's flips (one rollout restarts
  every canary pod: two with the suite's two canary pods); an in-engine gate restarts
  nothing. Issue 12's "restarts a day" is judged on these, as the issue counts pods.
* **onset**: the truth turns "off" (alpha crosses below 0.55, or a regression starts; a run
  that starts below the gate has an onset at 0) while the policy speculates. Its **detection
  delay** is the time to the first decision that leaves no canary pod speculating, made before
  the truth turns back "on" (plus one window); the **draft tokens** are those the canary
  drafted meanwhile. An onset with no such decision is **missed**.
* **wrong state**: the time-weighted share of canary pods whose speculation disagrees with
  the truth, as a percentage of the run.
* **regret**: canary tokens the oracle's run generated minus the policy's, as a percentage
  of the oracle's (same case, same seeds; the oracle pays its own restarts). Tokens are the
  simulator's ``vllm:generation_tokens_total`` of the canary pods, summed over restarts.
  Over the suite it is the mean of the scenarios' regret % (each scenario counts once, a
  day-long one as much as an hour-long one).
* **where regret comes from**: each 30 s step's tokens lost against the oracle's same step,
  put in one bin by what the policy's canary was doing: ``restart`` (within the model load
  and warm-up after one of its own flips), ``below break-even`` (speculating while the truth
  says off), ``off while it pays`` (not speculating while the truth says on: cooldowns,
  false rollbacks, waiting to confirm), ``same state`` (both right: noise, and the oracle's
  own restarts, which count against the oracle). The bins add up to the regret.
* **coverage** (alphagate only): the share of the alpha intervals it reported with at least
  two batches (every one it stood behind, whatever the check then said) that hold the
  window's true alpha: the expected pooled accepted/drafted ratio of the canary's drafts in
  the window, from the simulator (each in-flight request's set alpha at admission, weighted
  by its drafts: after a change of alpha, requests keep theirs, so the counters lag the set
  alpha by a request's life, and so does this truth). Issue 12's target is judged on it.
  **decisive coverage** counts only the intervals on which the check passed or failed:
  selected for straying toward a decision, so biased low near the gate; shown beside it.
  Windows with fewer than two batches report no interval (Inconclusive) and are counted
  apart.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate_lab.bench.decisions.loop import STEP, WARMUP_SECONDS, RunResult
from alphagate_lab.bench.decisions.suite import LOAD_SECONDS

WINDOW: Final = 300.0
REGRET_BINS: Final = ("restart", "below break-even", "off while it pays", "same state")
CAUGHT_WITHIN: Final = 3 * WINDOW  # "within 3 non-overlapping windows"


@dataclass
class RunScore:
    days: float
    flips: int
    false_flips: int
    false_rollbacks: int
    restarts: int
    onsets: int
    delays: list[float]
    delay_drafts: list[float]
    missed: int
    wrong_seconds: float
    seconds: float
    tokens: float
    covered: int
    intervals: int
    covered_decisive: int = 0
    decisive: int = 0
    insufficient: int = 0
    step_tokens: list[float] = field(default_factory=list)
    step_bins: list[int] = field(default_factory=list)  # index into REGRET_BINS


def _should_on_throughout(r: RunResult, t: float) -> bool:
    idx = [i for i, s in enumerate(r.t) if t - WINDOW - 1e-6 <= s <= t + 1e-6]
    return bool(idx) and all(r.should_on[i] for i in idx)


def _should_on_at(r: RunResult, t: float) -> bool:
    best = 0
    for i, s in enumerate(r.t):
        if s <= t + 1e-6:
            best = i
        else:
            break
    return r.should_on[best]


def regret_bins(r: RunResult) -> list[int]:
    """Each step's bin in REGRET_BINS, by what the policy's canary was doing then."""
    restart = LOAD_SECONDS + WARMUP_SECONDS
    flips = [t for t, _ in r.flips]
    out = []
    j = 0
    for t, on, should in zip(r.t, r.on, r.should_on, strict=True):
        while j < len(flips) and flips[j] + restart < t - 1e-6:
            j += 1
        if any(f < t + 1e-6 and t - f <= restart + 1e-6 for f in flips[j : j + 4]):
            out.append(0)
        elif on > 0 and not should:
            out.append(1)
        elif on < 1 and should:
            out.append(2)
        else:
            out.append(3)
    return out


def score_run(r: RunResult) -> RunScore:
    false_flips = false_rollbacks = 0
    for t, kind in r.flips:
        if kind == "disable" and _should_on_throughout(r, t):
            false_flips += 1
            false_rollbacks += 1
        elif kind == "enable" and not _should_on_at(r, t):
            false_flips += 1
    n = len(r.t)
    onsets = missed = 0
    delays: list[float] = []
    drafts: list[float] = []
    for j0 in range(n):
        start = (j0 == 0 and not r.should_on[0]) or (
            j0 > 0 and r.should_on[j0 - 1] and not r.should_on[j0]
        )
        if not start or r.on[j0 - 1 if j0 else 0] <= 0:
            continue
        onsets += 1
        end = next((j for j in range(j0, n) if r.should_on[j]), n)
        limit = min(n, end + round(WINDOW / STEP) + 1)
        hit = next((j for j in range(j0, limit) if r.on[j] <= 0), None)
        if hit is None:
            missed += 1
            continue
        delays.append(r.t[hit] - r.t[j0])
        drafts.append(math.fsum(r.drafts[j0 + 1 : hit + 1]))
    wrong = math.fsum(
        abs(o - (1.0 if s else 0.0)) * STEP for o, s in zip(r.on, r.should_on, strict=True)
    )
    covered = intervals = covered_decisive = decisive = insufficient = 0
    for t, lo, up, ws, _, honest, was_decisive in r.intervals:
        if not honest:
            insufficient += 1
            continue
        truth = window_truth(r, ws, t)
        if math.isnan(truth):
            continue
        hit = lo <= truth <= up
        intervals += 1
        covered += hit
        if was_decisive:
            decisive += 1
            covered_decisive += hit
    return RunScore(
        days=r.hours / 24.0,
        flips=len(r.flips),
        false_flips=false_flips,
        false_rollbacks=false_rollbacks,
        restarts=r.restarts,
        onsets=onsets,
        delays=delays,
        delay_drafts=drafts,
        missed=missed,
        wrong_seconds=wrong,
        seconds=n * STEP,
        tokens=math.fsum(r.tokens),
        covered=covered,
        intervals=intervals,
        covered_decisive=covered_decisive,
        decisive=decisive,
        insufficient=insufficient,
        step_tokens=list(r.tokens),
        step_bins=regret_bins(r),
    )


def window_truth(r: RunResult, start: float, end: float) -> float:
    """The expected pooled alpha of the window (start, end]: each step's expected acceptance
    of its canary drafts (the set alpha when the run did not record it) weighted by the
    draft tokens of the step (a step covers the tick ending then); the plain mean of the set
    alpha when nothing was drafted; NaN when no step falls in the window."""
    expected = r.drafted_alpha if len(r.drafted_alpha) == len(r.t) else r.alpha
    steps = [
        (a, e, d)
        for s, a, e, d in zip(r.t, r.alpha, expected, r.drafts, strict=True)
        if start + 1e-6 < s <= end + 1e-6
    ]
    if not steps:
        return math.nan
    drafted = [(e, d) for _, e, d in steps if d > 0 and math.isfinite(e)]
    total = math.fsum(d for _, d in drafted)
    if total > 0:
        return math.fsum(e * d for e, d in drafted) / total
    return statistics.fmean(a for a, _, _ in steps)


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def aggregate(runs: Iterable[tuple[str, int, str, RunScore]]) -> dict[str, Any]:
    """Per (case, policy) and per policy over the suite, from (case, seed, policy, score);
    the oracle's tokens on the same seeds set the regret."""
    scored: dict[tuple[str, str], dict[int, RunScore]] = defaultdict(dict)
    for case_name, seed, policy_name, s in runs:
        scored[(case_name, policy_name)][seed] = s
    cases = sorted({c for c, _ in scored}, key=_case_order)
    policies = sorted({p for _, p in scored}, key=_policy_order)
    cells: list[dict[str, Any]] = []
    for case in cases:
        oracle = scored.get((case, "oracle"), {})
        for policy in policies:
            by_seed = scored.get((case, policy))
            if not by_seed:
                continue
            cells.append(_cell(case, policy, by_seed, oracle))
    summary = [_summary(p, [c for c in cells if c["policy"] == p]) for p in policies]
    coverage = {
        c["case"]: c["coverage"] for c in cells if c["policy"] == "alphagate" and c["intervals"]
    }
    return {"cells": cells, "summary": summary, "coverage": coverage}


def _cell(
    case: str, policy: str, by_seed: dict[int, RunScore], oracle: dict[int, RunScore]
) -> dict[str, Any]:
    s = list(by_seed.values())
    days = math.fsum(x.days for x in s)
    delays = [d for x in s for d in x.delays]
    drafts = [d for x in s for d in x.delay_drafts]
    onsets = sum(x.onsets for x in s)
    caught = sum(1 for d in delays if d <= CAUGHT_WITHIN + 1e-6)
    common = [seed for seed in by_seed if seed in oracle]
    oracle_tokens = math.fsum(oracle[seed].tokens for seed in common)
    lost = math.fsum(oracle[seed].tokens - by_seed[seed].tokens for seed in common)
    intervals = sum(x.intervals for x in s)
    decisive = sum(x.decisive for x in s)
    bins = dict.fromkeys(REGRET_BINS, 0.0)
    for seed in common:
        mine, theirs = by_seed[seed], oracle[seed]
        for k, a, b in zip(mine.step_bins, mine.step_tokens, theirs.step_tokens, strict=False):
            bins[REGRET_BINS[k]] += b - a
    return {
        "case": case,
        "policy": policy,
        "seeds": len(s),
        "days": days,
        "false_flips_per_day": sum(x.false_flips for x in s) / days,
        "false_rollbacks_per_day": sum(x.false_rollbacks for x in s) / days,
        "flips_per_day": sum(x.flips for x in s) / days,
        "restarts_per_day": sum(x.restarts for x in s) / days,
        "onsets": onsets,
        "detected": len(delays),
        "missed": sum(x.missed for x in s),
        "delays_s": delays,
        "delay_median_s": _median(delays),
        "delay_max_s": max(delays) if delays else None,
        "delay_drafts_median": _median(drafts),
        "caught_within_3_windows": caught / onsets if onsets else None,
        "wrong_state_pct": 100.0
        * math.fsum(x.wrong_seconds for x in s)
        / math.fsum(x.seconds for x in s),
        "tokens": math.fsum(x.tokens for x in s),
        "oracle_tokens": oracle_tokens,
        "regret_tokens": lost,
        "regret_pct": 100.0 * lost / oracle_tokens if oracle_tokens > 0 else None,
        "regret_bins_pct": {
            k: 100.0 * v / oracle_tokens if oracle_tokens > 0 else None for k, v in bins.items()
        },
        "intervals": intervals,
        "coverage": sum(x.covered for x in s) / intervals if intervals else None,
        "decisive_intervals": decisive,
        "decisive_coverage": sum(x.covered_decisive for x in s) / decisive if decisive else None,
        "insufficient_windows": sum(x.insufficient for x in s),
    }


def _summary(policy: str, cells: list[dict[str, Any]]) -> dict[str, Any]:
    days = math.fsum(c["days"] for c in cells)
    oracle = math.fsum(c["oracle_tokens"] for c in cells)
    lost = math.fsum(c["regret_tokens"] for c in cells)
    delays = [d for c in cells for d in c["delays_s"]]
    regrets = [c["regret_pct"] for c in cells if c["regret_pct"] is not None]
    return {
        "policy": policy,
        "cases": len(cells),
        "false_flips_per_day": math.fsum(c["false_flips_per_day"] * c["days"] for c in cells)
        / days,
        "false_rollbacks_per_day": math.fsum(
            c["false_rollbacks_per_day"] * c["days"] for c in cells
        )
        / days,
        "restarts_per_day": math.fsum(c["restarts_per_day"] * c["days"] for c in cells) / days,
        "flips_per_day": math.fsum(c["flips_per_day"] * c["days"] for c in cells) / days,
        "onsets": sum(c["onsets"] for c in cells),
        "missed": sum(c["missed"] for c in cells),
        "delay_median_s": _median(delays),
        "wrong_state_pct": statistics.fmean(c["wrong_state_pct"] for c in cells),
        "regret_tokens": lost,
        # Each scenario counts once, whatever its length (a day-long case would otherwise
        # outweigh the hour-long ones 24 to 1); the token-pooled figure is kept beside it.
        "regret_pct": statistics.fmean(regrets) if regrets else None,
        "regret_pooled_pct": 100.0 * lost / oracle if oracle > 0 else None,
    }


def _case_order(name: str) -> int:
    from alphagate_lab.bench.decisions.suite import SUITE

    names = [c.name for c in SUITE]
    return names.index(name) if name in names else len(names)


def _policy_order(name: str) -> int:
    from alphagate_lab.bench.decisions.loop import POLICY_NAMES

    return POLICY_NAMES.index(name) if name in POLICY_NAMES else len(POLICY_NAMES)
