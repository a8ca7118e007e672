"""The benchmark's outputs: a Markdown report, the same numbers as JSON, one PNG, and the
tracebacks of every exception a policy raised.

The report opens with issue 21's "done when" checklist, evaluated on the run (PASS/FAIL with
the figures; "-" when the run did not include what a target needs), then the suite, then per
scenario. The PNG: suite regret with its seed interval per policy; alphagate's and the best
anchor's regret per scenario; alphagate's coverage and below-lower share per scenario; the
detection delays of every policy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from alphagate.errors import AlphagateError
from alphagate_lab.bench.decisions import anchors, score, suite

Check = tuple[str, str, bool | None]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.{digits}f}%"


def _num(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


def regret_text(c: dict[str, Any]) -> str:
    """``1.23 [0.91, 1.55]``: mean regret % over seeds with its 95% t interval."""
    m, lo, hi = c.get("regret_pct"), c.get("regret_lo"), c.get("regret_hi")
    if m is None:
        return "-"
    if lo is None or not math.isfinite(lo):
        return f"{m:.2f}"
    return f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


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


def _delay(c: dict[str, Any]) -> str:
    return f"{_num(c['delay_median_s'], '.0f')} s"


def _cell(agg: dict[str, Any], case: str, policy: str = "alphagate") -> dict[str, Any] | None:
    return next((c for c in agg["cells"] if c["case"] == case and c["policy"] == policy), None)


def _cells(agg: dict[str, Any], policy: str = "alphagate") -> list[dict[str, Any]]:
    return [c for c in agg["cells"] if c["policy"] == policy]


# ------------------------------------------------------------------------------ done when


def checklist(agg: dict[str, Any]) -> list[Check]:
    """Issue 21's targets for alphagate: (target, measured, met); None when not run."""
    rows: list[Check] = []
    rows += _one_pod_checks(agg)
    rows += _coverage_checks(agg)
    rows += _per_day_checks(agg)
    rows += _latency_checks(agg)
    rows += _suite_checks(agg)
    return rows


def _one_pod_checks(agg: dict[str, Any]) -> list[Check]:
    rows: list[Check] = []
    found = [(t, _cell(agg, f"1c3b-{t}-a0.45")) for t in ("conv", "code", "poisson")]
    got = [(t, c) for t, c in found if c is not None and c["onsets"]]
    if got:
        text = "; ".join(
            f"{t} {_pct(c['caught_within_3_windows'], 0)} (median {_delay(c)})" for t, c in got
        )
        ok = len(got) == 3 and all((c["caught_within_3_windows"] or 0) >= 0.95 for _, c in got)
        rows.append(
            (
                "one canary pod: alpha 0.45 rolled back within 15 min on conv, code, Poisson"
                " (read: in >= 95% of runs)",
                text,
                ok if len(got) == 3 else None,
            )
        )
    widths = [(a, _cell(agg, f"1c3b-conv-a{a}")) for a in ("0.62", "0.7")]
    got_w = [(a, c) for a, c in widths if c is not None and c["width_median"] is not None]
    if got_w:
        text = "; ".join(f"{a}: {_num(c['width_median'], '.3f')}" for a, c in got_w)
        ok = len(got_w) == 2 and all(c["width_median"] <= 0.10 for _, c in got_w)
        rows.append(
            (
                "one canary pod, conversation: alpha 0.62 and 0.70 interval median width <= 0.10",
                text,
                ok if len(got_w) == 2 else None,
            )
        )
    return rows


def _coverage_checks(agg: dict[str, Any]) -> list[Check]:
    cov = [c for c in _cells(agg) if c["coverage"] is not None]
    if not cov:
        return []
    lo = min(cov, key=lambda c: c["coverage"])
    hi = max(cov, key=lambda c: c["coverage"])
    out_of = [c["case"] for c in cov if not 0.93 <= c["coverage"] <= 0.97]
    below = max(cov, key=lambda c: c["below_lower"] or 0.0)
    over = [c["case"] for c in cov if (c["below_lower"] or 0.0) > 0.035]
    return [
        (
            "95% interval coverage 93-97% in every scenario",
            f"{_pct(lo['coverage'])} ({lo['case']}) to {_pct(hi['coverage'])} ({hi['case']});"
            f" {len(out_of)} of {len(cov)} scenarios outside",
            not out_of,
        ),
        (
            "truth below the lower bound in at most 3.5% of windows, every scenario",
            f"worst {_pct(below['below_lower'])} ({below['case']}); {len(over)} of {len(cov)}"
            " scenarios above 3.5%",
            not over,
        ),
    ]


