"""Reports for people: a Markdown summary and a PNG timeline of alpha, state and latency.

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

from alphagate.core.model import (
    Action,
    Cause,
    CheckKind,
    Evaluation,
    LatencyEvidence,
    State,
    Verdict,
)
from alphagate.errors import AlphagateError

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
    # Per slice (check suffix; "" with one slice): (canary, baseline) latency quantile, seconds.
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    failing: tuple[str, ...] = ()  # names of the checks that failed in this evaluation
    failing_kinds: tuple[CheckKind, ...] = ()  # their kinds (what code branches on)
    cause: Cause | None = None  # the transition's cause, when the state changed
    latency_quantile: float = math.nan  # the quantile the latency guard compares (0.99: P99)


def quantile_name(q: float) -> str:
    """ "P99" for 0.99; "quantile" when unknown (labels say what the guard compared)."""
    return f"P{q * 100:g}" if math.isfinite(q) else "quantile"


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
    quantile = math.nan
    latency: dict[str, tuple[float, float]] = {}
    for check in evaluation.checks:
        ev = check.evidence
        if isinstance(ev, LatencyEvidence):
            cp = ev.canary.quantile_seconds if ev.canary is not None else math.nan
            bp = ev.baseline.quantile_seconds if ev.baseline is not None else math.nan
            if not (math.isnan(cp) and math.isnan(bp)):
                latency[check.slice or ""] = (cp, bp)
            if not math.isnan(cp) and (math.isnan(canary_p99) or cp > canary_p99):
                canary_p99, baseline_p99 = cp, bp
                metric = ev.metric.value
                quantile = ev.quantile
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
        latency=latency,
        failing=tuple(c.name for c in evaluation.checks if c.verdict is Verdict.FAIL),
        failing_kinds=tuple(c.kind for c in evaluation.checks if c.verdict is Verdict.FAIL),
        cause=tr.cause if tr is not None else None,
        latency_quantile=quantile,
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


def _flip_label(p: Point) -> str:
    """A short label for a transition on the timeline."""
    if p.action == Action.ENABLE:
        return "re-probe (early)" if p.cause is Cause.EARLY_REPROBE else "enable"
    if p.action == Action.DISABLE:
        kinds = set(p.failing_kinds)
        if kinds == {CheckKind.LATENCY}:
            return f"rollback: {quantile_name(p.latency_quantile)}"
        if kinds & {CheckKind.ACCEPTANCE, CheckKind.FLOOR}:
            return "rollback: alpha"
        return "rollback"
    return p.transition.split(" -> ")[-1]


def plot(
    points: Sequence[Point],
    path: Path,
    *,
    title: str,
    gate: tuple[float, float],
    spans: Sequence[tuple[float, float, str]] = (),
) -> Path:
    """Three stacked panels sharing time: alpha per slice with bounds and gate; state with
    each evaluation's verdict; P99 canary vs baseline per slice. `spans` (start, end, label)
    are shaded on every panel (e.g. faults injected on purpose)."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise AlphagateError(
            "charts need matplotlib, which this install lacks; "
            "install it with: pip install 'alphagate[plot]'"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_s, ax_p) = plt.subplots(
        3, 1, figsize=(12, 8.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3, 2]}
    )
    colors = {}
    slices = sorted(
        {name for p in points for name in p.alphas} | {name for p in points for name in p.latency}
    )
    for i, name in enumerate(slices):
        colors[name] = f"C{i}"
    ts = [p.t for p in points]
    nan = math.nan
    lowest = 1.0
    # NaN where a window had no estimate, so markers and bands break instead of bridging.
    for name in sorted({name for p in points for name in p.alphas}):
        v = [p.alphas[name].value if name in p.alphas else nan for p in points]
        lo = [p.alphas[name].lower if name in p.alphas else nan for p in points]
        hi = [p.alphas[name].upper if name in p.alphas else nan for p in points]
        ax_a.plot(ts, v, ".", ms=3, color=colors[name], label=f"alpha {name} (95% interval)")
        ax_a.fill_between(ts, lo, hi, color=colors[name], alpha=0.2, lw=0)
        lowest = min([lowest, *(x for x in v if not math.isnan(x))])
    comb = [p.combined.value if p.combined is not None else nan for p in points]
    if any(p.combined is not None for p in points):
        ax_a.plot(ts, comb, ".", ms=4, color="black", label="combined alpha")
    if any(not math.isnan(p.truth_alpha) for p in points):
        truth = [p.truth_alpha for p in points]
        ax_a.plot(ts, truth, color="grey", ls=":", lw=1.2, label="true alpha")
    ax_a.axhline(gate[0], color="red", ls="--", lw=1, label=f"disable below {gate[0]:.2f}")
    ax_a.axhline(gate[1], color="green", ls="--", lw=1, label=f"enable above {gate[1]:.2f}")
    ax_a.set_ylim(max(0.0, min(0.2, lowest - 0.1)), 1.0)
    ax_a.set_ylabel("acceptance alpha")
    ax_a.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, ncol=6, frameon=False)
    fig.suptitle(title)

    ax_s.step(
        [p.t for p in points],
        [STATE_LEVEL.get(State(p.state), 0) for p in points],
        where="post",
        color="C4",
        lw=1.8,
    )
    ax_s.set_yticks([0, 1, 2], ["off", "probing", "on"])
    ax_s.set_ylabel("state")
    marks = {"Error": ("x", "red"), "Inconclusive": ("|", "0.6")}
    for verdict, (marker, color) in marks.items():
        xs = [p.t for p in points if p.verdict == verdict]
        if xs:
            ax_s.plot(xs, [-0.45] * len(xs), marker, color=color, ms=5, ls="", label=verdict)
    if any(p.verdict in marks for p in points):
        ax_s.legend(
            loc="lower right",
            fontsize=6,
            ncol=2,
            title="evaluation verdicts",
            title_fontsize=6,
            framealpha=0.9,
        )
    for p in transitions(points):
        color = {Action.ENABLE: "green", Action.DISABLE: "red"}.get(Action(p.action), "grey")
        for ax in (ax_a, ax_s, ax_p):
            ax.axvline(p.t, color=color, lw=0.9 if color != "grey" else 0.5, alpha=0.6)
        if p.action in (Action.ENABLE, Action.DISABLE):
            ax_a.annotate(
                _flip_label(p),
                (p.t, 0.22),
                fontsize=7,
                rotation=90,
                color=color,
                va="bottom",
                ha="right",
            )
    ax_s.set_ylim(-0.7, 2.5)

    missing = (math.nan, math.nan)
    for name in sorted({name for p in points for name in p.latency}):
        c = colors.get(name, "C3")
        label = name or "canary"
        # NaN where a window had no latency data, so lines break instead of bridging gaps.
        cp = [p.latency.get(name, missing)[0] * 1e3 for p in points]
        bp = [p.latency.get(name, missing)[1] * 1e3 for p in points]
        ax_p.plot(ts, cp, color=c, lw=1.4, label=f"{label}: canary")
        ax_p.plot(ts, bp, color=c, lw=1.0, ls="--", label=f"{label}: baseline")
    metric = next((p.latency_metric for p in points if p.latency_metric), "")
    words = {
        "perToken": "per token",
        "perStepScaled": "per step, scaled",
        "perStepAbsolute": "per step",
    }
    q = quantile_name(next((p.latency_quantile for p in points if p.latency_metric), math.nan))
    ax_p.set_ylabel(f"{q} ms ({words.get(metric, metric)})" if metric else f"{q} ms")
    ax_p.set_xlabel("seconds since start")
    if any(p.latency for p in points):
        ax_p.legend(loc="upper right", fontsize=7, ncol=2, framealpha=0.9)
    for start, end, label in spans:
        for ax in (ax_a, ax_s, ax_p):
            ax.axvspan(start, max(end, start + 0.5), color="orange", alpha=0.15, lw=0)
        ax_a.annotate(
            label,
            (start, 0.99),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="darkorange",
            rotation=90,
            va="top",
            ha="left",
        )
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
    spans: Sequence[tuple[float, float, str]] = (),
) -> dict[str, Path]:
    """Write report.md, timeline.png and points.jsonl into `out_dir`; return their paths.
    `spans` (start, end, label) are shaded on the timeline."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = (
        plot(points, out_dir / "timeline.png", title=title, gate=gate, spans=spans)
        if points
        else None
    )
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
