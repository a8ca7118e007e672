"""When a rolled-back canary may probe before its cooldown ends: evidence, never time alone.

Two kinds of evidence that the traffic which made speculation fail has gone:

* SLICE_SHARE: the traffic share of slices whose last alpha cleared enableAbove grew by
  `timing.reprobeMixShift` since the rollback (a policy with several slices sees its mix).
* SHAPE: the traffic's measured shape (output lengths) had changed when it failed and has
  come back toward the shape on which speculation paid (`core.shape`). A policy with one
  slice sees a change of mix only this way.

Either only opens the door; the machine's other guards (minimum dwell, room in the flip
budget for the enable and its rollback) still apply, and the probe must pass like any other.
A shape re-probe undoes only the first rollback in a row (MAX_SHAPE_INDEX): a failed one, or
traffic that swings back and forth, leaves the rest to the cooldown. The machine keeps the
memory this needs: the shape of the last window whose alpha passed while speculating
(`remember_paid`) and the one it rolled back on (`Memory.shape_failed`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import shape as shapes
from alphagate.core.model import CheckKind, CheckResult, Memory, State, TrafficShape, Verdict
from alphagate.core.window import EPS

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
    shape: TrafficShape | None,
) -> Early | None:
    """The evidence for probing a rolled-back canary before its cooldown ends, or None (also
    when it is not cooling down)."""
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
    if memory.cooldown_index > MAX_SHAPE_INDEX:
        return None
    back = shapes.returned(
        memory.shape_paid,
        memory.shape_failed,
        shape,
        enable_above=spec.acceptance.enable_above,
    )
    if not back.fires:
        return None
    return Early(
        Basis.SHAPE,
        f"the output-length mix it failed on is gone: it had moved {back.shift:.2f} (total "
        f"variation) from where speculation paid and is now {back.back:.0%} of the way back "
        f"(predicted alpha {back.predicted_alpha:.2f})",
        {"early_basis": Basis.SHAPE.value, **back.evidence()},
    )


def remember_paid(
    memory: Memory, results: Sequence[CheckResult], shape: TrafficShape | None
) -> Memory:
    """A judged window whose alpha cleared the gate while speculating (every acceptance check
    PASS, no floor FAIL) records the shape on which speculation paid. Alpha alone, not the
    overall verdict: a latency check still undecided says nothing about what is generated."""
    if shape is None or memory.state not in (State.PROBING, State.ON):
        return memory
    acceptance = [c for c in results if c.kind is CheckKind.ACCEPTANCE]
    floors_ok = all(c.verdict is not Verdict.FAIL for c in results if c.kind is CheckKind.FLOOR)
    if not acceptance or not floors_ok or any(c.verdict is not Verdict.PASS for c in acceptance):
        return memory
    return memory.model_copy(update={"shape_paid": shape})
