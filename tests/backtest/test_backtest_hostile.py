"""Hostile recordings given to `alphagate backtest`: each ends in one line naming the file,
the line and the field (exit 1), never a traceback or a hang."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from backtest_support import make_recording, policy_doc, scenario, spec_of, write_policy
from typer.testing import CliRunner

from alphagate.errors import ScenarioError
from alphagate_lab.backtest import run_recording
from alphagate_lab.commands import backtest as backtest_command

ITL = "vllm:inter_token_latency_seconds"


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sc = scenario("steady-chat").model_copy(update={"duration": 300.0})
    return make_recording(sc, tmp_path_factory.mktemp("short") / "short.jsonl")


def _snapshot_line(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if '"type":"snapshot"' in line)


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["pods"][0]
    return pod


def edit_pod(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda obj: change(_pod(obj))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return edit_pod(lambda pod: pod.__setitem__(key, value))


def _counter(value: Any) -> Callable[[dict[str, Any]], None]:
    return edit_pod(lambda pod: pod["counters"].__setitem__("vllm:generation_tokens_total", value))


def _drop_bucket(obj: dict[str, Any]) -> None:
    _pod(obj)["histograms"][ITL]["buckets"].pop()


def _truth(obj: dict[str, Any]) -> None:
    pod = next(iter(obj["truth"]["pods"].values()))
    pod["tokens_per_step"] = None


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "nan-counter": (_counter(float("nan")), "counters.vllm:generation_tokens_total"),
    "negative-counter": (_counter(-5), "greater than or equal to 0"),
    "string-counter": (_counter("12"), "valid integer"),
    "huge-counter": (_counter(10**400), "less than or equal to"),
    "infinite-restarts": (_set("restarts", float("inf")), "restarts"),
    "bool-restarts": (_set("restarts", True), "restarts"),
    "spec-k-billion": (_set("spec_k", 10**9), "spec_k"),
    "labels-a-list": (_set("labels", ["pod", "x"]), "labels"),
    "no-pod-label": (edit_pod(lambda pod: pod["labels"].pop("pod")), "needs a `pod` label"),
    "bucket-missing": (_drop_bucket, f"histogram {ITL} has"),
    "unknown-histogram": (
        edit_pod(
            lambda pod: pod["histograms"].__setitem__("x", {"buckets": [], "sum": 0, "count": 0})
        ),
        "unknown histogram 'x'",
    ),
    "truth-none": (_truth, "tokens_per_step"),
    "phase-odd": (_set("phase", "crashing"), "phase"),
    "pods-a-dict": (lambda obj: obj.__setitem__("pods", {"a": 1}), "pods"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE), ids=str)
def test_a_hostile_snapshot_names_file_line_and_field(
    short: Path, tmp_path: Path, case: str
) -> None:
    change, words = HOSTILE[case]
    lines = short.read_text(encoding="utf-8").splitlines(keepends=True)
    at = _snapshot_line(lines)
    obj = json.loads(lines[at])
    change(obj)
    lines[at] = json.dumps(obj) + "\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        run_recording(spec_of(policy_doc(["chat"])), bad)
    message = str(info.value)
    assert message.startswith(f"{bad}:{at + 1}: bad recording line: "), message
    assert words in message and "\n" not in message


def test_the_header_is_checked_too(short: Path, tmp_path: Path) -> None:
    """A scenario pool of a billion replicas (the backtest lists the pods a pool may grow to)
    and a non-finite epoch."""
    lines = short.read_text(encoding="utf-8").splitlines(keepends=True)
    for key, value, words in (
        ("scenario_spec", {"pools": [{"name": "p", "replicas": 10**9}]}, "replicas"),
        ("start_epoch", float("inf"), "start_epoch"),
        ("interval", -15, "interval"),
    ):
        header = json.loads(lines[0])
        header[key] = value
        bad = tmp_path / "header.jsonl"
        bad.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")
        with pytest.raises(ScenarioError, match=rf"{bad}:1: bad recording line: .*{words}"):
            run_recording(spec_of(policy_doc(["chat"])), bad)


def test_deep_nesting_and_non_objects_are_lines_too(short: Path, tmp_path: Path) -> None:
    lines = short.read_text(encoding="utf-8").splitlines(keepends=True)
    for junk, words in (("[" * 100_000 + "]" * 100_000, "nested too deeply"), ("7", "JSON object")):
        bad = tmp_path / "deep.jsonl"
        bad.write_text("".join(lines[:2]) + junk + "\n", encoding="utf-8")
        with pytest.raises(ScenarioError, match=rf"{bad}:3: bad recording line: .*{words}"):
            run_recording(spec_of(policy_doc(["chat"])), bad)


def test_the_cli_prints_one_line_and_exits_1(short: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    backtest_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `backtest` a subcommand."""

    lines = short.read_text(encoding="utf-8").splitlines(keepends=True)
    at = _snapshot_line(lines)
    obj = json.loads(lines[at])
    _pod(obj)["restarts"] = float("inf")  # int(inf) was an OverflowError traceback
    lines[at] = json.dumps(obj) + "\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    policy = write_policy(tmp_path / "policy.yaml", policy_doc(["chat"]))
    result = CliRunner().invoke(app, ["backtest", "-p", str(policy), "-r", str(bad)])
    assert result.exit_code == 1
    assert f"error: {bad}:{at + 1}: bad recording line: " in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


def test_a_fifo_recording_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "recording.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="cannot read recording: not a regular file: a FIFO"):
        run_recording(spec_of(policy_doc(["chat"])), fifo)
