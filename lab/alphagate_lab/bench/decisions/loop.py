"""One closed-loop run: a seeded fleet, one policy, and the pods' lives as the policy shapes them.

Every ``TICK`` the fleet advances; every ``STEP`` the loop snapshots the pods (a scrape), asks
each due policy, and applies its answer as a cluster would: a change of config restarts every
canary pod (model load ``suite.LOAD_SECONDS``, counters reset, then a warm-up during which steps
run ``WARMUP_SLOWDOWN`` times slower), and the restarted pods serve with or without speculation.
The rollout status the policy sees is the pods' own (in progress while any canary pod loads).

What a run records, every ``STEP``: the true alpha, whether the oracle would speculate, the
share of canary pods speculating, the canary pods' generated and drafted tokens (from the
simulator's counters, restarts included), the alpha those drafts have in expectation (the
simulator's ``drafted_alpha``: after a change it lags the set alpha by a request's life; and
``realised_alpha``, the same with each pod's own wander in, the coverage truth) and
the time speculation saved on them in the policy's own terms (``saving``). Stall episodes and
injected latency regressions are drawn from the seed alone, so every policy meets the same
ones.

A policy that raises does not end the run: the exception and its traceback are recorded and
the canary holds its state, as the controller holds on an Error.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate.core.model import Rollout
from alphagate_lab.bench.decisions import anchors, calibrate, suite
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


def saving(alpha: float, k: int, gate: float = suite.GATE) -> float:
    """Share of a token's time speculation saves at true alpha, in the shipped policy's terms:
    a speculative step costs what ``1 + k * gate`` plain tokens cost (the gate is where it
    breaks even, by the policy's definition) and yields ``1 + k * alpha`` tokens."""
    return 1.0 - (1.0 + k * gate) / (1.0 + k * alpha)


def make_policy(name: str, seed: int, k: int = suite.K, case: suite.Case | None = None) -> Policy:
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
        # thresholdRange max, fixed as a team sets it from its dashboard: the policy's margin
        # above what one healthy baseline pod's 1-minute P99 request duration stays under in
        # 95% of minutes (over a healthy hour of the same fleet)
        limit = math.inf
        if case is not None:
            p95 = calibrate.healthy(case).minute_duration_p95
            limit = (1.0 + spec.latency.max_regression_ratio) * p95
        return anchors.Flagger(spec, limit)
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
    # Expected accepted / drafted of those drafts (NaN when none), around the set alpha.
    drafted_alpha: list[float] = field(default_factory=list)
    # The same around what each request was really drawn around, each pod's own wander in:
    # the canary's realised alpha, the coverage score's truth (NaN when nothing was drafted).
    realised_alpha: list[float] = field(default_factory=list)
    # canary time saved by speculation in the step, in token-times (see saving)
    value: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)  # canary pods ready at the step
    flips: list[tuple[float, str]] = field(default_factory=list)  # (t, "enable"/"disable")
    restarts: int = 0
    restart_log: list[tuple[float, int]] = field(default_factory=list)  # (t, pods restarted)
    # (t, pods switched off inside their engine, no restart): charged as a restart is.
    switch_log: list[tuple[float, int]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)  # tracebacks of the policy's raises
    regression_at: float | None = None
    # Every alpha interval alphagate reported: (t, lower, upper, window start, batches,
    # honest, decisive); see policies.IntervalRecord.
    intervals: list[tuple[float, float, float, float, int, bool, bool]] = field(
        default_factory=list
    )
    extra: dict[str, Any] = field(default_factory=dict)


