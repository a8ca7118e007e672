"""When a rolled-back canary may probe before its cooldown ends: evidence, never time alone.

Two kinds of evidence that the traffic which made speculation fail has gone:

* SLICE_SHARE: the traffic share of slices whose last alpha cleared enableAbove grew by
  `timing.reprobeMixShift` since the rollback (a policy with several slices sees its mix);
  "at the rollback" is the lowest share read within one window after it (`settle_share`).
* SHAPE: the traffic's measured shape (output lengths) had moved, beyond its window-to-window
  noise, when alpha failed, alpha moved with it, and RETURNED_WINDOWS disjoint windows in a
  row have come back toward the shape on which speculation paid (`core.shape`). A policy with
  one slice sees a change of mix only this way.

Either only opens the door; the machine's other guards (minimum dwell, room in the flip
budget for the enable and its rollback) still apply, and the probe must pass like any other.
A shape re-probe undoes only the first rollback in a row (MAX_SHAPE_INDEX), and only once
until speculation is confirmed again (`ShapeMemory.spent`). An early re-probe that fails does
not lengthen the cooldown: the rollback keeps the one it interrupted (`failed_early`). The
machine keeps the memory this needs (`observe`, `at_rollback`). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import shape as shapes
from alphagate.core.model import (
    Cause,
    CheckKind,
    CheckResult,
    Memory,
    ShapeMemory,
    State,
    TrafficShape,
    Verdict,
)
from alphagate.core.window import EPS, JUDGING

MAX_SHAPE_INDEX: Final = 1
"""A shape re-probe undoes only the first rollback in a row (`Memory.cooldown_index` after it
is 1): traffic that keeps swinging gets one early look, then waits for the cooldown, until
speculation has held On for `cooldown.decayAfterSeconds` again."""


class Basis(StrEnum):
    """What justified an early re-probe (stable strings: the transition's evidence)."""

    SLICE_SHARE = "slice-share"
    SHAPE = "shape"


@dataclass(frozen=True, slots=True)
class Early:
    """An early re-probe the evidence allows: on what basis, why (for people), the numbers."""

    basis: Basis
    why: str
    evidence: dict[str, float | str] = field(default_factory=dict)


def early(
    memory: Memory,
    spec: SpeculativeCanarySpec,
    *,
    now: float,
    good_share: float | None,
    shape: TrafficShape | None = None,
) -> Early | None:
    """The evidence for probing a rolled-back canary before its cooldown ends, or None (also
    when it is not cooling down). `shape` is the current window's (for the evidence)."""
    if memory.state is not State.ROLLED_BACK or now >= memory.cooldown_until - EPS:
        return None
    t = spec.timing
    if good_share is not None:
        shift = good_share - memory.good_share_at_rollback
        if shift > 0 and shift >= t.reprobe_mix_shift - EPS:
            return Early(
                Basis.SLICE_SHARE,
                f"traffic share of slices whose last alpha cleared enableAbove grew from "
                f"{memory.good_share_at_rollback:.2f} to {good_share:.2f} (>= reprobeMixShift "
                f"{t.reprobe_mix_shift:.2f})",
                {"early_basis": Basis.SLICE_SHARE.value, "good_share": good_share},
            )
    track = memory.shape
    if memory.cooldown_index > MAX_SHAPE_INDEX or track.spent or track.axis is None:
        return None
    if track.returned < shapes.RETURNED_WINDOWS or shape is None:
        return None
    back = shapes.returned(track.axis, shape, enable_above=spec.acceptance.enable_above)
    if not back.fires:
        return None
    return Early(
        Basis.SHAPE,
        f"the output-length mix it failed on is gone: it had moved {back.shift:.2f} (total "
        f"variation, {1 / max(track.axis.noise, 1e-9):.0f}x its window-to-window noise) from "
        f"where speculation paid, alpha moved with it over {track.axis.windows} windows, and "
        f"{track.returned} windows in a row are back ({back.back:.0%} of the way now, "
        f"predicted alpha {back.predicted_alpha:.2f})",
        {
            "early_basis": Basis.SHAPE.value,
            **back.evidence(),
            "shape_returned_windows": float(track.returned),
            "shape_relation_windows": float(track.axis.windows),
        },
    )


def observe(
    memory: Memory,
    spec: SpeculativeCanarySpec,
    results: Sequence[CheckResult],
    shape: TrafficShape | None,
    *,
    start: float,
    now: float,
) -> Memory:
    """Record a whole window disjoint from the last one recorded: its shares, and while judging
    the alpha measured on it and whether it paid (every acceptance check PASS) or failed (an
    acceptance or floor check FAIL): alpha alone, whatever latency said. While cooling down
    after a rollback on alpha, count the windows in a row that returned along its line."""
    track = memory.shape
    whole = now - start >= spec.timing.window_seconds - EPS
    if shape is None or not whole or start < track.last_end - EPS:
        return memory
    judged = memory.state in JUDGING and not any(c.kind is CheckKind.WINDOW for c in results)
    acceptance = [c for c in results if c.kind is CheckKind.ACCEPTANCE]
    paid = judged and bool(acceptance) and all(c.verdict is Verdict.PASS for c in acceptance)
    failed = judged and any(
        c.verdict is Verdict.FAIL and c.kind in (CheckKind.ACCEPTANCE, CheckKind.FLOOR)
        for c in results
    )
    measured = shape if judged else shape.model_copy(update={"alpha": None})
    track = shapes.record(track, measured, at=now, paid=paid, failed=failed)
    if memory.state is State.ROLLED_BACK and track.axis is not None:
        back = shapes.returned(track.axis, shape, enable_above=spec.acceptance.enable_above)
        track = track.model_copy(update={"returned": track.returned + 1 if back.fires else 0})
    return memory.model_copy(update={"shape": track})


def at_rollback(memory: Memory, fail_kinds: Collection[CheckKind]) -> ShapeMemory:
    """The shape memory a rollback leaves: a failure of alpha learns the line back to what paid
    (`shape.learn`); any other failure (latency, a fail-safe) learns none."""
    track = memory.shape.model_copy(update={"returned": 0, "axis": None})
    if not any(k in (CheckKind.ACCEPTANCE, CheckKind.FLOOR) for k in fail_kinds):
        return track
    return track.model_copy(update={"axis": shapes.learn(track).axis})


def settle_share(
    memory: Memory, spec: SpeculativeCanarySpec, good_share: float | None, *, now: float
) -> Memory:
    """Lower the share of good slices remembered at a rollback to the lowest read within one
    window after it. The window read at a rollback still holds traffic from before the shift
    that made alpha fail (in-flight long requests go on counting tokens), so it overstates
    the good share of the traffic that failed; the windows ending within windowSeconds after
    the rollback read that traffic itself. No later: a slow drift (a daily cycle) must not
    lower the reference the SLICE_SHARE re-probe is measured from."""
    if memory.state is not State.ROLLED_BACK or memory.last_flip_at is None:
        return memory
    if good_share is None or not good_share < memory.good_share_at_rollback:
        return memory
    if now > memory.last_flip_at + spec.timing.window_seconds + EPS:
        return memory
    return memory.model_copy(update={"good_share_at_rollback": good_share})


def failed_early(memory: Memory) -> bool:
    """Is this a probe that an early re-probe started, not yet confirmed? Its failure keeps
    the cooldown it interrupted instead of lengthening it."""
    if memory.state is not State.PROBING:
        return False
    enables = [t for t in memory.history if t.to_state is State.PROBING]
    return bool(enables) and enables[-1].cause is Cause.EARLY_REPROBE
