"""Issue 21's "done when" checklist, evaluated on a benchmark run: each target with what the
run measured and whether it is met (None when the run did not include what a target needs).
The report opens with it."""

from __future__ import annotations

import math
from typing import Any

from alphagate_lab.bench.decisions import anchors, suite
from alphagate_lab.bench.decisions.readout import (
    cell_of,
    cells_of,
    delay_text,
    num,
    pct,
    regret_text,
)

Check = tuple[str, str, bool | None]


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
    found = [(t, cell_of(agg, f"1c3b-{t}-a0.45")) for t in ("conv", "code", "poisson")]
    got = [(t, c) for t, c in found if c is not None and c["onsets"]]
    if got:
        text = "; ".join(
            f"{t} {pct(c['caught_within_3_windows'], 0)} (median {delay_text(c)})" for t, c in got
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
    widths = [(a, cell_of(agg, f"1c3b-conv-a{a}")) for a in ("0.62", "0.7")]
    got_w = [(a, c) for a, c in widths if c is not None and c["width_median"] is not None]
    if got_w:
        text = "; ".join(f"{a}: {num(c['width_median'], '.3f')}" for a, c in got_w)
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
    cov = [c for c in cells_of(agg) if c["coverage"] is not None]
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
            f"{pct(lo['coverage'])} ({lo['case']}) to {pct(hi['coverage'])} ({hi['case']});"
            f" {len(out_of)} of {len(cov)} scenarios outside",
            not out_of,
        ),
        (
            "truth below the lower bound in at most 3.5% of windows, every scenario",
            f"worst {pct(below['below_lower'])} ({below['case']}); {len(over)} of {len(cov)}"
            " scenarios above 3.5%",
            not over,
        ),
    ]


def _per_day_checks(agg: dict[str, Any]) -> list[Check]:
    day = [
        c
        for c in cells_of(agg)
        if suite.BY_NAME.get(c["case"]) and suite.BY_NAME[c["case"]].per_day
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
    c = cell_of(agg, "1c3b-conv-uniform-1.5x-def")
    if c is not None and c["onsets"]:
        v = c["caught_within_3_windows"] or 0.0
        rows.append(
            (
                "uniform 1.5x (every step) caught within 15 min in >= 95% of runs, default buckets",
                f"{pct(v, 0)} of {c['onsets']} onsets (median {delay_text(c)})",
                v >= 0.95,
            )
        )
    c = cell_of(agg, "1c3b-conv-tail-1.5x-geo")
    if c is not None and c["onsets"]:
        v = c["caught_within_30_min"] or 0.0
        rows.append(
            (
                "tail-only 1.5x P99 caught within 30 min in >= 90% of runs, geometric buckets",
                f"{pct(v, 0)} of {c['onsets']} onsets",
                v >= 0.90,
            )
        )
    c = cell_of(agg, "1c3b-conv-tail-1.5x-def")
    if c is not None and c["latency_judged"] and c.get("latency_tail_within") is not None:
        v = c["latency_tail_within"] or 0.0
        u = c.get("latency_unresolvable") or 0.0
        rows.append(
            (
                "tail-only 1.5x never confirmed as within on default buckets (reported as "
                "unresolvable)",
                f"P99 claimed within in {pct(v)} of {c['latency_judged']} windows inside the "
                f"regression (a latency Pass, on the mean, in {pct(c['latency_confirmed'])}); "
                f"reported unresolvable in {pct(u)}",
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
