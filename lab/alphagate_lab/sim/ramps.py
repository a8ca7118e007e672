"""Drifts under way: a timeline event with a ``ramp`` moves a number (the traffic rate, or a
float field of a slice) linearly from its old value to its new one over the ramp's length,
instead of at once. The fleet asks, before each tick, what the numbers are at its middle.
"""

from __future__ import annotations

#: What drifts: (slice name, or "" for the traffic, field name).
RampKey = tuple[str, str]


class Ramps:
    """Each drift's (start, length, from, to), by what drifts."""

    def __init__(self) -> None:
        self._ramps: dict[RampKey, tuple[float, float, float, float]] = {}

    def __bool__(self) -> bool:
        return bool(self._ramps)

    def start(self, key: RampKey, at: float, length: float, v0: float, v1: float) -> None:
        self._ramps[key] = (at, length, v0, v1)

    def cancel(self, key: RampKey) -> None:
        """A new value for ``key`` ends its drift, wherever it had got to."""
        self._ramps.pop(key, None)

    def at(self, now: float, tick: float) -> tuple[float | None, dict[str, dict[str, float]]]:
        """The traffic rate (None: not drifting) and each drifting slice field at the middle of
        the tick starting at ``now``; drifts that have run their length end at their value."""
        t = now + tick / 2
        rate: float | None = None
        updates: dict[str, dict[str, float]] = {}
        for (name, key), (start, length, v0, v1) in list(self._ramps.items()):
            frac = min(max((t - start) / length, 0.0), 1.0)
            value = v0 + (v1 - v0) * frac
            if name:
                updates.setdefault(name, {})[key] = value
            else:
                rate = value
            if now >= start + length:
                del self._ramps[(name, key)]
                if name:
                    updates[name][key] = v1
                else:
                    rate = v1
        return rate, updates
