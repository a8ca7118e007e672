"""How numbers read in the reasons people see: three significant digits, NaN and infinities
spelled out (a reason must never print `nan` where a person expects a value)."""

from __future__ import annotations

import math


def number(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits; NaN and +/-Inf by name."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return f"{x:.{digits}g}"
