"""What the demo's run amounts to: its transitions, the story's milestones, how each fault
showed, and the report's notes; read from the decisions' typed fields."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from alphagate.core.model import Action, Cause
from alphagate_lab.sandbox.demo.chaos import ChaosRecord, fault_end
from alphagate_lab.sandbox.demo.view import Decision, LogLine, cause_of, failing_checks, why_text


def transitions(decisions: Sequence[Decision]) -> list[dict[str, Any]]:
    """Every transition the demo saw, with the kinds and slices of its failing checks."""
    out = []
    for d in decisions:
        p = d.point
        if not p.transition:
            continue
        checks = failing_checks(d.evaluation)
        entry: dict[str, Any] = {
            "t": round(p.t, 1),
            "transition": p.transition,
            "from": p.transition.split(" -> ")[0],
            "to": p.transition.split(" -> ")[-1],
            "action": p.action,
            "reason": p.reason,
            "failing_checks": [c.name for c in checks],
            "failing": [{"kind": c.kind.value, "slice": c.slice} for c in checks],
            "transition_cause": p.cause.value if p.cause is not None else None,
        }
        if p.action == Action.DISABLE.value:
            entry["cause"] = cause_of(checks)
        if p.action == Action.ENABLE.value:
            entry["early_reprobe"] = p.cause is Cause.EARLY_REPROBE
        out.append(entry)
    return out


def milestones(transitions: Sequence[dict[str, Any]]) -> dict[str, bool]:
    """The default story's beats, in order: enabled, rolled back on P99, re-enabled,
    rolled back on alpha, re-enabled by an early re-probe."""
    want: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
        ("enabled", lambda e: e["action"] == "enable"),
        ("rolled_back_on_p99", lambda e: e.get("cause") == "latency"),
        ("re_enabled", lambda e: e["action"] == "enable"),
        ("rolled_back_on_alpha", lambda e: e.get("cause") == "acceptance"),
        ("early_reprobe", lambda e: e["action"] == "enable" and bool(e.get("early_reprobe"))),
    ]
    found = dict.fromkeys((k for k, _ in want), False)
    i = 0
    for entry in transitions:
        if i < len(want) and want[i][1](entry):
            found[want[i][0]] = True
            i += 1
    return found


def chaos_report(
    records: Sequence[ChaosRecord], decisions: Sequence[Decision], interval: float
) -> list[dict[str, Any]]:
    """Per fault: when it ran, the evaluations during it (and one interval after), their
    verdicts, flips (there should be none) and how the view showed it."""
    out = []
    for rec in records:
        if rec.started is None:
            out.append({"kind": rec.step.kind, "what": rec.step.what, "ran": False})
            continue
        end = fault_end(rec)
        # Evaluations during the fault (and one interval after, while data recovers).
        inside = [d for d in decisions if rec.started <= d.t <= end + interval]
        verdicts: dict[str, int] = {}
        for d in inside:
            verdicts[d.point.verdict] = verdicts.get(d.point.verdict, 0) + 1
        flips = [
            d.point.action
            for d in inside
            if d.point.action in (Action.ENABLE.value, Action.DISABLE.value)
        ]
        shown = [d for d in inside if d.point.verdict in ("Error", "Inconclusive")]
        # The evaluation that shows this fault best: one naming it, if any does.
        mark = {"prometheus": "unreachable", "apiserver": "HTTP 500", "pod": "rollout"}
        naming = [d for d in shown if mark[rec.step.kind] in shown_as(d)]
        shown = naming or shown
        out.append(
            {
                "kind": rec.step.kind,
                "what": rec.step.what,
                "ran": True,
                "start": round(rec.started, 1),
                "end": round(end, 1),
                "detail": rec.detail,
                "evaluations": len(inside),
                "verdicts": verdicts,
                "flips": len(flips),
                "example": shown_as(shown[0]) if shown else "",
            }
        )
    return out


def shown_as(d: Decision) -> str:
    """How the view showed one evaluation: verdict, decision and the checks behind it."""
    why = why_text(d.evaluation) or d.error
    text = f"{d.point.verdict}: {d.point.reason}"
    if why and why not in text:
        text += f" ({why})"
    return text[:400]


def notes(
    header: str, log: Sequence[LogLine], chaos: Sequence[dict[str, Any]], extra: Sequence[str]
) -> list[str]:
    """The report's notes: the header, the scenario's own lines, each fault, then `extra`."""
    notes = [header]
    for line in log:
        if line.source == "scenario":
            notes.append(f"t={line.t:.0f} s scenario: {line.text}")
    for c in chaos:
        if not c["ran"]:
            notes.append(f"chaos {c['what']}: not reached before the end")
            continue
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(c["verdicts"].items())) or "none"
        flip = "no flip" if c["flips"] == 0 else f"{c['flips']} FLIPS"
        notes.append(
            f"chaos t={c['start']:.0f}-{c['end']:.0f} s: {c['what']} ({c['detail']}); "
            f"{c['evaluations']} evaluations: {verdicts}; {flip}."
            + (f" Shown as: {c['example']}" if c["example"] else "")
        )
    notes.extend(extra)
    return notes


def spans(records: Sequence[ChaosRecord]) -> list[tuple[float, float, str]]:
    """(start, end, what) of every fault that ran, for the timeline."""
    return [(r.started, fault_end(r), r.step.what) for r in records if r.started is not None]
