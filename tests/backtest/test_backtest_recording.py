"""Backtests over simulator recordings: decisions, the truth they are scored against, and
that the replay reads the recording exactly as the live pod-scrape source would."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
from backtest_support import make_recording, policy_doc, scenario, spec_of

from alphagate_lab.backtest import BacktestResult, Options, run_recording
from alphagate_lab.backtest.recorded import page_of, page_via_text
from alphagate_lab.sim.fleet import FleetSnapshot
from alphagate_lab.sim.recording import iter_recording
from alphagate_lab.sim.scenario import Event

SHIFT_AT = 20 * 60.0  # chat-to-code: the mix moves to 70% code here ...
BACK_AT = 60 * 60.0  # ... and back to 80% chat here


def decisions(result: BacktestResult, unit: int = 0) -> list[tuple[float, str, str]]:
    """(t, action, transition) of every flip or state change."""
    return [
        (p.t, p.action, p.transition)
        for p in result.units[unit].points
        if p.action != "hold" or p.transition
    ]


def points_json(result: BacktestResult) -> list[str]:
    return [json.dumps(asdict(p), default=str) for u in result.units for p in u.points]


@pytest.fixture(scope="module")
def combined(chat_to_code: Path) -> BacktestResult:
    """The combined policy's backtest of chat-to-code, run once for the tests that read it."""
    return run_recording(spec_of(policy_doc()), chat_to_code)


def test_chat_to_code_disables_after_the_shift_and_reenables_when_it_returns(
    combined: BacktestResult,
) -> None:
    spec = spec_of(policy_doc())
    result = combined
    unit = result.units[0]
    flips = [(t, a) for t, a, _ in decisions(result) if a in ("enable", "disable")]
    disables = [t for t, a in flips if a == "disable"]
    enables = [t for t, a in flips if a == "enable"]

    # Exactly one rollback, after the shift; the first enable is the new canary's probe, the
    # second the early re-probe once chat's share is back.
    assert len(disables) == 1 and SHIFT_AT < disables[0] < BACK_AT, flips
    assert len(enables) == 2 and enables[0] == 0.0 and enables[1] > BACK_AT, flips
    assert unit.points[-1].state == "On"

    score = unit.score
    assert score is not None
    assert len(score.episodes) == 1
    episode = score.episodes[0]
    assert SHIFT_AT <= episode.start <= SHIFT_AT + 30  # the pods' next tick carries the new mix
    assert episode.end is not None and BACK_AT <= episode.end <= BACK_AT + 30
    assert episode.speculating_at_start and not episode.missed
    # Bound: consecutive windows are disjoint, so consecutiveWindows failing windows of
    # windowSeconds each must follow the shift (plus one interval for the evaluation tick).
    t = spec.timing
    bound = spec.acceptance.consecutive_windows * t.window_seconds + t.interval_seconds
    assert episode.delay is not None and 0 < episode.delay <= bound, episode
    assert score.false_flips == ()

    # While rolled back the canary's spec-decode series are hidden, as on a real off pod.
    off = [p for p in unit.points if p.state == "RolledBack" and p.action == "hold"]
    assert off and all(not p.alphas and p.combined is None for p in off)
    # The true alpha the report plots is the traffic-weighted mix (~0.71 before, ~0.49 after).
    before = [p.truth_alpha for p in unit.points if 300 <= p.t < SHIFT_AT]
    during = [p.truth_alpha for p in unit.points if SHIFT_AT + 60 <= p.t < BACK_AT]
    assert min(before) > 0.62 and max(before) < 0.78
    assert min(during) > 0.40 and max(during) < 0.55  # below the gate throughout


def test_a_short_cooldown_probe_while_alpha_is_low_counts_as_a_false_enable(
    chat_to_code: Path,
) -> None:
    """The score can say no: a probe 15 minutes into the low-alpha stretch is a false flip."""
    # a 900 s cooldown (not the recording's 3,600 s) lets a probe land in the low stretch;
    # capped, since a rollback far below the gate starts its cooldown steps deeper (4x here)
    spec = spec_of(policy_doc(timing={"cooldown": {"initialSeconds": 900, "maxSeconds": 900}}))
    score = run_recording(spec, chat_to_code).units[0].score
    assert score is not None
    assert score.false_enables >= 1 and score.false_disables == 0
    t = score.false_flips[0].t
    assert SHIFT_AT < t < BACK_AT and score.false_flips[0].true_alpha < 0.55


