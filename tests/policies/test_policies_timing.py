"""`policy check` warns where the timing cannot work (alphagate.core.timing).

An interval or window spanning fewer than two scrape intervals makes `increase()` empty at
times; a staleness.afterSeconds below window + warm-up reports every probe stale. Warnings
are typed (`--json` "timing") and leave the exit status alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alphagate import config
from alphagate.cli import app
from alphagate.core import timing
from alphagate.core.timing import TimingProblem

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))
CHAT = ROOT / "policies" / "general-chat-eagle3.yaml"  # prometheus, interval 30, window 300
CODE = ROOT / "policies" / "code-slice.yaml"  # podScrape, interval 30, window 600
runner = CliRunner()


def _with(tmp_path: Path, src: Path, **spec_over: Any) -> Path:
    doc = yaml.safe_load(src.read_text())
    for key, value in spec_over.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    out = tmp_path / src.name
    out.write_text(yaml.safe_dump(doc))
    return out


def _check(path: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["policy", "check", str(path), "--json", *extra])
    data = json.loads(result.stdout)
    return result.exit_code, data[0]["timing"]


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_shipped_policies_fit_the_shipped_scrape_interval(path: Path) -> None:
    code, found = _check(path)
    assert code == 0 and found == []


def test_interval_shorter_than_two_scrapes_warns(tmp_path: Path) -> None:
    path = _with(tmp_path, CHAT, timing={"intervalSeconds": 20})
    code, found = _check(path)  # 15 s scrapes: 20 s spans 1.3 of them
    assert code == 0
    assert [(w["problem"], w["field"]) for w in found] == [
        (TimingProblem.INTERVAL_TOO_SHORT.value, "spec.timing.intervalSeconds")
    ]
    assert found[0]["needed_seconds"] == 30 and found[0]["scrape_interval_seconds"] == 15
    # with a slower Prometheus the window fails too
    _, slow = _check(path, "--scrape-interval", "200")
    assert {w["problem"] for w in slow} == {
        TimingProblem.INTERVAL_TOO_SHORT.value,
        TimingProblem.WINDOW_TOO_SHORT.value,
    }
    text = runner.invoke(app, ["policy", "check", str(path)])
    assert text.exit_code == 0 and "warn" in text.stderr
    assert "spec.timing.intervalSeconds" in text.stderr


def test_pod_scrape_counts_its_own_interval(tmp_path: Path) -> None:
    # podScrape scrapes once per evaluation: a window of one interval holds one increment
    path = _with(tmp_path, CODE, timing={"intervalSeconds": 60, "windowSeconds": 60})
    _, found = _check(path, "--scrape-interval", "1")  # ignored for podScrape
    assert [(w["problem"], w["scrape_interval_seconds"]) for w in found] == [
        (TimingProblem.WINDOW_TOO_SHORT.value, 60)
    ]


def test_staleness_shorter_than_window_and_warmup_warns(tmp_path: Path) -> None:
    path = _with(tmp_path, CHAT, staleness={"afterSeconds": 200})
    _, found = _check(path)
    assert [w["problem"] for w in found] == [TimingProblem.STALENESS_TOO_SHORT.value]


def test_advise_is_the_same_rule_for_the_controller() -> None:
    spec = config.parse(yaml.safe_load(CHAT.read_text())).spec
    assert timing.advise(spec, 15.0) == ()
    assert timing.advise(spec, None) == ()  # unknown scrape interval: nothing to say
    (w,) = timing.advise(spec, 16.0)  # 30 s interval spans 1.9 scrapes of 16 s
    assert w.problem is TimingProblem.INTERVAL_TOO_SHORT and w.scrapes == pytest.approx(30 / 16)
    assert w.needed_seconds == 32 and w.message


def test_batch_seconds_over_half_the_window_warns(tmp_path: Path) -> None:
    # one canary pod's 300 s window would be one block of 600 s: never judged
    path = _with(tmp_path, CHAT, acceptance={"batchSeconds": 600})  # the value under test
    code, found = _check(path)
    assert code == 0
    assert [(w["problem"], w["field"], w["needed_seconds"]) for w in found] == [
        (TimingProblem.BLOCKS_TOO_LONG.value, "spec.acceptance.batchSeconds", 1200.0)
    ]
    text = runner.invoke(app, ["policy", "check", str(path)])
    assert "leave batchSeconds out" in text.output
    # half the window fits twice: no warning
    assert _check(_with(tmp_path, CHAT, acceptance={"batchSeconds": 150}))[1] == []  # fits


def test_a_window_of_one_sample_warns_with_automatic_blocks(tmp_path: Path) -> None:
    # Prometheus policy evaluated every 120 s over 180 s: a pod's window is one 120 s sample
    path = _with(tmp_path, CHAT, timing={"intervalSeconds": 120, "windowSeconds": 180})
    _, found = _check(path)
    assert [(w["problem"], w["needed_seconds"]) for w in found] == [
        (TimingProblem.WINDOW_ONE_BLOCK.value, 240.0)
    ]


def test_the_shipped_chat_policy_leaves_blocks_automatic() -> None:
    spec = config.parse(yaml.safe_load(CHAT.read_text())).spec
    assert spec.acceptance.batch_seconds is None
    assert timing.batches_advice(spec, 15.0) == ()


def test_a_probe_deadline_before_the_first_possible_confirmation_warns(tmp_path: Path) -> None:
    # 600 s windows, three to pass, on the 900 s default deadline: a healthy probe would be
    # reported stalled every time (code-slice shipped so until its probeSeconds was set)
    doc = yaml.safe_load(CODE.read_text())
    del doc["spec"]["timing"]["probeSeconds"]
    path = tmp_path / "code.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, found = _check(path)
    assert code == 0
    assert [(w["problem"], w["field"], w["seconds"], w["needed_seconds"]) for w in found] == [
        (TimingProblem.PROBE_TOO_SHORT.value, "spec.timing.probeSeconds", 900.0, 2010.0)
    ]
    assert (
        "every healthy probe is reported stalled"
        in runner.invoke(app, ["policy", "check", str(path)]).output
    )
