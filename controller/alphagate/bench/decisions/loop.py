"""One closed-loop run: a seeded fleet, one policy, and the pods' lives as the policy shapes them.

Every ``TICK`` the fleet advances; every ``STEP`` the loop snapshots the pods (a scrape), asks
each due policy, and applies its answer as a cluster would: a change of config restarts every
canary pod (model load ``suite.LOAD_SECONDS``, counters reset, then a warm-up during which steps
run ``WARMUP_SLOWDOWN`` times slower), and the restarted pods serve with or without speculation.
The rollout status the policy sees is the pods' own (in progress while any canary pod loads).

What a run records, every ``STEP``: the true alpha, whether the oracle would speculate, the
share of canary pods speculating, and the canary pods' generated and drafted tokens (from the
simulator's counters, restarts included). Stall episodes and injected latency regressions
are drawn from the seed alone, so every policy meets the same ones.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from alphagate.bench.decisions import anchors, suite
from alphagate.bench.decisions.policies import (
    Alphagate,
    Ctx,
    Oracle,
    Policy,
    Want,
    shipped_spec,
)
from alphagate.core.model import Rollout
from alphagate.sim.fleet import Fleet
from alphagate.sim.pod import SimPod

TICK: Final = 30.0
STEP: Final = 30.0
WARMUP_SECONDS: Final = 60.0
WARMUP_SLOWDOWN: Final = 1.3
# Stall episodes the loop applies while the simulator cannot (suite.STALLS when it can).
STALL_EVERY: Final = 1200.0  # mean seconds between episodes, per pod
STALL_SECONDS: Final = (30.0, 90.0)
STALL_SLOWDOWN: Final = 4.0
CALIBRATION_SECONDS: Final = 1200.0

POLICY_NAMES: Final = ("oracle", "alphagate", "argo-rollouts", "flagger", "in-engine", "kayenta")


def make_policy(name: str, seed: int) -> Policy:
    spec = shipped_spec()
    if name == "oracle":
        return Oracle()
    if name == "alphagate":
        return Alphagate(name, spec)
    if name == "argo-rollouts":
        return anchors.Argo(spec)
    if name == "flagger":
        return anchors.Flagger(spec)
    if name == "in-engine":
        return anchors.InEngine(seed)
    if name == "kayenta":
        return anchors.Kayenta(spec)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")


@dataclass
class RunResult:
    """What one (case, seed, policy) run produced; plain data, so it crosses processes."""

    case: str
    seed: int
    policy: str
    hours: float
    t: list[float] = field(default_factory=list)
    alpha: list[float] = field(default_factory=list)
    should_on: list[bool] = field(default_factory=list)
    on: list[float] = field(default_factory=list)  # share of canary pods speculating
    tokens: list[float] = field(default_factory=list)  # canary generated tokens in the step
    drafts: list[float] = field(default_factory=list)  # canary draft tokens in the step
    flips: list[tuple[float, str]] = field(default_factory=list)  # (t, "enable"/"disable")
    restarts: int = 0
    intervals: list[tuple[float, float, float, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _stall_schedule(
    seed: int, pods: list[str], duration: float
) -> dict[str, list[tuple[float, float]]]:
    """Per pod, (start, end) of its stall episodes: Poisson starts, 30-90 s long."""
    out: dict[str, list[tuple[float, float]]] = {}
    for i, name in enumerate(sorted(pods)):
        rng = np.random.default_rng([seed, i, 0x57A11])
        spans = []
        t = float(rng.exponential(STALL_EVERY))
        while t < duration:
            spans.append((t, t + float(rng.uniform(*STALL_SECONDS))))
            t += float(rng.exponential(STALL_EVERY))
        out[name] = spans
    return out


@functools.lru_cache(maxsize=32)
def healthy_ratio(case_name: str) -> float:
    """A speculating canary's mean time per token over the baseline's, healthy (no regression):
    the injected regression scales the canary so the ratio becomes the case's target."""
    case = suite.BY_NAME[case_name]
    fleet = Fleet(case.scenario(CALIBRATION_SECONDS / 3600.0), seed=0, tick=TICK)
    ratios = []
    while fleet.now + TICK <= CALIBRATION_SECONDS:
        fleet.step()
        if fleet.now < CALIBRATION_SECONDS / 2:
            continue
        truth = fleet.truth().pods.values()
        c = [p.time_per_token for p in truth if p.role == "canary" and p.time_per_token > 0]
        b = [p.time_per_token for p in truth if p.role == "baseline" and p.time_per_token > 0]
        if c and b:
            ratios.append((sum(c) / len(c)) / (sum(b) / len(b)))
    return float(np.mean(ratios))


