"""Scores: what each number in the table means, computed from runs.

The truth at a step says whether the oracle would speculate: true alpha >= the shipped
policy's gate (0.55) and no injected latency regression ("should be on").

* **regret**: what the policy's decisions cost against the oracle's on the same seeded fleet,
  priced in the shipped policy's own terms, as a % of the oracle's canary tokens. A token a
  canary pod generates while speculating at true alpha a saves ``1 - (1 + K*0.55)/(1 + K*a)``
  of a plain token's time (the gate is where speculation breaks even, by the policy's
  definition: +14.5% at 0.70, -12.8% at 0.45 with K = 3); every switch of a canary pod's
  speculation is charged the same, whatever carries it out: a pod restart's model load and
  warm-up, priced as the tokens the pod would have served meanwhile at its mean rate
  (``RESTART_SECONDS``). The oracle pays it on every flip, and so does every policy, the
  in-engine gate included (it switches a pod off inside the engine, without a restart: charged
  as a restart all the same), so no policy beats the oracle by how it switches and regret is
  never negative by accounting. The open-loop traffic does not wait for the pods, so tokens served
  barely move with the decisions: this price is what a decision changes. Per seed, then the
  mean over seeds with a 95% t interval; over the suite, each seed's mean over the scored
  scenarios (those without an injected latency regression or a per-day horizon), then the
  same interval over seeds.
* **where regret comes from**: each step's difference against the oracle's same step, put in
  one bin by what the policy's canary was doing: ``restart`` (within the model load and
  warm-up after one of its own flips), ``below break-even`` (speculating while the truth says
  off), ``off while it pays`` (not speculating while the truth says on), ``same state``
  (both right: noise, and the oracle's own restarts). The bins add up to the regret.
* **false rollback**: a rollback (or an engine gating itself) while the truth said "on" over
  the 5 minutes before it (``WINDOW``); a **false flip** also counts an enable (a probe
  included) while it said "off". Per simulated day.
* **pod restarts**: canary pod restarts caused by the policy's flips; an in-engine gate
  restarts nothing.
* **onset**: the truth turns "off" (alpha crosses below the gate, or a regression starts; a
  run that starts below the gate has an onset at 0) while the policy speculates. Its
  **detection delay** is the time to the first decision that leaves no canary pod
  speculating, made before the truth turns back "on" (plus one window). An onset with no such
  decision is **missed**. ``caught <= 15 min`` and ``<= 30 min`` are shares of onsets.
* **coverage** (alphagate): the share of the alpha intervals it reported with at least two
  batches that hold the window's true alpha: the canary's realised alpha over the window, the
  same on every topology (one pod or sixteen): each draft's expected acceptance given what its
  request was drawn around (the slice's alpha, the pod's offset and the pod's own slow wander
  at the request's admission), weighted by drafts over the canary pods (the simulator's
  ``realised_alpha``). It leaves out only the requests' own random draws, which the interval
  is there to cover; the pod's wander is in, since "is speculation paying on this canary" is
  about what its pods really accepted over the window, not the slice's set value.
  **below lower** is the share of those windows whose truth fell below the interval's lower
  bound (a Pass relies on it: nominal 2.5%).
  **median width** is over every window with an interval, one-batch [0, 1] ones included
  (a blind canary reads 1.00).
* **latency Pass inside it** (alphagate, regression cases): the share of decisions made on
  windows wholly inside an injected regression whose latency check said Pass. **Tail claimed
  within** is the share whose check also claimed the canary's quantile within the margin
  (its tail part showed ``shown``): that, not a Pass, is "confirmed as within" for a tail-only
  regression, since a Pass on the exact mean that reports the quantile ``unresolvable`` (the
  default buckets cannot show it) makes no claim about the tail; **tail unresolvable** is the
  share that reported it so.
* **exceptions**: a policy's decide raised (the run went on; tracebacks are saved).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate.core.stats import t_quantile
from alphagate_lab.bench.decisions.loop import STEP, WARMUP_SECONDS, WARMUP_SLOWDOWN, RunResult
from alphagate_lab.bench.decisions.suite import BY_NAME, LOAD_SECONDS

WINDOW: Final = 300.0
REGRET_BINS: Final = ("restart", "below break-even", "off while it pays", "same state")
CAUGHT_WITHIN: Final = 3 * WINDOW  # 15 minutes: three non-overlapping windows
CAUGHT_WITHIN_LONG: Final = 6 * WINDOW  # 30 minutes
RESTART_SECONDS: Final = LOAD_SECONDS + (WARMUP_SLOWDOWN - 1.0) * WARMUP_SECONDS
"""What a pod restart costs, in seconds of the pod's traffic: its model load, and its warm-up
at 1.3x slower steps."""


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
    below: int = 0
    widths: list[float] = field(default_factory=list)
    no_interval: int = 0
    covered_decisive: int = 0
    decisive: int = 0
    insufficient: int = 0
    step_values: list[float] = field(default_factory=list)  # net of restart charges
    step_bins: list[int] = field(default_factory=list)  # index into REGRET_BINS
    value: float = 0.0  # the run's saving net of restart charges (token-times)
    latency_pass: int = 0
    latency_judged: int = 0
    latency_tail_within: int = 0  # the quantile claimed within ("shown")
    latency_unresolvable: int = 0  # the quantile reported unresolvable at the layout
    latency_tail_seen: int = 0  # the check got as far as its quantile part
    exceptions: int = 0
    tracebacks: list[str] = field(default_factory=list)


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


def step_values(r: RunResult) -> list[float]:
    """Each step's saving, net of the switches made at it (priced at the run's mean tokens
    per ready canary pod-second, ``RESTART_SECONDS`` each): pod restarts, and pods switched
    off inside their engine (charged as a restart is: the same accounting for every policy)."""
    values = list(r.value) if len(r.value) == len(r.t) else [0.0] * len(r.t)
    pod_seconds = math.fsum(r.ready) * STEP if len(r.ready) == len(r.t) else 0.0
    rate = math.fsum(r.tokens) / pod_seconds if pod_seconds > 0 else 0.0
    for t, n in [*r.restart_log, *r.switch_log]:
        i = min(range(len(r.t)), key=lambda j: abs(r.t[j] - t)) if r.t else None
        if i is not None:
            values[i] -= n * rate * RESTART_SECONDS
    return values


def _onsets(r: RunResult) -> tuple[int, int, list[float], list[float]]:
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
    return onsets, missed, delays, drafts


def score_run(r: RunResult) -> RunScore:
    false_flips = false_rollbacks = 0
    for t, kind in r.flips:
        if kind == "disable" and _should_on_throughout(r, t):
            false_flips += 1
            false_rollbacks += 1
        elif kind == "enable" and not _should_on_at(r, t):
            false_flips += 1
    onsets, missed, delays, drafts = _onsets(r)
    wrong = math.fsum(
        abs(o - (1.0 if s else 0.0)) * STEP for o, s in zip(r.on, r.should_on, strict=True)
    )
    covered = intervals = below = covered_decisive = decisive = insufficient = 0
    widths: list[float] = []
    for t, lo, up, ws, _, honest, was_decisive in r.intervals:
        widths.append(up - lo)
        if not honest:
            insufficient += 1
            continue
        truth = window_truth(r, ws, t)
        if math.isnan(truth):
            continue
        hit = lo <= truth <= up
        intervals += 1
        covered += hit
        below += truth < lo
        if was_decisive:
            decisive += 1
            covered_decisive += hit
    latency_pass = latency_judged = tail_within = unresolvable = tail_seen = 0
    if r.regression_at is not None:
        for t, verdict, *tail in r.extra.get("latency", ()):
            if t >= r.regression_at + WINDOW:
                latency_judged += 1
                latency_pass += verdict == "Pass"
                tail_within += verdict == "Pass" and tail[:1] == ["shown"]
                unresolvable += tail[:1] == ["unresolvable"]
                tail_seen += bool(tail) and tail[0] != "none"
    values = step_values(r)
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
        seconds=len(r.t) * STEP,
        tokens=math.fsum(r.tokens),
        covered=covered,
        intervals=intervals,
        below=below,
        widths=widths,
        no_interval=int(r.extra.get("no_interval", 0)),
        covered_decisive=covered_decisive,
        decisive=decisive,
        insufficient=insufficient,
        step_values=values,
        step_bins=regret_bins(r),
        value=math.fsum(values),
        latency_pass=latency_pass,
        latency_judged=latency_judged,
        latency_tail_within=tail_within,
        latency_unresolvable=unresolvable,
        latency_tail_seen=tail_seen,
        exceptions=len(r.exceptions),
        tracebacks=list(r.exceptions),
    )


def window_truth(r: RunResult, start: float, end: float) -> float:
    """The canary's realised alpha over the window (start, end]: each step's realised alpha
    of its canary drafts (``realised_alpha``, each pod's wander in; the set alpha when the run
    did not record it) weighted by the draft tokens of the step (a step covers the tick ending
    then); the plain mean of the set alpha when nothing was drafted; NaN when no step falls in
    the window."""
    expected = r.realised_alpha if len(r.realised_alpha) == len(r.t) else r.alpha
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


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, lower, upper): the mean over seeds with its t interval (a single seed: no
    interval, both bounds NaN)."""
    if not values:
        return math.nan, math.nan, math.nan
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + confidence / 2, len(values) - 1) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    return m, m - half, m + half


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def aggregate(
    runs: Iterable[tuple[str, int, str, RunScore]], scored: Sequence[str] | None = None
) -> dict[str, Any]:
    """Per (case, policy) and per policy over the suite, from (case, seed, policy, score);
    the oracle's run on the same seed sets the regret. ``scored``: the cases whose regret
    makes the suite's (default: every case with an oracle)."""
    by: dict[tuple[str, str], dict[int, RunScore]] = defaultdict(dict)
    for case_name, seed, policy_name, s in runs:
        by[(case_name, policy_name)][seed] = s
    cases = sorted({c for c, _ in by}, key=_case_order)
    policies = sorted({p for _, p in by}, key=_policy_order)
    cells: list[dict[str, Any]] = []
    for case in cases:
        oracle = by.get((case, "oracle"), {})
        for policy in policies:
            by_seed = by.get((case, policy))
            if by_seed:
                cells.append(_cell(case, policy, by_seed, oracle))
    in_suite = set(scored) if scored is not None else set(cases)
    summary = [_summary(p, [c for c in cells if c["policy"] == p], in_suite) for p in policies]
    coverage = {
        c["case"]: c["coverage"] for c in cells if c["policy"] == "alphagate" and c["intervals"]
    }
    return {"cells": cells, "summary": summary, "coverage": coverage}


