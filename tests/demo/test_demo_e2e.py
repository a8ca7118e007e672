"""The whole demo, compressed: the default scenario at 4x with the scripted faults.

One run (about 90 s; Prometheus when installed, pod scraping otherwise) is shared by the tests:
the story's transitions in order, the report files, each fault shown as Error/Inconclusive
and never as a flip, and every part stopped afterwards. A second, short run in a subprocess
is interrupted with Ctrl-C (SIGINT) and must stop everything and still write its report.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
from typer.testing import CliRunner

from alphagate_lab.commands import demo as demo_command

pytestmark = [pytest.mark.slow, pytest.mark.realtime]

SPEED = "4"  # `make test` gives it priority over the suite (`realtime`): beside it, it came late
PARTS = ("sandbox-kubelet", "alphagate-loop", "alphagate-watch", "sim-", "apiserver:",
         "alphagate-metrics", "demo-prometheus")  # fmt: skip


def _app() -> typer.Typer:
    app = typer.Typer()
    demo_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `demo` a subcommand."""

    return app


def _closed(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((parts.hostname or "127.0.0.1", parts.port or 80)) != 0


@pytest.fixture(scope="module")
def threads_before_demo() -> set[threading.Thread]:
    """Threads this process ran before the demo: not its parts (under pytest-xdist, a worker
    may still run another module's session fixture, a simulated fleet among them)."""
    return set(threading.enumerate())


@pytest.fixture(scope="module")
def demo_run(
    threads_before_demo: set[threading.Thread], tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(
        _app(),
        ["demo", "--speed", SPEED, "--chaos", "--no-live", "--json", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    print(
        f"\ndemo: {summary['scenario_seconds']} scenario s in {summary['wall_seconds']} s wall "
        f"({summary['source']}, {SPEED}x), {summary['evaluations']} evaluations"
    )
    return summary, out


def test_the_story_happens_in_order(demo_run: tuple[dict[str, Any], Path]) -> None:
    summary, _ = demo_run
    flips = [t for t in summary["transitions"] if t["action"] in ("enable", "disable")]
    story = [(t["action"], t.get("cause", ""), bool(t.get("early_reprobe"))) for t in flips]
    assert story[:5] == [
        ("enable", "", False),  # chat-heavy mix, alpha good: speculation on
        ("disable", "latency", False),  # load spike: P99 per token regresses, alpha fine
        ("enable", "", False),  # cooldown over: probe again
        ("disable", "acceptance", False),  # code shift: combined alpha under the gate
        ("enable", "", True),  # mix back: early re-probe
    ], summary["transitions"]
    assert all(summary["milestones"].values()), summary["milestones"]
    # The first probe was confirmed (Probing -> On), not only enabled; the last one, the early
    # re-probe, may still be probing when the story ends (its confirmation races the pod
    # deletion the chaos makes near the end), but speculation is on again.
    states = [t["transition"] for t in summary["transitions"]]
    assert states[:2] == ["Off -> Probing", "Probing -> On"]
    assert states[-1] in ("RolledBack -> Probing", "Probing -> On")
    p99 = next(t for t in flips if t.get("cause") == "latency")
    assert {"kind": "latency", "slice": "chat"} in p99["failing"]
    assert p99["transition_cause"] == "policy-fail"
    early = [t for t in flips if t.get("early_reprobe")]
    assert early and all(t["transition_cause"] == "early-reprobe" for t in early)


def test_the_report_is_written(demo_run: tuple[dict[str, Any], Path]) -> None:
    summary, out = demo_run
    md = (out / "report.md").read_text()
    assert md.startswith("# alphagate demo")
    assert "![timeline](timeline.png)" in md
    assert md.count("| enable |") >= 3 and md.count("| disable |") >= 2
    png = out / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000
    points = (out / "points.jsonl").read_text().splitlines()
    assert len(points) == summary["evaluations"]
    assert summary["report"]["png"] == str(png)


def test_faults_show_as_error_or_inconclusive_and_never_flip(
    demo_run: tuple[dict[str, Any], Path],
) -> None:
    summary, out = demo_run
    chaos = {c["kind"]: c for c in summary["chaos"]}
    expected = {"apiserver", "pod"} | (
        {"prometheus"} if summary["source"] == "prometheus" else set()
    )
    assert set(chaos) == expected
    for kind, c in chaos.items():
        assert c["ran"], c
        assert c["flips"] == 0, c
        shown = c["verdicts"].get("Error", 0) + c["verdicts"].get("Inconclusive", 0)
        assert shown >= 1, c
        inside = [
            t for t in summary["transitions"]
            if c["start"] <= t["t"] <= c["end"] and t["action"] in ("enable", "disable")
        ]  # fmt: skip
        assert inside == [], (kind, inside)
    assert chaos["apiserver"]["verdicts"].get("Error", 0) >= 1
    assert "HTTP 500" in chaos["apiserver"]["example"]
    if "prometheus" in chaos:
        assert chaos["prometheus"]["verdicts"].get("Error", 0) >= 1
        assert "unreachable" in chaos["prometheus"]["example"]
    md = (out / "report.md").read_text()
    for c in chaos.values():
        assert f"chaos t={c['start']:.0f}" in md and "no flip" in md


def test_every_part_is_stopped_after_the_run(
    demo_run: tuple[dict[str, Any], Path], threads_before_demo: set[threading.Thread]
) -> None:
    summary, _ = demo_run
    for name, url in summary["endpoints"].items():
        assert _closed(url), f"{name} still listening at {url}"
    deadline = time.monotonic() + 10
    alive: list[str] = []
    while time.monotonic() < deadline:
        alive = [
            t.name
            for t in threading.enumerate()
            if t.name.startswith(PARTS) and t not in threads_before_demo
        ]
        if not alive:
            break
        time.sleep(0.1)
    assert alive == []


def test_ctrl_c_stops_everything_and_still_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "alphagate", "demo", "--speed", "4", "--no-live", "--json",
         "--source", "scrape", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "Off -> Probing" in line:  # the controller is at work
                break
        assert any("Off -> Probing" in s for s in seen), "".join(seen)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, stderr
    summary = json.loads(stdout)
    assert summary["interrupted"] is True
    for name, url in summary["endpoints"].items():
        assert _closed(url), f"{name} still listening at {url}"
    assert (out / "timeline.png").exists()
    assert "interrupted at t=" in (out / "report.md").read_text()
