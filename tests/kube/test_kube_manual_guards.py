"""Manual `enable` obeys the guards unless `--force`; `promote` needs promotion or `--force`.

The CLI sends the force flag as an annotation next to the command; the controller passes it
to the core, which records `forced` and the overridden guards on the transition (status
history) and the Event says so.
"""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.config import GROUP, VERSION
from alphagate.kube.status import (
    ANN_COMMAND,
    ANN_COMMAND_FORCE,
    CanaryStatus,
    command_forced,
    pending_command,
)
from alphagate.sandbox.apiserver import ApiServer

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
