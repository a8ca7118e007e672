"""The noisy-neighbour benchmark end to end, one attack class, small: so it cannot rot.

The slice flood (one canary of 64 slices at the 0.1 s floor) beside one victim, the real
controller as a child process against the API double: the run completes, the victim is
evaluated, the attacker is held to budgets of its own (its canary API budget; on a busy
machine its reads' budget may be spent first) and says so, typed; the table and its PASS/FAIL
line are printed. No speed is asserted.
"""

from __future__ import annotations

import pytest

from alphagate_lab.bench import tenants
from alphagate_lab.bench.tenants_run import Evaluation, RunResult


@pytest.mark.slow
def test_the_slice_flood_class_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    (verdict,) = tenants.main(["--attacks", "slice-flood", "--victims", "1", "--seconds", "45"])
    out = capsys.readouterr().out
    assert verdict.attack.name == "slice-flood"
    for run in (verdict.base, verdict.got):
        assert not run.error
        assert run.victims.get("v0"), "the victim was never evaluated"
        assert run.healthz_ok > 0 and 0 < run.peak_rss_mib < tenants.MEMORY_LIMIT_MIB
        assert run.api_per_second > 0
    (status,) = verdict.got.attacker.values()
    named = {
        f"{c['type']}={c['reason']}"
        for c in status["conditions"]
        if c["status"] == "False" and "budget" in c["reason"].lower()
    }
    assert tenants.budget_named(status) in named
    # its own budgets only, never one the victim shares (the namespace's, the controller's);
    # on a busy machine its reads' budget may be spent before its API budget is
    assert named and named <= {
        "WithinApiBudget=CanaryApiBudgetExceeded",
        "SourceHealthy=BudgetExceeded",
    }
    assert verdict.typed
    assert "slice-flood" in out and ("PASS" in out or "FAIL" in out)


def _run(victims: dict[str, list[tuple[float, str, str]]], **over: object) -> RunResult:
    r = RunResult(seconds=20.0, healthz_ok=10, peak_rss_mib=150.0)
    for name, evs in victims.items():
        r.victims[name] = [
            Evaluation(at, "Probing", verdict, action) for at, action, verdict in evs
        ]
    for key, value in over.items():
        setattr(r, key, value)
    return r


BASE = {"v0": [(2.0, "enable", "Inconclusive"), (4.0, "hold", "Inconclusive"),
               (6.0, "disable", "Fail"), (8.0, "hold", "Inconclusive"),
               (10.0, "hold", "Inconclusive"), (12.0, "hold", "Inconclusive"),
               (14.0, "hold", "Inconclusive"), (16.0, "hold", "Inconclusive"),
               (18.0, "hold", "Inconclusive")]}  # fmt: skip
TYPED = {"h0": {"lastDecision": {"verdict": "Error"}, "conditions": [
    {"type": "SourceHealthy", "status": "False", "reason": "ScrapeBudgetExceeded"}]}}  # fmt: skip


def test_the_done_when_judge() -> None:
    attack = tenants.BY_NAME["slow-pod"]
    base = _run(BASE)
    same = tenants.Verdict(attack, base, _run(BASE, attacker=TYPED), 2.0)
    assert same.same_decisions and same.delay_ok and same.healthy and same.typed and same.passed
    # late, not different: the disable not made yet is the delay's to judge
    late = _run({"v0": [(2.0, "enable", "Inconclusive"), (19.0, "hold", "Inconclusive")]})
    judged = tenants.Verdict(attack, base, late, 2.0)
    assert judged.same_decisions and not judged.delay_ok and judged.delay == pytest.approx(15.0)
    # a verdict it never gave, a different flip, never evaluated: different decisions
    for evs in (
        [(2.0, "enable", "Inconclusive"), (4.0, "hold", "Error")],
        [(2.0, "enable", "Inconclusive"), (6.0, "enable", "Pass")],
        [],
    ):
        assert not tenants.Verdict(attack, base, _run({"v0": evs}), 2.0).same_decisions
    # untyped attacker, a victim in Error, memory over the limit, /healthz down: each fails
    untyped = {"h0": {"lastDecision": {"verdict": "Error"}, "conditions": []}}
    assert not tenants.Verdict(attack, base, _run(BASE, attacker=untyped), 2.0).typed
    assert not tenants.Verdict(attack, base, _run(BASE, attacker={}), 2.0).typed
    assert not tenants.Verdict(attack, base, _run(BASE, attacker=TYPED, peak_rss_mib=600.0),
                               2.0).passed  # fmt: skip
    assert not tenants.Verdict(attack, base, _run(BASE, attacker=TYPED, healthz_failed=1),
                               2.0).passed  # fmt: skip


def test_a_class_that_exceeds_no_budget_is_judged_contained() -> None:
    """concurrency-collapse spends nothing shared past a budget: its attacker, judged on its
    own data (Inconclusive, no budget named), passes as contained; Error (or never evaluated)
    or a victim's Error does not. A class that exceeds a budget still needs it named."""
    attack = tenants.BY_NAME["concurrency-collapse"]
    assert not attack.exceeds and tenants.BY_NAME["shared-pods"].exceeds
    base = _run(BASE)
    own = {"h0": {"lastDecision": {"verdict": "Inconclusive"}, "conditions": [
        {"type": "Judgeable", "status": "False", "reason": "ShortOutputs"}]}}  # fmt: skip
    judged = tenants.Verdict(attack, base, _run(BASE, attacker=own), 2.0)
    assert judged.contained and judged.passed and not judged.typed
    text = tenants.attacker_text(own, exceeds=False)
    assert "Inconclusive x1" in text and "Judgeable=ShortOutputs" in text
    for attacker in ({"h0": {"lastDecision": {"verdict": "Error"}}}, {"h0": {}}, {}):
        assert not tenants.Verdict(attack, base, _run(BASE, attacker=attacker), 2.0).passed
    # where it did spend a budget (a loaded Prometheus refusing its pools), naming it passes
    assert tenants.Verdict(attack, base, _run(BASE, attacker=TYPED), 2.0).passed
    victim_error = {"v0": [*BASE["v0"], (19.0, "hold", "Error")]}
    assert not tenants.Verdict(attack, _run(victim_error), _run(victim_error, attacker=own),
                               2.0).passed  # fmt: skip
    typed_class = tenants.Verdict(tenants.BY_NAME["slow-pod"], base, _run(BASE, attacker=own), 2.0)
    assert not typed_class.passed  # judged on its own data is not enough where a budget applies
