"""`alphagate run` and `Controller`: leader election between two replicas, the HTTP probes,
metrics and JSON logs, all against the API server double over real HTTP."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import structlog
from kube_support import FAST_TIMING, NS, FakeSource, canary_cr, seed, speculating

from alphagate import logs
from alphagate.commands.run import StopSignals
from alphagate.kube.client import Kube
from alphagate.kube.status.resource import parse_status
from alphagate.shell.controller import Controller, RunOptions
from alphagate_lab.sandbox.apiserver import ApiServer
from alphagate_lab.sandbox.apiserver.access import CONTROLLER_TOKEN

if TYPE_CHECKING:
    from conftest import WaitFor

# One TLS context for every request: httpx otherwise builds one per call (loading the CA
# bundle, ~0.1 s of CPU each, and /readyz is polled while `alphagate run` starts), though
# these servers speak plain HTTP on 127.0.0.1. Each request still opens its own connection.
TLS = ssl.create_default_context()


def controller(apiserver: ApiServer, identity: str, source: FakeSource) -> Controller:
    opts = RunOptions(
        namespace=NS,
        identity=identity,
        lease_namespace="alphagate",
        lease_duration=2.0,
        renew_deadline=1.0,
        retry_period=0.1,
        metrics_port=0,
        watch_timeout=2.0,
    )
    kube = Kube.from_configuration(apiserver.configuration())
    return Controller(opts, kube=kube, source_factory=lambda spec, ns, name: source)


def state(apiserver: ApiServer) -> str | None:
    return parse_status(apiserver.get("speculativecanaries", NS, "chat")).state


def test_two_replicas_one_acts_and_the_other_takes_over(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    seed(apiserver, cr=canary_cr(timing=FAST_TIMING))
    alpha = {"chat": 0.72}
    source = FakeSource(apiserver, lambda s: alpha[s])
    a = controller(apiserver, "replica-a", source).start()
    b = controller(apiserver, "replica-b", source).start()
    try:
        leader, standby = wait_for(
            lambda: (a, b) if a.is_leader else ((b, a) if b.is_leader else None), 10, "a leader"
        )
        wait_for(lambda: state(apiserver) == "On", 20, "the canary confirmed On")
        assert not standby.is_leader
        instances = {e.get("reportingInstance") for e in apiserver.objects("events", NS, group="")}
        assert instances == {leader.identity}  # only the leader acted
        # /metrics, /healthz, /readyz on both; only the leader exports per-canary state
        for c in (leader, standby):
            assert httpx.get(c.metrics_url + "/healthz", verify=TLS).status_code == 200
            assert wait_for(
                lambda c=c: httpx.get(c.metrics_url + "/readyz", verify=TLS).status_code == 200,
                5,
                "ready",
            )
        lead_metrics = httpx.get(leader.metrics_url + "/metrics", verify=TLS).text
        assert "alphagate_leader 1.0" in lead_metrics
        assert 'alphagate_state{canary="chat",namespace="llm"' in lead_metrics
        assert (
            "alphagate_leader 0.0" in httpx.get(standby.metrics_url + "/metrics", verify=TLS).text
        )

        leader.stop(release=False)  # the leader dies without a goodbye
        wait_for(lambda: standby.is_leader, 10, "the standby to take over")
        alpha["chat"] = 0.4
        wait_for(lambda: not speculating(apiserver, "chat-canary"), 20, "the new leader's rollback")
        wait_for(lambda: state(apiserver) == "RolledBack", 10, "the status after the rollback")
        disabled = [
            e
            for e in apiserver.objects("events", NS, group="")
            if e["reason"] == "SpeculationDisabled"
        ]
        assert [e["reportingInstance"] for e in disabled] == [standby.identity]
    finally:
        a.stop()
        b.stop()


def test_controller_without_leader_election_acts_at_once(
    apiserver: ApiServer, wait_for: WaitFor
) -> None:
    seed(apiserver, cr=canary_cr(timing=FAST_TIMING))
    source = FakeSource(apiserver, lambda s: 0.72)
    opts = RunOptions(namespace=NS, leader_elect=False, serve_metrics=False, watch_timeout=2.0)
    seen: list[str] = []
    c = Controller(
        opts,
        kube=Kube.from_configuration(apiserver.configuration()),
        source_factory=lambda *a: source,
        on_outcome=lambda out: seen.append(out.name),
    ).start()
    try:
        wait_for(lambda: speculating(apiserver, "chat-canary"), 10, "the first probe")
        wait_for(lambda: "chat" in seen, 10, "on_outcome to hear of the reconcile")
        # a spec change is picked up by the watch and evaluated at once
        obj = apiserver.get("speculativecanaries", NS, "chat")
        obj["spec"]["mode"] = "dryRun"
        apiserver.put(obj)
        wait_for(
            lambda: (
                parse_status(apiserver.get("speculativecanaries", NS, "chat")).observed_generation
                == 2
            ),
            10,
            "observedGeneration 2",
        )
        # deleting the resource forgets it
        apiserver.delete("speculativecanaries", NS, "chat")
        wait_for(lambda: not c.reconciler.loop.due(float("inf")), 10, "the cache to forget it")
    finally:
        c.stop()


@pytest.mark.slow
def test_alphagate_run_command_serves_probes_and_logs_json(
    apiserver: ApiServer, wait_for: WaitFor, tmp_path: Path
) -> None:
    seed(apiserver, cr=canary_cr(timing=FAST_TIMING))
    import socket

    # the process authenticates as the controller's ServiceAccount: held to the shipped Roles
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": apiserver.url}}],
                "users": [{"name": "controller", "user": {"token": CONTROLLER_TOKEN}}],
                "contexts": [
                    {"name": "double", "context": {"cluster": "double", "user": "controller"}}
                ],
                "current-context": "double",
            }
        )
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "alphagate",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        NS,
        "--lease-namespace",
        "alphagate",
        "--metrics-port",
        str(port),
        "--log-format",
        "json",
        "--watch-timeout",
        "2",
        "--exit-after",
        "60",
        "--lease-duration",
        "2",
        "--renew-deadline",
        "1",
        "--retry-period",
        "0.2",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(url + "/readyz", timeout=1, verify=TLS).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 90, "/readyz")  # importing alone takes 25 s on a loaded machine
        assert httpx.get(url + "/healthz", verify=TLS).status_code == 200
        assert "alphagate_build_info" in httpx.get(url + "/metrics", verify=TLS).text
        # the default pod-scrape source finds no pods here: an Error, held, and said so
        st = wait_for(
            lambda: parse_status(apiserver.get("speculativecanaries", NS, "chat")).condition(
                "SourceHealthy"
            ),
            30,
            "a status with SourceHealthy",
        )
        assert st.status == "False" and "no ready pods" in st.message
        assert not speculating(apiserver, "chat-canary")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    decisions = [line for line in lines if line.get("event") == "decision"]
    assert decisions and decisions[0]["canary"] == "chat" and decisions[0]["action"] == "hold"
    assert any(line.get("event") == "lease_released" for line in lines)
    assert {"event": "signal", "signal": "SIGTERM"}.items() <= next(
        line for line in lines if line.get("event") == "signal"
    ).items()
    assert (
        apiserver.get("leases", "alphagate", "alphagate-controller")["spec"].get("holderIdentity")
        is None
    )


class _SignalMidWrite(io.StringIO):
    """A log stream whose first write is interrupted by a stop signal, as a SIGTERM can arrive
    while the main thread is printing a log line (holding the log's write lock)."""

    def __init__(self, handler: Callable[[int, Any], None]) -> None:
        super().__init__()
        self.handler, self.interrupted = handler, False

    def write(self, text: str) -> int:
        if not self.interrupted:
            self.interrupted = True
            self.handler(signal.SIGTERM, None)
        return super().write(text)


def test_a_stop_signal_during_a_log_write_is_noted_without_waiting_for_the_log() -> None:
    """A handler that logged (it once did) would wait for the write lock its own thread holds:
    `alphagate run` then never stopped. The handler only notes the signal."""
    received = StopSignals()
    stream = _SignalMidWrite(received)
    saved, root = structlog.get_config(), logging.getLogger()
    handlers = root.handlers[:]
    logs.configure(fmt="json", stream=stream)
    try:
        writer = threading.Thread(target=lambda: logs.get("controller").info("started"))
        writer.start()
        writer.join(5)
        assert not writer.is_alive(), "the signal handler waited for the log's write lock"
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
    assert received == [signal.SIGTERM]
    assert '"event": "started"' in stream.getvalue()
