"""Draft-length tuning (opt-in): the controller moves num_speculative_tokens on the canary.

Every change of K restarts the canary's pods, so K moves under the same safeguards as a flip:

* evidence: `core.draft_length.recommend` must ask for the same new K in `consecutiveWindows`
  disjoint judged windows (SHORTEN: the dropped positions' upper bounds are below break-even;
  LONGER_MAY_PAY: one more position is tried, up to maxK). INSUFFICIENT, a window from a rollout
  or its warm-up, or a missing report is no evidence and leaves the streak as it is;
* only while speculation is confirmed On and the state machine did nothing this window;
* `timing.minDwellSeconds` since the last flip or K change, room in `timing.maxFlipsPerHour` for
  the change and its possible revert (K changes count as flips), and no cooldown pending;
* a new K is a trial until `consecutiveWindows` disjoint passing windows confirm it; a failing
  window, a measured speed-up confidently below the last good K's, or (after lengthening) the
  new positions confidently not paying, reverts it to the last good K at once, and the next
  change waits `cooldownSeconds` (doubling with each revert in a row). A rollback of
  speculation during a trial also puts K back to the last good one.

`retune` is pure: the evaluation the state machine just made, the report, and `now` in; the new
memory, the typed decision and its evidence out. The shell applies `speculative_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import window
from alphagate.core.draft_length import DraftAdvice, DraftLengthReport
from alphagate.core.model import (
    Action,
    CheckKind,
    DraftCause,
    DraftChange,
    DraftMemory,
    Evaluation,
    LatencyEvidence,
    Memory,
    Rollout,
    State,
    Verdict,
)
from alphagate.core.window import EPS

HISTORY_LIMIT: Final = 10
MAX_COOLDOWN_FACTOR: Final = 8.0


class TuneHold(StrEnum):
    """Why K did not change this window (stable strings: metric labels, logs)."""

    DISABLED = "disabled"  # draftLength.tuning.enabled is false
    MACHINE_ACTED = "machine-acted"  # the on/off machine flipped or moved this window
    NOT_ON = "not-on"  # speculation is not confirmed On (Off, Probing, Paused, Promoted)
    UNJUDGED = "unjudged"  # rollout in progress or warm-up: the window is not evidence
    NO_EVIDENCE = "no-evidence"  # no report, or too few drafts / batches to judge K
    KEEP = "keep"  # the report asks for the K that runs (or a bound stops it)
    AGREEING = "agreeing"  # a new K is asked for, not yet in consecutiveWindows windows
    TRIAL = "trial"  # a new K runs and is not yet confirmed
    COOLDOWN = "cooldown"  # a revert happened recently
    DWELL = "dwell"  # minDwellSeconds since the last flip or K change
    FLIP_BUDGET = "flip-budget"  # no room for the change and its possible revert


@dataclass(frozen=True, slots=True)
class Tuned:
    """The tuner's decision for one window: the memory to keep, and the change if any.

    `change` is set when K changed (SHORTEN, LENGTHEN, REVERT: the shell patches the canary)
    or a trial K was confirmed (CONFIRMED: nothing to patch); `hold` says why K stayed."""

    memory: Memory
    k: int  # the K the canary should run when speculating
    change: DraftChange | None = None
    hold: TuneHold | None = None

    @property
    def restarts(self) -> bool:
        """The change moves K on the running canary (a patch and a restart)."""
        return self.change is not None and self.change.cause is not DraftCause.CONFIRMED


def current_k(spec: SpeculativeCanarySpec, memory: Memory) -> int:
    """The K the canary runs when speculating: the tuned one when tuning is on and the memory
    belongs to this spec's K, else the spec's."""
    d = memory.draft
    if not spec.draft_length.tuning.enabled or d.k is None or d.spec_k != spec.k:
        return spec.k
    t = spec.draft_length.tuning
    return min(max(d.k, t.min_k), t.max_k or spec.k)


def speculative_config(spec: SpeculativeCanarySpec, memory: Memory) -> dict[str, Any]:
    """spec.speculativeConfig with the K the canary should run."""
    return {**spec.speculative_config, "num_speculative_tokens": current_k(spec, memory)}


def measured_speedup(evaluation: Evaluation) -> tuple[float, float] | None:
    """(worst point estimate, worst upper bound) of the measured speed-up over the latency
    checks of the window (baseline over canary mean time per token); None when unmeasured."""
    points, uppers = [], []
    for c in evaluation.checks:
        if c.kind is CheckKind.LATENCY and isinstance(c.evidence, LatencyEvidence):
            sp = c.evidence.speedup
            if sp is not None and math.isfinite(sp.value) and math.isfinite(sp.upper):
                points.append(sp.value)
                uppers.append(sp.upper)
    return (min(points), min(uppers)) if points else None


def _cooldown(spec: SpeculativeCanarySpec, index: int) -> float:
    base = spec.draft_length.tuning.cooldown_seconds
    return base * min(MAX_COOLDOWN_FACTOR, 2.0 ** max(0, index))


def _record(d: DraftMemory, change: DraftChange) -> tuple[DraftChange, ...]:
    return (*d.history, change)[-HISTORY_LIMIT:]


@dataclass(frozen=True, slots=True)
class _Win:
    spec: SpeculativeCanarySpec
    evaluation: Evaluation
    memory: Memory
    d: DraftMemory
    now: float
    start: float
    k: int
    good: int
    evidence: Mapping[str, float | str]

    def hold(self, why: TuneHold, d: DraftMemory | None = None) -> Tuned:
        m = self.memory.model_copy(update={"draft": d or self.d})
        return Tuned(m, self.k, None, why)

    def move(self, to: int, cause: DraftCause, reason: str, **update: object) -> Tuned:
        """Change K (a restart: counted as a flip, warm-up and dwell start again)."""
        change = DraftChange(
            at=self.now,
            from_k=self.k,
            to_k=to,
            cause=cause,
            reason=reason,
            evidence=dict(self.evidence),
        )
        d = self.d.model_copy(
            update={
                "k": to,
                "changed_at": self.now,
                "target": None,
                "streak": 0,
                "confirm_streak": 0,
                "streak_end": self.now,
                "history": _record(self.d, change),
                **update,
            }
        )
        m = self.memory.model_copy(
            update={
                "draft": d,
                "flip_times": (*self.memory.flip_times, self.now),
                "last_flip_at": self.now,
            }
        )
        return Tuned(m, to, change, None)

    def revert(self, reason: str, *, restart: bool = True) -> Tuned:
        index = self.d.cooldown_index
        until = self.now + _cooldown(self.spec, index)
        text = f"{reason}; back to the last good K={self.good}, no change before {until:.0f}"
        update: dict[str, object] = {
            "trial": False,
            "cooldown_until": until,
            "cooldown_index": index + 1,
        }
        if restart:
            return self.move(self.good, DraftCause.REVERT, text, **update)
        change = DraftChange(
            at=self.now,
            from_k=self.k,
            to_k=self.good,
            cause=DraftCause.REVERT,
            reason=text,
            evidence=dict(self.evidence),
        )
        d = self.d.model_copy(
            update={
                "k": self.good,
                "target": None,
                "streak": 0,
                "confirm_streak": 0,
                "history": _record(self.d, change),
                **update,
            }
        )
        return Tuned(self.memory.model_copy(update={"draft": d}), self.good, change, None)


def _evidence(
    report: DraftLengthReport | None, speedup: tuple[float, float] | None, k: int, good: int
) -> dict[str, float | str]:
    out: dict[str, float | str] = {"k": float(k), "good_k": float(good)}
    if report is not None:
        out |= report.evidence()
    if speedup is not None:
        out["measured_speedup"], out["measured_speedup_upper"] = speedup
    return out


def retune(
    spec: SpeculativeCanarySpec,
    evaluation: Evaluation,
    report: DraftLengthReport | None,
    *,
    now: float,
    rollout: Rollout,
    window_start: float | None = None,
) -> Tuned:
    """The tuner's step after the state machine's (see the module docstring for the rules).

    `report` is the draft-length report of the same window at the K that ran (core.insights);
    `window_start` when the window's data begins (default now - windowSeconds)."""
    t = spec.draft_length.tuning
    memory = evaluation.memory
    d = memory.draft
    if not t.enabled:
        if d != DraftMemory():  # tuning switched off: back to the spec's K, forget the rest
            memory = memory.model_copy(update={"draft": DraftMemory()})
        return Tuned(memory, spec.k, None, TuneHold.DISABLED)
    if d.spec_k != spec.k:
        if d.spec_k is not None:
            change = DraftChange(
                at=now,
                from_k=d.k or d.spec_k,
                to_k=spec.k,
                cause=DraftCause.SPEC_CHANGED,
                reason=f"speculativeConfig now sets K={spec.k} (was {d.spec_k}): tuning "
                f"starts again from it",
            )
            d = DraftMemory(spec_k=spec.k, history=_record(d, change))
            memory = memory.model_copy(update={"draft": d})
            return Tuned(memory, spec.k, change, None)
        d = d.model_copy(update={"spec_k": spec.k})
        memory = memory.model_copy(update={"draft": d})
    k = current_k(spec, memory)
    good = d.good_k if d.good_k is not None else spec.k
    speedup = measured_speedup(evaluation)
    start = window_start if window_start is not None else now - spec.timing.window_seconds
    w = _Win(spec, evaluation, memory, d, now, start, k, good, _evidence(report, speedup, k, good))

    if evaluation.transition is not None or evaluation.action is not Action.HOLD:
        if evaluation.action is Action.DISABLE and d.trial:
            return w.revert(
                f"speculation rolled back while K={k} was on trial", restart=False
            )  # the disable restarts the pods anyway
        return w.hold(TuneHold.MACHINE_ACTED)
    if window.effective_state(memory) is not State.ON or memory.state is State.PAUSED:
        return w.hold(TuneHold.NOT_ON)
    if window.not_judgeable(spec, rollout, memory, start) is not None:
        return w.hold(TuneHold.UNJUDGED)
    if evaluation.verdict is Verdict.ERROR:
        return w.hold(TuneHold.NO_EVIDENCE)
    if d.trial:
        return _trial(w, report, speedup)
    if speedup is not None and k == good and evaluation.verdict is Verdict.PASS:
        d = d.model_copy(update={"good_speedup": speedup[0]})
        w = _Win(spec, evaluation, memory, d, now, start, k, good, w.evidence)
    return _propose(w, report)


