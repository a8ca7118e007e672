"""The judging step of one unit, and what it tells people beyond the state machine.

`judge` runs the core's evaluation, its insights over the same window (at the K that ran),
and the opt-in draft-length tuner after the state machine (`core.tuning`). `tell_tuning`
reports a K change; `Diagnoses` emits the diagnosis Event once per change of findings.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import tuning
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import Insights, analyse
from alphagate.core.model import Command, Evaluation, Memory, Observation, Rollout
from alphagate.kube.events import EventRecorder, ObjectRef, diagnosis_event, draft_length_event
from alphagate.kube.status import CanaryStatus


def judge(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    memory: Memory,
    rollout: Rollout,
    *,
    now: float,
    command: Command | None,
    slices: Sequence[str] | None,
    force: bool = False,
) -> tuple[Evaluation, Insights, tuning.Tuned]:
    """The state machine's evaluation, the window's insights, and the tuner's step; the
    evaluation carries the tuner's memory."""
    evaluation = evaluate(
        spec,
        observation,
        memory,
        rollout,
        now=now,
        command=command,
        slices=slices,
        force=force,
    )
    insights = analyse(
        spec,
        observation,
        estimates=evaluation.estimates,
        combined=evaluation.combined,
        slices=slices,
        cost_per_position=spec.draft_length.cost_per_position,
        k=tuning.current_k(spec, memory),  # the K that ran in this window
    )
    tuned = tuning.retune(
        spec,
        evaluation,
        insights.draft,
        now=now,
        rollout=rollout,
        window_start=observation.at - observation.window_seconds,
    )
    if tuned.memory is not evaluation.memory:
        evaluation = dataclasses.replace(evaluation, memory=tuned.memory)
    return evaluation, insights, tuned


def tell_tuning(
    events: EventRecorder,
    ref: ObjectRef,
    tuned: tuning.Tuned,
    *,
    dry_run: bool,
    unit: str,
    log: Any,
) -> None:
    """An Event and a log line when the tuner changed or confirmed K."""
    if tuned.change is None:
        return
    draft_length_event(events, ref, tuned.change, dry_run=dry_run, unit=unit)
    log.info(
        "draft_length",
        cause=tuned.change.cause.value,
        from_k=tuned.change.from_k,
        to_k=tuned.change.to_k,
        reason=tuned.change.reason,
    )


class Diagnoses:
    """The diagnosis findings last reported per resource, so each change is told once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reported: dict[tuple[str, str], list[str]] = {}

    def report(
        self,
        events: EventRecorder,
        ref: ObjectRef,
        insights: Insights,
        previous: CanaryStatus,
        *,
        unit: str,
    ) -> None:
        """Emit the diagnosis Event when the findings changed. The last set this process
        reported (a window without findings does not reset it, so causes that come and go are
        told once); after a restart, the status's."""
        key = (ref.namespace, ref.name)
        with self._lock:
            reported = self._reported.get(key)
            known = reported is not None
        if reported is None:
            reported = list(previous.insights.findings) if previous.insights else []
        found = [c.value for c in insights.findings()]
        if (
            diagnosis_event(events, ref, found, reported, insights.explain(), unit=unit)
            or not known
        ):
            with self._lock:
                self._reported[key] = found or reported
