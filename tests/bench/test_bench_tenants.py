"""The noisy-neighbour benchmark end to end, one attack class, small: so it cannot rot.

The slice flood (one canary of 64 slices at the 0.1 s floor) beside one victim, the real
controller as a child process against the API double: the run completes, the victim is
evaluated, the attacker is held to its canary API budget and says so, typed; the table and
its PASS/FAIL line are printed. No speed is asserted.
"""

from __future__ import annotations

import pytest

from alphagate.bench import tenants

pytestmark = pytest.mark.slow


def test_the_slice_flood_class_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    (verdict,) = tenants.main(["--attacks", "slice-flood", "--victims", "1", "--seconds", "30"])
    out = capsys.readouterr().out
    assert verdict.attack.name == "slice-flood"
    for run in (verdict.base, verdict.got):
        assert not run.error
        assert run.victims.get("v0"), "the victim was never evaluated"
        assert run.healthz_ok > 0 and 0 < run.peak_rss_mib < tenants.MEMORY_LIMIT_MIB
        assert run.api_per_second > 0
    (status,) = verdict.got.attacker.values()
    assert tenants.budget_named(status) == "WithinApiBudget=CanaryApiBudgetExceeded"
    assert verdict.typed
    assert "slice-flood" in out and ("PASS" in out or "FAIL" in out)