def _per_day_checks(agg: dict[str, Any]) -> list[Check]:
    day = [
        c for c in _cells(agg) if suite.BY_NAME.get(c["case"]) and suite.BY_NAME[c["case"]].per_day
    ]
    day = [c for c in day if c["case"].endswith(f"-a{suite.IN_BAND:g}")]
    if not day:
        return []
    worst = max(day, key=lambda c: c["false_rollbacks_per_day"])
    over = [c for c in day if c["false_rollbacks_per_day"] > 0.25]
    total = sum(c["false_rollbacks"] for c in day)
    days = math.fsum(c["days"] for c in day)
    expected = len(suite.group_names()["per-day"])
    return [
        (
            f"at most 0.25 false rollbacks per simulated day at alpha {suite.IN_BAND:g},"
            " every topology and trace",
            f"worst {worst['false_rollbacks_per_day']:.2f}/d ({worst['case']},"
            f" {worst['false_rollbacks']} in {worst['days']:.1f} d); {len(over)} of"
            f" {len(day)} cases above; all: {total} in {days:.1f} d",
            not over if len(day) == expected else (False if over else None),
        )
    ]


def _latency_checks(agg: dict[str, Any]) -> list[Check]:
    rows: list[Check] = []
    c = _cell(agg, "1c3b-conv-uniform-1.5x-def")
    if c is not None and c["onsets"]:
        v = c["caught_within_3_windows"] or 0.0
        rows.append(
            (
                "uniform 1.5x (every step) caught within 15 min in >= 95% of runs, default buckets",
                f"{_pct(v, 0)} of {c['onsets']} onsets (median {_delay(c)})",
                v >= 0.95,
            )
        )
    c = _cell(agg, "1c3b-conv-tail-1.5x-geo")
    if c is not None and c["onsets"]:
        v = c["caught_within_30_min"] or 0.0
        rows.append(
            (
                "tail-only 1.5x P99 caught within 30 min in >= 90% of runs, geometric buckets",
                f"{_pct(v, 0)} of {c['onsets']} onsets",
                v >= 0.90,
            )
        )
    c = _cell(agg, "1c3b-conv-tail-1.5x-def")
    if c is not None and c["latency_judged"] and c.get("latency_tail_within") is not None:
        v = c["latency_tail_within"] or 0.0
        u = c.get("latency_unresolvable") or 0.0
        rows.append(
            (
                "tail-only 1.5x never confirmed as within on default buckets (reported as "
                "unresolvable)",
                f"P99 claimed within in {_pct(v)} of {c['latency_judged']} windows inside the "
                f"regression (a latency Pass, on the mean, in {_pct(c['latency_confirmed'])}); "
                f"reported unresolvable in {_pct(u)}",
                v == 0.0 and c.get("latency_unresolvable_n") == c.get("latency_tail_seen"),
            )
        )
    return rows


def _suite_checks(agg: dict[str, Any]) -> list[Check]:
    rows: list[Check] = []
    exc = sum(c["exceptions"] for c in agg["cells"])
    failures = len(agg.get("task_failures", ()))
    rows.append(
        (
            "no exception from the core in any run",
            f"{exc} exceptions from policies, {failures} runs that crashed",
            exc == 0 and failures == 0,
        )
    )
    ours = next((s for s in agg["summary"] if s["policy"] == "alphagate"), None)
    anchors_ = [
        s
        for s in agg["summary"]
        if s["policy"] in anchors.RENDERING and s["regret_pct"] is not None
    ]
    if ours is not None and ours["regret_pct"] is not None and anchors_:
        best = min(anchors_, key=lambda s: s["regret_pct"])
        half = ours["regret_pct"] <= best["regret_pct"] / 2
        apart = (ours["regret_hi"] or math.inf) < (best["regret_lo"] or -math.inf)
        rows.append(
            (
                "suite regret at most half the best anchor's, seed intervals not overlapping",
                f"alphagate {regret_text(ours)} vs {best['policy']} {regret_text(best)}"
                f" ({ours['regret_cases']} scenarios x {ours['regret_seeds']} seeds)",
                half and apart,
            )
        )
    return rows


