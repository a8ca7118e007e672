"""TimingFits for one resource, and its Warning told once per change rather than every interval.

The advice comes from `core.timing` against the scrape interval the source saw; the condition
from `kube.freshness.timing_fits`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import timing
from alphagate.core.model import Observation
from alphagate.kube.events import EventRecorder, ObjectRef, timing_events
from alphagate.kube.freshness import timing_fits
from alphagate.shell.reporting import METRIC_ERRORS, NullRecorder, Recorder


class TimingWarnings:
    """Per resource, the timing problems last warned about (generation, scrape interval,
    problems): an Event and a log line once, not every interval; the metric every interval
    (`alphagate_timing_problem`, for its alert)."""

    def __init__(self, events: EventRecorder, recorder: Recorder | None = None) -> None:
        self.events = events
        self.recorder: Recorder = recorder if recorder is not None else NullRecorder()
        self._lock = threading.Lock()
        self._warned: dict[tuple[str, str], tuple[Any, ...]] = {}

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._warned.pop((namespace, name), None)

    def check(
        self,
        spec: SpeculativeCanarySpec,
        observation: Observation,
        conditions: list[Any],
        *,
        ref: ObjectRef,
        generation: int,
        now: float,
        log: Any,
    ) -> list[Any]:
        """TimingFits from core/timing against the scrape interval the source saw; a Warning
        Event and a log line once per policy generation, scrape interval and problems."""
        scrape = timing.scrape_interval(spec, observation.scrape_interval_seconds)
        advice = timing.advise(spec, scrape)
        key = (ref.namespace, ref.name)
        seen = (generation, scrape, tuple(w.problem for w in advice))
        with self._lock:
            new = bool(advice) and self._warned.get(key) != seen
            self._warned[key] = seen
        with contextlib.suppress(*METRIC_ERRORS):
            self.recorder.timing(
                namespace=ref.namespace,
                canary=ref.name,
                problems=sorted({w.problem.value for w in advice}),
            )
        if new:
            log.warning(
                "timing_too_short",
                problems=[w.problem.value for w in advice],
                fields=[w.field for w in advice],
                scrape_interval_seconds=scrape,
            )
            timing_events(self.events, ref, advice)
        return timing_fits(conditions, advice, scrape, now=now, generation=generation)
