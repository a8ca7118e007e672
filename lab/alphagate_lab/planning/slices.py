"""Traffic slices typed on the command line: `chat=0.7:0.7` (--mix) and `chat:0.7:0.7` (--slice).

Both say: slice name, its share of the traffic, the alpha expected on it. Parsing errors name
the offending item so a one-line message is enough to fix the command.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from alphagate_lab.planning.speedup import combined_alpha

_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """One slice of traffic with the alpha its draft is expected to reach there."""

    name: str
    share: float
    alpha: float


def _number(text: str, what: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{item!r}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or not (0.0 <= value <= 1.0):
        raise ValueError(f"{item!r}: {what} must be within [0, 1], got {text}")
    return value


def _slice(name: str, share: str, alpha: str, item: str) -> SliceSpec:
    name = name.strip()
    if not _NAME.match(name) or len(name) > 63:
        raise ValueError(
            f"{item!r}: slice name {name!r} must be lower-case letters, digits, '-' or '_' "
            "(it becomes a Kubernetes-style name)"
        )
    return SliceSpec(
        name, _number(share.strip(), "share", item), _number(alpha.strip(), "alpha", item)
    )


def _check_set(slices: list[SliceSpec]) -> list[SliceSpec]:
    if not slices:
        raise ValueError("no slices given")
    names = [s.name for s in slices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"slice names must be unique; repeated: {', '.join(dupes)}")
    combined_alpha({s.name: (s.share, s.alpha) for s in slices})  # shares sum to ~1
    return slices


def parse_mix(text: str) -> list[SliceSpec]:
    """`chat=0.7:0.7,code=0.3:0.4` -> slices; ValueError naming the bad item otherwise."""
    items = [part for part in (p.strip() for p in text.split(",")) if part]
    if not items:
        raise ValueError("the mix is empty: expected name=share:alpha[,name=share:alpha...]")
    out: list[SliceSpec] = []
    for item in items:
        name, eq, rest = item.partition("=")
        share, colon, alpha = rest.partition(":")
        if not eq or not colon or ":" in alpha:
            raise ValueError(f"{item!r}: expected name=share:alpha, e.g. chat=0.7:0.7")
        out.append(_slice(name, share, alpha, item))
    return _check_set(out)


def parse_slices(items: list[str]) -> list[SliceSpec]:
    """Repeated `--slice chat:0.7:0.7` values -> slices; ValueError naming the bad item."""
    out: list[SliceSpec] = []
    for item in items:
        parts = item.split(":")
        if len(parts) != 3:
            raise ValueError(f"{item!r}: expected name:share:alpha, e.g. chat:0.7:0.7")
        out.append(_slice(parts[0], parts[1], parts[2], item))
    return _check_set(out)


def mix_alpha(slices: list[SliceSpec]) -> float:
    """Traffic-weighted alpha of already-parsed slices."""
    return combined_alpha({s.name: (s.share, s.alpha) for s in slices})
