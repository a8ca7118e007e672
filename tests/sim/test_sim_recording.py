"""JSONL recordings: what the fleet produced is what a backtest reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from alphagate import vllm
from alphagate.errors import ScenarioError
from alphagate_lab.sim.exposition import render
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.recording import iter_recording, read_recording, record
from alphagate_lab.sim.scenario import Scenario


def test_round_trip(steady_chat: Scenario, tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"

    def fleet() -> Fleet:
        f = Fleet(steady_chat, seed=8, tick=5.0)
        f.advance_to(30.0)
        f.set_speculative_config("chat-canary-0", None)  # a restart inside the recording
        return f

    count = record(fleet(), path, duration=120.0, every=30.0)
    assert count == 4  # t = 30, 60, 90, 120
    expected = list(fleet().run(120.0, every=30.0))
    rec = read_recording(path)
    assert rec.header["seed"] == 8 and rec.header["tick"] == 5.0
    assert rec.header["buckets"][vllm.ITL] == list(vllm.ITL_BUCKETS)
    assert [s.t for s in rec.snapshots] == [30.0, 60.0, 90.0, 120.0]
    restarted = rec.snapshots[0].pod("chat-canary-0")
    assert restarted.phase == "loading" and restarted.spec_k is None
    assert rec.snapshots[-1].pod("chat-canary-0").ready  # loaded again after 30 s
    # The recording holds exactly what the live run produced (same seed, same actions), and
    # a recorded snapshot renders the same page as the live one did.
    live = {round(s.t): s for s in expected}
    for snap in rec.snapshots:
        for got in snap.pods:
            want = live[round(snap.t)].pod(got.name)
            assert got.to_json() == want.to_json()
            assert render(got) == render(want)
    assert rec.snapshots[-1].truth.slices["chat"].alpha == 0.72
    assert rec.snapshots[-1].truth.pods["chat-canary-0"].k == 0
    kinds = [e.kind for e in rec.events]
    assert kinds.count("pod_added") == 4 and kinds.index("restart") < kinds.index("ready")


def test_bad_lines_name_file_and_line(steady_chat: Scenario, tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record(Fleet(steady_chat, tick=15.0), path, duration=30.0, every=15.0)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:2], '{"type": "snapshot", "t": 1}', *lines[2:]]) + "\n")
    with pytest.raises(ScenarioError, match=rf"{path}:3: bad recording line"):
        read_recording(path)
    path.write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(ScenarioError, match=r":1: bad recording line: not an alphagate"):
        list(iter_recording(path))
    with pytest.raises(ScenarioError, match="cannot read recording"):
        read_recording(tmp_path / "absent.jsonl")
