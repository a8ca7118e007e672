"""The fault matrix, API side: an API server that never answers, 409 storms, 500s, 403s, a
reply lost after the write landed, a controller killed before or after its patch or after
its status write, a leader change mid-flip. The real `kubernetes` client over HTTP against
the API double (or a silent socket); docs/reliability.md tabulates these."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import NS, Clock, FakeSource, canary_cr, seed, speculating

from alphagate.config import DeploymentRef
from alphagate.core.model import Action
from alphagate.errors import KubeError, RecordChangedError
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import CanaryStatus, parse_status
from alphagate.kube.workload import ANN_OWNER
from alphagate.shell.reconciler import Reconciler
from alphagate.sources import factory
from alphagate.sources.endpoints import SourcesConfig
from alphagate_lab.sandbox.apiserver import ApiServer


@pytest.fixture
def silent() -> Iterator[str]:
    """A server on 127.0.0.1 that accepts connections and never answers (bounded: the test's
    client gives up first; the sockets close when the fixture ends)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        sock.close()


def test_an_api_server_that_never_answers_costs_one_request_deadline(
    apiserver: ApiServer, silent: str
) -> None:
    cfg = apiserver.configuration()
    cfg.host = silent
    kube = Kube.from_configuration(cfg, timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(KubeError) as caught:
            Actuator(kube.api_client).read("llm", DeploymentRef(name="chat-canary"))
        took = time.monotonic() - started
    finally:
        kube.close()
    assert caught.value.reason == "Unreachable"  # a failed request, not a stuck loop
    assert took < 5.0  # bounded by the deadline, not the OS's TCP timeout (minutes)


# ---------------------------------------------------------------- the reconciler's faults


def reconciler(kube: Kube, source: FakeSource, clock: Clock, **kw: Any) -> Reconciler:
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
        **kw,
    )


def step(rec: Reconciler, n: int = 1, name: str = "chat") -> Any:
    clock = rec.clock
    assert isinstance(clock, Clock)
    out = None
    for _ in range(n):
        clock.tick()
        out = rec.reconcile(NS, name)
    return out


def status(apiserver: ApiServer, name: str = "chat") -> CanaryStatus:
    return parse_status(apiserver.get("speculativecanaries", NS, name))


def reasons(apiserver: ApiServer) -> list[str]:
    return [e["reason"] for e in apiserver.objects("events", NS, group="")]


def flips(apiserver: ApiServer, deployment: str = "chat-canary") -> int:
    """Writes that changed the canary's container args (whether or not the reply arrived)."""
    return sum(
        1
        for r in apiserver.requests_matching(method="PATCH", name=deployment)
        if r.status in (200, 504, 0) and "spec" in (r.body or {})
    )


def on_then_failing(apiserver: ApiServer, kube: Kube) -> tuple[Reconciler, FakeSource, Clock]:
    """A canary brought On by the controller, then a first failing window (the next one flips
    it off)."""
    seed(apiserver)
    clock = Clock()
    source = FakeSource(apiserver, lambda s: 0.7)
    rec = reconciler(kube, source, clock)
    step(rec, 3)
    assert status(apiserver).state == "On" and speculating(apiserver, "chat-canary")
    source.alpha = lambda s: 0.3
    out = step(rec)
    assert out.evaluation.action is Action.HOLD
    return rec, source, clock


@pytest.mark.parametrize("reply", [504, 0], ids=["gateway-timeout", "connection-dropped"])
def test_a_lost_reply_to_a_flip_never_flips_twice(
    apiserver: ApiServer, kube: Kube, reply: int
) -> None:
    rec, _, _ = on_then_failing(apiserver, kube)
    before = flips(apiserver)
    # the PATCH lands; its reply does not
    lost = apiserver.faults.add("PATCH", r"/deployments/chat-canary$", reply, after=True)
    out = step(rec)
    assert lost.hits == 1
    assert out.evaluation.action is Action.DISABLE and out.units[0].error is not None
    assert not speculating(apiserver, "chat-canary")  # it did land
    assert flips(apiserver) == before + 1

    out = step(rec)  # the same process, its own memory still On: the record wins
    assert out.units[0].memory_origin == "record on chat-canary"
    assert out.evaluation.action is Action.HOLD
    assert flips(apiserver) == before + 1  # not undone as drift, not repeated
    st = status(apiserver)
    assert st.state == "RolledBack" and st.condition("Ready").status == "True"
    assert "ResumedFromRecord" in reasons(apiserver)
    assert "DriftCorrected" not in reasons(apiserver)


def test_killed_before_the_patch_the_next_process_decides_once(
    apiserver: ApiServer, kube: Kube
) -> None:
    rec, source, clock = on_then_failing(apiserver, kube)
    before = flips(apiserver)
    apiserver.faults.add("PATCH", r"/deployments/chat-canary$", 500)  # refused: not landed
    out = step(rec)
    assert out.units[0].error is not None and speculating(apiserver, "chat-canary")
    second = reconciler(kube, source, clock)  # a fresh process after the crash
    out = step(second)
    assert out.evaluation.action is Action.DISABLE and out.units[0].error is None
    step(second, 2)
    assert flips(apiserver) == before + 1 and status(apiserver).state == "RolledBack"


