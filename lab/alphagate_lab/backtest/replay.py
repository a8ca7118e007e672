"""One decision unit replayed through the core: which units a policy has (every slice
together for combined aggregation, each slice alone for perSlice), the replay's options, and
:class:`UnitReplay`, the unit's Memory, modelled rollouts and decisions evaluation by
evaluation. While the policy has speculation off, the canary's acceptance batches are hidden
from the core (a pod without ``--speculative-config`` exports no spec-decode series).
The drivers over a recording or a range are in ``engine``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from alphagate.config import Aggregation, SpeculativeCanarySpec
from alphagate.core import window
from alphagate.core.evaluate import evaluate
from alphagate.core.model import Evaluation, Memory, Observation, Role, Rollout, State
from alphagate_lab.backtest import truth as truth_mod
from alphagate_lab.report import Point
from alphagate_lab.report import point as report_point

EPS: Final = 1e-6
"""Slack for comparing recorded times (seconds)."""


@dataclass(frozen=True, slots=True)
class UnitDef:
    """Slices decided together: name "" and every slice (combined), or one slice (perSlice)."""

    name: str
    slices: tuple[str, ...]
    per_slice: bool


def units_of(spec: SpeculativeCanarySpec) -> list[UnitDef]:
    if spec.aggregation is Aggregation.PER_SLICE:
        return [UnitDef(s.name, (s.name,), True) for s in spec.slices]
    return [UnitDef("", tuple(s.name for s in spec.slices), False)]


def sub_spec(spec: SpeculativeCanarySpec, slices: Sequence[str]) -> SpeculativeCanarySpec:
    """The policy restricted to `slices`, so a source reads only that unit's pools."""
    if len(slices) == len(spec.slices):
        return spec
    keep = [s for s in spec.slices if s.name in slices]
    return spec.model_copy(update={"slices": keep})


@dataclass(frozen=True, slots=True)
class Options:
    """How the replay models what the recording cannot show."""

    initial_on: bool = False  # start as if the canary already ran speculation (On)
    rollout_seconds: float = 0.0  # a flip's rollout completes this long after the decision
    via_text: bool = False  # recordings: render and parse real /metrics text (slower, same)


def mask_acceptance(observation: Observation, slices: Sequence[str]) -> Observation:
    """Drop the canary acceptance batches of `slices`: what an off canary would export."""
    if not any(p.acceptance for p in observation.pools):
        return observation
    pools = tuple(
        dataclasses.replace(p, acceptance=(), spec_series=False, no_data=None)
        if p.role is Role.CANARY and p.slice in slices and p.acceptance
        else p
        for p in observation.pools
    )
    return dataclasses.replace(observation, pools=pools)


class UnitReplay:
    """One unit's Memory, its modelled rollouts and its decisions, evaluation by evaluation."""

    def __init__(
        self, spec: SpeculativeCanarySpec, unit: UnitDef, *, start: float, options: Options
    ) -> None:
        self.spec = spec
        self.unit = unit
        self.view = sub_spec(spec, unit.slices)
        self.start = start
        self.options = options
        self.speculation_on = options.initial_on
        self.memory = Memory(state=State.ON, since=start) if options.initial_on else Memory()
        self.flip_at: float | None = None
        self.points: list[Point] = []
        self.truth: list[truth_mod.TruthSample] = []
        self.evaluations = 0
        self.unspeculating = 0  # evaluations with speculation on but no canary drafts recorded

    def rollout(self, now: float) -> Rollout:
        if self.flip_at is None:
            return Rollout(speculation_on=self.speculation_on)
        done = self.flip_at + self.options.rollout_seconds
        if now < done - EPS:
            return Rollout(in_progress=True, speculation_on=self.speculation_on)
        return Rollout(completed_at=done, speculation_on=self.speculation_on)

    def step(
        self, observation: Observation, rollout: Rollout, now: float, truth_alpha: float
    ) -> Evaluation:
        if not rollout.speculation_on:
            observation = mask_acceptance(observation, self.unit.slices)
        elif not any(
            p.acceptance
            for p in observation.pools
            if p.role is Role.CANARY and p.slice in self.unit.slices
        ):
            self.unspeculating += 1
        evaluation = evaluate(
            self.spec,
            observation,
            self.memory,
            rollout,
            now=now,
            slices=self.unit.slices if self.unit.per_slice else None,
        )
        self.memory = evaluation.memory
        if evaluation.target_speculation_on != self.speculation_on:
            self.speculation_on = evaluation.target_speculation_on
            self.flip_at = now
        self.points.append(report_point(evaluation, start=self.start, truth_alpha=truth_alpha))
        self.evaluations += 1
        return evaluation


def read_window(
    spec: SpeculativeCanarySpec,
    replays: Sequence[UnitReplay],
    rollouts: Sequence[Rollout],
    now: float,
) -> tuple[float, float]:
    """The window every unit reads now: the live reconciler's one query for all units."""
    units = [(r.memory, ro) for r, ro in zip(replays, rollouts, strict=True)]
    return window.shared_window(spec, units, now)
