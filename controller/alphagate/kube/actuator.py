"""The actuator: turns a decision into (at most) one patch of a canary Deployment or Argo Rollout.

It edits only the vLLM container's `--speculative-config` (via `kube.args`), and writes the
controller's state into the Deployment's annotations *in the same patch*, so a controller
killed between this patch and its status write finds the flip already recorded on the
Deployment and does not flip again. Every write of that record bumps its generation
(`alphagate.io/record`), and a write is refused (RecordChangedError, nothing patched) when the
record is newer than the one the decision was made from: a lost reply, a crash or another
replica can never make one decision flip twice. One SpeculativeCanary owns a Deployment
(`alphagate.io/owner`, written by `claim` before any flip); the actuator never patches one
another canary owns (ClaimedError). It is idempotent (no request when nothing would change),
uses optimistic concurrency (the patch carries the resourceVersion it was computed from; a 409
re-reads and retries a bounded number of times, then ConflictError), and reports the
Deployment's rollout as the core's `Rollout` so data from a rollout and its warm-up is never
judged. Every failure is one of our KubeErrors, with a Warning Event when a recorder is given.
Dry-run never writes. Argo Rollouts and KServe InferenceServices get the same edit, record and
safeguards; how they are read and sent differs (`kube.workload`, `kube.inferenceservice`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from alphagate.config import WorkloadKind, WorkloadRef
from alphagate.core.model import Memory, Rollout, State
from alphagate.errors import (
    ClaimedError,
    ConflictError,
    KubeError,
    OwnerConflictError,
    RecordChangedError,
)
from alphagate.kube import args as argsmod
from alphagate.kube import inferenceservice as isvc
from alphagate.kube import ownership
from alphagate.kube.client import API_ERRORS, call, translate
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.refusals import claimed_message, refuse_rejected, warning_reason
from alphagate.kube.status.fields import rfc3339
from alphagate.kube.workload import (
    ANN_LAST_FLIP,
    ANN_MEMORY,
    ANN_OWNER,
    ANN_RECORD,
    ANN_SPECULATION,
    ANN_STATE,
    ROLLOUT_GROUP,
    ROLLOUT_PLURAL,
    ROLLOUT_VERSION,
    WorkloadState,
    json_patch,
    memory_annotation,
    merge_body,
    workload_state,
)

ANNOTATION_HISTORY: Final = 5  # transitions kept in the annotation copy of Memory


def _json_object(resp: Any) -> dict[str, Any]:
    """The object as the API server sent it. Decoding it into the client's model and back to
    a dict cost ~45x the JSON parse (755 us against 16 us for a small Deployment); the fields
    alphagate reads are the same either way (camelCase keys, RFC 3339 strings)."""
    try:
        body = json.loads(resp.data)
    finally:
        resp.release_conn()
    if not isinstance(body, dict):
        raise ValueError(f"the answer is not a JSON object but {type(body).__name__}")
    return body


@dataclass(frozen=True, slots=True)
class ApplyResult:
    deployment: WorkloadState
    args_changed: bool  # the container args differ (or would, in dry-run) from before
    patched: bool  # a PATCH was accepted
    dry_run: bool
    attempts: int
    before: WorkloadState
    record: int = 0  # the record's generation after this apply (written or already there)


class _Conflict(Exception):
    def __init__(self, error: KubeError) -> None:
        self.error = error
        super().__init__(str(error))


def deployment_state(dep: Any, container: str) -> WorkloadState:
    return workload_state(dep, container, WorkloadKind.DEPLOYMENT)


class Actuator:
    """Thread-safe; holds no decision state."""

    def __init__(
        self,
        api_client: Any,
        *,
        events: EventRecorder | None = None,
        max_attempts: int = 5,
        wait_initial: float = 0.05,
        wait_max: float = 1.0,
        field_manager: str = "alphagate",
    ) -> None:
        self._api_client = api_client
        self._apps = client.AppsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self.events = events
        self.max_attempts = max_attempts
        self.wait_initial = wait_initial
        self.wait_max = wait_max
        self.field_manager = field_manager
        # When this process first saw a generation complete, for Deployments whose status
        # carries no Progressing condition time.
        self._first_complete: dict[tuple[str, str, int], float] = {}
        self._lock = threading.Lock()

    def read(self, namespace: str, ref: WorkloadRef) -> WorkloadState:
        what = f"read {ref.kind.value} {namespace}/{ref.name}"
        if ref.kind is WorkloadKind.INFERENCE_SERVICE:
            return isvc.read(self._custom, self._apps, self._as_dict, namespace, ref)
        if ref.kind is WorkloadKind.ROLLOUT:
            obj = call(
                what,
                lambda: self._custom.get_namespaced_custom_object(
                    ROLLOUT_GROUP, ROLLOUT_VERSION, namespace, ROLLOUT_PLURAL, ref.name
                ),
            )
            return workload_state(obj, ref.container, ref.kind)
        dep = call(
            what,
            lambda: _json_object(
                self._apps.read_namespaced_deployment(ref.name, namespace, _preload_content=False)
            ),
        )
        return workload_state(dep, ref.container, ref.kind)

    def _as_dict(self, obj: Any) -> dict[str, Any]:
        out = self._api_client.sanitize_for_serialization(obj)
        return out if isinstance(out, dict) else {}

    def rollout(self, dep: WorkloadState, *, now: float) -> Rollout:
        if not dep.rollout_complete:
            return Rollout(in_progress=True, completed_at=None, speculation_on=dep.speculation_on)
        completed = dep.completed_at
        if completed is None:
            key = (dep.namespace, dep.name, dep.generation)
            with self._lock:
                completed = self._first_complete.setdefault(key, now)
        return Rollout(in_progress=False, completed_at=completed, speculation_on=dep.speculation_on)

    def apply(
        self,
        namespace: str,
        ref: WorkloadRef,
        *,
        speculative_config: Mapping[str, Any] | None,
        state: State | str,
        memory: Memory | None,
        now: float,
        dry_run: bool = False,
        owner: str = "",
        involved: ObjectRef | None = None,
        record_state: bool = True,
        expect_record: int | None = None,
    ) -> ApplyResult:
        """Make the container run `speculative_config` (None: off) and record `state`/`memory`.

        With `expect_record` (the record generation the decision was made from), an object
        whose record is newer is not touched: RecordChangedError. Raises ConflictError after
        `max_attempts` 409s, or another KubeError; each but RecordChangedError with a Warning
        Event on `involved` when a recorder was given.
        """
        what = f"{ref.kind.value} {namespace}/{ref.name}"
        attempts = 0
        first: WorkloadState | None = None
        try:
            for attempt in self._retrying():
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    dep = self.read(namespace, ref)
                    if first is None:
                        first = dep
                    result = self._apply_once(
                        dep,
                        ref,
                        speculative_config=speculative_config,
                        state=str(state),
                        memory=memory,
                        now=now,
                        dry_run=dry_run,
                        owner=owner,
                        record_state=record_state,
                        attempts=attempts,
                        first=first,
                        expect_record=expect_record,
                    )
            return result
        except _Conflict as exc:
            err = ConflictError(
                f"{what}: still conflicting after {attempts} attempts (someone else keeps "
                f"changing it): {exc.error}",
                status=409,
                reason="Conflict",
            )
            self._warn(involved, Reason.CONFLICT_RETRIES_EXHAUSTED, str(err))
            raise err from exc
        except RetryError as exc:  # pragma: no cover - reraise=True makes this unreachable
            raise KubeError(f"{what}: {exc}") from exc
        except RecordChangedError:
            raise
        except KubeError as err:
            self._warn(involved, warning_reason(err), str(err))
            raise

    def _apply_once(
        self,
        dep: WorkloadState,
        ref: WorkloadRef,
        *,
        speculative_config: Mapping[str, Any] | None,
        state: str,
        memory: Memory | None,
        now: float,
        dry_run: bool,
        owner: str,
        record_state: bool,
        attempts: int,
        first: WorkloadState,
        expect_record: int | None = None,
    ) -> ApplyResult:
        if expect_record is not None and dep.record > expect_record:
            raise RecordChangedError(
                f"{dep.what}: its record is at generation {dep.record}, newer than the "
                f"{expect_record} this decision was made from (written since by a reply that "
                "was lost or by another replica): not patched; the next evaluation resumes "
                "from the record",
                reason="RecordChanged",
            )
        if owner and dep.owner and dep.owner != owner:
            raise ClaimedError(claimed_message(dep, owner), reason="TargetClaimed")
        refuse_rejected(dep, speculative_config)
        new_args = argsmod.edit(dep.args, speculative_config)
        args_changed = new_args != list(dep.args)
        annotations = self._annotations(
            dep,
            state=state,
            memory=memory,
            now=now,
            flip=args_changed,
            owner=owner,
            speculation_on=speculative_config is not None,
        )
        stale_state = record_state and any(
            dep.annotations.get(k) != v
            for k, v in annotations.items()
            if k not in (ANN_MEMORY, ANN_RECORD)
        )
        if dep.record_restarts and not args_changed:
            stale_state = False  # the record alone would restart the pods: it rides on flips
        if dry_run or not (args_changed or stale_state):
            return ApplyResult(dep, args_changed, False, dry_run, attempts, first, dep.record)
        record = max(dep.record, expect_record or 0) + 1
        annotations[ANN_RECORD] = str(record)
        if memory is not None:
            annotations[ANN_MEMORY] = self._memory_text(
                memory.model_copy(update={"record": record})
            )
        if args_changed:
            owner_name = ownership.yields_to(dep)
            if owner_name is not None:
                raise OwnerConflictError(
                    ownership.conflict_message(dep, owner_name, self.field_manager),
                    reason="OwnerReverted",
                )
        patched = self._send_once(
            "patch", dep, ref, annotations, new_args if args_changed else None
        )
        after = self._after(patched, ref)
        return ApplyResult(after, args_changed, True, False, attempts, first, record)

    def _retrying(self) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential(multiplier=self.wait_initial, max=self.wait_max)
            + wait_random(0, self.wait_initial),
            retry=retry_if_exception_type(_Conflict),
            reraise=True,
        )

    def _send_once(
        self,
        verb: str,
        dep: WorkloadState,
        ref: WorkloadRef,
        annotations: Mapping[str, str],
        args: list[str] | None,
    ) -> dict[str, Any]:
        """`_send`, its failures as KubeErrors; a 409 as `_Conflict`, to retry."""
        try:
            return self._send(dep, ref, annotations, args)
        except client.ApiException as exc:
            err = translate(exc, f"{verb} {dep.what}")
            if isinstance(err, ConflictError):
                raise _Conflict(err) from exc
            raise err from exc
        except API_ERRORS as exc:
            raise translate(exc, f"{verb} {dep.what}") from exc

    @staticmethod
    def _after(patched: dict[str, Any], ref: WorkloadRef) -> WorkloadState:
        """The object as the patch left it. An InferenceService's answer lacks its Deployment,
        which KServe re-renders after the patch: rolled out it is not, until read again."""
        if ref.kind is WorkloadKind.INFERENCE_SERVICE:
            return isvc.isvc_state(patched, ref.container, None)
        return workload_state(patched, ref.container, ref.kind)

    def _send(
        self,
        dep: WorkloadState,
        ref: WorkloadRef,
        annotations: Mapping[str, str],
        new_args: list[str] | None,
    ) -> dict[str, Any]:
        custom = {
            WorkloadKind.ROLLOUT: (ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_PLURAL),
            WorkloadKind.INFERENCE_SERVICE: (isvc.GROUP, isvc.VERSION, isvc.PLURAL),
        }.get(ref.kind)
        if custom is not None:
            group, version, plural = custom
            out = self._custom.patch_namespaced_custom_object(
                group,
                version,
                dep.namespace,
                plural,
                ref.name,
                json_patch(dep, annotations, new_args),
                field_manager=self.field_manager,
                _content_type="application/json-patch+json",
            )
            return out if isinstance(out, dict) else {}
        return _json_object(
            self._apps.patch_namespaced_deployment(
                ref.name,
                dep.namespace,
                merge_body(dep, annotations, new_args),
                field_manager=self.field_manager,
                _preload_content=False,
            )
        )

    @staticmethod
    def _annotations(
        dep: WorkloadState,
        *,
        state: str,
        memory: Memory | None,
        now: float,
        flip: bool,
        owner: str,
        speculation_on: bool,
    ) -> dict[str, str]:
        out = {ANN_STATE: state, ANN_SPECULATION: "on" if speculation_on else "off"}
        if owner:
            out[ANN_OWNER] = owner
        if memory is not None:
            out[ANN_MEMORY] = Actuator._memory_text(memory)
        if flip:
            out[ANN_LAST_FLIP] = rfc3339(now)
        elif ANN_LAST_FLIP in dep.annotations:
            out[ANN_LAST_FLIP] = dep.annotations[ANN_LAST_FLIP]
        return out

    @staticmethod
    def _memory_text(memory: Memory) -> str:
        trimmed = memory.model_copy(update={"history": memory.history[-ANNOTATION_HISTORY:]})
        return memory_annotation(trimmed)

    def claim(
        self,
        namespace: str,
        ref: WorkloadRef,
        *,
        owner: str,
        owner_exists: Callable[[str], bool],
        involved: ObjectRef | None = None,
    ) -> tuple[WorkloadState, str]:
        """Make `owner` (`namespace/name`) the object's one canary; returns the object and the
        stale owner it took over from ("" if none).

        A claim by another canary that still exists (`owner_exists`) is refused with
        ClaimedError; one by a canary that is gone is taken over. Written with the
        resourceVersion it was read at, so of two canaries claiming at once one wins.
        """
        what = f"{ref.kind.value} {namespace}/{ref.name}"
        try:
            for attempt in self._retrying():
                with attempt:
                    dep = self.read(namespace, ref)
                    if dep.owner == owner:
                        return dep, ""
                    stale = dep.owner
                    if stale and owner_exists(stale):
                        raise ClaimedError(claimed_message(dep, owner), reason="TargetClaimed")
                    if dep.record_restarts and not stale:
                        return dep, ""  # the claim rides on the first flip (module text)
                    patched = self._send_once("claim", dep, ref, {ANN_OWNER: owner}, None)
                    return self._after(patched, ref), stale
        except _Conflict as exc:
            err = ConflictError(
                f"{what}: claim still conflicting after {self.max_attempts} attempts: {exc.error}",
                status=409,
                reason="Conflict",
            )
            self._warn(involved, Reason.CONFLICT_RETRIES_EXHAUSTED, str(err))
            raise err from exc
        except KubeError as err:
            self._warn(involved, warning_reason(err), str(err))
            raise
        raise KubeError(f"{what}: claim not attempted")  # pragma: no cover - reraise=True

    def _warn(self, involved: ObjectRef | None, reason: Reason, message: str) -> None:
        if self.events is not None and involved is not None:
            self.events.warning(involved, reason, message)


__all__ = [
    "Actuator",
    "ApplyResult",
    "deployment_state",
]
