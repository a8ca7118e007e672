"""`alphagate backtest`: tables, --json, --out reports, and clear errors for bad input."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from backtest_support import make_recording, policy_doc, scenario, spec_of, write_policy
from typer.testing import CliRunner

from alphagate.errors import PolicyError, ScenarioError
from alphagate_lab.backtest import run_recording
from alphagate_lab.commands import backtest as backtest_command


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    backtest_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `backtest` a subcommand."""

    return app


runner = CliRunner()


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    """Chat and code (for the chat-to-code recording)."""
    return write_policy(tmp_path / "policy.yaml", policy_doc())


@pytest.fixture
def chat_policy(tmp_path: Path) -> Path:
    """Chat only (for the steady-chat recording)."""
    return write_policy(tmp_path / "chat.yaml", policy_doc(["chat"]))


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 simulated minutes of steady chat: quick to replay, for error cases."""
    sc = scenario("steady-chat").model_copy(update={"duration": 600.0})
    return make_recording(sc, tmp_path_factory.mktemp("short") / "short.jsonl")


# --------------------------------------------------------------------------- happy paths


@pytest.fixture(scope="module")
def tables_and_report(
    app: typer.Typer, chat_to_code: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    """One table run with --out, read by two tests: what it prints and what it writes.

    --out only adds files (and a line naming them): the tables are the same as without it, so
    one run of the 90-minute backtest serves both instead of two."""
    tmp = tmp_path_factory.mktemp("tables")
    policy = write_policy(tmp / "policy.yaml", policy_doc())
    out = tmp / "report"
    result = runner.invoke(
        app, ["backtest", "-p", str(policy), "-r", str(chat_to_code), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return result.stdout, out


def test_tables_show_the_timeline_flips_states_and_score(
    tables_and_report: tuple[str, Path],
) -> None:
    out, _ = tables_and_report
    assert "Decision timeline" in out and "Summary" in out
    assert "mix shifts to code" in out  # the recorded timeline, interleaved
    assert "failing window" in out  # the rollback's reason (decisive, or two disjoint)
    assert "early re-probe" in out
    assert "RolledBack" in out and "disable" in out
    # the delay counts from where the true alpha crossed the gate, just after the shift at 20 m
    assert "detection delay" in out
    assert re.search(r"\d+ s \(from 0:20:[0-5]\d\)", out)
    assert "cannot change recorded data" in out


def test_json_summary(app: typer.Typer, policy: Path, chat_to_code: Path) -> None:
    result = runner.invoke(app, ["backtest", "-p", str(policy), "-r", str(chat_to_code), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["policy"] == "backtest-test" and data["aggregation"] == "combined"
    assert data["source"]["kind"] == "recording" and data["source"]["scenario"] == "chat-to-code"
    assert data["flips"] == 3  # probe, rollback, re-probe
    assert len(data["detection_delays_seconds"]) == 1 and data["false_flips"] == 0
    assert data["missed"] == 0
    unit = data["units"][0]
    assert unit["unit"] == "combined" and unit["slices"] == ["chat", "code"]
    assert [t["transition"] for t in unit["transitions"]] == [
        "Off -> Probing",
        "Probing -> On",
        "On -> RolledBack",
        "RolledBack -> Probing",
        "Probing -> On",
    ]
    assert set(unit["seconds_in_state"]) == {"Probing", "On", "RolledBack"}
    assert sum(unit["seconds_in_state"].values()) == pytest.approx(unit["duration_seconds"])
    assert unit["truth"]["episodes"][0]["detection_delay_seconds"] > 0
    assert any(e["kind"] == "timeline" for e in data["events"])


def test_out_writes_the_demo_report_and_json(tables_and_report: tuple[str, Path]) -> None:
    _, out = tables_and_report
    md = (out / "report.md").read_text()
    assert md.startswith("# Backtest of backtest-test on chat-to-code")
    assert "| On -> RolledBack | disable |" in md
    assert "detection delay" in md and "cannot change recorded data" in md
    assert "Recorded at 0:20:00: timeline: mix shifts to code" in md
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "points.jsonl").read_text().splitlines()) == 181
    assert json.loads((out / "backtest.json").read_text())["flips"] == 3


def test_per_slice_reports_one_directory_per_slice(
    app: typer.Typer, chat_to_code: Path, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", policy_doc(aggregation="perSlice"))
    out = tmp_path / "report"
    result = runner.invoke(
        app, ["backtest", "-p", str(policy), "-r", str(chat_to_code), "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [u["unit"] for u in data["units"]] == ["chat", "code"]
    for name in ("chat", "code"):
        assert (out / name / "report.md").exists() and (out / name / "timeline.png").exists()
    assert str(out / "backtest.json") in data["written"]


def test_every_evaluation_lists_holds_too(app: typer.Typer, short: Path, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", policy_doc(["chat"]))
    brief = runner.invoke(app, ["backtest", "-p", str(policy), "-r", str(short)])
    full = runner.invoke(
        app, ["backtest", "-p", str(policy), "-r", str(short), "--every-evaluation"]
    )
    assert brief.exit_code == 0 and full.exit_code == 0, brief.output + full.output
    # holds on a judged window and on the looks between judged windows
    for hold in ("probing: window Pass", "probing: look Pass"):
        assert hold not in brief.stdout and hold in full.stdout


def test_parse_time_forms() -> None:
    now = 1_800_000_000.0
    assert backtest_command.parse_time("1700000000.5", now=now, option="--start") == 1700000000.5
    assert backtest_command.parse_time("now", now=now, option="--end") == now
    assert backtest_command.parse_time("now-30m", now=now, option="--start") == now - 1800
    iso = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert backtest_command.parse_time("2026-01-02T03:04:05Z", now=now, option="--start") == iso
    assert backtest_command.parse_time("2026-01-02T03:04:05", now=now, option="--start") == iso
    with pytest.raises(typer.BadParameter, match="RFC 3339"):
        backtest_command.parse_time("yesterday", now=now, option="--start")
    with pytest.raises(typer.BadParameter):
        backtest_command.parse_time("now-soon", now=now, option="--start")


# --------------------------------------------------------------------------- bad input


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_garbled_line_is_named(
    app: typer.Typer, chat_policy: Path, short: Path, tmp_path: Path
) -> None:
    lines = _lines(short)
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"  # cut a snapshot in half
    bad = tmp_path / "garbled.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    result = runner.invoke(app, ["backtest", "-p", str(chat_policy), "-r", str(bad)])
    assert result.exit_code == 1
    assert f"error: {bad}:5: bad recording line" in result.stderr
    assert "Traceback" not in result.output
    with pytest.raises(ScenarioError, match=r":5: bad recording line"):
        run_recording(spec_of(policy_doc(["chat"])), bad)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ls: [*ls[:-1], ls[-1][:100]], r":{n}: bad recording line"),  # truncated end
        (lambda ls: ls[1:], r":1: bad recording line: not an alphagate-sim-recording"),
        (lambda ls: [], r"empty recording"),
        (lambda ls: ls[:1], r"has no snapshots"),
        (
            lambda ls: [*ls[:3], '{"type": "snapshot", "t": 0, "pods": []}\n', *ls[3:]],
            r":4: bad recording line: time: Field required",
        ),
        (lambda ls: [*ls[:3], '{"type": "mystery"}\n'], r":4: bad recording line: unknown line"),
    ],
    ids=["truncated", "no-header", "empty", "header-only", "missing-field", "unknown-type"],
)
def test_bad_recordings_fail_with_the_line(
    short: Path, tmp_path: Path, edit: object, message: str
) -> None:
    lines = edit(_lines(short))  # type: ignore[operator]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ScenarioError, match=message.format(n=len(lines))):
        run_recording(spec_of(policy_doc(["chat"])), bad)


def test_time_going_backwards_is_refused(short: Path, tmp_path: Path) -> None:
    lines = _lines(short)
    snaps = [i for i, line in enumerate(lines) if '"type":"snapshot"' in line]
    lines[snaps[3]], lines[snaps[5]] = lines[snaps[5]], lines[snaps[3]]
    bad = tmp_path / "backwards.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ScenarioError, match="goes back in time"):
        run_recording(spec_of(policy_doc(["chat"])), bad)


def test_missing_recording(app: typer.Typer, policy: Path, tmp_path: Path) -> None:
    absent = tmp_path / "absent.jsonl"
    result = runner.invoke(app, ["backtest", "-p", str(policy), "-r", str(absent)])
    assert result.exit_code == 1
    assert f"{absent}: cannot read recording" in result.stderr


def test_selectors_matching_no_recorded_pod_say_so(
    app: typer.Typer, short: Path, tmp_path: Path
) -> None:
    doc = policy_doc(["chat"], selector={"app": "llama", "track": "canary"})
    policy = write_policy(tmp_path / "p.yaml", doc)
    result = runner.invoke(app, ["backtest", "-p", str(policy), "-r", str(short)])
    assert result.exit_code == 1
    err = result.stderr
    assert str(policy) in err
    assert "spec.slices[0].canary.matchLabels {app: llama, track: canary}" in err
    assert "no recorded pod" in err
    # ... and shows what the recorded pods do carry, to fix the selector with.
    assert "role: canary" in err and "slice: chat" in err
    with pytest.raises(PolicyError) as info:
        run_recording(spec_of(doc), short, where="p.yaml")
    assert info.value.path == "spec.slices[0].canary.matchLabels"


def test_only_one_pool_unmatched_is_named(short: Path) -> None:
    doc = policy_doc(["chat"])
    doc["spec"]["slices"][0]["baseline"]["matchLabels"] = {"slice": "chat", "role": "stable"}
    with pytest.raises(PolicyError, match=r"spec\.slices\[0\]\.baseline\.matchLabels") as info:
        run_recording(spec_of(doc), short)
    assert "canary.matchLabels" not in str(info.value)


def test_invalid_policy_names_the_field(app: typer.Typer, short: Path, tmp_path: Path) -> None:
    doc = policy_doc(["chat"], acceptance={"disableBelow": 1.5})
    policy = tmp_path / "bad.yaml"
    write_policy(policy, doc)
    result = runner.invoke(app, ["backtest", "-p", str(policy), "-r", str(short)])
    assert result.exit_code == 1
    assert "spec.acceptance.disableBelow" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --recording or --prometheus"),
        (["-r", "x.jsonl", "--prometheus", "http://127.0.0.1:1"], "exactly one of"),
        (["--prometheus", "http://127.0.0.1:1"], "--prometheus needs --start"),
        (["--prometheus", "127.0.0.1:9090", "--start", "now-1h"], "http:// or https://"),
        (["--prometheus", "http://127.0.0.1:1", "--start", "soon"], "RFC 3339"),
        (
            ["--prometheus", "http://127.0.0.1:1", "--start", "now", "--end", "now-1h"],
            "must be after --start",
        ),
        (["-r", "x.jsonl", "--start", "now-1h"], "go with --prometheus only"),
        (["-r", "x.jsonl", "--initial-state", "maybe"], "must be off or on"),
        (["-r", "x.jsonl", "--rollout", "soon"], "duration"),
    ],
)
def test_usage_errors_exit_2(
    app: typer.Typer, policy: Path, short: Path, args: list[str], message: str
) -> None:
    args = [str(short) if a == "x.jsonl" else a for a in args]
    result = runner.invoke(app, ["backtest", "-p", str(policy), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_unreachable_prometheus_holds_and_says_why(app: typer.Typer, policy: Path) -> None:
    """Nothing listens on the port: every evaluation is an Error, and errors never flip."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: connections are refused
    args = ["backtest", "-p", str(policy), "--prometheus", f"http://127.0.0.1:{port}"]
    args += ["--start", "1800000000", "--end", "1800000030", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["evaluations"] == 2 and data["flips"] == 0
    unit = data["units"][0]
    assert unit["transitions"] == [] and set(unit["seconds_in_state"]) == {"Off"}
    notes = " ".join(data["notes"])
    assert "2 unit evaluations had source errors" in notes
    assert "Pool chat/canary returned no data in any evaluation; first error: unreachable" in notes
