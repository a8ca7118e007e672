"""Manual `enable` obeys the guards unless `--force`; `promote` needs promotion or `--force`.

The CLI sends the force flag as an annotation next to the command; the controller passes it
to the core, which records `forced` and the overridden guards on the transition (status
history) and the Event says so.
"""

from __future__ import annotations

from typing import Any

from kube_support import NS, Clock, FakeSource, seed, speculating
from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.config import GROUP, VERSION
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.commands import (
    ANN_COMMAND,
    ANN_COMMAND_FORCE,
    command_forced,
    pending_command,
)
from alphagate.kube.status.resource import CanaryStatus, parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer

runner = CliRunner()


def run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "220", "NO_COLOR": "1"})


def _seed(apiserver: ApiServer) -> None:
    apiserver.put(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SpeculativeCanary",
            "metadata": {"name": "chat", "namespace": "llm"},
            "spec": {"mode": "enforce", "target": {"name": "chat-canary"}},
        }
    )


def _obj(apiserver: ApiServer) -> dict[str, Any]:
    return apiserver.get("speculativecanaries", "llm", "chat")


def test_force_travels_as_an_annotation_and_is_cleared_after(apiserver: ApiServer) -> None:
    _seed(apiserver)
    forced = run("enable", "chat", "-n", "llm", "--server", apiserver.url, "--force")
    assert forced.exit_code == 0, forced.output
    assert "with --force" in forced.stdout
    obj = _obj(apiserver)
    assert obj["metadata"]["annotations"][ANN_COMMAND_FORCE] == "true"
    assert command_forced(obj) and pending_command(obj, CanaryStatus()) is not None
    plain = run("promote", "chat", "-n", "llm", "--server", apiserver.url)
    assert plain.exit_code == 0, plain.output
    obj = _obj(apiserver)
    assert obj["metadata"]["annotations"][ANN_COMMAND] == "promote"
    assert ANN_COMMAND_FORCE not in obj["metadata"]["annotations"]  # not left over
    assert not command_forced(obj)


def test_force_is_refused_where_there_is_no_guard(apiserver: ApiServer) -> None:
    _seed(apiserver)
    result = run("disable", "chat", "-n", "llm", "--server", apiserver.url, "--force")
    assert result.exit_code != 0
    assert "--force" in result.output
    assert ANN_COMMAND not in (_obj(apiserver)["metadata"].get("annotations") or {})


def test_help_documents_the_escape_hatch() -> None:
    for command in ("enable", "promote"):
        result = run(command, "--help")
        assert result.exit_code == 0 and "--force" in result.stdout


# ---------------------------------------------------------------- through the controller


def _reconciler(kube: Kube, source: FakeSource, clock: Clock) -> Reconciler:
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )


def _step(rec: Reconciler, clock: Clock, n: int = 1) -> Any:
    out = None
    for _ in range(n):
        clock.tick()
        out = rec.reconcile(NS, "chat")
    return out


def _events(apiserver: ApiServer) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"]) for e in apiserver.objects("events", NS, group="")
    ]


def _command(apiserver: ApiServer, *args: str) -> None:
    result = run(*args, "chat", "-n", NS, "--server", apiserver.url)
    assert result.exit_code == 0, result.output


def test_enable_in_cooldown_is_refused_then_forced(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    rec = _reconciler(kube, FakeSource(apiserver, lambda s: 0.3), clock)
    _step(rec, clock, 3)  # probe, two failing windows: rolled back, cooling down 30 s
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "RolledBack" and not speculating(apiserver, "chat-canary")

    _command(apiserver, "enable")
    _step(rec, clock)
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "RolledBack" and not speculating(apiserver, "chat-canary")
    last = st.history[-1]
    assert last.cause == "refused" and last.guards == ["cooldown"] and not last.forced
    assert st.last_command is not None and "refused" in st.last_command.result
    assert not st.last_command.forced
    assert any(t == "Warning" and r == "FlipRefused" for t, r, _ in _events(apiserver))

    _command(apiserver, "enable", "--force")
    _step(rec, clock)
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "Probing" and speculating(apiserver, "chat-canary")
    last = st.history[-1]
    assert last.cause == "manual" and last.forced and last.guards == ["cooldown"]
    assert st.last_command is not None and st.last_command.forced
    forced = [m for t, r, m in _events(apiserver) if r == "CommandForced"]
    assert len(forced) == 1 and "cooldown" in forced[0]


def test_promote_needs_promotion_or_force(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    rec = _reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    _step(rec, clock, 3)
    assert parse_status(apiserver.get("speculativecanaries", NS, "chat")).state == "On"

    _command(apiserver, "promote")
    _step(rec, clock)
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "On" and st.history[-1].guards == ["promotion-disabled"]
    assert st.history[-1].cause == "refused"

    _command(apiserver, "promote", "--force")
    _step(rec, clock)
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "Promoted" and st.history[-1].forced
    assert st.history[-1].guards == ["promotion-disabled"]
