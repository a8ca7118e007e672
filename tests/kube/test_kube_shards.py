"""Shard Leases: three replicas against the API server double share the shards, never hold
one twice at once, and take a dead replica's shards within the lease time."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from alphagate.kube.client import Kube
from alphagate.kube.shards import ShardLeases, assignment, shard_of
from alphagate_lab.sandbox.apiserver import ApiServer, Rbac

if TYPE_CHECKING:
    from conftest import WaitFor


SHARDS = 12
TIMES = {"lease_duration": 2.0, "renew_deadline": 1.0, "retry_period": 0.1}


def test_shard_of_is_stable_and_spreads() -> None:
    assert shard_of("ns", "a", 7) == shard_of("ns", "a", 7)  # no per-process hash seed
    counts = Counter(shard_of("ns", f"canary-{i}", 3) for i in range(300))
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 70
    with pytest.raises(ValueError):
        shard_of("ns", "a", 0)


def test_assignment_is_round_robin_over_sorted_members() -> None:
    got = assignment(["c", "a", "b", "a"], 6)
    assert got == {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    assert assignment([], 3) == {}


class Sampler:
    """Watches who holds each shard every few ms: the most holders at once, and the longest
    time a shard had none."""

    def __init__(self, replicas: dict[str, ShardLeases]) -> None:
        self.replicas = replicas
        self.most = 0
        self.longest_gap = 0.0
        self._free_since: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while not self._stop.wait(0.01) and time.monotonic() < deadline:
            now = time.monotonic()
            for shard in range(SHARDS):
                n = sum(r.holds(shard) for r in list(self.replicas.values()))
                self.most = max(self.most, n)
                if n:
                    start = self._free_since.pop(shard, None)
                    if start is not None:
                        self.longest_gap = max(self.longest_gap, now - start)
                else:
                    self._free_since.setdefault(shard, now)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def apiserver(sharded_rbac: Rbac) -> Iterator[ApiServer]:
    """The controller held to the shipped Roles with the sharded overlay's (shard Leases)."""
    with ApiServer(rbac=sharded_rbac) as server:
        yield server


@pytest.fixture
def clients(apiserver: ApiServer) -> Iterator[list[Kube]]:
    made = [Kube.from_configuration(apiserver.configuration()) for _ in range(4)]
    yield made
    for k in made:
        k.close()


def replica(kube: Kube, identity: str) -> ShardLeases:
    return ShardLeases(
        kube.api_client, namespace="alphagate", shards=SHARDS, identity=identity, **TIMES
    )


def counts(replicas: dict[str, ShardLeases]) -> dict[str, int]:
    return {name: len(r.held()) for name, r in replicas.items()}


@pytest.mark.slow
def test_three_replicas_share_fail_over_and_rebalance(
    clients: list[Kube], wait_for: WaitFor
) -> None:
    replicas = {name: replica(k, name) for name, k in zip("abc", clients, strict=False)}
    with Sampler(replicas) as sampler:
        for r in replicas.values():
            r.start()
        wait_for(
            lambda: counts(replicas) == {"a": 4, "b": 4, "c": 4}, 10, "4 shards each on a, b, c"
        )
        # c dies (no release): a and b take its shards within the lease time and a few rounds.
        dead = replicas.pop("c")
        died = time.monotonic()
        dead.stop(release=False)
        wait_for(lambda: counts(replicas) == {"a": 6, "b": 6}, 10, "6 shards each on a, b")
        took = time.monotonic() - died
        # d joins: the shards spread again, handed over one round at a time.
        replicas["d"] = replica(clients[3], "d").start()
        wait_for(
            lambda: counts(replicas) == {"a": 4, "b": 4, "d": 4}, 10, "4 shards each on a, b, d"
        )
        for r in replicas.values():
            r.stop(release=True)
    print(f"takeover {took:.2f} s, longest unowned {sampler.longest_gap:.2f} s")
    assert sampler.most == 1  # never two holders of one shard at once
    lease = TIMES["lease_duration"]
    # a dead replica's shards: taken once its Leases expire, within a few rounds after that
    assert took < lease + 1.5
    assert sampler.longest_gap < lease + 1.5  # no shard left unowned longer than that
    assert all(not r.held() for r in replicas.values())
