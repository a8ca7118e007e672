"""When a decision unit may judge and what it reads: the window rule (`read_window`), the
warm-up that keeps restart data out, and the queries over a unit's memory the rule, the state
machine and the shell all rest on (its effective state, the flips in the sliding hour, the
cooldown, the verdict's age). Live controller and backtest call the same functions, so they
decide alike on the same data. `core.machine` re-exports them. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import (
    CheckKind,
    Memory,
    Rollout,
    State,
)

HOUR: Final = 3600.0
SPECULATING: Final = frozenset({State.PROBING, State.ON, State.PROMOTED})
JUDGING: Final = frozenset({State.PROBING, State.ON})  # states whose windows decide a flip
READ_MIN_INTERVALS: Final = 2  # a window cut after a warm-up keeps at least this many
EPS: Final = 1e-3
"""Seconds two times may differ and still count as equal: a millisecond, PromQL's resolution.
Epoch seconds (~1.8e9) carry ~2.4e-7 of rounding, so a window of 16/3 s read back from its
ends is never exactly 16/3 s: a tighter tolerance left such windows never whole (the demo at
--speed 3 judged none)."""


def wall_time(at: float) -> str:
    """A time in a reason a person reads: UTC wall time of the given Unix seconds (pure)."""
    try:
        return datetime.fromtimestamp(at, tz=UTC).strftime("%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{at:.0f}"


def effective_state(memory: Memory) -> State:
    """The state whose config runs: the state before a pause while paused."""
    if memory.state is State.PAUSED and memory.state_before_pause is not None:
        return memory.state_before_pause
    return memory.state


def speculation_on(memory: Memory) -> bool:
    """Should the canary run with --speculative-config in this memory's state?"""
    return effective_state(memory) in SPECULATING


def cooldown_seconds(spec: SpeculativeCanarySpec, index: int) -> float:
    """Cooldown before the next probe after the `index`-th rollback in a row (0-based)."""
    b = spec.timing.cooldown
    try:
        value = b.initial_seconds * b.factor ** max(0, index)
    except OverflowError:
        value = math.inf
    return float(min(value, b.max_seconds))


def recent_flips(memory: Memory, now: float) -> tuple[float, ...]:
    """Flips inside the sliding hour (now - 1h, now]."""
    return tuple(t for t in memory.flip_times if now - HOUR < t <= now + EPS)


def flip_room(memory: Memory, spec: SpeculativeCanarySpec, now: float) -> bool:
    """True when an enable now, and a rollback right after it, both fit in the hourly cap."""
    return len(recent_flips(memory, now)) + 2 <= spec.timing.max_flips_per_hour


def verdict_age(memory: Memory, now: float) -> float | None:
    """Seconds since the last conclusive verdict, or since the unit entered its state if later
    (the enable, the confirmation, a resume); None unless the unit judges (Probing, On)."""
    if memory.state not in JUDGING:
        return None
    since = max(memory.last_conclusive_at, memory.since, memory.last_flip_at or 0.0)
    return max(0.0, now - since)


def warmup_end(
    spec: SpeculativeCanarySpec, rollout: Rollout, memory: Memory | None
) -> float | None:
    """When data becomes judgeable again: warm-up after the last rollout and the last flip."""
    ends = []
    if rollout.completed_at is not None:
        ends.append(rollout.completed_at + spec.timing.warmup_seconds)
    if memory is not None and memory.last_flip_at is not None:
        ends.append(memory.last_flip_at + spec.timing.warmup_seconds)
    return max(ends) if ends else None


def not_judgeable(
    spec: SpeculativeCanarySpec, rollout: Rollout, memory: Memory | None, window_start: float
) -> str | None:
    """Why a window starting at `window_start` must not be judged, or None if it may be."""
    if rollout.in_progress:
        return "rollout in progress"
    end = warmup_end(spec, rollout, memory)
    if end is not None and window_start < end - EPS:
        return f"warm-up: window starts at {window_start:.0f}, warm-up ends at {end:.0f}"
    return None