def _regrets(by_seed: dict[int, RunScore], oracle: dict[int, RunScore]) -> dict[int, float]:
    out = {}
    for seed, mine in by_seed.items():
        theirs = oracle.get(seed)
        if theirs is not None and theirs.tokens > 0:
            out[seed] = 100.0 * (theirs.value - mine.value) / theirs.tokens
    return out


def _cell(
    case: str, policy: str, by_seed: dict[int, RunScore], oracle: dict[int, RunScore]
) -> dict[str, Any]:
    s = list(by_seed.values())
    days = math.fsum(x.days for x in s)
    delays = [d for x in s for d in x.delays]
    drafts = [d for x in s for d in x.delay_drafts]
    onsets = sum(x.onsets for x in s)
    known = BY_NAME.get(case)
    # With a latency regression the truth is the P99 promise, which the price does not weigh.
    priced = known is None or known.regression is None
    regrets = _regrets(by_seed, oracle) if priced else {}
    mean, lo, hi = mean_interval(list(regrets.values()))
    oracle_tokens = math.fsum(oracle[seed].tokens for seed in regrets)
    bins = dict.fromkeys(REGRET_BINS, 0.0)
    for seed in regrets:
        mine, theirs = by_seed[seed], oracle[seed]
        for k, a, b in zip(mine.step_bins, mine.step_values, theirs.step_values, strict=False):
            bins[REGRET_BINS[k]] += b - a
    intervals = sum(x.intervals for x in s)
    decisive = sum(x.decisive for x in s)
    widths = [w for x in s for w in x.widths]
    judged = sum(x.latency_judged for x in s)
    return {
        "case": case,
        "policy": policy,
        "seeds": len(s),
        "days": days,
        "false_flips": sum(x.false_flips for x in s),
        "false_rollbacks": sum(x.false_rollbacks for x in s),
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
        "caught_within_3_windows": _share(delays, CAUGHT_WITHIN, onsets),
        "caught_within_30_min": _share(delays, CAUGHT_WITHIN_LONG, onsets),
        "wrong_state_pct": 100.0
        * math.fsum(x.wrong_seconds for x in s)
        / math.fsum(x.seconds for x in s),
        "tokens": math.fsum(x.tokens for x in s),
        "oracle_tokens": oracle_tokens,
        "regret_seeds": {str(k): v for k, v in sorted(regrets.items())},
        "regret_pct": mean if regrets else None,
        "regret_lo": lo if regrets else None,
        "regret_hi": hi if regrets else None,
        "regret_bins_pct": {
            k: 100.0 * v / oracle_tokens if oracle_tokens > 0 else None for k, v in bins.items()
        },
        "intervals": intervals,
        "coverage": sum(x.covered for x in s) / intervals if intervals else None,
        "below_lower": sum(x.below for x in s) / intervals if intervals else None,
        "width_median": _median(widths),
        "no_interval_windows": sum(x.no_interval for x in s),
        "decisive_intervals": decisive,
        "decisive_coverage": sum(x.covered_decisive for x in s) / decisive if decisive else None,
        "insufficient_windows": sum(x.insufficient for x in s),
        "latency_judged": judged,
        "latency_confirmed": sum(x.latency_pass for x in s) / judged if judged else None,
        "latency_tail_within": (sum(x.latency_tail_within for x in s) / judged if judged else None),
        "latency_unresolvable": (
            sum(x.latency_unresolvable for x in s) / judged if judged else None
        ),
        "latency_tail_seen": sum(x.latency_tail_seen for x in s),
        "latency_unresolvable_n": sum(x.latency_unresolvable for x in s),
        "exceptions": sum(x.exceptions for x in s),
    }