# ------------------------------------------------------------------------------ markdown

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
    lines = [_row(SUITE_COLUMNS), _row(["---"] * len(SUITE_COLUMNS))]
    for s in agg["summary"]:
        lines.append(
            _row(
                [
                    s["policy"],
                    regret_text(s),
                    _num(s["false_rollbacks_per_day"]),
                    _num(s["restarts_per_day"]),
                    _num(s["delay_median_s"], ".0f"),
                    f"{s['missed']}/{s['onsets']}",
                    _num(s["wrong_state_pct"], ".1f"),
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
    lines = [_row(ALPHAGATE_COLUMNS), _row(["---"] * len(ALPHAGATE_COLUMNS))]
    for c in _cells(agg):
        lines.append(
            _row(
                [
                    c["case"],
                    regret_text(c),
                    _pct(c["coverage"]) + (f" ({c['intervals']})" if c["intervals"] else ""),
                    _pct(c["below_lower"]),
                    _num(c["width_median"], ".3f"),
                    f"{c['false_rollbacks_per_day']:.2f} ({c['false_rollbacks']})",
                    _num(c["delay_median_s"], ".0f"),
                    _pct(c["caught_within_3_windows"], 0),
                    _num(c["restarts_per_day"], ".1f"),
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
    lines = [_row(COLUMNS), _row(["---"] * len(COLUMNS))]
    for c in agg["cells"]:
        lines.append(
            _row(
                [
                    c["case"],
                    c["policy"],
                    regret_text(c),
                    _num(c["false_rollbacks_per_day"]),
                    _num(c["restarts_per_day"], ".1f"),
                    _num(c["delay_median_s"], ".0f"),
                    _pct(c["caught_within_3_windows"], 0),
                    _pct(c["caught_within_30_min"], 0),
                    f"{c['missed']}/{c['onsets']}" if c["onsets"] else "-",
                    _num(c["wrong_state_pct"], ".1f"),
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
        _row(head),
        _row(["---"] * len(head)),
    ]
    cal = meta.get("calibration", {})
    for case in cases:
        row = [case, cal.get(case, "-")]
        for p in policies:
            c = _cell(agg, case, p)
            row.append(
                "-"
                if c is None
                else f"{_pct(c['caught_within_3_windows'], 0)} / "
                f"{_pct(c['caught_within_30_min'], 0)}"
            )
        ours = _cell(agg, case)
        row.append(
            "-"
            if ours is None or not ours["latency_judged"]
            else f"{_pct(ours['latency_confirmed'])} / {_pct(ours.get('latency_tail_within'))}"
            f" / {_pct(ours.get('latency_unresolvable'))}"
        )
        lines.append(_row(row))
    return lines


def _regret_matrix(agg: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Mean regret % over seeds, one row per scored scenario, one column per policy."""
    policies = [p for p in meta["policies"] if p != "oracle"]
    rows = [c for c in meta.get("scored", []) if any(_cell(agg, c, p) for p in policies)]
    if not rows:
        return []
    lines = [_row(["scenario", *policies]), _row(["---"] * (1 + len(policies)))]
    for case in rows:
        cells = [_cell(agg, case, p) for p in policies]
        lines.append(_row([case, *(_num(c["regret_pct"]) if c else "-" for c in cells)]))
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
                    _num(c["regret_pct"]),
                    *(_num(bins.get(k)) for k in score.REGRET_BINS),
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
    lines += [_row(["target", "measured", "met"]), _row(["---"] * 3)]
    for target, measured, met in checklist(agg):
        lines.append(_row([target, measured, "-" if met is None else ("PASS" if met else "FAIL")]))
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


# ------------------------------------------------------------------------------ chart


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
    fig, axes = plt.subplots(2, 2, figsize=(15, 10))
    _plot_suite(axes[0][0], agg)
    _plot_scenarios(axes[0][1], agg)
    _plot_coverage(axes[1][0], agg)
    _plot_delays(axes[1][1], agg)
    meta = result["meta"]
    fig.suptitle(
        f"alphagate decision benchmark: {meta['seeds']} seeds x {len(meta['cases'])} scenarios "
        f"({meta['date']}, {meta.get('commit', '')})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_suite(ax: Any, agg: dict[str, Any]) -> None:
    rows = [s for s in agg["summary"] if s["policy"] != "oracle" and s["regret_pct"] is not None]
    for i, s in enumerate(rows):
        lo, hi = s["regret_lo"], s["regret_hi"]
        err = (
            [[s["regret_pct"] - lo], [hi - s["regret_pct"]]]
            if lo is not None and math.isfinite(lo)
            else None
        )
        color = "tab:red" if s["policy"].startswith("alphagate") else "tab:blue"
        ax.errorbar([i], [s["regret_pct"]], yerr=err, fmt="o", color=color, capsize=5)
    ax.set_xticks(range(len(rows)), [s["policy"] for s in rows], rotation=20, fontsize=8)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("regret, % of the oracle's canary tokens")
    ax.set_title("Suite regret, mean over seeds with 95% interval (lower is better)")
    ax.grid(alpha=0.3, axis="y")


def _plot_scenarios(ax: Any, agg: dict[str, Any]) -> None:
    ours = {c["case"]: c for c in _cells(agg) if c["regret_pct"] is not None}
    scored = [c for c in ours if suite.BY_NAME.get(c) and suite.BY_NAME[c].scored]
    best = {}
    for case in scored:
        others = [c for c in agg["cells"] if c["case"] == case and c["policy"] in anchors.RENDERING]
        others = [c for c in others if c["regret_pct"] is not None]
        if others:
            best[case] = min(others, key=lambda c: c["regret_pct"])
    y = range(len(scored))
    ax.scatter([ours[c]["regret_pct"] for c in scored], y, color="tab:red", label="alphagate")
    ax.scatter(
        [best[c]["regret_pct"] if c in best else math.nan for c in scored],
        y,
        color="tab:blue",
        marker="x",
        label="best anchor there",
    )
    ax.set_yticks(list(y), scored, fontsize=7)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("regret %")
    ax.set_title("Regret per scenario")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x")


def _plot_coverage(ax: Any, agg: dict[str, Any]) -> None:
    cells = [c for c in _cells(agg) if c["coverage"] is not None]
    y = list(range(len(cells)))
    ax.scatter([100 * c["coverage"] for c in cells], y, color="tab:green", label="coverage")
    ax.axvspan(93, 97, color="tab:green", alpha=0.1)
    ax.set_xlim(80, 100)
    ax.set_xlabel("coverage, % of windows with >= 2 batches (target band shaded)")
    ax.set_yticks(y, [c["case"] for c in cells], fontsize=7)
    top = ax.twiny()
    top.scatter([100 * (c["below_lower"] or 0) for c in cells], y, color="black", marker="x",
                label="truth below the lower bound")  # fmt: skip
    top.axvline(3.5, color="black", lw=0.5, ls="--")
    top.set_xlim(0, 20)
    top.set_xlabel("truth below the lower bound, % (x; limit 3.5% dashed)")
    ax.set_title("alphagate's 95% alpha interval", fontsize=10, pad=36)


def _plot_delays(ax: Any, agg: dict[str, Any]) -> None:
    names = [s["policy"] for s in agg["summary"] if s["policy"] != "oracle"]
    delays = []
    for name in names:
        values = [d / 60.0 for c in agg["cells"] if c["policy"] == name for d in c["delays_s"]]
        delays.append([max(v, 0.25) for v in values] or [math.nan])
    ax.boxplot(delays, showfliers=True)
    misses = {s["policy"]: f"{s['missed']}/{s['onsets']}" for s in agg["summary"]}
    ax.set_xticks(range(1, len(names) + 1), [f"{n}\nmissed {misses[n]}" for n in names], fontsize=7)
    if any(math.isfinite(v) for d in delays for v in d):
        ax.set_yscale("log")
    ax.axhline(15, color="grey", lw=0.5, ls="--")
    ax.set_ylabel("detection delay, minutes (log)")
    ax.set_title("Detection delay after the truth turns 'off'")
    ax.grid(alpha=0.3, axis="y")


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
