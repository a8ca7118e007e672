"""One pass of the controller as the demo hears it: the reconciler's Outcome turned into a
`Decision` (the report's point, with the simulator's true alpha beside the estimate) and the
line the log shows for it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alphagate.core.model import Action, Evaluation, Verdict
from alphagate_lab import report
from alphagate_lab.sandbox.demo.view import Decision, cause_of, failing_checks


@dataclass(frozen=True, slots=True)
class Heard:
    """A Decision and what it says of the canary now (unchanged when nothing was evaluated)."""

    decision: Decision
    state: str
    speculation_on: bool | None
    last_alpha: dict[str, float] | None  # None: not evaluated, keep the last known


def true_alpha(evaluation: Evaluation, truth: Mapping[str, Mapping[str, float]]) -> float:
    """The simulator's alpha pooled as the combined estimate pools the slices (NaN if unknown):
    each slice's set alpha weighted by its share of the drafted tokens, from its traffic share
    and the K / (1 + K alpha) tokens it drafts per token generated at that alpha
    (`acceptance.combine`), so the line is what the estimate estimates. Weighted by traffic
    alone it sat 0.03-0.06 above the estimate: the code slice drafts more per token."""
    if not truth or evaluation.combined is None:
        return math.nan
    drafted: dict[str, float] = {}
    for name, share in evaluation.weights.items():
        e = evaluation.estimates.get(name)
        if name not in truth or e is None or not (share > 0 and e.drafts > 0):
            continue
        k = e.draft_tokens / e.drafts  # tokens a draft proposes: counted, not estimated
        drafted[name] = share * k / (1.0 + k * truth[name]["alpha"])
    total = math.fsum(drafted.values())
    if not total > 0:
        return math.nan
    return math.fsum(truth[n]["alpha"] * d for n, d in drafted.items()) / total


def hear(
    out: Any,
    *,
    t: float,
    wall: float,
    t0_wall: float,
    truth: Mapping[str, Mapping[str, float]],
    state: str,
    speculation_on: bool | None,
) -> Heard:
    """The Outcome of one reconcile (its first unit) at scenario second `t`; `state` and
    `speculation_on` are what was known before it."""
    unit = out.units[0] if out.units else None
    evaluation: Evaluation | None = unit.evaluation if unit is not None else None
    error = ""
    if out.spec_error:
        error = out.spec_error
    elif unit is not None and unit.error is not None:
        error = f"not applied: {unit.error}"
    last_alpha: dict[str, float] | None = None
    if evaluation is not None:
        point = report.point(evaluation, start=t0_wall, truth_alpha=true_alpha(evaluation, truth))
        point = dataclasses.replace(point, t=t)
        if error and unit is not None and unit.error is not None:
            point = dataclasses.replace(point, reason=f"{point.reason} — {error}")
        memory = unit.memory if unit is not None and unit.memory is not None else None
        state = (memory or evaluation.memory).state.value
        speculation_on = unit.speculation_on if unit is not None else None
        last_alpha = dict((memory or evaluation.memory).last_alpha)
    else:
        point = report.Point(
            t=t,
            at=wall,
            state=state,
            action=Action.HOLD.value,
            reason=f"not evaluated: {error}" if error else "not evaluated",
            verdict=Verdict.ERROR.value,
            speculation_on=bool(speculation_on),
        )
    decision = Decision(
        t=t,
        point=point,
        evaluation=evaluation,
        error=error,
        applied=bool(unit and unit.applied),
    )
    return Heard(decision, state, speculation_on, last_alpha)


def log_line(decision: Decision) -> tuple[str, str] | None:
    """(text, style) of the controller's line in the log: a transition, or an error; else None."""
    point = decision.point
    if point.transition:
        why = ""
        if point.action == Action.DISABLE.value:
            why = f" [{cause_of(failing_checks(decision.evaluation)) or 'see checks'}]"
        style = (
            "bold green"
            if point.action == Action.ENABLE.value
            else "bold red"
            if point.action == Action.DISABLE.value
            else "bold"
        )
        return f"{point.transition}: {point.action}{why} — {point.reason}", style
    if decision.error:
        return f"{point.verdict}: {decision.error[:200]}", "red"
    return None
