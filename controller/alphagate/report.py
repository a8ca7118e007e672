"""Reports for people: a Markdown summary and a PNG timeline of alpha, state and P99.

Shared by `demo` and `backtest` so both tell a run's story the same way. Input is a list of
`Point`s (one per evaluation) built from core Evaluations; this module only renders.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alphagate.core.model import Action, Evaluation, State

STATE_LEVEL = {
    State.OFF: 0,
    State.ROLLED_BACK: 0,
    State.PAUSED: 0.5,
    State.PROBING: 1,
    State.ON: 2,
    State.PROMOTED: 2,
}


@dataclass(frozen=True)
class SliceAlpha:
    value: float
    lower: float
    upper: float
    drafts: float
    weight: float


@dataclass(frozen=True)
class Point:
    """One evaluation, flattened for plotting and tables. `t` is seconds since the run began."""

    t: float
    at: float
    state: str
    action: str
    reason: str
    verdict: str
    speculation_on: bool
    alphas: dict[str, SliceAlpha] = field(default_factory=dict)
    combined: SliceAlpha | None = None
    canary_p99: float = math.nan
    baseline_p99: float = math.nan
    latency_metric: str = ""
    transition: str = ""  # "Off -> Probing" when the state changed
    truth_alpha: float = math.nan  # from a simulator recording, when known


def _num(evidence: dict[str, float | str], *keys: str) -> float:
    for key in keys:
        value = evidence.get(key)
        if isinstance(value, int | float):
            return float(value)
    return math.nan


def point(evaluation: Evaluation, *, start: float, truth_alpha: float = math.nan) -> Point:
    """Flatten one Evaluation; latency evidence is taken from the worst latency check."""
    alphas = {
        name: SliceAlpha(e.value, e.lower, e.upper, e.drafts, evaluation.weights.get(name, 0.0))
        for name, e in evaluation.estimates.items()
    }
    combined = None
    if evaluation.combined is not None:
        c = evaluation.combined
        combined = SliceAlpha(c.value, c.lower, c.upper, c.drafts, 1.0)
    canary_p99 = baseline_p99 = math.nan
    metric = ""
    for check in evaluation.checks:
        if check.check.startswith("latency"):
            cp = _num(check.evidence, "canary_p99", "canary_quantile", "canary_p99_seconds")
            bp = _num(check.evidence, "baseline_p99", "baseline_quantile", "baseline_p99_seconds")
            if not math.isnan(cp) and (math.isnan(canary_p99) or cp > canary_p99):
                canary_p99, baseline_p99 = cp, bp
                metric = str(check.evidence.get("metric", ""))
    tr = evaluation.transition
    return Point(
        t=evaluation.at - start,
        at=evaluation.at,
        state=str(evaluation.memory.state),
        action=str(evaluation.action),
        reason=evaluation.reason,
        verdict=str(evaluation.verdict),
        speculation_on=evaluation.target_speculation_on,
        alphas=alphas,
        combined=combined,
        canary_p99=canary_p99,
        baseline_p99=baseline_p99,
        latency_metric=metric,
        transition=f"{tr.from_state} -> {tr.to_state}" if tr is not None else "",
        truth_alpha=truth_alpha,
    )


def transitions(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if p.transition]


def summary(points: Sequence[Point], *, title: str) -> dict[str, Any]:
    """Machine-readable run summary (the `--json` output of demo and backtest)."""
    seconds_in: dict[str, float] = {}
    for a, b in itertools.pairwise(points):
        seconds_in[a.state] = seconds_in.get(a.state, 0.0) + b.t - a.t
    flips = [p for p in points if p.action in (Action.ENABLE, Action.DISABLE)]
    return {
        "title": title,
        "evaluations": len(points),
        "duration_seconds": points[-1].t - points[0].t if points else 0.0,
        "flips": len(flips),
        "seconds_in_state": dict(seconds_in),
        "transitions": [
            {"t": round(p.t, 1), "transition": p.transition, "action": p.action, "reason": p.reason}
            for p in transitions(points)
        ],
    }


def plot(points: Sequence[Point], path: Path, *, title: str, gate: tuple[float, float]) -> Path:
    """Three stacked panels sharing time: alpha per slice with bounds and gate; state; P99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_s, ax_p) = plt.subplots(
        3, 1, figsize=(11, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1, 2]}
    )
    ts = [p.t for p in points]
    slices = sorted({name for p in points for name in p.alphas})
    for name in slices:
        xs = [p.t for p in points if name in p.alphas]
        v = [p.alphas[name].value for p in points if name in p.alphas]
        lo = [p.alphas[name].lower for p in points if name in p.alphas]
        hi = [p.alphas[name].upper for p in points if name in p.alphas]
        (line,) = ax_a.plot(xs, v, marker=".", ms=3, lw=1.2, label=f"alpha {name}")
        ax_a.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
    comb = [(p.t, p.combined.value) for p in points if p.combined is not None]
    if comb:
        ax_a.plot(*zip(*comb, strict=True), color="black", lw=1.6, label="combined alpha")
    truth = [(p.t, p.truth_alpha) for p in points if not math.isnan(p.truth_alpha)]
    if truth:
        ax_a.plot(*zip(*truth, strict=True), color="grey", ls=":", lw=1.2, label="true alpha")
    ax_a.axhline(gate[0], color="red", ls="--", lw=1, label=f"disable below {gate[0]:.2f}")
    ax_a.axhline(gate[1], color="green", ls="--", lw=1, label=f"enable above {gate[1]:.2f}")
    ax_a.set_ylim(0, 1)
    ax_a.set_ylabel("acceptance alpha")
    ax_a.legend(loc="lower left", fontsize=7, ncol=3)
    ax_a.set_title(title)

    ax_s.step(ts, [STATE_LEVEL.get(State(p.state), 0) for p in points], where="post", color="C4")
    ax_s.set_yticks([0, 1, 2], ["off", "probing", "on"])
    ax_s.set_ylabel("state")
    for p in transitions(points):
        for ax in (ax_a, ax_s, ax_p):
            ax.axvline(p.t, color="grey", lw=0.6, alpha=0.6)
        ax_s.annotate(
            p.transition.replace(" -> ", "→"), (p.t, 2.05), fontsize=6, rotation=20, va="bottom"
        )
    ax_s.set_ylim(-0.3, 2.8)

    cp = [(p.t, p.canary_p99 * 1e3) for p in points if not math.isnan(p.canary_p99)]
    bp = [(p.t, p.baseline_p99 * 1e3) for p in points if not math.isnan(p.baseline_p99)]
    if cp:
        ax_p.plot(*zip(*cp, strict=True), color="C3", label="canary P99")
    if bp:
        ax_p.plot(*zip(*bp, strict=True), color="C0", label="baseline P99")
    metric = next((p.latency_metric for p in points if p.latency_metric), "")
    ax_p.set_ylabel(f"P99 ms {metric}".strip())
    ax_p.set_xlabel("seconds since start")
    if cp or bp:
        ax_p.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(
    points: Sequence[Point], *, title: str, picture: str | None, notes: Sequence[str] = ()
) -> str:
    """A short report: what happened, when, and why, with the evidence at each transition."""
    s = summary(points, title=title)
    out = [f"# {title}", ""]
    out.append(
        f"{s['evaluations']} evaluations over {s['duration_seconds']:.0f} s; "
        f"{s['flips']} flips of the speculative config."
    )
    out.append("")
    if picture:
        out += [f"![timeline]({picture})", ""]
    out += ["## Transitions", "", "| t (s) | transition | action | reason |", "|---|---|---|---|"]
    for p in transitions(points):
        reason = p.reason.replace("|", "\\|")
        out.append(f"| {p.t:.0f} | {p.transition} | {p.action} | {reason} |")
    if not transitions(points):
        out.append("| – | none | – | – |")
    out += ["", "## Time in each state", ""]
    for state, secs in sorted(s["seconds_in_state"].items()):
        out.append(f"- {state}: {secs:.0f} s")
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    out.append("")
    return "\n".join(out)


def write(
    points: Sequence[Point],
    out_dir: Path,
    *,
    title: str,
    gate: tuple[float, float],
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Write report.md, timeline.png and points.jsonl into `out_dir`; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot(points, out_dir / "timeline.png", title=title, gate=gate) if points else None
    md = out_dir / "report.md"
    md.write_text(markdown(points, title=title, picture=png.name if png else None, notes=notes))
    jl = out_dir / "points.jsonl"
    with jl.open("w") as fh:
        for p in points:
            fh.write(json.dumps(asdict(p), default=str) + "\n")
    paths = {"markdown": md, "points": jl}
    if png:
        paths["png"] = png
    return paths
