"""One closed-loop run: a seeded fleet, one policy, and the pods' lives as the policy shapes them.

Every ``TICK`` the fleet advances; every ``STEP`` the loop snapshots the pods (a scrape), asks
each due policy, and applies its answer as a cluster would: a change of config restarts every
canary pod (model load ``suite.LOAD_SECONDS``, counters reset, then a warm-up during which steps
run ``WARMUP_SLOWDOWN`` times slower), and the restarted pods serve with or without speculation.
The rollout status the policy sees is the pods' own (in progress while any canary pod loads).

What a run records, every ``STEP``: the true alpha, whether the oracle would speculate, the
share of canary pods speculating, the canary pods' generated and drafted tokens (from the
simulator's counters, restarts included) and the alpha those drafts have in expectation (the
simulator's ``drafted_alpha``: after a change it lags the set alpha by a request's life).
Stall episodes and injected latency regressions are drawn from the seed alone, so every
policy meets the same ones.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from alphagate.core.model import Rollout
from alphagate_lab.bench.decisions import anchors, suite
from alphagate_lab.bench.decisions.policies import (
    Alphagate,
    Ctx,
    Oracle,
    Policy,
    Want,
    shipped_spec,
)
from alphagate_lab.sim.fleet import Fleet, FleetSnapshot
from alphagate_lab.sim.pod import SimPod

TICK: Final = 30.0
STEP: Final = 30.0
WARMUP_SECONDS: Final = 60.0
WARMUP_SLOWDOWN: Final = 1.3
# Stall episodes the loop applies while the simulator cannot (suite.STALLS when it can).
STALL_EVERY: Final = 1200.0  # mean seconds between episodes, per pod
STALL_SECONDS: Final = (30.0, 90.0)
STALL_SLOWDOWN: Final = 4.0
CALIBRATION_SECONDS: Final = 1200.0

POLICY_NAMES: Final = (
    "oracle",
    "alphagate",
    "alphagate-one-shot",
    "argo-rollouts",
    "flagger",
    "in-engine",
    "kayenta",
)
ONE_SHOT_COOLDOWN: Final = 30 * 86400.0
K_TUNING: Final = "alphagate-k-tuning"
EXTRA_POLICIES: Final = (K_TUNING,)
"""Run only when named (--policies): alphagate with spec.draftLength.tuning on. Meaningful on
cases with an acceptance chain (``suite.Case.chain``), where alpha follows the K that runs."""


def make_policy(name: str, seed: int, k: int = suite.K) -> Policy:
    spec = shipped_spec(k=k)
    if name == "oracle":
        return Oracle()
    if name == "alphagate":
        return Alphagate(name, spec)
    if name == K_TUNING:
        tuning = spec.draft_length.tuning.model_copy(update={"enabled": True, "max_k": k})
        draft = spec.draft_length.model_copy(update={"tuning": tuning})
        return Alphagate(name, spec.model_copy(update={"draft_length": draft}))
    if name == "alphagate-one-shot":
        # The same policy, but a rollback is final, as it is for every anchor: what the
        # re-probes cost and what they win back.
        backoff = spec.timing.cooldown.model_copy(
            update={"initial_seconds": ONE_SHOT_COOLDOWN, "max_seconds": ONE_SHOT_COOLDOWN}
        )
        timing = spec.timing.model_copy(update={"cooldown": backoff})
        return Alphagate(name, spec.model_copy(update={"timing": timing}), final=True)
    if name == "argo-rollouts":
        return anchors.Argo(spec)
    if name == "flagger":
        return anchors.Flagger(spec)
    if name == "in-engine":
        return anchors.InEngine(seed)
    if name == "kayenta":
        return anchors.Kayenta(spec)
    known = ", ".join((*POLICY_NAMES, *EXTRA_POLICIES))
    raise ValueError(f"unknown policy {name!r}; known: {known}")


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
    # Expected accepted / drafted of those drafts (NaN when none): the coverage score's truth.
    drafted_alpha: list[float] = field(default_factory=list)
    flips: list[tuple[float, str]] = field(default_factory=list)  # (t, "enable"/"disable")
    restarts: int = 0
    # Every alpha interval alphagate reported: (t, lower, upper, window start, batches,
    # honest, decisive); see policies.IntervalRecord.
    intervals: list[tuple[float, float, float, float, int, bool, bool]] = field(
        default_factory=list
    )
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


@dataclass
class _Branch:
    """One policy's run. Branches share a fleet until their policy first acts on it."""

    policy: Policy
    res: RunResult
    fleet: Fleet
    next_decision: float
    on: bool = True  # the canary Deployment starts with --speculative-config (a new rollout)
    flipped: bool = False
    gated: frozenset[str] = frozenset()
    k: int = suite.K  # the draft length the canary Deployment runs
    last: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    tokens: float = 0.0
    drafts: float = 0.0
    expected: float = 0.0  # sum over the step's canary drafts of their expected acceptance

    def account(self) -> None:
        """Canary tokens and drafts since the last tick, from the counters, across restarts,
        and the drafts' expected acceptance (the pod's last tick: called every tick)."""
        for name, pod in self.fleet.pods.items():
            if pod.spec.role != "canary":
                continue
            c = pod.counters
            cur = (pod.restarts, c.generation_tokens, c.draft_tokens)
            prev = self.last.get(name)
            drafted = 0.0
            if prev is not None and prev[0] != cur[0]:
                self.tokens += cur[1]
                drafted = cur[2]
            elif prev is not None:
                self.tokens += cur[1] - prev[1]
                drafted = cur[2] - prev[2]
            self.drafts += drafted
            if drafted > 0 and pod.truth is not None:
                self.expected += drafted * pod.truth.drafted_alpha
            self.last[name] = cur


