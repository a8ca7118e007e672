"""The benchmark's outputs: a Markdown report, the same numbers as JSON, one PNG, and the
tracebacks of every exception a policy raised.

The report opens with issue 21's "done when" checklist (``checklist``), evaluated on the run
(PASS/FAIL with the figures; "-" when the run did not include what a target needs), then the
suite, then per scenario; its tables are built here. The PNG is ``chart``'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from alphagate_lab.bench.decisions import anchors, score, suite
from alphagate_lab.bench.decisions.chart import plot
from alphagate_lab.bench.decisions.checklist import checklist
from alphagate_lab.bench.decisions.readout import (
    cell_of,
    cells_of,
    num,
    pct,
    regret_text,
    table_row,
)


def hours_text(case_hours: dict[str, float]) -> str:
    """ "1 h per run (24 h: a, b)": the simulated time each scenario ran."""
    by: dict[float, list[str]] = {}
    for case, h in case_hours.items():
        by.setdefault(h, []).append(case)
    if not by:
        return "no runs"
    common = max(by, key=lambda h: len(by[h]))
    rest = "; ".join(
        f"{h:g} h: {len(cs)} per-day cases" for h, cs in sorted(by.items()) if h != common
    )
    return f"{common:g} simulated h per run" + (f" ({rest})" if rest else "")


SUITE_COLUMNS: Final = (
    "policy",
    "regret % [95% CI]",
    "false rollbacks/d",
    "pod restarts/d",
    "delay s (median)",
    "missed/onsets",
    "wrong state %",
    "exceptions",
)


def _suite_table(agg: dict[str, Any]) -> list[str]:
    lines = [table_row(SUITE_COLUMNS), table_row(["---"] * len(SUITE_COLUMNS))]
    for s in agg["summary"]:
        lines.append(
            table_row(
                [
                    s["policy"],
                    regret_text(s),
                    num(s["false_rollbacks_per_day"]),
                    num(s["restarts_per_day"]),
                    num(s["delay_median_s"], ".0f"),
                    f"{s['missed']}/{s['onsets']}",
                    num(s["wrong_state_pct"], ".1f"),
                    str(s["exceptions"]),
                ]
            )
        )
    return lines


ALPHAGATE_COLUMNS: Final = (
    "scenario",
    "regret % [95% CI]",
    "coverage",
    "below lower",
    "median width",
    "false rollbacks/d",
    "delay s (median)",
    "caught <= 15 min",
    "pod restarts/d",
    "exceptions",
)


def _alphagate_table(agg: dict[str, Any]) -> list[str]:
    lines = [table_row(ALPHAGATE_COLUMNS), table_row(["---"] * len(ALPHAGATE_COLUMNS))]
    for c in cells_of(agg):
        lines.append(
            table_row(
                [
                    c["case"],
                    regret_text(c),
                    pct(c["coverage"]) + (f" ({c['intervals']})" if c["intervals"] else ""),
                    pct(c["below_lower"]),
                    num(c["width_median"], ".3f"),
                    f"{c['false_rollbacks_per_day']:.2f} ({c['false_rollbacks']})",
                    num(c["delay_median_s"], ".0f"),
                    pct(c["caught_within_3_windows"], 0),
                    num(c["restarts_per_day"], ".1f"),
                    str(c["exceptions"]),
                ]
            )
        )
    return lines


COLUMNS: Final = (
    "scenario",
    "policy",
    "regret % [95% CI]",
    "false rollbacks/d",
    "pod restarts/d",
    "delay s (median)",
    "caught <= 15 min",
    "caught <= 30 min",
    "missed/onsets",
    "wrong state %",
)


def _all_table(agg: dict[str, Any]) -> list[str]:
    lines = [table_row(COLUMNS), table_row(["---"] * len(COLUMNS))]
    for c in agg["cells"]:
        lines.append(
            table_row(
                [
                    c["case"],
                    c["policy"],
                    regret_text(c),
                    num(c["false_rollbacks_per_day"]),
                    num(c["restarts_per_day"], ".1f"),
                    num(c["delay_median_s"], ".0f"),
                    pct(c["caught_within_3_windows"], 0),
                    pct(c["caught_within_30_min"], 0),
                    f"{c['missed']}/{c['onsets']}" if c["onsets"] else "-",
                    num(c["wrong_state_pct"], ".1f"),
                ]
            )
        )
    return lines


def _latency_table(agg: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    cases = [c for c in meta["cases"] if suite.BY_NAME[c].regression is not None]
    if not cases:
        return []
    policies = [p for p in meta["policies"] if p != "oracle"]
    head = [
        "scenario",
        "injected",
        *policies,
        "alphagate inside it: Pass / tail claimed within / tail unresolvable",
    ]
    lines = [
        "Caught within 15 / 30 minutes (share of runs), per policy; the last column: of",
        "alphagate's windows wholly inside the regression, the share whose latency check passed,",
        "the share whose check claimed the canary's P99 within (confirmed as within), and the",
        "share that reported the P99 unresolvable at the bucket layout.",
        "",
        table_row(head),
        table_row(["---"] * len(head)),
    ]
    cal = meta.get("calibration", {})
    for case in cases:
        row = [case, cal.get(case, "-")]
        for p in policies:
            c = cell_of(agg, case, p)
            row.append(
                "-"
                if c is None
                else f"{pct(c['caught_within_3_windows'], 0)} / {pct(c['caught_within_30_min'], 0)}"
            )
        ours = cell_of(agg, case)
        row.append(
            "-"
            if ours is None or not ours["latency_judged"]
            else f"{pct(ours['latency_confirmed'])} / {pct(ours.get('latency_tail_within'))}"
            f" / {pct(ours.get('latency_unresolvable'))}"
        )
        lines.append(table_row(row))
    return lines


def _regret_matrix(agg: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Mean regret % over seeds, one row per scored scenario, one column per policy."""
    policies = [p for p in meta["policies"] if p != "oracle"]
    rows = [c for c in meta.get("scored", []) if any(cell_of(agg, c, p) for p in policies)]
    if not rows:
        return []
    lines = [table_row(["scenario", *policies]), table_row(["---"] * (1 + len(policies)))]
    for case in rows:
        cells = [cell_of(agg, case, p) for p in policies]
        lines.append(table_row([case, *(num(c["regret_pct"]) if c else "-" for c in cells)]))
    return lines


