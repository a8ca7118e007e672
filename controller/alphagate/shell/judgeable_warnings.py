"""CanaryJudgeable for one resource, and its Warning told once per change rather than every
interval (as `timing_warnings` does for TimingFits).

The typed cause comes from the acceptance checks' evidence (`Judgeability`, core/blocksize.py);
the condition from `kube.freshness.canary_judgeable`, the Event from `kube.events`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from alphagate.core.model import Evaluation
from alphagate.kube.events import EventRecorder, ObjectRef, unjudgeable_event
from alphagate.kube.freshness import canary_judgeable, unjudgeable


class JudgeableWarnings:
    """Per resource, the unjudgeable causes last warned about (generation and, per unit, the
    cause and the window that would do): an Event and a log line once, not every interval."""

    def __init__(self, events: EventRecorder) -> None:
        self.events = events
        self._lock = threading.Lock()
        self._warned: dict[tuple[str, str], tuple[Any, ...]] = {}

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._warned.pop((namespace, name), None)

    def check(
        self,
        evaluations: Sequence[tuple[str, Evaluation]],
        conditions: list[Any],
        *,
        ref: ObjectRef,
        generation: int,
        now: float,
        log: Any,
    ) -> list[Any]:
        """CanaryJudgeable from the units' evaluations; a Warning Event and a log line when the
        causes change (a window judged again clears them, so a relapse warns again)."""
        found = unjudgeable(evaluations)
        key = (ref.namespace, ref.name)
        seen = (generation, tuple((u, w.cause, w.window_seconds) for u, w in found))
        with self._lock:
            new = bool(found) and self._warned.get(key) != seen
            if found:
                self._warned[key] = seen
            elif any(e.estimates for _, e in evaluations):
                self._warned.pop(key, None)
        if new:
            log.warning(
                "canary_unjudgeable",
                causes=[w.cause.value for _, w in found],
                needed_window_seconds=[w.window_seconds for _, w in found],
                needed_pods=[w.pods for _, w in found],
            )
            for unit, why in found:
                unjudgeable_event(self.events, ref, unit, why)
        return canary_judgeable(conditions, evaluations, now=now, generation=generation)
