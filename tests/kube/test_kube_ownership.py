"""One owner per canary, always: replicas that split the work differently (a rolling change of
`--shards`, a leader-elected replica beside sharded ones) never both own a canary, and no canary
is left without an owner for longer than one lease.

Every replica here is the real `ShardLeases` or `LeaderElector`, talking to the API server
double over HTTP through the real kubernetes client with real Leases, held to the shipped Roles
and the sharded overlay's. Only time is virtual: each replica runs its rounds on a shared
clock that the test advances (in steps of a quarter second), so the shipped lease times (15 s
lease, 10 s renew deadline, 2 s retry) cost milliseconds, not minutes. After every step and
every round, 300 canaries are checked: how many replicas own each, and for how long each has
had none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from alphagate.kube.client import Kube
from alphagate.kube.coordination import ANN_MODE, ANN_SHARDS, Coordination, Refusal
from alphagate.kube.lease import LeaderElector
from alphagate.kube.shards import ShardLeases, shard_of
from alphagate.shell.controller import Controller, RunOptions
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

if TYPE_CHECKING:
    from conftest import WaitFor

NS = "alphagate-system"
GROUP = "alphagate-controller"
# The shipped defaults (RunOptions, `alphagate run`): virtual time makes them free.
LEASE = 15.0
TIMES = {"lease_duration": LEASE, "renew_deadline": 10.0, "retry_period": 2.0}
STEP = 0.25
CANARIES = [("team-a" if i % 2 else "team-b", f"canary-{i:03d}") for i in range(300)]


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Replica:
    """One controller replica's ownership: its Leases and what it may act on."""

    name: str
    lease: ShardLeases | LeaderElector
    next_round: float
    alive: bool = True
    refusals: list[Refusal | None] = field(default_factory=list)

    def run_round(self) -> None:
        self.lease.run_round()

    def owners_of(self) -> Callable[[int], bool]:
        """canary index -> owned by this replica now (computed once per check)."""
        if not self.alive:
            return lambda i: False
        if isinstance(self.lease, LeaderElector):
            leading = self.lease.is_leader
            return lambda i: leading
        held = self.lease.held()
        of = _shards_of(self.lease.shards)
        return lambda i: of[i] in held


_SHARD_MAPS: dict[int, list[int]] = {}


def _shards_of(count: int) -> list[int]:
    if count not in _SHARD_MAPS:
        _SHARD_MAPS[count] = [shard_of(ns, name, count) for ns, name in CANARIES]
    return _SHARD_MAPS[count]


class Cluster:
    """Replicas on one virtual clock, checked after every step and round."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.clock = VirtualClock()
        self.replicas: dict[str, Replica] = {}
        self.most_owners = 0
        self.twice: list[tuple[float, str, list[str]]] = []
        self.unowned_since: dict[int, float] = {}
        self.longest_unowned = 0.0
        self.watching = False  # gaps count once every canary has had an owner
        self._phase = 0.0

    def _add(self, name: str, lease: ShardLeases | LeaderElector) -> Replica:
        self._phase = (self._phase + 0.7) % TIMES["retry_period"]
        replica = Replica(name, lease, self.clock.now + self._phase)
        lease.on_refusal = replica.refusals.append
        self.replicas[name] = replica
        return replica

    def sharded(self, name: str, shards: int) -> Replica:
        lease = ShardLeases(
            self.kube.api_client,
            namespace=NS,
            shards=shards,
            group=GROUP,
            identity=name,
            clock=self.clock,
            **TIMES,
        )
        return self._add(name, lease)

    def leader(self, name: str) -> Replica:
        lease = LeaderElector(
            self.kube.api_client,
            namespace=NS,
            name=GROUP,
            identity=name,
            clock=self.clock,
            **TIMES,
        )
        return self._add(name, lease)

    def stop(self, name: str, *, release: bool = True) -> None:
        """A clean stop (SIGTERM: hand everything back) or, without `release`, a crash."""
        replica = self.replicas[name]
        replica.alive = False
        replica.lease.stop(release=release)
        self.check()

    def check(self) -> None:
        live = [r for r in self.replicas.values() if r.alive]
        owns = [(r.name, r.owners_of()) for r in live]
        now = self.clock.now
        unowned = 0
        for i in range(len(CANARIES)):
            owners = [name for name, owned in owns if owned(i)]
            self.most_owners = max(self.most_owners, len(owners))
            if len(owners) > 1 and len(self.twice) < 20:
                self.twice.append((now, CANARIES[i][1], owners))
            if owners:
                since = self.unowned_since.pop(i, None)
                if since is not None and self.watching:
                    self.longest_unowned = max(self.longest_unowned, now - since)
            else:
                unowned += 1
                self.unowned_since.setdefault(i, now)
        if not self.watching and unowned == 0:
            self.watching = True
            self.unowned_since.clear()

    def run(self, seconds: float) -> None:
        """Advance the clock; every live replica runs a round every retry period."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.clock.now += STEP
            for replica in list(self.replicas.values()):
                if replica.alive and replica.next_round <= self.clock.now:
                    replica.run_round()
                    replica.next_round += TIMES["retry_period"]
                    self.check()
            self.check()

    def owners(self) -> dict[str, int]:
        """How many canaries each live replica owns now."""
        out = {}
        for r in self.replicas.values():
            if r.alive:
                owned = r.owners_of()
                out[r.name] = sum(owned(i) for i in range(len(CANARIES)))
        return out

    def assert_one_owner_always(self, longest: float = LEASE) -> None:
        assert self.most_owners <= 1, f"canaries owned twice: {self.twice}"
        assert not self.unowned_since, f"{len(self.unowned_since)} canaries have no owner"
        assert self.longest_unowned <= longest, (
            f"a canary had no owner for {self.longest_unowned:.2f} s (lease {LEASE:g} s)"
        )