def _engine_off(pod: SimPod) -> None:
    """Speculation off inside a running engine (no restart): the engine drafts no more."""
    engine = getattr(pod, "engine", None)
    if engine is None or not hasattr(engine, "k"):
        raise RuntimeError("the simulator's pod has no engine.k to gate: update the loop")
    engine.k = 0
    cache = getattr(engine, "_step_cache", None)  # step times cached with the old K
    if isinstance(cache, dict):
        cache.clear()


def run_group(
    case_name: str, seed: int, policy_names: Sequence[str], hours: float
) -> list[RunResult]:
    """Closed-loop runs of several policies on one seeded case; deterministic in the inputs.

    Every policy starts on one shared fleet; the first time a policy acts (a flip, an engine
    gating itself), its branch continues on a copy made at that instant, so each run is
    exactly the run it would be alone, for a fraction of the cost while policies agree."""
    case = suite.BY_NAME[case_name]
    trunk = Fleet(case.scenario(hours), seed=seed, tick=TICK)
    pods = _Pods(trunk, case, seed, hours)
    branches = []
    for name in policy_names:
        policy = make_policy(name, seed, case.k)
        res = RunResult(case_name, seed, name, hours)
        branches.append(_Branch(policy, res, trunk, next_decision=policy.interval, k=case.k))
    steps = round(hours * 3600.0 / TICK)
    per_step = round(STEP / TICK)
    for i in range(steps + 1):
        t = i * TICK
        if i:
            for fleet in _fleets(branches):
                fleet.step()
        for b in branches:
            b.account()
        if case.chain:
            for b in branches:  # alpha follows the K each fleet's canary runs
                _chain(b.fleet, case, t / (hours * 3600.0), b.k)
        if i % per_step == 0:
            alpha = (
                case.alpha_at(t / (hours * 3600.0)) if case.chain else trunk.slices["chat"].alpha
            )
            regressed = pods.regression_at is not None and t >= pods.regression_at
            should_on = alpha >= suite.GATE and not regressed
            snaps: dict[int, FleetSnapshot] = {}
            for b in branches:
                if t + 1e-6 >= b.next_decision:
                    b.next_decision += b.policy.interval
                    _decide(b, t, should_on, snaps, branches)
                _record(b, t, alpha, should_on)
        for fleet in _fleets(branches):
            gated = next(b.gated for b in branches if b.fleet is fleet)
            pods.apply(fleet, t, gated)
    out = []
    for b in branches:
        policy, res = b.policy, b.res
        if isinstance(policy, Alphagate):
            res.intervals = [
                (r.t, r.lower, r.upper, r.window_start, r.batches, r.honest, r.decisive)
                for r in policy.intervals
            ]
            res.extra = policy.extra()
        if isinstance(policy, anchors.InEngine):
            res.extra = {"engine_gated": sorted(policy.off)}
        if isinstance(policy, anchors.Kayenta):
            res.extra = {"scores": policy.scores}
        if not math.isfinite(sum(res.tokens)):
            raise RuntimeError(f"{case_name}/{res.policy}/{seed}: non-finite token counts")
        out.append(res)
    return out