class _Pods:
    """Per-pod latency of the run: warm-up after a (re)start, and the injected regression of a
    speculating canary (every step slower, or a share of its requests)."""

    def __init__(self, case: suite.Case, hours: float) -> None:
        self.regression_at = case.regression_start(hours)
        self.kind = case.regression.kind if case.regression is not None else None
        self.scale = self.tail = 1.0
        if case.regression is not None:
            h = calibrate.healthy(case)
            if self.kind == "uniform":
                self.scale = calibrate.uniform_scale(h, case.regression.factor)
            else:
                self.tail = calibrate.tail_factor(h, case.regression.factor)

    def regressed(self, pod: SimPod, t: float, gated: bool) -> bool:
        return (
            self.regression_at is not None
            and t >= self.regression_at
            and pod.spec.role == "canary"
            and bool(pod.k)
            and not gated
        )

    def apply(self, fleet: Fleet, t: float, gated: frozenset[str]) -> None:
        for pod in fleet.pods.values():
            s = 1.0
            if pod.restarts and 0 <= t - pod.ready_at < WARMUP_SECONDS:
                s *= WARMUP_SLOWDOWN
            on = self.regressed(pod, t, pod.name in gated)
            if on and self.kind == "uniform":
                s *= self.scale
            share, factor = (suite.TAIL_SHARE, self.tail) if on and self.kind == "tail" else (0, 1)
            spec = pod.spec
            if (spec.latency_scale, spec.tail_share, spec.tail_factor) != (s, share, factor):
                pod.spec = dataclasses.replace(
                    spec, latency_scale=s, tail_share=float(share), tail_factor=float(factor)
                )


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
    realised: float = 0.0  # the same, around what each request was drawn around (wander in)
    value: float = 0.0  # canary time speculation saved in the step (token-times)

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
                self.realised += drafted * pod.truth.realised_alpha
            k = pod.engine.k  # 0 once off, or gated inside the engine
            made = cur[1] - prev[1] if prev is not None and prev[0] == cur[0] else cur[1]
            if k and pod.truth is not None and prev is not None:
                self.value += made * saving(pod.truth.drafted_alpha, k)
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
    trunk = Fleet(case.scenario(hours, calibrate.layout_args(case)), seed=seed, tick=TICK)
    pods = _Pods(case, hours)
    branches = []
    for name in policy_names:
        policy = make_policy(name, seed, case.k, case)
        res = RunResult(case_name, seed, name, hours, regression_at=pods.regression_at)
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
                elif t > 0:
                    _watch(b, t, should_on, snaps)
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
        if isinstance(policy, anchors.Flagger):
            res.extra = {"promoted": policy.promoted, "limit_s": policy.duration_limit}
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
    try:
        want: Want = b.policy.decide(ctx)
    except Exception:  # a run never crashes: record it, and hold as the controller would
        b.res.exceptions.append(f"t={t:g}s\n{traceback.format_exc()}")
        want = Want(b.on, b.gated, None)
    new_gates = want.engine_off - b.gated
    if (want.on != b.on or new_gates) and sum(x.fleet is fleet for x in all_) > 1:
        b.fleet = fleet = copy.deepcopy(fleet)  # this policy acts: its own fleet from now on
    for name in sorted(new_gates):  # an engine gates itself: no restart
        _engine_off(fleet.pods[name])
        b.res.flips.append((t, "disable"))
    if new_gates:
        b.res.switch_log.append((t, len(new_gates)))
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
        restarted = 0
        for name in canaries:
            if fleet.set_speculative_config(name, suite.spec_config(k) if b.on else None):
                restarted += 1
        b.res.restarts += restarted
        b.res.restart_log.append((t, restarted))
    b.k = k


def _watch(b: _Branch, t: float, should_on: bool, snaps: dict[int, FleetSnapshot]) -> None:
    """Between its decisions, a policy that reads through Prometheus still sees the scrape."""
    watch = getattr(b.policy, "watch", None)
    if watch is None:
        return
    snap = snaps.get(id(b.fleet))
    if snap is None:
        snap = snaps[id(b.fleet)] = b.fleet.snapshot()
    try:
        watch(Ctx(t, snap.time, snap, _rollout(b.fleet, b.on, b.flipped), b.fleet, should_on))
    except Exception:
        b.res.exceptions.append(f"t={t:g}s (watch)\n{traceback.format_exc()}")


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
    r.realised_alpha.append(b.realised / b.drafts if b.drafts > 0 else math.nan)
    r.value.append(b.value)
    r.ready.append(sum(1 for p in canaries if p.ready))
    b.tokens = b.drafts = b.expected = b.realised = b.value = 0.0


def run(case_name: str, seed: int, policy_name: str, hours: float) -> RunResult:
    """One policy's closed-loop run (the same run it has within a group)."""
    return run_group(case_name, seed, [policy_name], hours)[0]