def _trial(w: _Win, report: DraftLengthReport | None, speedup: tuple[float, float] | None) -> Tuned:
    t, d, k = w.spec.draft_length.tuning, w.d, w.k
    if w.evaluation.verdict is Verdict.FAIL:
        return w.revert(f"K={k} on trial: the window failed the gate")
    if speedup is not None and d.good_speedup is not None:
        floor = d.good_speedup * (1.0 - t.min_speedup_drop)
        if speedup[1] < floor:
            return w.revert(
                f"K={k} on trial: measured speed-up at most {speedup[1]:.3f}, below "
                f"{floor:.3f} ({d.good_speedup:.3f} at K={w.good} less "
                f"{t.min_speedup_drop:.0%})"
            )
    if (
        k > w.good
        and report is not None
        and report.advice is DraftAdvice.SHORTEN
        and report.recommended_k <= w.good
    ):
        return w.revert(
            f"K={k} on trial: positions {report.recommended_k}-{k - 1} confidently cost more "
            f"than they return"
        )
    if w.evaluation.verdict is not Verdict.PASS:
        return w.hold(TuneHold.TRIAL)
    if w.start < d.streak_end - EPS and d.confirm_streak > 0:
        return w.hold(TuneHold.TRIAL)  # overlaps the last counted window: no new evidence
    count = d.confirm_streak + 1
    if count < t.consecutive_windows:
        return w.hold(
            TuneHold.TRIAL, d.model_copy(update={"confirm_streak": count, "streak_end": w.now})
        )
    change = DraftChange(
        at=w.now,
        from_k=k,
        to_k=k,
        cause=DraftCause.CONFIRMED,
        reason=f"K={k} confirmed: {count} disjoint passing windows since the change",
        evidence=dict(w.evidence),
    )
    d = d.model_copy(
        update={
            "good_k": k,
            "good_speedup": speedup[0] if speedup is not None else None,
            "trial": False,
            "confirm_streak": 0,
            "streak_end": w.now,
            "cooldown_index": max(0, d.cooldown_index - 1),
            "history": _record(d, change),
        }
    )
    return Tuned(w.memory.model_copy(update={"draft": d}), k, change, None)


