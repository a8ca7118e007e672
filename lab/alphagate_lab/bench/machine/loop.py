"""Drive the decision core over one generated day: `evaluate` and the state machine exactly
as the reconciler calls them (`window.read_window` says what to read), on observations built
from `traffic.Day` counters, with no HTTP and no simulator.

A rollback is re-armed after `rearm_seconds` (the cooldown is cut short: the machine then
probes on its own, obeying its dwell and flip budget), so one day holds as many chances to
roll back falsely as speculation has time to run. Every judged transition is recorded with
the time speculation had run before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import window
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    AcceptanceSample,
    Action,
    Buckets,
    Cause,
    Estimate,
    Evaluation,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
)
from alphagate_lab.bench.machine.traffic import LENGTH_BOUNDS, Day

T0 = 1_700_000_000.0  # the day's first second (Unix): wall times in reasons stay readable
ROLLOUT_SECONDS = 60.0  # a restart of the canary pods (model load)
BOUNDS = (*LENGTH_BOUNDS, math.inf)


@dataclass
class Judged:
    """One evaluation's combined estimate, for shadow rules (`shadow.py`)."""

    at: float
    start: float
    estimate: Estimate | None


@dataclass
class Run:
    """What happened over one day."""

    rollbacks: list[float] = field(default_factory=list)  # times of policy rollbacks
    enables: list[float] = field(default_factory=list)  # times speculation was turned on
    detections: list[float] = field(default_factory=list)  # enable -> rollback, seconds
    speculating_seconds: float = 0.0  # canary pods running speculation, rollouts excluded
    verdicts: dict[str, int] = field(default_factory=dict)
    judged: list[Judged] = field(default_factory=list)
    causes: dict[str, int] = field(default_factory=dict)
    early: list[tuple[float, str]] = field(default_factory=list)  # (seconds, basis) re-probes
    confirmed: list[float] = field(default_factory=list)  # Probing -> On, seconds
    cooldowns: list[float] = field(default_factory=list)  # each rollback's cooldown, seconds


def _samples(
    d: Day, first: int, last: int, speculating: np.ndarray
) -> tuple[AcceptanceSample, ...]:
    out = []
    dt = d.interval_seconds
    for pod in range(d.drafts.shape[0]):
        for i in range(first, last):
            if not speculating[i]:
                continue
            steps = float(d.drafts[pod, i])
            out.append(
                AcceptanceSample(
                    drafts=steps,
                    draft_tokens=steps * d.k,
                    accepted_tokens=float(d.accepted[pod, i]),
                    pod=f"canary-{pod}",
                    start=T0 + i * dt,
                    end=T0 + (i + 1) * dt,
                )
            )
    return tuple(out)


def _lengths(d: Day, pool: int, first: int, last: int) -> Buckets:
    counts = d.lengths[pool, first:last].sum(axis=0)
    return Buckets(bounds=BOUNDS, counts=tuple(float(c) for c in np.cumsum(counts)))


def observe(d: Day, start: float, now: float, speculating: np.ndarray, pods: int) -> Observation:
    """The window [start, now] as a source reads it: per-pod per-interval increments of the
    canary's spec-decode counters (only where it speculated), output lengths of both pools."""
    dt = d.interval_seconds
    first = max(0, math.ceil((start - T0) / dt - 1e-9))
    last = round((now - T0) / dt)
    on = bool(speculating[max(0, last - 1)])
    canary = PoolObservation(
        "chat",
        Role.CANARY,
        acceptance=_samples(d, first, last, speculating),
        generation_tokens=float(d.generated[:, first:last].sum()),
        pods=pods,
        output_lengths=_lengths(d, 0, first, last),
        spec_series=on,
    )
    baseline = PoolObservation(
        "chat", Role.BASELINE, pods=3, output_lengths=_lengths(d, 1, first, last)
    )
    return Observation(at=now, window_seconds=now - start, pools=(canary, baseline))


def run_day(
    spec: SpeculativeCanarySpec,
    d: Day,
    *,
    start_on: bool,
    rearm_seconds: float | None = 600.0,
    keep_judged: bool = False,
) -> Run:
    """Evaluate every interval of the day; `start_on`: the canary speculates, confirmed, from
    the start (else it is created off and the machine probes it)."""
    dt = d.interval_seconds
    pods = int(d.drafts.shape[0])
    speculating = np.zeros(d.intervals, dtype=bool)
    template_on = start_on
    memory = Memory(state=State.ON, since=T0 - 3600.0) if start_on else Memory()
    flip_at: float | None = T0 - 3600.0 if start_on else None
    enabled_at = T0 if start_on else math.nan
    rolled_at = math.nan
    out = Run()
    first_tick = int(spec.timing.window_seconds // dt)
    for i in range(first_tick, d.intervals + 1):
        now = T0 + i * dt
        in_progress = flip_at is not None and now < flip_at + ROLLOUT_SECONDS - 1e-9
        if i >= 1:
            speculating[i - 1] = template_on and not (
                flip_at is not None and now - dt < flip_at + ROLLOUT_SECONDS - 1e-9
            )
        out.speculating_seconds += dt if speculating[i - 1] else 0.0
        rollout = (
            Rollout(in_progress=True, speculation_on=template_on)
            if in_progress
            else Rollout(
                completed_at=None if flip_at is None else flip_at + ROLLOUT_SECONDS,
                speculation_on=template_on,
            )
        )
        rearm = rearm_seconds is not None and now >= rolled_at + rearm_seconds - 1e-9
        if rearm and memory.state is State.ROLLED_BACK and memory.cooldown_until > now:
            memory = memory.model_copy(update={"cooldown_until": now})
        start, _ = window.read_window(spec, rollout, now, memory=memory)
        obs = observe(d, start, now, speculating, pods)
        ev: Evaluation = evaluate(spec, obs, memory, rollout, now=now)
        memory = ev.memory
        out.verdicts[ev.verdict.value] = out.verdicts.get(ev.verdict.value, 0) + 1
        if keep_judged and window.effective_state(memory) in window.JUDGING:
            out.judged.append(Judged(now, start, ev.combined))
        if ev.action in (Action.ENABLE, Action.DISABLE) and ev.transition is not None:
            cause = ev.transition.cause
            out.causes[cause.value] = out.causes.get(cause.value, 0) + 1
            if ev.action is Action.ENABLE:
                enabled_at = now
                out.enables.append(now - T0)
                if cause is Cause.EARLY_REPROBE:
                    out.early.append((now - T0, str(ev.transition.evidence.get("early_basis"))))
            elif cause is Cause.POLICY_FAIL:
                out.rollbacks.append(now - T0)
                out.detections.append(now - enabled_at)
                out.cooldowns.append(ev.memory.cooldown_until - now)
                rolled_at = now
        if ev.transition is not None and ev.transition.cause is Cause.POLICY_PASS:
            out.confirmed.append(now - T0)
        if ev.target_speculation_on != template_on:
            template_on = ev.target_speculation_on
            flip_at = now
    return out