def _bins_table(agg: dict[str, Any]) -> list[str]:
    shown = [
        c
        for c in agg["cells"]
        if c["policy"] in ("alphagate", "alphagate-one-shot", "kayenta")
        and c["regret_pct"] is not None
        and suite.BY_NAME.get(c["case"]) is not None
        and suite.BY_NAME[c["case"]].scored
    ]
    if not shown:
        return []
    lines = [
        table_row(["scenario", "policy", "regret %", *score.REGRET_BINS]),
        table_row(["---"] * (3 + len(score.REGRET_BINS))),
    ]
    for c in shown:
        bins = c["regret_bins_pct"]
        lines.append(
            table_row(
                [
                    c["case"],
                    c["policy"],
                    num(c["regret_pct"]),
                    *(num(bins.get(k)) for k in score.REGRET_BINS),
                ]
            )
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    agg = result["aggregate"]
    lines = [
        "# Decision benchmark",
        "",
        f"{meta['seeds']} seeds x {len(meta['cases'])} scenarios, {meta['runs']} runs "
        f"({meta.get('hours_text') or ''}), closed loop; {meta['wall_seconds']:.0f} s wall on "
        f"{meta['jobs']} processes; {meta['machine']}; {meta['date']}; commit "
        f"{meta.get('commit', 'unknown')}.",
    ]
    if meta.get("partial"):
        lines += ["", f"**Partial run**: {meta['partial']}"]
    lines += ["", "## Done when (issue 21)", ""]
    lines += [table_row(["target", "measured", "met"]), table_row(["---"] * 3)]
    for target, measured, met in checklist(agg):
        lines.append(
            table_row([target, measured, "-" if met is None else ("PASS" if met else "FAIL")])
        )
    lines += ["", "## Over the suite", ""]
    lines += [
        "Regret: the mean over seeds of each seed's mean over the scenarios scored for regret"
        f" ({len(meta.get('scored', []))}: no injected latency regression, not per-day), with"
        " its 95% t interval over seeds. Rates per simulated day over every scenario run.",
        "",
    ]
    lines += _suite_table(agg)
    lines += ["", "## alphagate per scenario", ""]
    lines += _alphagate_table(agg)
    latency = _latency_table(agg, meta)
    if latency:
        lines += ["", "## Latency regressions", ""]
        lines += latency
    matrix = _regret_matrix(agg, meta)
    if matrix:
        lines += ["", "## Regret per scenario and policy", ""]
        lines += matrix
    lines += ["", "## Every policy per scenario", ""]
    lines += _all_table(agg)
    bins = _bins_table(agg)
    if bins:
        lines += ["", "## Where the regret comes from", ""]
        lines += bins
    failures = agg.get("task_failures") or []
    exc = sum(c["exceptions"] for c in agg["cells"])
    if failures or exc:
        lines += ["", "## Exceptions", ""]
        lines += [f"{exc} exceptions from policies (the run went on, holding);"
                  f" {len(failures)} runs that crashed: see exceptions.txt."]  # fmt: skip
    lines += ["", "## Scenarios", ""]
    lines += [f"- `{c.name}`: {c.title}" for c in suite.BY_NAME.values() if c.name in meta["cases"]]
    lines += ["", "## How each anchor is rendered", ""]
    lines += [f"- **{name}**: {text}" for name, text in anchors.RENDERING.items()]
    lines += ["", "## What the numbers mean", "", (score.__doc__ or "").strip(), ""]
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path, tracebacks: Sequence[str] = ()) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "decisions.md",
        "json": out / "decisions.json",
        "png": out / "decisions.png",
    }
    paths["markdown"].write_text(markdown(result), encoding="utf-8")
    paths["json"].write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    plot(result, paths["png"])
    if tracebacks:
        paths["exceptions"] = out / "exceptions.txt"
        paths["exceptions"].write_text("\n\n".join(tracebacks) + "\n", encoding="utf-8")
    return paths
