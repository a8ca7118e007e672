"""The demo's "true alpha" line is what the combined estimate estimates: the slices' alphas
pooled over drafted tokens (`acceptance.combine`), not weighted by traffic alone."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from alphagate.core import acceptance
from alphagate.core.evidence import Estimate, EstimateMethod
from alphagate_lab.sandbox.demo.hearing import true_alpha

K = 5
TRUTH = {"chat": {"alpha": 0.85, "share": 0.8}, "code": {"alpha": 0.40, "share": 0.2}}
WEIGHTS = {"chat": 0.8, "code": 0.2}  # traffic shares (generated tokens)


def _estimate(alpha: float, drafts: float) -> Estimate:
    """A slice's estimate that reads exactly its true alpha."""
    return Estimate(
        value=alpha,
        lower=alpha - 0.01,
        upper=alpha + 0.01,
        confidence=0.95,
        drafts=drafts,
        draft_tokens=drafts * K,
        accepted_tokens=drafts * K * alpha,
        batches=10,
        method=EstimateMethod.BATCH_MEANS,
        std_error=0.005,
        dof=9.0,
    )


def _evaluation(estimates: dict[str, Estimate]) -> Any:
    combined = acceptance.combine(estimates, WEIGHTS, confidence=0.95)
    return SimpleNamespace(estimates=estimates, weights=WEIGHTS, combined=combined)


def test_the_truth_is_the_pooled_alpha_the_combined_estimate_reads() -> None:
    estimates = {name: _estimate(t["alpha"], 1000.0) for name, t in TRUTH.items()}
    evaluation = _evaluation(estimates)
    assert evaluation.combined is not None
    assert true_alpha(evaluation, TRUTH) == pytest.approx(evaluation.combined.value, abs=1e-12)
    # the traffic-weighted mean is another number (0.76): code drafts more per generated token
    traffic = sum(WEIGHTS[n] * TRUTH[n]["alpha"] for n in TRUTH)
    assert true_alpha(evaluation, TRUTH) < traffic - 0.04  # 0.713 against 0.760


def test_the_truth_weights_come_from_the_true_alphas_not_the_estimates() -> None:
    exact = _evaluation({n: _estimate(t["alpha"], 1000.0) for n, t in TRUTH.items()})
    off = _evaluation({"chat": _estimate(0.95, 1000.0), "code": _estimate(0.30, 400.0)})
    assert true_alpha(off, TRUTH) == pytest.approx(true_alpha(exact, TRUTH), abs=1e-12)


def test_no_combined_estimate_or_no_drafts_is_unknown() -> None:
    none: Any = SimpleNamespace(estimates={}, weights=WEIGHTS, combined=None)
    assert math.isnan(true_alpha(none, TRUTH))
    idle = _evaluation({n: _estimate(t["alpha"], 0.0) for n, t in TRUTH.items()})
    assert math.isnan(true_alpha(idle, TRUTH))
    assert math.isnan(true_alpha(_evaluation({"chat": _estimate(0.85, 10.0)}), {}))