@pytest.fixture
def apiserver(sharded_rbac: Rbac) -> Iterator[ApiServer]:
    """The controller held to the shipped Roles with the sharded overlay's."""
    with ApiServer(rbac=sharded_rbac) as server:
        yield server


@pytest.fixture
def cluster(apiserver: ApiServer) -> Iterator[Cluster]:
    kube = Kube.from_configuration(apiserver.configuration())
    made = Cluster(kube)
    yield made
    for r in made.replicas.values():
        if r.alive:
            r.lease.stop(release=False)
    kube.close()


def record(apiserver: ApiServer) -> dict[str, str]:
    lease = apiserver.get("leases", NS, GROUP, group="coordination.k8s.io")
    annotations = lease["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in (ANN_MODE, ANN_SHARDS)}


def test_replicas_with_different_shard_counts_never_share_a_canary(
    cluster: Cluster, apiserver: ApiServer
) -> None:
    """The reported bug: `--shards 3` and `--shards 4` side by side owned 54 of 300 canaries
    twice and 102 not at all. Now the first count recorded wins and the other refuses."""
    for name in ("a", "b", "c"):
        cluster.sharded(name, 3)
    cluster.run(10)
    late = cluster.sharded("d", 4)
    cluster.run(60)
    assert cluster.owners()["d"] == 0
    assert late.refusals and late.refusals[-1] is not None
    refusal = late.refusals[-1]
    assert refusal.ours == Coordination.sharded(4)
    assert refusal.recorded == Coordination.sharded(3)
    assert refusal.lease == f"{NS}/{GROUP}"
    assert record(apiserver) == {ANN_MODE: "sharded", ANN_SHARDS: "3"}
    assert sum(cluster.owners().values()) == len(CANARIES)
    cluster.assert_one_owner_always()


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stops", "last-old-replica-crashes"])
def test_a_rolling_change_of_shards_keeps_one_owner(
    cluster: Cluster, apiserver: ApiServer, crash: bool
) -> None:
    """3 replicas at --shards 3 replaced one by one by 3 at --shards 4 (maxSurge 1): the new
    ones refuse until the last old one is gone, then take every canary within a lease."""
    for name in ("old-0", "old-1", "old-2"):
        cluster.sharded(name, 3)
    cluster.run(20)
    assert sum(cluster.owners().values()) == len(CANARIES)
    for i in range(3):
        new = cluster.sharded(f"new-{i}", 4)
        cluster.run(10)
        assert cluster.owners()[f"new-{i}"] == 0 and new.refusals[-1] is not None
        cluster.stop(f"old-{i}", release=not (crash and i == 2))
        cluster.run(8)
    cluster.run(40)
    owners = cluster.owners()
    assert sum(owners.values()) == len(CANARIES) and all(owners.values()), owners
    assert all(cluster.replicas[f"new-{i}"].refusals[-1] is None for i in range(3))
    assert record(apiserver) == {ANN_MODE: "sharded", ANN_SHARDS: "4"}
    print(f"longest without an owner: {cluster.longest_unowned:.2f} s (lease {LEASE:g} s)")
    # A crash is seen only as a record that stops changing: it is taken over a lease after the
    # last renewal as the others saw it (up to a retry period late), in their next round.
    cluster.assert_one_owner_always(LEASE + 2 * TIMES["retry_period"] if crash else LEASE)


def test_switching_from_leader_election_to_shards_and_back_keeps_one_owner(
    cluster: Cluster, apiserver: ApiServer
) -> None:
    """Two leader-elected replicas replaced by two sharded ones, then back: while both kinds
    run, the kind the Lease records owns everything and every replica of the other refuses."""
    for name in ("leader-0", "leader-1"):
        cluster.leader(name)
    cluster.run(10)
    assert sorted(cluster.owners().values()) == [0, len(CANARIES)]
    assert record(apiserver) == {ANN_MODE: "leader", ANN_SHARDS: "0"}
    for i in range(2):
        cluster.sharded(f"shard-{i}", 4)
        cluster.run(10)
        disagreeing_replicas_refuse(cluster, apiserver)
        cluster.stop(f"leader-{i}")
        cluster.run(8)
    cluster.run(30)
    assert record(apiserver) == {ANN_MODE: "sharded", ANN_SHARDS: "4"}
    assert all(cluster.owners().values())
    assert sum(cluster.owners().values()) == len(CANARIES)
    # and back to leader election
    for i in range(2):
        cluster.leader(f"leader-{i + 2}")
        cluster.run(10)
        disagreeing_replicas_refuse(cluster, apiserver)
        cluster.stop(f"shard-{i}")
        cluster.run(8)
    cluster.run(30)
    assert record(apiserver) == {ANN_MODE: "leader", ANN_SHARDS: "0"}
    assert sorted(cluster.owners().values()) == [0, len(CANARIES)]
    print(f"longest without an owner: {cluster.longest_unowned:.2f} s (lease {LEASE:g} s)")
    cluster.assert_one_owner_always()


def disagreeing_replicas_refuse(cluster: Cluster, apiserver: ApiServer) -> None:
    """Every live replica whose configuration is not the recorded one owns nothing and has
    said why; the others have not refused."""
    recorded = Coordination.recorded(record(apiserver))
    owners = cluster.owners()
    for r in cluster.replicas.values():
        if not r.alive:
            continue
        last = r.refusals[-1] if r.refusals else None
        if r.lease.coordination == recorded:
            assert last is None, (r.name, last)
        else:
            assert owners[r.name] == 0, r.name
            assert last is not None and last.recorded == recorded, (r.name, last)


def test_a_leader_beside_sharded_replicas_refuses(cluster: Cluster, apiserver: ApiServer) -> None:
    """A leader-elected replica started beside a sharded group (the other order of the same
    mistake) never leads while the group renews the record."""
    for name in ("a", "b"):
        cluster.sharded(name, 5)
    cluster.run(10)
    stray = cluster.leader("stray")
    cluster.run(60)
    assert cluster.owners()["stray"] == 0
    refusal = stray.refusals[-1]
    assert refusal is not None and refusal.recorded == Coordination.sharded(5)
    assert refusal.ours == Coordination.leader()
    assert "5 shards" in refusal.message and "leader election" in refusal.message
    cluster.assert_one_owner_always()


def test_a_refusing_controller_says_why_on_the_lease_in_metrics_and_logs(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    """Two real `Controller`s (real time, short leases): a sharded one and a leader-elected one
    started beside it. The second never leads and says why (a Warning Event on the Lease, the
    gauge, a log line); once the sharded one stops cleanly it takes over and says so."""
    short = {"lease_duration": 2.0, "renew_deadline": 1.0, "retry_period": 0.1}

    def controller(identity: str, shards: int) -> Controller:
        opts = RunOptions(
            identity=identity,
            lease_namespace=NS,
            lease_name=GROUP,
            shards=shards,
            serve_metrics=False,
            watch_timeout=2.0,
            **short,
        )
        return Controller(opts, kube=Kube.from_configuration(apiserver.configuration()))

    def refused(c: Controller) -> float | None:
        return c.registry.get_sample_value("alphagate_ownership_refused")

    def reasons() -> list[tuple[str, str, str]]:
        return [
            (e["reason"], e["type"], e["message"])
            for e in apiserver.objects("events", NS, group="")
            if e["involvedObject"]["kind"] == "Lease" and e["involvedObject"]["name"] == GROUP
        ]

    sharded = controller("sharded-0", 3).start()
    leader = None
    try:
        wait_for(lambda: sharded.shards is not None and sharded.shards.held(), 10, "shards")
        with capture_logs() as logs:
            leader = controller("leader-0", 0).start()
            wait_for(lambda: refused(leader) == 1.0, 10, "the leader-elected replica to refuse")
            # the metric is set before the Event and the log line are written: wait for them
            wait_for(lambda: any(r[0] == "OwnershipRefused" for r in reasons()), 10, "the Event")
        assert not leader.is_leader
        assert any(
            e["event"] == "ownership_refused" and e["recorded"] == "3 shards" for e in logs
        ), logs
        (refusal,) = [r for r in reasons() if r[0] == "OwnershipRefused"]
        assert refusal[1] == "Warning"
        assert "leader election" in refusal[2] and "3 shards" in refusal[2]
        assert refused(sharded) == 0.0
        sharded.stop(release=True)
        wait_for(lambda: leader is not None and leader.is_leader, 10, "the leader to take over")
        wait_for(lambda: refused(leader) == 0.0, 5, "the gauge to clear")
        assert any(r[0] == "OwnershipResumed" for r in reasons())
        assert record(apiserver) == {ANN_MODE: "leader", ANN_SHARDS: "0"}
    finally:
        sharded.stop(release=False)
        if leader is not None:
            leader.stop()