def test_per_slice_keeps_chat_on_and_rolls_code_back(chat_to_code: Path) -> None:
    spec = spec_of(policy_doc(aggregation="perSlice"))
    result = run_recording(spec, chat_to_code)
    by_name = {u.name: u for u in result.units}
    assert set(by_name) == {"chat", "code"}
    chat, code = by_name["chat"], by_name["code"]
    assert [p for p in chat.points if p.action == "disable"] == []
    assert chat.points[-1].state == "On"
    assert code.points[-1].state == "RolledBack"
    code_disables = [p for p in code.points if p.action == "disable"]
    # The first probe fails fast: after warmup, within consecutiveWindows disjoint windows.
    t = spec.timing
    fast = t.warmup_seconds + spec.acceptance.consecutive_windows * t.window_seconds
    assert code_disables and code_disables[0].t <= fast, code_disables[0]
    # Code's alpha (0.35) never clears the gate: each of its probes is a false enable, and it
    # is never a false disable.
    assert code.score is not None and chat.score is not None
    assert code.score.false_disables == 0 and code.score.false_enables >= 1
    assert chat.score.false_flips == () and chat.score.episodes == ()


def test_steady_chat_never_disables(steady_chat: Path) -> None:
    result = run_recording(spec_of(policy_doc(["chat"])), steady_chat)
    unit = result.units[0]
    assert [p.action for p in unit.points if p.action != "hold"] == ["enable"]
    assert unit.points[-1].state == "On"
    assert unit.score is not None
    assert unit.score.episodes == () and unit.score.false_flips == ()
    assert {p.verdict for p in unit.points} <= {"Pass", "Inconclusive"}
    estimates = [p.alphas["chat"].value for p in unit.points if "chat" in p.alphas]
    assert estimates and all(abs(a - 0.72) < 0.04 for a in estimates[5:])


def test_initial_state_on_starts_judging_without_a_probe(steady_chat: Path) -> None:
    result = run_recording(
        spec_of(policy_doc(["chat"])), steady_chat, options=Options(initial_on=True)
    )
    unit = result.units[0]
    assert all(p.action == "hold" for p in unit.points)
    assert {p.state for p in unit.points} == {"On"}
    assert sum(p.verdict == "Pass" for p in unit.points) > len(unit.points) // 2


def test_same_recording_twice_gives_identical_decisions(
    chat_to_code: Path, combined: BacktestResult
) -> None:
    # the first run is the module's (no test changes a result), the second a new one
    first = combined
    second = run_recording(spec_of(policy_doc()), chat_to_code)
    assert points_json(first) == points_json(second)
    assert first.to_json() == second.to_json()


def test_a_restarted_canary_resets_counters_without_a_flip(tmp_path: Path) -> None:
    """The canary pod restarts mid-run (counters drop to zero): the reset-safe increments of
    the scrape source keep alpha right; the seconds with no ready canary hold, never flip."""
    base = scenario("steady-chat")
    restart = Event(at=900.0, restart=["chat-canary"], note="canary pod restarts")
    sc = base.model_copy(update={"duration": 1800.0, "timeline": [restart]})
    rec = make_recording(sc, tmp_path / "restart.jsonl")
    restarts = [
        s
        for s in iter_recording(rec)
        if isinstance(s, FleetSnapshot) and any(p.restarts for p in s.pods)
    ]
    assert restarts, "the recording should contain the restart"
    result = run_recording(spec_of(policy_doc(["chat"])), rec)
    unit = result.units[0]
    assert [p.action for p in unit.points if p.action != "hold"] == ["enable"]
    after = [p.alphas["chat"].value for p in unit.points if p.t > 960 and "chat" in p.alphas]
    assert after and all(0.6 < a < 0.85 for a in after)
    assert all(math.isfinite(p.alphas["chat"].drafts) for p in unit.points if "chat" in p.alphas)
    assert any(e.kind == "restart" for e in result.events)


def test_direct_pages_equal_rendered_and_parsed_pages(tmp_path: Path) -> None:
    """The backtest builds pages straight from snapshots; they must equal what parsing the
    real rendered /metrics text gives (spec on and off, after a restart)."""
    sc = scenario("steady-chat").model_copy(update={"duration": 600.0})
    rec = make_recording(sc, tmp_path / "pages.jsonl", every=60.0)
    seen_off = seen_on = 0
    for item in iter_recording(rec):
        if not isinstance(item, FleetSnapshot):
            continue
        for pod in item.pods:
            assert page_of(pod) == page_via_text(pod), pod.name
            seen_on += pod.spec_k is not None
            seen_off += pod.spec_k is None
    assert seen_on and seen_off


def test_via_text_gives_the_same_decisions(tmp_path: Path) -> None:
    sc = scenario("steady-chat").model_copy(update={"duration": 900.0})
    rec = make_recording(sc, tmp_path / "short.jsonl")
    spec = spec_of(policy_doc(["chat"]))
    direct = run_recording(spec, rec)
    parsed = run_recording(spec, rec, options=Options(via_text=True))
    assert points_json(direct) == points_json(parsed)