def _warmup_cut(
    spec: SpeculativeCanarySpec, rollout: Rollout, now: float, memory: Memory | None
) -> float | None:
    """The configured window's start moved past the warm-up; None while a rollout runs or
    when less than one interval would be left."""
    if rollout.in_progress:
        return None
    start = now - spec.timing.window_seconds
    end_of_warmup = warmup_end(spec, rollout, memory)
    if end_of_warmup is not None:
        start = max(start, end_of_warmup)
    if now - start < min(spec.timing.interval_seconds, spec.timing.window_seconds) - EPS:
        return None
    return start


def read_window(
    spec: SpeculativeCanarySpec, rollout: Rollout, now: float, *, memory: Memory | None
) -> tuple[float, float]:
    """The window rule: the (start, end) one decision unit reads at `now`, live and in the
    backtest alike.

    A unit that judges (Probing, On) cuts the configured window to start after its warm-up, so
    its status shows the new config's data sooner after a flip; but never to less than
    READ_MIN_INTERVALS intervals (a range query needs scrapes at both ends). Only a whole
    window disjoint from the last one judged counts toward a flip (`judged`): a cut window is
    a look, shown and never counted. A unit that judges nothing (Off, RolledBack, Paused,
    Promoted) reads the whole window: the early re-probe weighs the whole window's traffic.
    While a rollout runs, or before one interval has passed since the warm-up, the whole window
    too. A window that starts before the warm-up's end is not judged (`not_judgeable`).
    """
    t = spec.timing
    full = now - t.window_seconds
    if memory is None or effective_state(memory) not in JUDGING:
        return (full, now)
    cut = _warmup_cut(spec, rollout, now, memory)
    if cut is None:
        return (full, now)
    floor = now - min(t.window_seconds, READ_MIN_INTERVALS * t.interval_seconds)
    return (min(cut, floor), now)


def judged(spec: SpeculativeCanarySpec, memory: Memory, start: float, now: float) -> bool:
    """Does the window [start, now] count toward a flip? Only whole windows that share no data
    with the last window judged (`Memory.streak_end`) do, so the streaks see one verdict per
    `windowSeconds` whatever the evaluation interval: picking the first failing window among
    overlapping ones, or re-testing a growing window, would multiply the chances to fail on
    noise (optional stopping). The evaluations between judged windows are looks: shown, never
    counted."""
    whole = now - start >= spec.timing.window_seconds - EPS
    return whole and start >= memory.streak_end - EPS


def adjacent(spec: SpeculativeCanarySpec, memory: Memory, start: float) -> bool:
    """Does a judged window starting at `start` follow the last one judged closely enough to
    continue its streak (at most one window of unjudged time between them: one evaluation lost
    to a crash or an unwritten status is no break)? After a longer gap (the controller was
    down, the source failed for longer) a streak starts over."""
    return start - memory.streak_end <= spec.timing.window_seconds + EPS


def shared_window(
    spec: SpeculativeCanarySpec, units: Iterable[tuple[Memory, Rollout]], now: float
) -> tuple[float, float]:
    """One read for several units of a policy (perSlice): the earliest `read_window` start.

    A unit whose own cut starts later then sees a window that begins inside its warm-up, and
    judges it Inconclusive; warm-up data is never judged."""
    starts = [read_window(spec, r, now, memory=m)[0] for m, r in units]
    return (min(starts) if starts else now - spec.timing.window_seconds, now)


def windows_needed(
    spec: SpeculativeCanarySpec, fail_kinds: Collection[CheckKind] = ()
) -> tuple[int, int]:
    """(windows to confirm, windows to roll back) for this window's failing check kinds.

    Confirming needs the longer of the acceptance and latency counts; a rollback needs the
    shorter count among the kinds that failed (LATENCY vs anything else = acceptance).
    """
    acc = spec.acceptance.consecutive_windows
    lat = spec.latency.consecutive_windows if spec.latency.enabled else acc
    to_pass = max(acc, lat)
    counts = [lat if k is CheckKind.LATENCY else acc for k in fail_kinds]
    return to_pass, (min(counts) if counts else acc)
