"""The benchmark's outputs: a Markdown table, the same numbers as JSON, and one PNG.

The PNG is meant to be read at a glance: left, each policy's regret (tokens lost against the
oracle, % over the suite) against its false flips per simulated day (down and left is better);
right, each policy's detection delays over every onset of the suite, with the misses counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from alphagate.errors import AlphagateError
from alphagate_lab.bench.decisions import anchors, score, suite

COLUMNS: tuple[tuple[str, str], ...] = (
    ("false_flips_per_day", "false flips/d"),
    ("false_rollbacks_per_day", "false rollbacks/d"),
    ("flips_per_day", "rollouts/d"),
    ("restarts_per_day", "pod restarts/d"),
    ("delay_median_s", "delay s (median)"),
    ("delay_drafts_median", "drafts to detect"),
    ("caught_within_3_windows", "caught <= 15 min"),
    ("missed", "missed/onsets"),
    ("wrong_state_pct", "wrong state %"),
    ("regret_pct", "regret %"),
)


def _fmt(key: str, value: Any, cell: dict[str, Any]) -> str:
    if key == "missed":
        return f"{cell['missed']}/{cell['onsets']}" if cell["onsets"] else "-"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == "caught_within_3_windows":
        return f"{100 * value:.0f}%"
    if key == "delay_drafts_median":
        return f"{value / 1e3:.0f}k" if value >= 1e3 else f"{value:.0f}"
    if key == "delay_median_s":
        return f"{value:.0f}"
    if key in ("wrong_state_pct", "regret_pct"):
        return f"{value:.1f}"
    return f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


REGRET_POLICIES: Final = ("alphagate", "alphagate-one-shot", "kayenta")
"""Whose regret the table breaks down (alphagate's two variants and the best anchor)."""


def hours_text(case_hours: dict[str, float]) -> str:
    """ "1 h per run (24 h: stationary-0.45, drift)": the simulated time each scenario ran."""
    by: dict[float, list[str]] = {}
    for case, h in case_hours.items():
        by.setdefault(h, []).append(case)
    if not by:
        return "no runs"
    common = max(by, key=lambda h: len(by[h]))
    rest = "; ".join(f"{h:g} h: {', '.join(cs)}" for h, cs in sorted(by.items()) if h != common)
    return f"{common:g} simulated h per run" + (f" ({rest})" if rest else "")


def _hours(meta: dict[str, Any]) -> str:
    case_hours = meta.get("case_hours")
    if isinstance(case_hours, dict) and case_hours:
        return hours_text(case_hours)
    return f"{meta['hours']:g} simulated h per run"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _cell(agg: dict[str, Any], case: str, policy: str = "alphagate") -> dict[str, Any] | None:
    return next((c for c in agg["cells"] if c["case"] == case and c["policy"] == policy), None)


def targets(agg: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Issue 12's targets for alphagate: (target, measured, met); met is None when the run
    did not include what the target needs."""
    rows: list[tuple[str, str, bool | None]] = []
    cov = [
        (c["case"], c["coverage"])
        for c in agg["cells"]
        if c["policy"] == "alphagate" and c["coverage"] is not None
    ]
    if cov:
        lo, hi = min(v for _, v in cov), max(v for _, v in cov)
        rows.append(
            (
                "95% interval covers 93-97% in every scenario",
                f"{100 * lo:.1f}-{100 * hi:.1f}%",
                lo >= 0.93 and hi <= 0.97,
            )
        )
    for case in ("stationary-0.62", "stationary-0.575", "long-outputs", "stalls"):
        c = _cell(agg, case)
        if c is not None:
            v = c["false_rollbacks_per_day"]
            rows.append((f"0 false rollbacks/day, {case}", f"{v:.2f}", v == 0))
    c = _cell(agg, "stationary-0.45")
    if c is not None:
        rows.append(
            (
                "stationary 0.45: pod restarts <= 4/day",
                f"{c['restarts_per_day']:.1f} pod restarts ({c['flips_per_day']:.1f} rollouts)"
                f" per day over {c['days']:.0f} simulated days",
                c["restarts_per_day"] <= 4,
            )
        )
    c = _cell(agg, "drift")
    if c is not None:
        rows.append(
            (
                "slow drift: <= 2 flips/day",
                f"{c['flips_per_day']:.1f} over {c['days']:.0f} simulated days",
                c["flips_per_day"] <= 2,
            )
        )
    for case, need in (("latency-1.5x", 0.95), ("latency-2x", 0.99)):
        c = _cell(agg, case)
        if c is not None and c["caught_within_3_windows"] is not None:
            v = c["caught_within_3_windows"]
            rows.append(
                (
                    f"{case}: caught within 3 windows in >= {100 * need:.0f}% of runs",
                    f"{100 * v:.0f}%",
                    v >= need,
                )
            )
    ours = next((s for s in agg["summary"] if s["policy"] == "alphagate"), None)
    others = [  # the anchors: alphagate's own variants (one-shot) are not "other"
        s["regret_pct"]
        for s in agg["summary"]
        if not s["policy"].startswith("alphagate")
        and s["policy"] != "oracle"
        and s["regret_pct"] is not None
    ]
    if ours is not None and ours["regret_pct"] is not None and others:
        best = min(others)
        rows.append(
            (
                "suite regret <= half the best other policy's",
                f"{ours['regret_pct']:.1f}% vs {best:.1f}%",
                ours["regret_pct"] <= best / 2 if best > 0 else None,
            )
        )
    return rows


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    agg = result["aggregate"]
    lines = [
        "# Decision benchmark",
        "",
        f"{meta['seeds']} seeds x {len(meta['cases'])} scenarios x {len(meta['policies'])} "
        f"policies, {_hours(meta)}, closed loop "
        f"({meta['runs']} runs, {meta['wall_seconds']:.0f} s wall on {meta['jobs']} processes; "
        f"{meta['machine']}; {meta['date']}).",
        "",
        "## Over the suite",
        "",
        _row(
            [
                "policy",
                "false flips/d",
                "false rollbacks/d",
                "rollouts/d",
                "pod restarts/d",
                "delay s (median)",
                "missed/onsets",
                "wrong state % (mean)",
                "regret % (mean of scenarios)",
            ]
        ),
        _row(["---"] * 9),
    ]
    for s in agg["summary"]:
        lines.append(
            _row(
                [
                    s["policy"],
                    f"{s['false_flips_per_day']:.2f}",
                    f"{s['false_rollbacks_per_day']:.2f}",
                    f"{s.get('flips_per_day', math.nan):.2f}",
                    f"{s['restarts_per_day']:.2f}",
                    _fmt("delay_median_s", s["delay_median_s"], s),
                    f"{s['missed']}/{s['onsets']}",
                    f"{s['wrong_state_pct']:.1f}",
                    _fmt("regret_pct", s["regret_pct"], s),
                ]
            )
        )
    rows = targets(agg)
    if rows:
        lines += ["", "## alphagate against issue 12's targets", ""]
        lines += [_row(["target", "measured", "met"]), _row(["---"] * 3)]
        for target, measured, met in rows:
            lines.append(_row([target, measured, "-" if met is None else ("yes" if met else "no")]))
    lines += ["", "## Per scenario", ""]
    lines.append(_row(["scenario", "policy", *(title for _, title in COLUMNS)]))
    lines.append(_row(["---"] * (2 + len(COLUMNS))))
    for c in agg["cells"]:
        lines.append(_row([c["case"], c["policy"], *(_fmt(k, c.get(k), c) for k, _ in COLUMNS)]))
    shown = [c for c in agg["cells"] if c["policy"] in REGRET_POLICIES and "regret_bins_pct" in c]
    if shown:
        lines += [
            "",
            "## Where the regret comes from",
            "",
            "Tokens lost against the oracle, % of the oracle's, by what the policy's canary was "
            "doing (the bins add up to the regret; see below).",
            "",
            _row(["scenario", "policy", "regret %", *score.REGRET_BINS]),
            _row(["---"] * (3 + len(score.REGRET_BINS))),
        ]
        for c in shown:
            bins = c["regret_bins_pct"]
            lines.append(
                _row(
                    [
                        c["case"],
                        c["policy"],
                        _fmt("regret_pct", c["regret_pct"], c),
                        *(_fmt("regret_pct", bins.get(k), c) for k in score.REGRET_BINS),
                    ]
                )
            )
    lines += [
        "",
        "## Coverage of alphagate's 95% alpha interval",
        "",
        "Coverage over every interval reported with at least two batches (the target), and "
        "over the decisive ones only (check passed or failed: selected, so biased low near "
        "the gate); windows with fewer than two batches report no interval (Inconclusive).",
        "",
        _row(["scenario", "coverage", "intervals", "decisive coverage", "decisive", "< 2 batches"]),
        _row(["---"] * 6),
    ]
    for c in agg["cells"]:
        if c["policy"] == "alphagate" and (c["intervals"] or c.get("insufficient_windows")):
            lines.append(
                _row(
                    [
                        c["case"],
                        _pct(c["coverage"]),
                        str(c["intervals"]),
                        _pct(c.get("decisive_coverage")),
                        str(c.get("decisive_intervals", 0)),
                        str(c.get("insufficient_windows", 0)),
                    ]
                )
            )
    lines += ["", "## Scenarios", ""]
    lines += [f"- `{c.name}`: {c.title}" for c in suite.BY_NAME.values() if c.name in meta["cases"]]
    lines += ["", "## How each anchor is rendered", ""]
    lines += [f"- **{name}**: {text}" for name, text in anchors.RENDERING.items()]
    lines += ["", "## What the numbers mean", "", (score.__doc__ or "").strip(), ""]
    if meta.get("partial"):
        lines += ["", f"**Partial run**: {meta['partial']}", ""]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise AlphagateError(
            "the decision benchmark's chart needs matplotlib, which this install lacks; "
            "install it with: pip install 'alphagate[plot]'"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = result["aggregate"]
    summary = [s for s in agg["summary"] if s["policy"] != "oracle"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, s in enumerate(summary):
        x, y = s["false_flips_per_day"], s["regret_pct"] or 0.0
        color = "tab:red" if s["policy"].startswith("alphagate") else "tab:blue"
        left.scatter([x], [y], s=60, color=color)
        left.annotate(
            s["policy"], (x, y), textcoords="offset points", xytext=(6, 10 - 14 * (i % 2))
        )
    left.set_xlabel("false flips per simulated day (suite)")
    left.set_ylabel("regret: tokens lost vs oracle (% of oracle, suite)")
    left.set_title("Regret vs false flips (down-left is better)")
    left.grid(alpha=0.3)
    names = [s["policy"] for s in summary]
    delays = []
    for name in names:
        values = [d / 60.0 for c in agg["cells"] if c["policy"] == name for d in c["delays_s"]]
        delays.append([max(v, 0.25) for v in values] or [math.nan])
    right.boxplot(delays, showfliers=True)
    right.set_xticks(
        range(1, len(names) + 1),
        [f"{s['policy']}\nmissed {s['missed']}/{s['onsets']}" for s in summary],
    )
    if any(math.isfinite(v) for d in delays for v in d):
        right.set_yscale("log")
    right.set_ylabel("detection delay, minutes (log)")
    right.set_title("Detection delay after the truth turns 'off'")
    right.tick_params(axis="x", labelsize=8)
    right.grid(alpha=0.3, axis="y")
    meta = result["meta"]
    fig.suptitle(
        f"alphagate decision benchmark: {meta['seeds']} seeds x {len(meta['cases'])} scenarios, "
        f"{_hours(meta)}, closed loop ({meta['date']})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(result: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "decisions.md",
        "json": out / "decisions.json",
        "png": out / "decisions.png",
    }
    paths["markdown"].write_text(markdown(result), encoding="utf-8")
    paths["json"].write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    plot(result, paths["png"])
    return paths
