"""Kubernetes Events for every transition and every refusal, on the SpeculativeCanary.

`kubectl describe speculativecanary X` then tells the story, with the numbers in each
message. Events are best effort: a failure to record one is logged and
counted, never raised, so it cannot turn a good decision into a crash. Repeats of the same
(object, type, reason, message) within `dedupe_seconds` bump the existing Event's count
instead of creating a new one, as kubelet's recorder does.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from kubernetes import client

from alphagate.config import API_VERSION, KIND, SpeculativeCanarySpec
from alphagate.core.model import (
    Action,
    Alert,
    Cause,
    DraftCause,
    DraftChange,
    Evaluation,
    Judgeability,
    LatencyEvidence,
    State,
    Unjudgeable,
    Verdict,
)
from alphagate.core.timing import TimingWarning
from alphagate.errors import KubeError
from alphagate.kube import args as argsmod
from alphagate.kube.client import call, discard
from alphagate.logs import get as get_logger

COMPONENT: Final = "alphagate"
MAX_MESSAGE: Final = 1024


class Reason(StrEnum):
    """Stable: people filter on them."""

    SPECULATION_ENABLED = "SpeculationEnabled"
    SPECULATION_DISABLED = "SpeculationDisabled"
    STATE_CHANGED = "StateChanged"
    PROMOTED = "Promoted"
    PAUSED = "Paused"
    RESUMED = "Resumed"
    COMMAND = "CommandHandled"
    FLIP_REFUSED = "FlipRefused"
    WOULD_FLIP = "DryRunWouldFlip"
    SOURCE_ERRORS = "SourceErrors"
    CONFLICT_RETRIES_EXHAUSTED = "ConflictRetriesExhausted"
    FORBIDDEN = "Forbidden"
    NOT_FOUND = "TargetNotFound"
    PATCH_FAILED = "PatchFailed"
    ROLLOUT_TIMEOUT = "RolloutTimeout"
    INVALID_SPEC = "InvalidSpec"
    ARGS_UNEDITABLE = "ArgsUneditable"
    DRIFT_CORRECTED = "DriftCorrected"
    OWNER_REVERTED = "OwnerReverted"
    TARGET_CLAIMED = "TargetClaimed"
    CLAIM_TAKEN_OVER = "ClaimTakenOver"
    RESUMED_FROM_RECORD = "ResumedFromRecord"
    ALERT = "Alert"
    DRAFT_LENGTH_CHANGED = "DraftLengthChanged"
    DRAFT_LENGTH_REVERTED = "DraftLengthReverted"
    DRAFT_LENGTH_CONFIRMED = "DraftLengthConfirmed"
    DIAGNOSIS = "LatencyDiagnosis"
    FORCED = "CommandForced"  # a manual command carried past its guards with --force
    VERDICT_STALE = "VerdictStale"  # Probing/On without a conclusive verdict for too long
    TIMING_TOO_SHORT = "TimingTooShort"  # interval/window too short for the scrape interval
    OWNERSHIP_REFUSED = "OwnershipRefused"  # on the coordination Lease (kube.coordination)
    OWNERSHIP_RESUMED = "OwnershipResumed"
    API_BUDGET_EXCEEDED = "ApiBudgetExceeded"  # an evaluation deferred or a request refused
    QUERY_BUDGET_EXCEEDED = "QueryBudgetExceeded"  # a read deferred by a Prometheus budget
    CANARY_UNJUDGEABLE = "CanaryUnjudgeable"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    namespace: str
    name: str
    kind: str = KIND
    api_version: str = API_VERSION
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            kind=str(obj.get("kind", KIND)),
            api_version=str(obj.get("apiVersion", API_VERSION)),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
        )


@dataclass(slots=True)
class _Seen:
    name: str
    count: int
    first: datetime
    last_mono: float


class EventRecorder:
    """Thread-safe; never raises."""

    def __init__(
        self,
        api_client: Any,
        *,
        component: str = COMPONENT,
        instance: str | None = None,
        dedupe_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
        on_warning: Callable[[ObjectRef, str], None] | None = None,
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        # Called for every Warning, deduplicated or not (the exporter counts them for alerts).
        self.on_warning = on_warning
        self.component = component
        self.instance = instance or socket.gethostname()
        self.dedupe_seconds = dedupe_seconds
        self._clock = clock
        self._seen: dict[tuple[str, str, str, str, str, str], _Seen] = {}
        self._lock = threading.Lock()
        self.failures = 0

        self.emitted: deque[tuple[str, str, str, str]] = deque(maxlen=1000)
        self._log = get_logger("events")

    def normal(self, ref: ObjectRef, reason: str, message: str) -> bool:
        return self.emit(ref, EventType.NORMAL, reason, message)

    def warning(self, ref: ObjectRef, reason: str, message: str) -> bool:
        if self.on_warning is not None:
            try:
                self.on_warning(ref, str(reason))
            except Exception as exc:  # noqa: BLE001 - last resort: a metrics hook must never break the loop
                self._log.warning(
                    "on_warning_failed", error=repr(exc), error_type=type(exc).__name__
                )
        return self.emit(ref, EventType.WARNING, reason, message)

    def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> bool:
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        key = (ref.namespace, ref.kind, ref.name, str(type_), str(reason), message)
        now = datetime.fromtimestamp(self._clock(), UTC).replace(microsecond=0)
        mono = time.monotonic()
        with self._lock:
            if len(self._seen) > 512:  # forget aggregation keys past their window
                for k in [
                    k for k, v in self._seen.items() if mono - v.last_mono > self.dedupe_seconds
                ]:
                    del self._seen[k]
            self.emitted.append((f"{ref.namespace}/{ref.name}", str(type_), str(reason), message))
            seen = self._seen.get(key)
            if seen is not None and mono - seen.last_mono <= self.dedupe_seconds:
                seen.count += 1
                seen.last_mono = mono
                count, name = seen.count, seen.name
            else:
                seen = None
                count, name = 1, f"{ref.name}.{time.time_ns():x}"
        try:
            if seen is not None:
                call(
                    f"update event {ref.namespace}/{name}",
                    lambda: discard(
                        self._core.patch_namespaced_event(
                            name,
                            ref.namespace,
                            {"count": count, "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                            _content_type="application/merge-patch+json",
                            _preload_content=False,
                        )
                    ),
                )
            else:
                body = client.CoreV1Event(
                    metadata=client.V1ObjectMeta(name=name, namespace=ref.namespace),
                    involved_object=client.V1ObjectReference(
                        api_version=ref.api_version,
                        kind=ref.kind,
                        name=ref.name,
                        namespace=ref.namespace,
                        uid=ref.uid or None,
                        resource_version=ref.resource_version or None,
                    ),
                    reason=str(reason),
                    message=message,
                    type=str(type_),
                    count=1,
                    first_timestamp=now,
                    last_timestamp=now,
                    source=client.V1EventSource(component=self.component, host=self.instance),
                    reporting_component=self.component,
                    reporting_instance=self.instance,
                    action=str(reason),
                )
                call(
                    f"create event {ref.namespace}/{name}",
                    lambda: discard(
                        self._core.create_namespaced_event(
                            ref.namespace, body, _preload_content=False
                        )
                    ),
                )
                with self._lock:
                    self._seen[key] = _Seen(name, 1, now, mono)
            return True
        except (KubeError, ValueError) as exc:  # events are best effort by design
            with self._lock:
                self.failures += 1
                if seen is not None:
                    self._seen.pop(key, None)
            self._log.warning(
                "event_not_recorded",
                object=f"{ref.namespace}/{ref.name}",
                reason=str(reason),
                error=str(exc),
            )
            return False


def latency_note(e: Evaluation) -> str:
    """The latency guard's quantile at its buckets, for a flip's Event: the effective margin
    (the regression the Fail side is sure to see) and whether "within" was shown; "" when no
    latency check got that far."""
    notes = []
    for c in e.checks:
        ev = c.evidence
        if not isinstance(ev, LatencyEvidence) or ev.tail is None:
            continue
        t = ev.tail
        q = f"P{ev.quantile * 100:g}"
        sure = t.effective_margin
        margin = f"effective margin {sure:+.0%}" if math.isfinite(sure) else "no sure margin"
        where = f" [{c.slice}]" if c.slice else ""
        notes.append(f"{q}{where} {margin}, within {t.within.value}")
    return f" (latency: {'; '.join(notes)})" if notes else ""


def decision_events(
    events: EventRecorder,
    ref: ObjectRef,
    spec: SpeculativeCanarySpec,
    e: Evaluation,
    *,
    dry_run: bool,
    unit: str,
    errors: Sequence[str],
    speculative_config: Mapping[str, Any] | None = None,
) -> None:
    """The Events one applied decision tells `kubectl describe`: the transition (its reason from
    the typed cause) and the alerts. `unit`: the perSlice unit ("" for combined)."""
    where = f" [slice {unit}]" if unit else ""
    alpha = ""
    if e.combined is not None and math.isfinite(e.combined.value):
        alpha = (
            f" (alpha {e.combined.value:.3f} [{e.combined.lower:.3f}, {e.combined.upper:.3f}],"
            f" {e.combined.drafts:.0f} drafts)"
        )
    alpha += latency_note(e)
    config = argsmod.render(
        dict(speculative_config) if speculative_config is not None else spec.speculative_config
    )
    if e.action in (Action.ENABLE, Action.DISABLE) and dry_run:
        events.normal(
            ref, Reason.WOULD_FLIP, f"dry-run: would {e.action.value}{where}: {e.reason}{alpha}"
        )
    elif e.action is Action.ENABLE:
        events.normal(
            ref,
            Reason.SPECULATION_ENABLED,
            f"--speculative-config {config} on{where}: {e.reason}{alpha}",
        )
    elif e.action is Action.DISABLE:
        kind = "Warning" if e.verdict in (Verdict.FAIL, Verdict.ERROR) else "Normal"
        events.emit(
            ref,
            kind,
            Reason.SPECULATION_DISABLED,
            f"--speculative-config removed{where}: {e.reason}{alpha}",
        )
    elif e.action is Action.PROMOTE:
        events.normal(ref, Reason.PROMOTED, f"{e.reason}{where}")
    elif e.transition is not None:
        t = e.transition
        reason = Reason.STATE_CHANGED
        if t.to_state is State.PAUSED:
            reason = Reason.PAUSED
        elif t.from_state is State.PAUSED:
            reason = Reason.RESUMED
        elif t.cause is Cause.MANUAL:
            reason = Reason.COMMAND
        if t.cause is Cause.REFUSED:
            events.warning(ref, Reason.FLIP_REFUSED, f"{t.reason}{where}")
        else:
            events.normal(
                ref,
                reason,
                f"{t.from_state.value} -> {t.to_state.value}{where}: {t.reason}{alpha}",
            )
    done = e.transition
    if done is not None and done.forced and done.command is not None:
        guards = ", ".join(g.value for g in done.guards) or "none in the way"
        events.warning(
            ref,
            Reason.FORCED,
            f"manual {done.command.value} --force{where}: guards overridden: {guards}",
        )
    # Alerts repeat every interval while they last, with a stable message, so the recorder
    # folds them into one Event with a growing count (what `kubectl describe` shows as
    # "x12 over 6m") instead of one Event per interval.
    for alert in e.alerts:
        if alert is Alert.SOURCE_ERRORS:
            first = errors[0] if errors else "no details"
            events.warning(ref, Reason.SOURCE_ERRORS, f"metrics source failing{where}: {first}")
        elif alert is Alert.FLIP_BUDGET:
            events.warning(
                ref,
                Reason.FLIP_REFUSED,
                f"flip budget exhausted{where}: at most {spec.timing.max_flips_per_hour} "
                "flips per hour; holding",
            )
        elif alert is Alert.VERDICT_STALE:
            events.warning(
                ref,
                Reason.VERDICT_STALE,
                f"no conclusive verdict for over {spec.staleness.after_seconds:g} s while "
                f"speculating{where}: speculation runs unchecked "
                f"(staleness.failSafe {spec.staleness.fail_safe.value})",
            )
        elif alert is Alert.ROLLOUT_TIMEOUT:
            events.warning(
                ref,
                Reason.ROLLOUT_TIMEOUT,
                f"rollout not complete after {spec.timing.rollout_timeout_seconds:g} s{where}",
            )
        else:
            events.warning(ref, Reason.ALERT, f"{alert}{where}")


def timing_events(events: EventRecorder, ref: ObjectRef, warnings: Sequence[TimingWarning]) -> None:
    """The caller sends these once per policy generation and scrape interval."""
    for w in warnings:
        events.warning(ref, Reason.TIMING_TOO_SHORT, w.message)


def unjudgeable_event(events: EventRecorder, ref: ObjectRef, unit: str, why: Judgeability) -> None:
    """The caller sends it once per change, not every evaluation."""
    events.warning(ref, Reason.CANARY_UNJUDGEABLE, judgeable_message(why, unit))


def judgeable_message(why: Judgeability, unit: str = "") -> str:
    """The words for a `Judgeability` (conditions and Events; nothing parses them)."""
    where = f" [slice {unit}]" if unit else ""
    return (
        f"alpha cannot be judged{where}: {UNJUDGEABLE_WORDS[why.cause]} "
        f"{why.block_seconds:g} s, so a {why.current_window_seconds:g} s window of one pod holds "
        f"fewer than two; timing.windowSeconds {why.window_seconds:g} or {why.pods} canary pods "
        f"would be judged"
    )


UNJUDGEABLE_WORDS: Final = {
    Unjudgeable.REQUESTS_OUTLIVE_WINDOW: "requests decode so long that a batch must span",
    Unjudgeable.DECODE_TIMES_UNKNOWN: (
        "the pods export no vllm:request_decode_time_seconds, so batches span"
    ),
    Unjudgeable.BLOCKS_TOO_LONG: "acceptance.batchSeconds makes batches span",
    Unjudgeable.DRAFTS_IN_ONE_BLOCK: "every draft came in one burst; a batch spans",
    Unjudgeable.WINDOW_TOO_SHORT: "a batch spans at least one sample of the pod,",
}


def list_events(
    api_client: Any, namespace: str, name: str, kind: str = KIND
) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api_client)
    result = call(
        f"list events for {namespace}/{name}",
        lambda: core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}"
        ),
    )
    out = []
    for ev in result.items or []:
        stamp = ev.last_timestamp or ev.event_time or ev.first_timestamp
        out.append(
            {
                "type": ev.type or "",
                "reason": ev.reason or "",
                "message": ev.message or "",
                "count": ev.count or 1,
                "time": stamp.isoformat() if stamp is not None else "",
            }
        )
    out.sort(key=lambda e: str(e["time"]))
    return out


def draft_length_event(
    events: EventRecorder, ref: ObjectRef, change: DraftChange, *, dry_run: bool, unit: str
) -> None:
    """One Event per K decision of the tuner (core/tuning.py), its reason from the typed cause."""
    where = f" [slice {unit}]" if unit else ""
    move = f"num_speculative_tokens {change.from_k} -> {change.to_k}{where}"
    if change.cause is DraftCause.CONFIRMED:
        events.normal(
            ref,
            Reason.DRAFT_LENGTH_CONFIRMED,
            f"num_speculative_tokens {change.to_k}{where}: {change.reason}",
        )
    elif dry_run:
        events.normal(ref, Reason.WOULD_FLIP, f"dry-run: would set {move}: {change.reason}")
    elif change.cause is DraftCause.REVERT:
        events.warning(ref, Reason.DRAFT_LENGTH_REVERTED, f"{move}: {change.reason}")
    else:
        events.normal(ref, Reason.DRAFT_LENGTH_CHANGED, f"{move}: {change.reason}")


def diagnosis_event(
    events: EventRecorder,
    ref: ObjectRef,
    findings: Sequence[str],
    previous: Sequence[str],
    text: str,
    *,
    unit: str,
) -> bool:
    """A Warning naming the diagnosis's typed causes, once per change of the set; True if sent."""
    if not findings or set(findings) == set(previous):
        return False
    where = f" [slice {unit}]" if unit else ""
    events.warning(ref, Reason.DIAGNOSIS, f"{', '.join(findings)}{where}: {text}")
    return True