def _share(delays: Sequence[float], within: float, onsets: int) -> float | None:
    return sum(1 for d in delays if d <= within + 1e-6) / onsets if onsets else None


def _summary(policy: str, cells: list[dict[str, Any]], scored: set[str]) -> dict[str, Any]:
    days = math.fsum(c["days"] for c in cells)
    delays = [d for c in cells for d in c["delays_s"]]
    suite_cells = [c for c in cells if c["case"] in scored and c["regret_seeds"]]
    seeds = (
        set.intersection(*(set(c["regret_seeds"]) for c in suite_cells)) if suite_cells else set()
    )
    per_seed = [statistics.fmean(c["regret_seeds"][s] for c in suite_cells) for s in sorted(seeds)]
    mean, lo, hi = mean_interval(per_seed)
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
        # Each scenario counts once, whatever its length; the interval is over seeds.
        "regret_pct": mean if per_seed else None,
        "regret_lo": lo if per_seed else None,
        "regret_hi": hi if per_seed else None,
        "regret_cases": len(suite_cells),
        "regret_seeds": len(per_seed),
        "exceptions": sum(c["exceptions"] for c in cells),
    }


def _case_order(name: str) -> int:
    names = list(BY_NAME)
    return names.index(name) if name in names else len(names)


def _policy_order(name: str) -> int:
    from alphagate_lab.bench.decisions.loop import POLICY_NAMES

    return POLICY_NAMES.index(name) if name in POLICY_NAMES else len(POLICY_NAMES)
