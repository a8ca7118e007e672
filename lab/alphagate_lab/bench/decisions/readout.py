"""How the decision benchmark's aggregate reads in its report: a cell looked up by scenario
and policy, numbers as text ("-" for what a run lacks), a Markdown table row. The report's
tables (``report``), the done-when checklist (``checklist``) and the chart (``chart``) share
them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.{digits}f}%"


def num(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


def regret_text(c: dict[str, Any]) -> str:
    """``1.23 [0.91, 1.55]``: mean regret % over seeds with its 95% t interval."""
    m, lo, hi = c.get("regret_pct"), c.get("regret_lo"), c.get("regret_hi")
    if m is None:
        return "-"
    if lo is None or not math.isfinite(lo):
        return f"{m:.2f}"
    return f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


def delay_text(c: dict[str, Any]) -> str:
    return f"{num(c['delay_median_s'], '.0f')} s"


def cell_of(agg: dict[str, Any], case: str, policy: str = "alphagate") -> dict[str, Any] | None:
    return next((c for c in agg["cells"] if c["case"] == case and c["policy"] == policy), None)


def cells_of(agg: dict[str, Any], policy: str = "alphagate") -> list[dict[str, Any]]:
    return [c for c in agg["cells"] if c["policy"] == policy]
