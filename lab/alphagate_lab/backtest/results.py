"""What a backtest found: the decisions of each unit with its truth and score, the recorded
events shown beside them, the notes, and the JSON the command writes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate_lab.backtest import truth as truth_mod
from alphagate_lab.report import Point


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    t: float
    kind: str
    message: str
    pod: str = ""


@dataclass
class UnitResult:
    name: str
    slices: tuple[str, ...]
    points: list[Point]
    truth: list[truth_mod.TruthSample]
    score: truth_mod.Score | None
    unspeculating: int = 0


@dataclass
class BacktestResult:
    """Everything a backtest found: decisions per unit, the truth and its score, and notes."""

    policy: str
    spec: SpeculativeCanarySpec
    source: dict[str, Any]
    start: float
    units: list[UnitResult]
    events: list[RecordedEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def has_truth(self) -> bool:
        return any(u.score is not None for u in self.units)

    @property
    def gate(self) -> tuple[float, float]:
        a = self.spec.acceptance
        return (a.disable_below, a.enable_above)

    def title(self, unit: UnitResult | None = None) -> str:
        what = self.source.get("scenario") or self.source.get("url") or "recorded metrics"
        unit_part = f" [slice {unit.name}]" if unit is not None and unit.name else ""
        return f"Backtest of {self.policy}{unit_part} on {what}"

    def to_json(self) -> dict[str, Any]:
        from alphagate_lab.report import summary

        units = []
        for u in self.units:
            s = summary(u.points, title=self.title(u))
            s["unit"] = u.name or "combined"
            s["slices"] = list(u.slices)
            if u.score is not None:
                s["truth"] = u.score.to_json()
            units.append(s)
        flips = sum(int(u["flips"]) for u in units)
        out: dict[str, Any] = {
            "policy": self.policy,
            "aggregation": self.spec.aggregation.value,
            "gate": {"disable_below": self.gate[0], "enable_above": self.gate[1]},
            "interval_seconds": self.spec.timing.interval_seconds,
            "window_seconds": self.spec.timing.window_seconds,
            "source": self.source,
            "start": self.start,
            "evaluations": sum(len(u.points) for u in self.units),
            "flips": flips,
            "units": units,
            "events": [dataclasses.asdict(e) for e in self.events],
            "notes": list(self.notes),
        }
        if self.has_truth:
            scores = [u.score for u in self.units if u.score is not None]
            delays = [d for s in scores for d in s.delays]
            out["detection_delays_seconds"] = delays
            out["false_flips"] = sum(len(s.false_flips) for s in scores)
            out["missed"] = sum(1 for s in scores for e in s.episodes if e.missed)
        return out
