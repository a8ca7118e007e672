"""`alphagate whatif` through the real CLI app: the lesson's figures, mixes and bad input."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from alphagate.cli import app

runner = CliRunner()


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _flat(text: str) -> str:
    """Rich boxes and wrapping removed: one line of words."""
    return " ".join(re.sub(r"[│╭╮╰╯─┃━┏┓┗┛┡┩└┘┌┐├┤┼╇╈┳┻]", " ", text).split())


def _json(*args: str) -> dict[str, Any]:
    result = _run(*args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_whatif_json_gives_lesson_figures() -> None:
    data = _json("whatif", "--alpha", "0.7", "--k", "5", "--overhead", "0.1")
    assert round(data["speedup"], 2) == 4.09
    assert data["breakeven_alpha"] == pytest.approx(0.02)
    assert data["alpha_for_2x"] == pytest.approx(0.24)
    assert data["alpha_for_3x"] == pytest.approx(0.46)
    assert data["at_concurrency"] is None
    by = {row["overhead"]: row for row in data["by_overhead"]}
    assert round(by[0.15]["breakeven_alpha"], 2) == 0.03
    # More overhead, more alpha needed for the same speed-up.
    needs = [row["alpha_for_2x"] for row in data["by_overhead"]]
    assert needs == sorted(needs)


def test_whatif_breakeven_for_overhead_015() -> None:
    data = _json("whatif", "--alpha", "0.5", "--k", "5", "--overhead", "0.15")
    assert round(data["breakeven_alpha"], 2) == 0.03


def test_whatif_with_concurrency_shows_practical_breakeven() -> None:
    data = _json(
        "whatif", "--alpha", "0.7", "--k", "5", "--overhead", "0.15", "--concurrency", "256"
    )
    at = data["at_concurrency"]
    assert 0.45 <= at["breakeven_alpha"] <= 0.55
    assert at["speedup"] < data["speedup"]
    assert at["stops_paying_above_concurrency"] > 256


def test_whatif_table_for_people() -> None:
    result = _run("whatif", "--alpha", "0.7", "--k", "5", "--overhead", "0.1")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    assert "4.09x" in flat
    assert "How it moves with the overhead" in flat


def test_whatif_mix_json() -> None:
    data = _json("whatif", "--mix", "chat=0.7:0.7,code=0.3:0.4", "--gate", "0.55")
    assert round(data["combined_alpha"], 2) == 0.61
    assert data["net_positive"] is True
    clears = {s["name"]: s["clears_gate"] for s in data["slices"]}
    assert clears == {"chat": True, "code": False}
    data = _json("whatif", "--mix", "chat=0.7:0.7,code=0.3:0.4", "--gate", "0.65")
    assert data["net_positive"] is False


def test_whatif_mix_for_people() -> None:
    result = _run("whatif", "--mix", "chat=0.7:0.7,code=0.3:0.4")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    assert "0.61" in flat and "net positive" in flat and "NOT" not in flat


@pytest.mark.parametrize(
    ("mix", "needle"),
    [
        ("chat=0.7", "expected name=share:alpha"),
        ("chat:0.7:0.7", "expected name=share:alpha"),
        ("chat=0.7:x", "is not a number"),
        ("chat=0.7:1.4", "alpha must be within [0, 1]"),
        ("chat=0.7:0.7,code=0.2:0.4", "sum to 1"),
        ("chat=0.5:0.7,chat=0.5:0.4", "repeated: chat"),
        ("Chat!=1:0.7", "slice name"),
        (",", "empty"),
    ],
)
def test_whatif_malformed_mix_is_one_clear_error(mix: str, needle: str) -> None:
    result = _run("whatif", "--mix", mix)
    assert result.exit_code == 2
    assert not isinstance(result.exception, ValueError)  # no traceback, a usage error
    flat = _flat(result.output)
    assert "--mix" in flat
    assert needle in flat


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--alpha", "0.7", "--k", "0"], "--k"),
        (["--alpha", "0.7", "--overhead", "-0.1"], "--overhead"),
        (["--alpha", "1.5"], "--alpha"),
        (["--alpha", "0.7", "--concurrency", "0"], "--concurrency"),
        (["--k", "5"], "--alpha"),
        (["--alpha", "0.7", "--mix", "a=1:0.7"], "--mix"),
    ],
)
def test_whatif_bad_numbers_name_the_option(args: list[str], option: str) -> None:
    result = _run("whatif", *args)
    assert result.exit_code == 2, result.output
    assert option in _flat(result.output)


def test_whatif_simulate_is_deterministic_per_seed() -> None:
    args = ["whatif", "--simulate", "--alpha", "0.8", "--concurrency", "4", "--steps", "200"]
    a = _json(*args, "--seed", "7", "--no-sweep")
    b = _json(*args, "--seed", "7", "--no-sweep")
    c = _json(*args, "--seed", "8", "--no-sweep")
    assert a == b
    assert a["at_concurrency"]["on"] != c["at_concurrency"]["on"]
    assert a["sweep"] is None


def test_whatif_simulate_per_token_time_falls_at_low_concurrency() -> None:
    data = _json(
        "whatif", "--simulate", "--alpha", "0.8", "--k", "5", "--concurrency", "2",
        "--steps", "300", "--seed", "1", "--no-sweep",
    )  # fmt: skip
    at = data["at_concurrency"]
    assert at["on"]["mean_ms_per_token"] < 0.5 * at["off"]["mean_ms_per_token"]
    assert at["on"]["tokens_per_pass"] > 3.0
    assert at["off"]["tokens_per_pass"] == 1.0


def test_whatif_simulate_sweep_finds_where_it_stops_paying() -> None:
    data = _json(
        "whatif", "--simulate", "--alpha", "0.8", "--concurrency", "64", "--steps", "100",
        "--seed", "3",
    )  # fmt: skip
    sweep = data["sweep"]
    assert [row["concurrency"] for row in sweep] == sorted(row["concurrency"] for row in sweep)
    assert sweep[0]["pays"] and not sweep[-1]["pays"]
    stop = data["stops_paying_at"]
    assert stop is not None and all(r["pays"] for r in sweep if r["concurrency"] < stop)


def test_whatif_simulate_for_people() -> None:
    result = _run("whatif", "--simulate", "--concurrency", "8", "--steps", "100")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    assert "Decode loop at concurrency 8" in flat
    assert "stops paying at concurrency" in flat