def test_killed_after_the_status_write_the_next_process_resumes_from_status(
    apiserver: ApiServer, kube: Kube
) -> None:
    rec, source, clock = on_then_failing(apiserver, kube)
    step(rec)  # the flip, recorded on the Deployment and in status
    assert status(apiserver).state == "RolledBack"
    before = flips(apiserver)
    second = reconciler(kube, source, clock)
    out = step(second)
    assert out.units[0].memory_origin == "status"
    assert out.evaluation.action is Action.HOLD and flips(apiserver) == before


def test_a_stale_replica_cannot_apply_a_decision_the_record_has_moved_past(
    apiserver: ApiServer, kube: Kube
) -> None:
    """Leader change mid-flip: replica A decides from record N while replica B (the new
    leader) writes N+1 between A's read and A's patch. A's patch is refused by the record, A
    resumes from it next time; one flip in all."""
    rec, source, clock = on_then_failing(apiserver, kube)
    other = reconciler(kube, source, clock)
    fired: list[int] = []

    class Racing(FakeSource):
        def observe(self, spec: Any, **kw: Any) -> Any:
            seen = super().observe(spec, **kw)
            if not fired:  # between A's read of the Deployment and its patch
                fired.append(1)
                other.reconcile(NS, "chat", now=clock())
            return seen

    racing = Racing(apiserver, lambda s: 0.3)
    a = reconciler(kube, racing, clock)
    a._memories = dict(rec._memories)  # A remembers the same state On as the old leader
    before = flips(apiserver)
    clock.tick()
    out = a.reconcile(NS, "chat")
    assert fired and flips(apiserver) == before + 1  # B's flip, and only B's
    unit = out.units[0]
    assert isinstance(unit.error, RecordChangedError) and not unit.applied
    out = step(a)
    assert out.units[0].memory_origin == "record on chat-canary"
    assert out.evaluation.action is Action.HOLD and flips(apiserver) == before + 1
    assert status(apiserver).state == "RolledBack"


# ---------------------------------------------------------------- one canary per Deployment


def test_a_second_canary_on_a_deployment_is_refused_and_never_flips_it(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver)
    apiserver.put(canary_cr("second"))  # the same target and baseline
    clock = Clock()
    source = FakeSource(apiserver, lambda s: 0.7)
    rec = reconciler(kube, source, clock)
    step(rec)  # the first canary claims chat-canary and starts probing
    owner = apiserver.get("deployments", NS, "chat-canary", group="apps")["metadata"]
    assert owner["annotations"][ANN_OWNER] == f"{NS}/chat"
    source.alpha = lambda s: 0.3  # the second would disable it
    before = flips(apiserver)
    for _ in range(3):
        out = step(rec, name="second")
        assert out.units[0].error is not None and out.units[0].evaluation is None
    assert flips(apiserver) == before and speculating(apiserver, "chat-canary")
    st = status(apiserver, "second")
    valid = st.condition("SpecValid")
    assert valid is not None and valid.status == "False" and valid.reason == "TargetClaimed"
    assert st.condition("Ready").reason == "TargetClaimed"
    assert reasons(apiserver).count("TargetClaimed") == 1  # counted up, not repeated

    apiserver.delete("speculativecanaries", NS, "chat")  # the owner is gone: taken over
    step(rec, name="second")
    dep = apiserver.get("deployments", NS, "chat-canary", group="apps")["metadata"]
    assert dep["annotations"][ANN_OWNER] == f"{NS}/second"
    assert "ClaimTakenOver" in reasons(apiserver)


# ---------------------------------------------------------------- an unknown endpoint


def test_a_policy_naming_an_unknown_endpoint_is_an_invalid_spec(
    apiserver: ApiServer, kube: Kube
) -> None:
    cr = canary_cr(source={"kind": "prometheus", "prometheus": {"endpoint": "nowhere"}})
    seed(apiserver, cr=cr)
    clock = Clock()
    configured = SourcesConfig.single("http://127.0.0.1:9")  # `default` only
    rec = Reconciler(
        kube,
        source_factory=factory(configured, core_api=kube.core),
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    for _ in range(2):
        out = step(rec)
        assert out.spec_invalid and out.evaluation is None
    st = status(apiserver)
    valid = st.condition("SpecValid")
    assert valid is not None and valid.status == "False" and valid.reason == "UnknownEndpoint"
    assert "nowhere" in valid.message
    assert reasons(apiserver) == ["InvalidSpec"]
    assert apiserver.requests_matching(method="PATCH", resource="deployments") == []


def test_a_policy_selecting_another_namespace_is_an_invalid_spec(
    apiserver: ApiServer, kube: Kube
) -> None:
    source = {"kind": "prometheus", "prometheus": {"matchLabels": {"namespace": "team-b"}}}
    seed(apiserver, cr=canary_cr(source=source))
    clock = Clock()
    rec = Reconciler(
        kube,
        source_factory=factory(SourcesConfig.single("http://127.0.0.1:9"), core_api=kube.core),
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    out = step(rec)
    assert out.spec_invalid and out.evaluation is None
    valid = status(apiserver).condition("SpecValid")
    assert valid is not None and valid.status == "False" and valid.reason == "CrossNamespace"
    assert "team-b" in valid.message and NS in valid.message
    assert reasons(apiserver) == ["InvalidSpec"]