class _Pods:
    """Latency scale of each pod: stalls, warm-up after a (re)start, injected regression."""

    def __init__(self, fleet: Fleet, case: suite.Case, seed: int, hours: float) -> None:
        duration = hours * 3600.0
        self.stalls = _stall_schedule(seed, list(fleet.pods), duration) if case.stalls else {}
        self.regression_at = case.regression_start(hours)
        self.regression = 1.0
        if case.regression is not None:
            self.regression = case.regression[1] / healthy_ratio(case.name)

    def scale(self, pod: SimPod, t: float, gated: bool) -> float:
        s = 1.0
        for a, b in self.stalls.get(pod.name, ()):
            if a <= t < b:
                s *= STALL_SLOWDOWN
                break
        ready_since = pod.ready_at
        if pod.restarts and 0 <= t - ready_since < WARMUP_SECONDS:
            s *= WARMUP_SLOWDOWN
        if (
            self.regression_at is not None
            and t >= self.regression_at
            and pod.spec.role == "canary"
            and pod.k
            and not gated
        ):
            s *= self.regression
        return s

    def apply(self, fleet: Fleet, t: float, gated: frozenset[str]) -> None:
        for pod in fleet.pods.values():
            s = self.scale(pod, t, pod.name in gated)
            if pod.spec.latency_scale != s:
                pod.spec = dataclasses.replace(pod.spec, latency_scale=s)


def _rollout(fleet: Fleet, on: bool, flipped: bool) -> Rollout:
    canaries = [p for p in fleet.pods.values() if p.spec.role == "canary"]
    if any(p.phase == "loading" for p in canaries):
        return Rollout(in_progress=True, speculation_on=on)
    if not flipped:
        return Rollout(speculation_on=on)
    return Rollout(completed_at=max(p.started for p in canaries), speculation_on=on)


def run(case_name: str, seed: int, policy_name: str, hours: float) -> RunResult:
    """One closed-loop run; deterministic in (case, seed, policy, hours)."""
    case = suite.BY_NAME[case_name]
    fleet = Fleet(case.scenario(hours), seed=seed, tick=TICK)
    policy = make_policy(policy_name, seed)
    pods = _Pods(fleet, case, seed, hours)
    duration = hours * 3600.0
    res = RunResult(case_name, seed, policy_name, hours)
    on = True  # the canary Deployment starts with --speculative-config (a new rollout)
    flipped = False
    gated: frozenset[str] = frozenset()
    last: dict[str, tuple[int, int, int]] = {}
    next_decision = policy.interval  # the first decision comes one interval in
    steps = round(duration / TICK)
    per_step = round(STEP / TICK)
    tokens = drafts = 0.0
    for i in range(steps + 1):
        t = i * TICK
        if i:
            fleet.step()
        for name, pod in fleet.pods.items():
            if pod.spec.role != "canary":
                continue
            c = pod.counters
            cur = (pod.restarts, c.generation_tokens, c.draft_tokens)
            prev = last.get(name)
            if prev is None:
                pass
            elif prev[0] != cur[0]:
                tokens += cur[1]
                drafts += cur[2]
            else:
                tokens += cur[1] - prev[1]
                drafts += cur[2] - prev[2]
            last[name] = cur
        if i % per_step == 0:
            alpha = fleet.slices["chat"].alpha
            regressed = pods.regression_at is not None and t >= pods.regression_at
            should_on = alpha >= suite.GATE and not regressed
            if t + 1e-6 >= next_decision:
                next_decision += policy.interval
                snap = fleet.snapshot()
                ctx = Ctx(t, snap.time, snap, _rollout(fleet, on, flipped), fleet, should_on)
                want: Want = policy.decide(ctx)
                for _ in want.engine_off - gated:  # an engine gated itself: no restart
                    res.flips.append((t, "disable"))
                gated = want.engine_off
                if want.on != on:
                    on = want.on
                    flipped = True
                    res.flips.append((t, "enable" if on else "disable"))
                    canary_names = [n for n, p in fleet.pods.items() if p.spec.role == "canary"]
                    for name in canary_names:
                        if fleet.set_speculative_config(name, suite.SPEC if on else None):
                            res.restarts += 1
            canaries = [p for p in fleet.pods.values() if p.spec.role == "canary"]
            share = (
                sum(1 for p in canaries if p.k and p.name not in gated) / len(canaries)
                if canaries
                else 0.0
            )
            res.t.append(t)
            res.alpha.append(alpha)
            res.should_on.append(should_on)
            res.on.append(share if on else 0.0)
            res.tokens.append(tokens)
            res.drafts.append(drafts)
            tokens = drafts = 0.0
        pods.apply(fleet, t, gated)
    if isinstance(policy, Alphagate):
        res.intervals = [(r.t, r.lower, r.upper, r.window_start) for r in policy.intervals]
        res.extra = policy.extra()
    if isinstance(policy, anchors.InEngine):
        res.extra = {"engine_gated": sorted(policy.off)}
    if isinstance(policy, anchors.Kayenta):
        res.extra = {"scores": policy.scores}
    if not math.isfinite(sum(res.tokens)):
        raise RuntimeError(f"{case_name}/{policy_name}/{seed}: non-finite token counts")
    return res
