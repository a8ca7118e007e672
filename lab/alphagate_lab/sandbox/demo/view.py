"""What the demo shows and returns: log lines, decisions (one per evaluation), the live view's
snapshot, the options and the result, and the few readings of an Evaluation the view needs
(from its typed checks, never from reason text)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alphagate.core.model import CheckKind, CheckResult, Evaluation, LatencyEvidence, Verdict
from alphagate_lab import report
from alphagate_lab.sandbox.demo.inputs import DEFAULT_OUT, NAMESPACE, SourceChoice


@dataclass(frozen=True)
class LogLine:
    t: float  # scenario seconds
    source: str  # scenario, controller, kubelet, event, chaos, demo
    text: str
    style: str = ""


@dataclass(frozen=True)
class Decision:
    """One evaluation as the demo saw it (from the reconciler's Outcome)."""

    t: float
    point: report.Point
    evaluation: Evaluation | None
    error: str = ""  # the evaluation could not happen (API) or the decision was not applied
    applied: bool = False


@dataclass
class Snapshot:
    """Everything the live view renders (a copy, safe to read from another thread)."""

    scenario: str
    t: float
    duration: float
    speed: float
    source: str
    gate: tuple[float, float]
    last: Decision | None
    last_transition: Decision | None
    state: str
    speculation_on: bool | None
    log: list[LogLine]
    truth: dict[str, dict[str, float]]
    pods: dict[str, dict[str, Any]]
    chaos_active: list[str]
    last_alpha: dict[str, float]
    finished: bool = False


@dataclass
class DemoOptions:
    scenario: Path | None = None
    policy: Path | None = None
    duration: float | None = None  # scenario seconds; default: the scenario's
    speed: float = 1.5
    source: SourceChoice = "auto"
    chaos: bool = False
    out: Path = DEFAULT_OUT
    seed: int | None = None
    namespace: str = NAMESPACE
    log_file: Path | None = None  # controller logs (structlog + logging); None: leave as is
    prometheus_timeout: float = 60.0


@dataclass
class DemoResult:
    scenario: str
    source: str
    speed: float
    sim_seconds: float
    wall_seconds: float
    decisions: list[Decision]
    transitions: list[dict[str, Any]]
    chaos: list[dict[str, Any]]
    paths: dict[str, Path]
    interrupted: bool
    milestones: dict[str, bool]
    notes: list[str]
    endpoints: dict[str, str]

    def summary(self) -> dict[str, Any]:
        """The `--json` output."""
        points = [d.point for d in self.decisions]
        base = report.summary(points, title=f"alphagate demo: {self.scenario}")
        return {
            "scenario": self.scenario,
            "source": self.source,
            "speed": self.speed,
            "scenario_seconds": round(self.sim_seconds, 1),
            "wall_seconds": round(self.wall_seconds, 1),
            "interrupted": self.interrupted,
            "evaluations": base["evaluations"],
            "errors": sum(1 for d in self.decisions if d.point.verdict == Verdict.ERROR.value),
            "flips": base["flips"],
            "seconds_in_state": {k: round(v, 1) for k, v in base["seconds_in_state"].items()},
            "transitions": self.transitions,
            "milestones": self.milestones,
            "chaos": self.chaos,
            "notes": self.notes,
            "endpoints": self.endpoints,
            "report": {k: str(v) for k, v in self.paths.items()},
        }


def failing_checks(evaluation: Evaluation | None) -> list[CheckResult]:
    if evaluation is None:
        return []
    return [c for c in evaluation.checks if c.verdict is Verdict.FAIL]


def cause_of(checks: Sequence[CheckResult]) -> str:
    """ "latency", "acceptance" (floor included) or "" for a disable's failing checks."""
    kinds = {c.kind for c in checks}
    if kinds and kinds <= {CheckKind.LATENCY}:
        return "latency"
    if kinds & {CheckKind.ACCEPTANCE, CheckKind.FLOOR}:
        return "acceptance"
    return ""


def why_text(evaluation: Evaluation | None) -> str:
    """The failing (or, failing that, erroring/inconclusive) checks' own sentences."""
    if evaluation is None:
        return ""
    for verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.INCONCLUSIVE):
        hits = [c for c in evaluation.checks if c.verdict is verdict]
        if hits:
            return "; ".join(f"{c.name}: {c.reason}" for c in hits)
    return ""


def latency_by_slice(evaluation: Evaluation | None) -> dict[str, dict[str, Any]]:
    """slice -> {canary, baseline (seconds), verdict, metric} from the latency checks."""
    out: dict[str, dict[str, Any]] = {}
    if evaluation is None:
        return out
    for c in evaluation.checks:
        ev = c.evidence
        if not isinstance(ev, LatencyEvidence):
            continue
        out[c.slice or ""] = {
            "canary": ev.canary.quantile_seconds if ev.canary is not None else math.nan,
            "baseline": ev.baseline.quantile_seconds if ev.baseline is not None else math.nan,
            "verdict": c.verdict.value,
            "metric": ev.metric.value,
        }
    return out
