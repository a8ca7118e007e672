"""Leader election on a Lease: two electors against one API server double, on virtual time
(tests/clocks.py): the production timings (15 s Lease, 10 s renew deadline, 2 s retry) cost
only the requests' real time."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from alphagate.kube.client import Kube
from alphagate.kube.lease import LeaderElector
from alphagate_lab.sandbox.apiserver import ApiServer
from clocks import VirtualClock

if TYPE_CHECKING:
    from conftest import WaitFor


# The shipped defaults (`alphagate run`), in virtual seconds.
TIMES = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def elector(
    kube: Kube, identity: str, clock: VirtualClock, log: list[str] | None = None
) -> LeaderElector:
    return LeaderElector(
        kube.api_client,
        namespace="alphagate",
        name="ctl",
        identity=identity,
        on_started_leading=(lambda: log.append(f"+{identity}")) if log is not None else None,
        on_stopped_leading=(lambda: log.append(f"-{identity}")) if log is not None else None,
        clock=clock.now,
        wait=clock.wait,
        **TIMES,
    )


def test_exactly_one_leads_and_the_other_takes_over(
    apiserver: ApiServer, kube: Kube, wait_for: WaitFor, clock: VirtualClock
) -> None:
    log: list[str] = []
    a, b = elector(kube, "a", clock, log), elector(kube, "b", clock, log)
    a.start()
    assert a.wait_until_leader(5)
    b.start()
    try:
        # b keeps campaigning for several renew periods but never leads while a renews
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: b.is_leader, 1.0, "b leading while a holds the Lease")
        assert a.is_leader and a.holder() == "a"
        # a dies without releasing: it simply stops renewing
        a.stop(release=False)
        died = clock.now()
        wait_for(lambda: log == ["+a", "-a", "+b"], 10, "b taking over")
        # not before the Lease expired on b's clock (it last saw a renew before a died)
        assert clock.now() - died >= TIMES["lease_duration"] - TIMES["retry_period"]
        assert b.is_leader and b.holder() == "b"
        assert not a.is_leader
        lease = apiserver.get("leases", "alphagate", "ctl")
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        a.stop()
        b.stop()


def test_both_never_lead_at_once(
    apiserver: ApiServer, kube: Kube, wait_for: WaitFor, clock: VirtualClock
) -> None:
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    a.start()
    b.start()
    try:
        wait_for(lambda: a.is_leader or b.is_leader, 5, "a leader")
        for _ in range(30):  # bounded sampling over ~0.6 s
            assert not (a.is_leader and b.is_leader)
            time.sleep(0.02)
    finally:
        a.stop()
        b.stop()


def test_clean_stop_releases_for_an_immediate_takeover(
    apiserver: ApiServer, kube: Kube, clock: VirtualClock
) -> None:
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    a.start()
    assert a.wait_until_leader(5)
    a.stop(release=True)
    assert apiserver.get("leases", "alphagate", "ctl")["spec"].get("holderIdentity") is None
    released = clock.now()
    b.start()
    try:
        assert b.wait_until_leader(2)
        assert clock.now() - released < TIMES["lease_duration"]  # no wait for an expiry
    finally:
        b.stop()


def test_leader_steps_down_when_it_cannot_renew(
    apiserver: ApiServer, kube: Kube, wait_for: WaitFor, clock: VirtualClock
) -> None:
    log: list[str] = []
    a = elector(kube, "a", clock, log)
    a.start()
    try:
        assert a.wait_until_leader(5)
        apiserver.faults.add("*", r"/leases/ctl$", 500, times=None)
        failing = clock.now()
        wait_for(lambda: log == ["+a", "-a"], 10, "a stepping down")
        assert not a.is_leader
        # after its renew deadline (it last renewed at most one retry before), not before
        assert clock.now() - failing >= TIMES["renew_deadline"] - TIMES["retry_period"]
        apiserver.faults.clear()
        assert a.wait_until_leader(5)  # campaigns again once the API answers
    finally:
        a.stop()


def test_forbidden_lease_never_leads(apiserver: ApiServer, kube: Kube, clock: VirtualClock) -> None:
    apiserver.rbac.deny(["create", "update"], "coordination.k8s.io", "leases")
    a = elector(kube, "a", clock)
    a.start()
    try:
        assert not a.wait_until_leader(0.5)
    finally:
        a.stop()


def test_bad_timings_are_rejected(kube: Kube) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaderElector(
            kube.api_client, namespace="x", lease_duration=1, renew_deadline=2, retry_period=0.1
        )


def test_a_stalled_leader_is_not_leader_past_its_renew_deadline(
    kube: Kube, clock: VirtualClock
) -> None:
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    a._last_renew = clock.now()
    assert a.is_leader
    clock.advance(TIMES["renew_deadline"])  # as if the process froze that long
    assert not a.is_leader
