"""The policies under test, behind one small interface, and alphagate's own one.

A policy sees what a controller in the cluster would: every ``interval`` seconds it gets the
fleet's pods as a scrape would return them (through its own pod-scrape source, the controller's
code path) and the canary Deployment's rollout status, and answers whether the canary should
run with ``--speculative-config``. The loop turns a change of that answer into a restart of the
canary pods. Only the oracle may read the truth.

alphagate is driven exactly as the reconciler drives it: ``window.read_window`` says which
window to read (cut after warm-up), the pod-scrape source observes it, ``evaluate`` decides
with the unit's Memory and the real rollout status. A change to the core is therefore judged
by this benchmark with no change here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import yaml

from alphagate import config
from alphagate.config import SpeculativeCanarySpec
from alphagate.core import tuning, window
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import analyse
from alphagate.core.latency_evidence import LatencyEvidence
from alphagate.core.model import CheckKind, Memory, Observation, Rollout, Verdict
from alphagate_lab.backtest.recorded import RecordingSource
from alphagate_lab.bench.decisions import suite
from alphagate_lab.sim.fleet import Fleet, FleetSnapshot

POLICIES_DIR = suite.POLICIES_DIR
SHIPPED_POLICY = suite.SHIPPED_POLICY


@dataclass
class Ctx:
    """What a policy is given at one decision time (``now`` is Unix seconds)."""

    t: float  # seconds since the start of the run
    now: float
    snap: FleetSnapshot
    rollout: Rollout
    fleet: Fleet  # for the in-engine gate (it lives inside the pods) and the oracle only
    should_on: bool  # the truth: only the oracle reads it


@dataclass
class Want:
    """A policy's answer: the Deployment's config, and pods whose engine gated itself off."""

    on: bool
    engine_off: frozenset[str] = frozenset()
    k: int | None = None  # the draft length to run (None: unchanged)


@dataclass(frozen=True)
class IntervalRecord:
    """One alpha interval the core reported (its combined estimate), for the coverage score.

    ``honest``: the core stood behind it (at least two batches; with fewer it reports [0, 1]
    and Inconclusive). ``decisive``: the acceptance check passed or failed on it.
    """

    t: float
    lower: float
    upper: float
    window_start: float
    batches: int
    honest: bool
    decisive: bool


class Policy(Protocol):
    name: str
    interval: float

    def decide(self, ctx: Ctx) -> Want: ...


def shipped_spec(name: str = SHIPPED_POLICY, *, k: int | None = None) -> SpeculativeCanarySpec:
    """A shipped policy as shipped, with only its selectors pointed at the simulator's pod
    labels. ``k`` other than the file's draft length serves the draft-length tuner's extra
    case (run only when named), never the suite."""
    data = yaml.safe_load((POLICIES_DIR / name).read_text(encoding="utf-8"))
    spec = config.parse(data, where=name).spec
    slices = [
        s.model_copy(
            update={
                "canary": config.PodSelector(match_labels={"slice": "chat", "role": "canary"}),
                "baseline": config.PodSelector(match_labels={"slice": "chat", "role": "baseline"}),
            }
        )
        for s in spec.slices
    ]
    update: dict[str, Any] = {"slices": slices}
    if k is not None and k != spec.speculative_config.get("num_speculative_tokens"):
        update["speculative_config"] = {**spec.speculative_config, "num_speculative_tokens": k}
    return spec.model_copy(update=update)


def canary_alpha(obs: Observation) -> float:
    """accepted / drafted over the canary pods in the window (NaN without drafts)."""
    acc = drafted = 0.0
    for p in obs.pools:
        if p.role.value == "canary":
            for s in p.acceptance:
                acc += s.accepted_tokens
                drafted += s.draft_tokens
    return acc / drafted if drafted > 0 else math.nan


class Alphagate:
    """alphagate's decision core, driven as the reconciler drives it."""

    def __init__(self, name: str, spec: SpeculativeCanarySpec, *, final: bool = False) -> None:
        self.name = name
        self.spec = spec
        # A rollback is final (alphagate-one-shot): no early re-probe either, so the policy
        # sees no traffic shape (the cooldown is set beyond the run by the caller).
        self.final = final
        self.interval = spec.timing.interval_seconds
        self.memory = Memory()
        self.source = RecordingSource()
        self.intervals: list[IntervalRecord] = []
        self.verdicts: dict[str, int] = {}
        # (t, verdict, tail) of the latency check at every decision that judged it; tail is
        # what its quantile part showed of "within" (core.resolution.TailWithin) or "none"
        self.latency: list[tuple[float, str, str]] = []
        self.no_interval = 0  # decisions with no finite combined interval (no data at all)
        self.k_changes: list[tuple[float, str, int]] = []  # (t, cause, new K)

    def decide(self, ctx: Ctx) -> Want:
        spec = self.spec
        start, end = window.read_window(spec, ctx.rollout, ctx.now, memory=self.memory)
        self.source.feed(ctx.snap.pods, ctx.now)
        obs = self.source.observe(spec, start=start, end=end, interval_seconds=self.interval)
        if self.final:
            pools = tuple(replace(p, output_lengths=None) for p in obs.pools)
            obs = replace(obs, pools=pools)
        ev = evaluate(spec, obs, self.memory, ctx.rollout, now=ctx.now)
        k: int | None = None
        if spec.draft_length.tuning.enabled:  # the reconciler's order: machine, then the tuner
            ran = tuning.current_k(spec, self.memory)
            ins = analyse(spec, obs, estimates=ev.estimates, combined=ev.combined, k=ran)
            tuned = tuning.retune(
                spec, ev, ins.draft, now=ctx.now, rollout=ctx.rollout, window_start=start
            )
            ev = dataclasses.replace(ev, memory=tuned.memory)
            k = tuned.k
            if tuned.change is not None:
                self.k_changes.append((ctx.t, tuned.change.cause.value, tuned.change.to_k))
        self.memory = ev.memory
        self.verdicts[ev.verdict.value] = self.verdicts.get(ev.verdict.value, 0) + 1
        decisive = any(
            c.kind is CheckKind.ACCEPTANCE and c.verdict in (Verdict.PASS, Verdict.FAIL)
            for c in ev.checks
        )
        for c in ev.checks:
            if c.kind is CheckKind.LATENCY:
                tail = c.evidence.tail if isinstance(c.evidence, LatencyEvidence) else None
                shown = tail.within.value if tail is not None else "none"
                self.latency.append((ctx.t, c.verdict.value, shown))
                break
        e = ev.combined
        if e is None or not (math.isfinite(e.lower) and math.isfinite(e.upper)):
            self.no_interval += 1
        else:
            self.intervals.append(
                IntervalRecord(
                    ctx.t,
                    e.lower,
                    e.upper,
                    ctx.t - (end - start),
                    e.batches,
                    e.conclusive,
                    decisive,
                )
            )
        return Want(ev.target_speculation_on, k=k)

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdicts": dict(self.verdicts),
            "latency": list(self.latency),
            "no_interval": self.no_interval,
        }
        if self.spec.draft_length.tuning.enabled:
            out["k_changes"] = list(self.k_changes)
        return out


@dataclass
class Oracle:
    """Knows the true alpha and whether a latency regression is on; flips at once."""

    name: str = "oracle"
    interval: float = 30.0
    notes: list[str] = field(default_factory=list)

    def decide(self, ctx: Ctx) -> Want:
        return Want(ctx.should_on)
