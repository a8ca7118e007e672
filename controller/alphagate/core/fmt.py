"""How numbers read in the reasons people see: three significant digits, NaN and infinities
spelled out (a reason must never print `nan` where a person expects a value), and evidence
values that survive JSON."""

from __future__ import annotations

import math


def number(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits; NaN and +/-Inf by name."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return f"{x:.{digits}g}"


def ev(value: float) -> float | str:
    """Evidence value that survives JSON: NaN and infinities become strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value
