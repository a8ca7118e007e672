"""kubectl habits of the CLI, against the API server double through real kubeconfig files: the
namespace comes from the context, `KUBECONFIG` lists merge, `-o json|yaml|wide`, a bounded
`--watch` that prints again only on change, `kubectl alphagate` as a real kubectl plugin, and
test-only flags hidden from help."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from alphagate import cli
from alphagate.config import GROUP, VERSION
from alphagate.kube.client import default_namespace
from alphagate.kube.status.fields import rfc3339
from alphagate.kube.status.resource import CanaryStatus
from alphagate_lab.sandbox.apiserver import ApiServer

runner = CliRunner()


@functools.cache
def _app(command: str) -> typer.Typer:
    """The app `alphagate COMMAND ...` builds: that command's module alone."""
    return cli.build(command)


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    env = {"COLUMNS": "250", "NO_COLOR": "1", **(env or {})}
    return runner.invoke(_app(args[0]), list(args), env=env)


def put(apiserver: ApiServer, namespace: str, name: str, state: str = "On") -> None:
    apiserver.put(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SpeculativeCanary",
            "metadata": {"name": name, "namespace": namespace, "generation": 3},
            "spec": {
                "mode": "enforce",
                "target": {"name": f"{name}-canary"},
                "aggregation": "combined",
                "slices": [{"name": "chat"}, {"name": "code"}],
            },
            "status": CanaryStatus(
                state=state, combined_alpha=0.7, last_evaluated=rfc3339(1_800_000_000.0)
            ).model_dump(mode="json", by_alias=True, exclude_none=True),
        }
    )


def kubeconfigs(tmp_path: Path, url: str) -> str:
    """Two files as a KUBECONFIG list: the first holds the cluster, user and contexts, the
    second only picks the current context (kubectl merges them; the first to set a key wins)."""
    first = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {}}],
        "contexts": [
            {
                "name": "team-llm",
                "context": {"cluster": "sandbox", "user": "me", "namespace": "llm"},
            },
            {"name": "team-b", "context": {"cluster": "sandbox", "user": "me", "namespace": "b"}},
        ],
    }
    second = {"apiVersion": "v1", "kind": "Config", "current-context": "team-llm"}
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(first))
    b.write_text(yaml.safe_dump(second))
    return os.pathsep.join([str(a), str(tmp_path / "missing.yaml"), str(b)])


def test_namespace_comes_from_the_merged_kubeconfig_context(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    put(apiserver, "llm", "chat")
    put(apiserver, "b", "other")
    env = {"KUBECONFIG": kubeconfigs(tmp_path, apiserver.url)}
    listed = run("status", env=env)
    assert listed.exit_code == 0, listed.output
    assert "chat" in listed.stdout and "other" not in listed.stdout
    in_b = run("status", "--context", "team-b", env=env)
    assert "other" in in_b.stdout and "chat" not in in_b.stdout
    explicit = run("status", "-n", "b", env=env)  # -n wins over the context
    assert "other" in explicit.stdout
    assert run("status", "-A", env=env).stdout.count("-canary") == 0  # narrow: no TARGET
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = env["KUBECONFIG"]
    try:
        assert default_namespace() == "llm"
        assert default_namespace(context="team-b") == "b"
        assert default_namespace(server=apiserver.url) == "default"  # no kubeconfig in play
    finally:
        if old is None:
            del os.environ["KUBECONFIG"]
        else:
            os.environ["KUBECONFIG"] = old


def test_output_json_yaml_and_wide(apiserver: ApiServer) -> None:
    put(apiserver, "llm", "chat")
    base = ("-n", "llm", "--server", apiserver.url)
    listed = run("status", *base, "-o", "json")
    assert listed.exit_code == 0, listed.output
    doc = yaml.safe_load(listed.stdout)
    assert doc["kind"] == "List" and [i["metadata"]["name"] for i in doc["items"]] == ["chat"]
    one = yaml.safe_load(run("status", "chat", *base, "-o", "yaml").stdout)
    assert one["kind"] == "SpeculativeCanary" and one["status"]["state"] == "On"
    wide = run("status", *base, "-o", "wide")
    header = wide.stdout.splitlines()
    assert any("TARGET" in h and "AGGREGATION" in h for h in header), wide.stdout
    row = " ".join(wide.stdout.split())
    assert "chat-canary combined 2" in row
    bad = run("status", *base, "-o", "table")
    assert bad.exit_code == 2


def test_watch_prints_again_only_when_something_changes(apiserver: ApiServer) -> None:
    put(apiserver, "llm", "chat", state="Probing")

    def change() -> None:
        time.sleep(0.6)
        put(apiserver, "llm", "chat", state="On")

    thread = threading.Thread(target=change)
    thread.start()
    started = time.monotonic()
    result = run(
        "status", "-n", "llm", "--server", apiserver.url, "-w", "--interval", "0.2",
        "--watch-limit", "8",
    )  # fmt: skip
    thread.join(timeout=5)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 10
    assert result.stdout.count("NAMESPACE") == 2  # the first listing and the change, not 8
    assert "Probing" in result.stdout and " On " in result.stdout


def test_test_only_flags_are_hidden() -> None:
    for command in ("status", "pause", "run"):
        text = run(command, "--help").stdout
        assert "--server" not in text, command
        assert "--namespace" in text or command == "run"
    assert "--watch-limit" not in run("status", "--help").stdout
    assert "--watch" in run("status", "--help").stdout


def test_kubectl_runs_it_as_a_plugin(apiserver: ApiServer) -> None:
    put(apiserver, "llm", "chat")
    bin_dir = Path(sys.executable).parent
    kubectl = bin_dir / "kubectl"
    if not (bin_dir / "kubectl-alphagate").exists():
        pytest.fail("kubectl-alphagate missing: pip install -e '.[dev]' (pyproject scripts)")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "ALPHAGATE_SERVER": apiserver.url,
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    plugins = subprocess.run(
        [str(kubectl), "plugin", "list", "--name-only"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert "kubectl-alphagate" in plugins.stdout, plugins.stdout + plugins.stderr
    proc = subprocess.run(
        [str(kubectl), "alphagate", "status", "-n", "llm", "-o", "json"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [i["metadata"]["name"] for i in yaml.safe_load(proc.stdout)["items"]] == ["chat"]