def _chain(fleet: Fleet, case: suite.Case, frac: float, k: int) -> None:
    """The slice's alpha and decay for the chain at `frac` and draft length `k`."""
    p, decay = case.chain_at(frac)
    sl = fleet.slices["chat"]
    alpha = round(suite.chain_alpha(p, decay, k), 6)
    if sl.alpha != alpha or sl.decay != decay:
        fleet.slices["chat"] = sl.model_copy(update={"alpha": alpha, "decay": decay})


def _fleets(branches: Sequence[_Branch]) -> list[Fleet]:
    seen: dict[int, Fleet] = {}
    for b in branches:
        seen.setdefault(id(b.fleet), b.fleet)
    return list(seen.values())


def _decide(
    b: _Branch, t: float, should_on: bool, snaps: dict[int, FleetSnapshot], all_: list[_Branch]
) -> None:
    fleet = b.fleet
    snap = snaps.get(id(fleet))
    if snap is None:
        snap = snaps[id(fleet)] = fleet.snapshot()
    ctx = Ctx(t, snap.time, snap, _rollout(fleet, b.on, b.flipped), fleet, should_on)
    want: Want = b.policy.decide(ctx)
    new_gates = want.engine_off - b.gated
    if (want.on != b.on or new_gates) and sum(x.fleet is fleet for x in all_) > 1:
        b.fleet = fleet = copy.deepcopy(fleet)  # this policy acts: its own fleet from now on
    for name in sorted(new_gates):  # an engine gates itself: no restart
        _engine_off(fleet.pods[name])
        b.res.flips.append((t, "disable"))
    b.gated = want.engine_off
    k = want.k if want.k is not None else b.k
    retune = want.on and b.on and k != b.k
    if retune and sum(x.fleet is fleet for x in all_) > 1:
        b.fleet = fleet = copy.deepcopy(fleet)
    if want.on != b.on or retune:
        b.flipped = True
        b.res.flips.append((t, "retune" if retune else ("enable" if want.on else "disable")))
        b.on, b.k = want.on, k
        canaries = [n for n, p in fleet.pods.items() if p.spec.role == "canary"]
        for name in canaries:
            if fleet.set_speculative_config(name, suite.spec_config(k) if b.on else None):
                b.res.restarts += 1
    b.k = k


def _record(b: _Branch, t: float, alpha: float, should_on: bool) -> None:
    canaries = [p for p in b.fleet.pods.values() if p.spec.role == "canary"]
    live = sum(1 for p in canaries if p.k and p.name not in b.gated)
    share = live / len(canaries) if canaries else 0.0
    r = b.res
    r.t.append(t)
    r.alpha.append(alpha)
    r.should_on.append(should_on)
    r.on.append(share if b.on else 0.0)
    r.tokens.append(b.tokens)
    r.drafts.append(b.drafts)
    r.drafted_alpha.append(b.expected / b.drafts if b.drafts > 0 else math.nan)
    b.tokens = b.drafts = b.expected = 0.0


def run(case_name: str, seed: int, policy_name: str, hours: float) -> RunResult:
    """One policy's closed-loop run (the same run it has within a group)."""
    return run_group(case_name, seed, [policy_name], hours)[0]
