"""The installed entry point (`alphagate.cli.main`), not only the Typer app: exit statuses and
one-line errors as a shell sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alphagate import cli

ROOT = Path(__file__).resolve().parents[2]


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr("sys.argv", ["alphagate", *args])
    try:
        cli.main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_main_whatif_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        _main(monkeypatch, "whatif", "--alpha", "0.7", "--k", "5", "--overhead", "0.1", "--json")
        == 0
    )
    assert round(json.loads(capsys.readouterr().out)["speedup"], 2) == 4.09


def test_main_policy_check_failure_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: [\n")
    assert _main(monkeypatch, "policy", "check", str(bad)) == 1
    assert "malformed YAML" in capsys.readouterr().err


def test_main_malformed_mix_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "whatif", "--mix", "chat=0.7") == 2
    err = capsys.readouterr().err
    assert "expected name=share:alpha" in err and "Traceback" not in err