def _propose(w: _Win, report: DraftLengthReport | None) -> Tuned:
    spec, d, k, now = w.spec, w.d, w.k, w.now
    t = spec.draft_length.tuning
    if report is None or report.advice is DraftAdvice.INSUFFICIENT or report.configured_k != k:
        return w.hold(TuneHold.NO_EVIDENCE)
    if w.evaluation.verdict is not Verdict.PASS:
        return w.hold(TuneHold.NO_EVIDENCE)  # K moves only on a canary that passes its gate
    top = t.max_k or spec.k
    want, cause = k, None
    if report.advice is DraftAdvice.SHORTEN:
        want, cause = max(t.min_k, report.recommended_k), DraftCause.SHORTEN
    elif report.advice is DraftAdvice.LONGER_MAY_PAY and k < top:
        want, cause = k + 1, DraftCause.LENGTHEN
    if want == k or cause is None:
        return w.hold(TuneHold.KEEP, d.model_copy(update={"target": None, "streak": 0}))
    if w.start < d.streak_end - EPS and d.target == want and d.streak > 0:
        return w.hold(TuneHold.AGREEING)  # overlaps the last counted window
    streak = d.streak + 1 if d.target == want else 1
    d = d.model_copy(update={"target": want, "streak": streak, "streak_end": now})
    w = _Win(spec, w.evaluation, w.memory, d, now, w.start, k, w.good, w.evidence)
    if streak < t.consecutive_windows:
        return w.hold(TuneHold.AGREEING)
    if now < d.cooldown_until - EPS:
        return w.hold(TuneHold.COOLDOWN)
    m = w.memory
    if m.last_flip_at is not None and now < m.last_flip_at + spec.timing.min_dwell_seconds - EPS:
        return w.hold(TuneHold.DWELL)
    if not window.flip_room(m, spec, now):
        return w.hold(TuneHold.FLIP_BUDGET)
    if cause is DraftCause.SHORTEN:
        o = report.option(want)
        gain = f"; predicted {o.speedup:.2f}x over draft steps" if o is not None else ""
        reason = (
            f"K {k} -> {want}: positions {want}-{k - 1} cost more than they return in "
            f"{streak} disjoint windows{gain}"
        )
    else:
        last = report.positions[-1].unconditional if report.positions else math.nan
        reason = (
            f"K {k} -> {want}: the last position still accepts {last:.3f}, well above its "
            f"break-even, in {streak} disjoint windows; one more position is tried"
        )
    return w.move(want, cause, reason, trial=True)
