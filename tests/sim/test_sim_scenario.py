"""Scenario files: every shipped one loads; bad ones name the file, line, field and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from alphagate.errors import ScenarioError
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import load_scenario, parse_duration

SHIPPED = ["steady-chat", "chat-to-code", "p99-regression", "low-traffic", "noisy-pods", "demo"]

GOOD = """\
name: t
slices:
  chat: {alpha: 0.7}
pools:
  - name: chat-canary
    role: canary
    slice: chat
    speculative_config: {num_speculative_tokens: 4}
"""


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load_and_run(scenarios_dir: Path, name: str) -> None:
    scenario = load_scenario(scenarios_dir / f"{name}.yaml")
    assert scenario.name == name
    # coarse (about a minute, dividing the duration): a smoke test of the whole timeline
    fleet = Fleet(scenario, tick=scenario.duration / max(1, round(scenario.duration / 60.0)))
    snaps = list(fleet.run(scenario.duration, every=scenario.duration))
    assert snaps[-1].t == pytest.approx(scenario.duration)  # ticks summed in floating point
    applied = [e for e in fleet.drain_events() if e.kind == "timeline"]
    assert len(applied) == len(scenario.timeline)
    assert any(p.spec_k for p in snaps[-1].pods)


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            GOOD.replace("alpha: 0.7", "alpha: 1.7"),
            3,
            "slices.chat.alpha",
            "less than or equal to 1",
        ),
        (GOOD.replace("alpha: 0.7", "alpah: 0.7"), 3, "slices.chat.alpah", "Extra inputs"),
        (GOOD.replace("alpha: 0.7", "alpha: lots"), 3, "slices.chat.alpha", "valid number"),
        (
            GOOD.replace("role: canary", "role: stable"),
            6,
            "pools[0].role",
            "'canary' or 'baseline'",
        ),
        (GOOD.replace("slice: chat", "slice: code"), 7, "pools[0].slice", "unknown slice 'code'"),
        (
            GOOD.replace("{num_speculative_tokens: 4}", "{method: eagle3}"),
            8,
            "pools[0].speculative_config",
            "num_speculative_tokens",
        ),
        (GOOD + "duration: soon\n", 9, "duration", "expected a duration"),
        (
            GOOD + "timeline:\n  - {at: 5m, pools: {nope: {replicas: 2}}}\n",
            10,
            "timeline[0].pools.nope",
            "unknown pool 'nope'",
        ),
        (GOOD + "timeline:\n  - {at: 5m}\n  - {at: 1m}\n", 11, "timeline[1].at", "time order"),
        (
            GOOD + "timeline:\n  - {at: 5m, slices: {chat: {alpha: null}}}\n",
            10,
            "timeline[0].slices.chat.alpha",
            "valid number",
        ),
        (
            GOOD.replace(
                "chat: {alpha: 0.7}", "chat: {alpha: 0.7, concurrency: 4, arrival_rate: 2}"
            ),
            3,
            "slices.chat",
            "not both",
        ),
        ("name: t\nslices: {}\n", 2, "slices", "at least 1"),
        ("slices:\n  chat: {alpha: 0.5}\n", 1, "name", "Field required"),
        ("name: t\nslices: [\n", 3, "", "invalid YAML"),
        ("- just\n- a list\n", None, "(top level)", "mapping"),
    ],
)
def test_bad_scenarios_name_file_line_field_and_reason(
    tmp_path: Path, text: str, line: int | None, field: str, reason: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    where = f"{path}:{line}:" if line else f"{path}:"
    assert any(
        ln.startswith(where) and field in ln and reason in ln for ln in message.splitlines()
    ), message


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read scenario"):
        load_scenario(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("2.5h", 9000.0), (45, 45.0), ("12", 12.0)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-3", "1d", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
