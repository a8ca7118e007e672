"""The decision benchmark's chart, one PNG: suite regret with its seed interval per policy;
alphagate's and the best anchor's regret per scenario; alphagate's coverage and below-lower
share per scenario; the detection delays of every policy. matplotlib is optional: without it
``plot`` raises our own error saying how to install it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from alphagate.errors import AlphagateError
from alphagate_lab.bench.decisions import anchors, suite
from alphagate_lab.bench.decisions.readout import cells_of


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
    ours = {c["case"]: c for c in cells_of(agg) if c["regret_pct"] is not None}
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
    cells = [c for c in cells_of(agg) if c["coverage"] is not None]
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
