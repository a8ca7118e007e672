"""`alphagate sim`: fast recordings, real-time serving, and clean errors and stops."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from alphagate_lab.commands import sim as sim_command
from alphagate_lab.sim.recording import read_recording


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    sim_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `sim` a subcommand."""

    return app


runner = CliRunner()


def test_fast_run_writes_a_readable_recording(
    app: typer.Typer, scenarios_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rec.jsonl"
    scenario = scenarios_dir / "chat-to-code.yaml"
    result = runner.invoke(
        app, ["sim", "-s", str(scenario), "--fast", "--duration", "30m", "--record", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "simulated 0:30:00 of 8 pods" in result.output
    assert "[0:20:00] timeline: mix shifts to code" in result.output
    rec = read_recording(out)
    assert rec.header["scenario"] == "chat-to-code" and rec.header["interval"] == 15.0
    assert [s.t for s in rec.snapshots][:3] == [0.0, 15.0, 30.0]
    assert rec.snapshots[-1].t == 1800.0
    assert rec.snapshots[-1].truth.slices["code"].share == 0.7
    assert any(e.kind == "timeline" for e in rec.events)


def test_fast_run_without_recording_prints_a_summary(app: typer.Typer, scenarios_dir: Path) -> None:
    result = runner.invoke(
        app, ["sim", "-s", str(scenarios_dir / "steady-chat.yaml"), "--fast", "--duration", "5m"]
    )
    assert result.exit_code == 0, result.output
    assert "chat-canary-0" in result.output and "0.720" in result.output


def test_real_time_run_serves_and_writes_file_sd(
    app: typer.Typer, scenarios_dir: Path, tmp_path: Path
) -> None:
    sd = tmp_path / "sd.json"
    args = ["sim", "-s", str(scenarios_dir / "steady-chat.yaml"), "--duration", "3s",
            "--speed", "30", "--file-sd", str(sd)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "http://127.0.0.1:" in result.output and "scenario finished" in result.output
    assert {g["labels"]["role"] for g in json.loads(sd.read_text())} == {"canary", "baseline"}


def test_bad_scenario_is_one_clear_line(app: typer.Typer, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nslices:\n  chat: {alpha: 2}\n")
    result = runner.invoke(app, ["sim", "-s", str(bad), "--fast"])
    assert result.exit_code == 1
    assert f"error: {bad}:3: slices.chat.alpha: Input should be less than or equal to 1" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_port_in_use_is_one_clear_line(app: typer.Typer, scenarios_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(
            app,
            ["sim", "-s", str(scenarios_dir / "steady-chat.yaml"), "--port-base", str(port),
             "--duration", "1s"],
        )  # fmt: skip
    assert result.exit_code == 1
    assert f"error: 127.0.0.1:{port} is already in use" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "hint"), [(["--duration", "soon"], "--duration"), (["--every", "0s"], "--every")]
)
def test_bad_options_are_usage_errors(
    app: typer.Typer, scenarios_dir: Path, args: list[str], hint: str
) -> None:
    result = runner.invoke(app, ["sim", "-s", str(scenarios_dir / "steady-chat.yaml"), *args])
    assert result.exit_code == 2 and hint in result.output


# The child is started as a shell's background job or a test runner's worker may start it:
# the stop signals ignored (a disposition that survives exec, and that Python keeps) and
# blocked (a mask that survives exec too). It must stop all the same.
HOSTILE_START = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGTERM):\n"
    "    signal.signal(sig, signal.SIG_IGN)\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


@pytest.mark.parametrize(
    ("sig", "inherited"),
    [
        (signal.SIGINT, "default"),
        (signal.SIGINT, "ignored and blocked"),
        (signal.SIGTERM, "ignored and blocked"),
    ],
    ids=["SIGINT", "SIGINT-inherited-ignored-and-blocked", "SIGTERM-inherited-ignored-and-blocked"],
)
def test_interrupt_stops_cleanly(scenarios_dir: Path, sig: signal.Signals, inherited: str) -> None:
    cmd = [sys.executable, "-m", "alphagate", "sim", "-s", str(scenarios_dir / "steady-chat.yaml")]
    if inherited != "default":
        cmd = [sys.executable, "-c", HOSTILE_START, *cmd[1:]]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "Ctrl-C stops" in line:
                break
        assert any("Ctrl-C stops" in ln for ln in seen), "".join(seen)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert "interrupted; stopping" in out
    assert "Traceback" not in err
