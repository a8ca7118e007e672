"""Leader election on a coordination.k8s.io/v1 Lease, so two replicas never both flip.

The algorithm is client-go's: a candidate creates the Lease or takes it over once the holder
has not renewed for `lease_duration` *as observed on the candidate's own monotonic clock*
(so clock skew between nodes does not matter); the holder renews every `retry_period` and
gives up leadership when it could not renew for `renew_deadline`. Writes carry the Lease's
resourceVersion, so two candidates racing for an expired Lease get one 200 and one 409.
A clean stop releases the Lease (empty holder) so a standby takes over at once.

The Lease also records how the replicas split the work (`kube.coordination`): a leader writes
`leader` on every renewal, and a replica that finds the Lease live with another record (sharded
replicas renew it too) refuses to lead and says why (`on_refusal`).

The kubernetes package ships a LeaderElection, but it uses the global default client, cannot
be stopped, and exits the process on bad arguments; this one is stoppable, and its clock and
waits go through the clock seam (`alphagate.clock`).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from alphagate import clock as clockmod
from alphagate.errors import NotFoundError
from alphagate.kube.client import API_ERRORS, call, discard
from alphagate.kube.coordination import (
    DEFAULT_LEASE_NAME,
    GROUP_LABEL,
    RECORD_ROLE,
    ROLE_LABEL,
    Coordination,
    Refusal,
    guarded,
    tell_refusal,
)
from alphagate.logs import get as get_logger


def default_identity() -> str:
    """Unique even for two processes on one host."""
    host = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_refusal: Callable[[Refusal | None], None] | None = None,
        clock: clockmod.Clock = clockmod.MONOTONIC,
        wait: clockmod.Wait = clockmod.wait,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                f"{lease_duration} / {renew_deadline} / {retry_period}"
            )
        self._api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_refusal = on_refusal
        self.clock = clock  # monotonic seconds: expiry and renew deadlines are on this clock
        self.wait = wait
        self.coordination = Coordination.leader()
        self.refusal: Refusal | None = None
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time the observed record last changed
        self._last_renew = 0.0
        self.transitions = 0  # times this elector became leader
        self._log = get_logger("lease").bind(lease=f"{namespace}/{name}", identity=self.identity)

    @property
    def is_leader(self) -> bool:
        """Leading, and the last renewal is fresh: a process that was stalled (GC, CPU
        starvation) past its renew deadline is not the leader, even before its loop notices."""
        return self._leading.is_set() and self.clock() - self._last_renew < self.renew_deadline

    def wait_until_leader(self, timeout: float) -> bool:
        return self._leading.wait(timeout)

    def holder(self) -> str | None:
        """None: nobody, or no Lease."""
        try:
            lease = call(
                f"read Lease {self.namespace}/{self.name}",
                lambda: self._api.read_namespaced_lease(self.name, self.namespace),
            )
        except NotFoundError:
            return None
        return (lease.spec.holder_identity if lease.spec else None) or None

    def _spec(self, *, acquire: datetime | None, transitions: int) -> client.V1LeaseSpec:
        now = datetime.now(UTC)
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, math.ceil(self.lease_duration)),
            acquire_time=acquire or now,
            renew_time=now,
            lease_transitions=transitions,
        )

    def _record(self, meta: client.V1ObjectMeta) -> client.V1ObjectMeta:
        """With the labels sharded replicas list their Leases by."""
        meta.annotations = {**(meta.annotations or {}), **self.coordination.annotations()}
        meta.labels = {**(meta.labels or {}), GROUP_LABEL: self.name, ROLE_LABEL: RECORD_ROLE}
        return meta

    def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except client.ApiException as exc:
            if exc.status != 404:
                self._log.info("lease_read_failed", status=exc.status)
                return False
            body = client.V1Lease(
                metadata=self._record(
                    client.V1ObjectMeta(name=self.name, namespace=self.namespace)
                ),
                spec=self._spec(acquire=None, transitions=0),
            )
            try:
                self._api.create_namespaced_lease(self.namespace, body)
            except client.ApiException as create_exc:
                self._log.info("lease_create_failed", status=create_exc.status)
                return False
            self._observed, self._observed_at = (self.identity, ""), now
            self._refused(None)
            return True
        except API_ERRORS as exc:  # unreachable API: not leader this round
            self._log.info("lease_read_failed", error=str(exc), error_type=type(exc).__name__)
            return False

        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        renew = spec.renew_time.isoformat() if spec.renew_time else ""
        if self._observed != (holder, renew):
            self._observed, self._observed_at = (holder, renew), now
        transitions = int(spec.lease_transitions or 0)
        if holder and holder != self.identity:
            duration = float(spec.lease_duration_seconds or self.lease_duration)
            if self._observed_at + duration > now:
                # held by someone else and not expired on our clock: a standby, unless the
                # Lease records another way of splitting the work (then say so)
                meta = lease.metadata
                recorded = Coordination.recorded(meta.annotations if meta is not None else None)
                where = f"{self.namespace}/{self.name}"
                self._refused(
                    None
                    if recorded == self.coordination
                    else Refusal(where, self.coordination, recorded, holder)
                )
                return False
        if holder == self.identity:
            new_spec = self._spec(acquire=spec.acquire_time, transitions=transitions)
        else:
            new_spec = self._spec(acquire=None, transitions=transitions + 1)
        lease.spec = new_spec
        lease.metadata = self._record(lease.metadata or client.V1ObjectMeta(name=self.name))
        try:
            discard(
                self._api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _preload_content=False
                )
            )
        except client.ApiException as exc:
            self._log.info("lease_update_failed", status=exc.status)
            return False
        except API_ERRORS as exc:  # the transport: not leader this round
            self._log.info("lease_update_failed", error=str(exc), error_type=type(exc).__name__)
            return False
        self._refused(None)
        return True

    def _refused(self, refusal: Refusal | None) -> None:
        if refusal == self.refusal:
            return
        self.refusal = refusal
        tell_refusal(self._log, refusal, self.coordination, self.on_refusal)

    def release(self) -> None:
        """Empty holder, so a standby need not wait."""
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = datetime.now(UTC)
            self._api.replace_namespaced_lease(self.name, self.namespace, lease)
            self._log.info("lease_released")
        except API_ERRORS as exc:  # best effort: the lease expires anyway
            self._log.info("lease_release_failed", error=str(exc), error_type=type(exc).__name__)

    def run_round(self) -> None:
        started = self.clock()  # a renewal counts from before its request: conservative
        if self.try_acquire_or_renew():
            self._last_renew = started
            self._set_leading(True)
            return
        if self._leading.is_set() and self.clock() - self._last_renew >= self.renew_deadline:
            self._log.warning("leadership_lost", since_renew=self.clock() - self._last_renew)
            self._set_leading(False)

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self._stop
        while not stop.is_set():
            self.run_round()
            self.wait(stop, self.retry_period)
        if self._leading.is_set():
            self._set_leading(False)

    def _set_leading(self, leading: bool) -> None:
        """Flip the leading flag, then run the callback (so the work the callback starts sees
        `is_leader` already true, and after a stop already false)."""
        if leading == self._leading.is_set():
            return
        if leading:
            self.transitions += 1
            self._log.info("leadership_acquired")
            self._leading.set()
            guarded(self._log, "leader_callback_failed", self.on_started_leading)
        else:
            self._leading.clear()
            self._log.info("leadership_stopped")
            guarded(self._log, "leader_callback_failed", self.on_stopped_leading)

    def start(self) -> LeaderElector:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), daemon=True, name=f"lease:{self.identity}"
        )
        self._thread.start()
        return self

    def stop(self, *, release: bool = True, timeout: float = 5.0) -> None:
        """Stop campaigning; with `release`, hand the Lease back. Without it, the Lease simply
        stops being renewed (what a crash looks like to the others)."""
        was_leader = self._leading.is_set()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._set_leading(False)  # stop acting before the Lease is handed back
        if release and was_leader:
            self.release()


__all__ = ["LeaderElector", "default_identity"]
