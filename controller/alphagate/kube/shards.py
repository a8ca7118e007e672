"""Split the canaries between controller replicas: one Lease per shard, a stable hash per canary.

Every canary belongs to one of `shards` shards by a stable hash of ``namespace/name`` (SHA-256:
the same in every process, Python version and replica). Each shard has a Lease
(``<group>-shard-<i>``). A replica evaluates and acts on a canary only while it holds the
canary's shard Lease and renewed it within `renew_deadline` on its own monotonic clock; another
replica may take an un-renewed Lease only once it has seen it unchanged for `lease_duration`
on *its* clock (client-go's rule, as in :mod:`alphagate.kube.lease`), so at most one replica
acts on a canary at any time, whatever the clock skew between nodes.

Who should hold what: every replica renews a member Lease (``<group>-member-<identity>``). The
live members (renewed within `lease_duration` as this replica observed it), sorted, share the
shards round-robin: shard ``i`` goes to member ``i mod n``. A replica acquires the free or
expired shards assigned to it and releases the ones assigned to another live member, which
takes them on its next round. Any shard seen free or expired for `lease_duration` is taken by
whoever sees it (members may disagree for a round while one joins), so none waits longer than
about `lease_duration` plus a round. A replica that dies stops renewing its member and shard
Leases together; the others take its shards within `lease_duration` plus one `retry_period`.

Every replica of the group must hash with the same shard count, so the count is recorded on
the group's coordination Lease (:mod:`alphagate.kube.coordination` says why and how); a replica
holds shards only while its own write of that record is within `renew_deadline`. Members count
each other for the round-robin only when they record the same configuration.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from kubernetes import client

from alphagate.kube.client import API_ERRORS, discard
from alphagate.kube.coordination import (
    GROUP_LABEL,
    RECORD_ROLE,
    ROLE_LABEL,
    Coordination,
    Refusal,
    guarded,
    tell_refusal,
)
from alphagate.kube.lease import default_identity
from alphagate.logs import get as get_logger

DEFAULT_GROUP: Final = "alphagate"


def shard_of(namespace: str, name: str, shards: int) -> int:
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def assignment(members: list[str], shards: int) -> dict[int, str]:
    ordered = sorted(set(members))
    return {i: ordered[i % len(ordered)] for i in range(shards)} if ordered else {}


class ShardLeases:
    """`on_change(gained, lost)` runs after a round that changed what this replica holds (lost
    shards are already not held when it runs, so work for them has stopped)."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        shards: int,
        group: str = DEFAULT_GROUP,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[frozenset[int], frozenset[int]], None] | None = None,
        on_refusal: Callable[[Refusal | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                "sharding needs lease_duration > renew_deadline > retry_period > 0, got "
                f"{lease_duration} / {renew_deadline} / {retry_period}"
            )
        self._api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.shards = shards
        self.group = group
        self.identity = identity or default_identity()
        self.coordination = Coordination.sharded(shards)
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.on_refusal = on_refusal
        self.clock = clock
        self._renewed: dict[int, float] = {}  # shard -> monotonic time of our last renew
        self._confirmed: float | None = None  # round start of our last write of the record
        self._observed: dict[str, tuple[tuple[str, str], float]] = {}  # lease -> (rec, since)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.members: list[str] = []  # live members of our configuration as of the last round
        self.refusal: Refusal | None = None  # set while the record disagrees with ours
        self._rounds = 0
        self._log = get_logger("shards").bind(group=group, identity=self.identity)

    def shard_lease(self, shard: int) -> str:
        return f"{self.group}-shard-{shard}"

    @property
    def record_lease(self) -> str:
        return self.group

    @property
    def member_lease(self) -> str:
        name = "".join(c if c.isalnum() or c in "-." else "-" for c in self.identity.lower())
        return f"{self.group}-member-{name}"[:253].rstrip("-.")

    def holds(self, shard: int) -> bool:
        """Held and renewed within `renew_deadline`, and the record (our shard count) written
        by us within it too (a stalled or refusing replica stops acting in time)."""
        with self._lock:
            at = self._renewed.get(shard)
            confirmed = self._confirmed
        if at is None or confirmed is None:
            return False
        now = self.clock()
        return now - at < self.renew_deadline and now - confirmed < self.renew_deadline

    def held(self) -> frozenset[int]:
        return frozenset(s for s in range(self.shards) if self.holds(s))

    def owns(self, namespace: str, name: str) -> bool:
        return self.holds(shard_of(namespace, name, self.shards))

    def _spec(self, holder: str | None, *, acquire: Any, transitions: int) -> client.V1LeaseSpec:
        now = datetime.now(UTC)
        return client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=max(1, math.ceil(self.lease_duration)) if holder else 1,
            acquire_time=acquire or now,
            renew_time=now,
            lease_transitions=transitions,
        )

    def _seen_for(self, name: str, spec: Any, now: float) -> float:
        """How long this replica has seen the Lease's (holder, renewTime) unchanged."""
        record = (
            (spec.holder_identity or "") if spec else "",
            spec.renew_time.isoformat() if spec and spec.renew_time else "",
        )
        previous = self._observed.get(name)
        if previous is None or previous[0] != record:
            self._observed[name] = (record, now)
            return 0.0
        return now - previous[1]

    def _write(self, lease: Any, name: str, role: str) -> bool:
        labels = {GROUP_LABEL: self.group, ROLE_LABEL: role}
        annotations = self.coordination.annotations()
        try:
            meta = lease.metadata
            if meta is not None and meta.resource_version:
                meta.labels = {**(meta.labels or {}), **labels}
                meta.annotations = {**(meta.annotations or {}), **annotations}
                discard(
                    self._api.replace_namespaced_lease(
                        name, self.namespace, lease, _preload_content=False
                    )
                )
            else:
                lease.metadata = client.V1ObjectMeta(
                    name=name, namespace=self.namespace, labels=labels, annotations=annotations
                )
                discard(
                    self._api.create_namespaced_lease(self.namespace, lease, _preload_content=False)
                )
        except client.ApiException as exc:
            if exc.status != 409:
                self._log.info("lease_write_failed", lease=name, status=exc.status)
            return False
        except API_ERRORS as exc:  # unreachable API: try again next round
            self._log.info("lease_write_failed", lease=name, error=str(exc)[:200])
            return False
        return True

    def _list(self) -> dict[str, Any] | None:
        """The group's Leases by name, the record included (read by name when a leader that
        predates the labels wrote it); None when the API cannot be read."""
        try:
            listed: list[Any] = self._api.list_namespaced_lease(
                self.namespace, label_selector=f"{GROUP_LABEL}={self.group}"
            ).items
            leases = {lease.metadata.name: lease for lease in listed}
            if self.record_lease not in leases:
                record = self._read(self.record_lease)
                if record is not None:
                    leases[self.record_lease] = record
        except API_ERRORS as exc:
            self._log.info("lease_list_failed", error=str(exc)[:200])
            return None
        return leases

    def _read(self, name: str) -> Any:
        try:
            return self._api.read_namespaced_lease(name, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _live_members(self, leases: dict[str, Any], now: float) -> list[str]:
        live = []
        for name, lease in leases.items():
            labels = lease.metadata.labels or {}
            if labels.get(ROLE_LABEL) != "member" or name == self.member_lease:
                continue
            spec = lease.spec
            if not (spec and spec.holder_identity):
                continue
            recorded = Coordination.recorded(lease.metadata.annotations)
            if recorded == self.coordination and self._seen_for(name, spec, now) < (
                self.lease_duration
            ):
                live.append(spec.holder_identity)
        return live

    def run_round(self) -> None:
        """Announce, confirm the record, then renew, acquire and release once; then report
        what changed."""
        before = self.held()
        now = self.clock()
        leases = self._list()
        if leases is None:  # keep what we hold until renew_deadline runs out
            self._report(before)
            return
        for name, lease in leases.items():
            # Watch every Lease of the group, even while refusing: a record or shard whose
            # holder died is then known expired as soon as it is, not a lease later.
            self._seen_for(name, lease.spec, now)
        member = leases.get(self.member_lease) or client.V1Lease(metadata=None, spec=None)
        member.spec = self._spec(self.identity, acquire=None, transitions=0)
        announced = self._write(member, self.member_lease, "member")
        self.members = sorted({self.identity, *self._live_members(leases, now)})
        self._rounds += 1
        if self._rounds == 1 or not announced:
            # The first round only announces this replica: taking shards before seeing the
            # others' member Leases would take them all, to hand most back a round later (and
            # a replica writes the record only a round after its member Lease is seen).
            self._report(before)
            return
        if not self._confirm(leases.get(self.record_lease), now):
            if self.refusal is not None:
                self._release_all(leases)
            self._report(before)
            return
        wanted = assignment(self.members, self.shards)
        for shard in range(self.shards):
            self._shard_round(shard, leases.get(self.shard_lease(shard)), wanted[shard], now)
        self._report(before)

    def _confirm(self, record: Any, now: float, *, retry: bool = True) -> bool:
        """Write the record (our shard count, this replica as its last renewer) unless it is
        live with another configuration; True when written."""
        spec: Any = record.spec if record is not None else None
        holder = (spec.holder_identity or "") if spec else ""
        recorded = (
            Coordination.recorded(record.metadata.annotations) if record is not None else None
        )
        seen = self._seen_for(self.record_lease, spec, now)
        duration = float((spec.lease_duration_seconds if spec else None) or self.lease_duration)
        if holder and recorded != self.coordination and seen < max(duration, self.lease_duration):
            lease = f"{self.namespace}/{self.record_lease}"
            self._refuse(Refusal(lease, self.coordination, recorded, holder))
            return False
        transitions = int(spec.lease_transitions or 0) if spec else 0
        fresh = record if record is not None else client.V1Lease(metadata=None, spec=None)
        fresh.spec = self._spec(
            self.identity,
            acquire=spec.acquire_time if spec and recorded == self.coordination else None,
            transitions=transitions + (recorded != self.coordination),
        )
        if self._write(fresh, self.record_lease, RECORD_ROLE):
            with self._lock:
                self._confirmed = now
            self._refuse(None)
            return True
        if not retry:
            return False
        # Another replica wrote it since we listed (most often one of ours renewing it): read
        # it again and decide once more.
        try:
            again = self._read(self.record_lease)
        except API_ERRORS as exc:
            self._log.info("lease_read_failed", lease=self.record_lease, error=str(exc)[:200])
            return False
        return self._confirm(again, now, retry=False)

    def _refuse(self, refusal: Refusal | None) -> None:
        if refusal == self.refusal:
            return
        self.refusal = refusal
        if refusal is not None:
            with self._lock:
                self._renewed.clear()
                self._confirmed = None
        tell_refusal(self._log, refusal, self.coordination, self.on_refusal)

    def _release_all(self, leases: dict[str, Any]) -> None:
        """Hand back every shard Lease this replica still holds (it refuses: the record's
        replicas may take them at once)."""
        for shard in range(self.shards):
            lease = leases.get(self.shard_lease(shard))
            if lease is not None and lease.spec and lease.spec.holder_identity == self.identity:
                self._release(shard, lease)

    def _shard_round(self, shard: int, lease: Any, owner: str, now: float) -> None:
        name = self.shard_lease(shard)
        spec: Any = lease.spec if lease is not None else None
        holder = (spec.holder_identity or "") if spec else ""
        transitions = int(spec.lease_transitions or 0) if spec else 0
        seen = self._seen_for(name, spec, now)  # a missing Lease counts as a free one
        if holder == self.identity:
            if owner != self.identity:
                self._release(shard, lease)  # assigned to another live member: hand it over
                return
            lease.spec = self._spec(
                self.identity, acquire=spec.acquire_time, transitions=transitions
            )
            if self._write(lease, name, "shard"):
                with self._lock:
                    self._renewed[shard] = now
            return
        with self._lock:
            self._renewed.pop(shard, None)  # someone else's, or nobody's: not ours to act on
        if holder and seen < self.lease_duration:
            return  # held, and renewed within a lease as we saw it
        # Free, or its holder stopped renewing: ours if assigned to us; anyone's once it has
        # stayed so for another lease (members can disagree for a round while one joins).
        if owner != self.identity and seen < (2 if holder else 1) * self.lease_duration:
            return
        fresh = lease if lease is not None else client.V1Lease(metadata=None, spec=None)
        fresh.spec = self._spec(self.identity, acquire=None, transitions=transitions + 1)
        if self._write(fresh, name, "shard"):
            with self._lock:
                self._renewed[shard] = now
            self._log.info("shard_acquired", shard=shard, previous=holder or None)

    def _release(self, shard: int, lease: Any) -> None:
        with self._lock:
            self._renewed.pop(shard, None)  # stop acting first, then hand the Lease back
        spec: Any = lease.spec
        lease.spec = self._spec(
            None, acquire=spec.acquire_time, transitions=int(spec.lease_transitions or 0)
        )
        if self._write(lease, self.shard_lease(shard), "shard"):
            self._log.info("shard_released", shard=shard)

    def _report(self, before: frozenset[int]) -> None:
        after = self.held()
        gained, lost = after - before, before - after
        if gained or lost:
            guarded(self._log, "shard_callback_failed", self.on_change, gained, lost)

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self._stop
        while not stop.is_set():
            self.run_round()
            stop.wait(self.retry_period)

    def start(self) -> ShardLeases:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), daemon=True, name=f"shards:{self.identity}"
        )
        self._thread.start()
        return self

    def stop(self, *, release: bool = True, timeout: float = 5.0) -> None:
        """Stop the rounds; with `release`, hand every shard back, release the record when no
        other live replica of our configuration is left (so the next configuration takes over
        at once) and delete the member Lease (without it, the Leases just stop being renewed:
        what a crash looks like)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        held = self.held()
        with self._lock:
            self._renewed.clear()
            self._confirmed = None
        if not release:
            return
        before = held
        for shard in held:
            try:
                lease = self._api.read_namespaced_lease(self.shard_lease(shard), self.namespace)
                if lease.spec is not None and lease.spec.holder_identity == self.identity:
                    self._release(shard, lease)
            except API_ERRORS as exc:  # best effort: the Lease expires anyway
                self._log.info("shard_release_failed", shard=shard, error=str(exc)[:200])
        self._release_record()
        try:
            self._api.delete_namespaced_lease(self.member_lease, self.namespace)
        except API_ERRORS as exc:
            self._log.info("member_delete_failed", error=str(exc)[:200])
        if before and self.on_change is not None:
            self._report(before)

    def _release_record(self) -> None:
        """The last live replica of our configuration hands the record back (with the
        resourceVersion of the listing that found no other: a write since is a 409)."""
        leases = self._list()
        if leases is None:
            return
        record = leases.get(self.record_lease)
        if record is None or record.spec is None or not record.spec.holder_identity:
            return
        if Coordination.recorded(record.metadata.annotations) != self.coordination:
            return
        others = self._live_members(leases, self.clock())
        if others:
            return  # they keep renewing it: nothing changes for the canaries
        spec: Any = record.spec
        record.spec = self._spec(
            None, acquire=spec.acquire_time, transitions=int(spec.lease_transitions or 0)
        )
        if self._write(record, self.record_lease, RECORD_ROLE):
            self._log.info("record_released", configuration=str(self.coordination))


__all__ = ["DEFAULT_GROUP", "ShardLeases", "assignment", "shard_of"]
