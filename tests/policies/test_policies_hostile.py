"""Hostile and odd policy files: every one is refused with one line naming the file and the
line or field, and nothing crashes; `policy check` and the controller (which reads the same
resource as JSON from the API) accept exactly the same documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alphagate import config, files, yamlload
from alphagate.cli import app
from alphagate.commands.policy import load_file
from alphagate.errors import PolicyError

ROOT = Path(__file__).resolve().parents[2]
CHAT = ROOT / "policies" / "general-chat-eagle3.yaml"
runner = CliRunner()

BOMB = "\n".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x, x]",
        *(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]"
            for i in range(7)
        ),
    ]
)


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _file(tmp_path: Path, text: str) -> Path:
    out = tmp_path / "policy.yaml"
    out.write_text(text)
    return out


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("alias bomb", BOMB),
        ("deep nesting", "spec: " + "[" * 3000 + "]" * 3000),
        ("unhashable key", "? [1, 2]\n: x\n"),
        ("mapping key", "? {a: 1}\n: x\n"),
        ("self alias", "a: &x [*x]\n"),
        ("duplicate key", "kind: A\nkind: B\n"),
        ("infinity", "spec: {timing: {intervalSeconds: .inf}}\n"),
        ("binary", "a: !!binary aGVsbG8=\n"),
    ],
)
def test_hostile_yaml_is_one_clear_line(tmp_path: Path, name: str, text: str) -> None:
    path = _file(tmp_path, text)
    result = _run("policy", "check", str(path))
    assert result.exit_code == 1, name
    errors = [ln for ln in result.output.splitlines() if ln.startswith(str(path))]
    assert len(errors) == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    show = _run("policy", "show", str(path))  # once exhausted memory on the bomb
    assert show.exit_code == 1


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = _file(tmp_path, "# pad\n" * (yamlload.MAX_BYTES // 6 + 10))
    [doc] = load_file(path)
    assert doc.index == 0 and doc.problems and "larger than" in doc.problems[0].message


def test_limits_name_the_line() -> None:
    with pytest.raises(yamlload.YamlLimitError) as caught:
        yamlload.load_all("ok: 1\nkeys:\n  ? [1]\n  : 2\n")
    assert caught.value.line == 3


def test_anchors_within_the_limits_still_work() -> None:
    [doc] = yamlload.load_all("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nagain: *b\n")
    assert doc.data == {
        "base": {"x": 1, "y": 2},
        "other": {"x": 1, "y": 3},
        "again": {"x": 1, "y": 2},
    }


def test_yaml_becomes_the_json_the_api_would_store() -> None:
    [doc] = yamlload.load_all("1: a\nwhen: 2024-01-02\nyes: on\n")
    assert doc.data == {"1": "a", "when": "2024-01-02", "true": True}
    assert json.loads(json.dumps(doc.data)) == doc.data


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    intervalSeconds: 30", "    intervalSeconds: .inf"),
        ("    intervalSeconds: 30", "    intervalSeconds: 0.001"),
        ("    windowSeconds: 300", "    windowSeconds: 0.05"),
        ("  namespace: llm", "  namepsace: llm"),
    ],
)
def test_check_and_controller_agree(tmp_path: Path, old: str, new: str) -> None:
    text = CHAT.read_text()
    assert old in text
    path = _file(tmp_path, text.replace(old, new, 1))
    [doc] = load_file(path)
    assert not doc.ok
    # The controller gets the object from the API as JSON; YAML's .inf cannot even be sent.
    data = yaml.safe_load(path.read_text())
    try:
        wire = json.loads(json.dumps(data, allow_nan=False))
    except ValueError:
        return  # kubectl could not send it either
    with pytest.raises(PolicyError):
        config.parse(wire)


def test_the_shipped_policy_is_accepted_by_both() -> None:
    [doc] = load_file(CHAT)
    assert doc.ok
    wire = json.loads(json.dumps(yaml.safe_load(CHAT.read_text())))
    assert config.parse(wire) == doc.resource


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["policy", "check", "{path}"], "cannot read: not a regular file: a FIFO"),
        (["inspect", "{path}"], "cannot read: not a regular file: a FIFO"),
        (
            ["run", "--config", "{path}", "--server", "http://127.0.0.1:9", "--exit-after", "1"],
            "cannot read: not a regular file: a FIFO",
        ),
    ],
    ids=["policy-check", "inspect", "run-config"],
)
def test_a_fifo_is_refused_before_it_is_opened(tmp_path: Path, args: list[str], says: str) -> None:
    """`open()` on a FIFO waits for a writer forever: `policy check`, `inspect` and
    `run --config` refuse it (and devices, sockets, directories) instead. In a child process
    with a deadline, so a regression fails rather than hangs the suite."""
    fifo = tmp_path / "named-pipe"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "alphagate", *(a.format(path=fifo) for a in args)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args[:2])} waited on the FIFO")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert says in output and str(fifo) in output, output
    assert "Traceback" not in output


def test_read_regular_refuses_devices_and_directories(tmp_path: Path) -> None:
    for path, kind in (("/dev/null", "a character device"), (str(tmp_path), "a directory")):
        with pytest.raises(OSError, match=f"not a regular file: {kind}"):
            files.read_regular(path, 10)
    ok = tmp_path / "f"
    ok.write_bytes(b"x" * 20)
    assert files.read_regular(ok, 10) == b"x" * 11  # the bound plus one: the caller can tell
