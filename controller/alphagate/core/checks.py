"""The one place thresholds are compared: each check turns evidence into a verdict and a sentence.

Verdicts: PASS, FAIL, INCONCLUSIVE (too little data, or inside the hysteresis band) and ERROR
(the source failed or sent bad data). FAIL needs solid evidence: the whole confidence interval
below the gate for alpha, a statistically significant bucket exceedance for latency. Every
result carries its kind, its slice and its typed evidence (what code reads), and a reason a
person can read, naming the metric that was used (what nothing parses).
The latency guard, the largest check, is its own module: `core.latency_check`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Final

from alphagate.config import AcceptanceGate
from alphagate.core import pace
from alphagate.core.fmt import number as _fmt
from alphagate.core.model import (
    AcceptanceEvidence,
    CheckKind,
    CheckResult,
    Estimate,
    FloorEvidence,
    Judgeability,
    LatencyEvidence,
    NoData,
    Undecided,
    Unjudgeable,
    Verdict,
)
from alphagate.core.stats import t_quantile

MIN_DECISIVE_DOF: Final = 3.0
"""Degrees of freedom a decisive window needs. A t on one or two degrees of freedom is exact
for normal batch means, but its far tail (the 1.6e-4 level of a decisive window) rests on
two or three pods agreeing to the fourth decimal by chance, which short, discrete requests do
far more often than normal ones: two canary pods on the code trace rolled back on one window
at a true 0.57 twice in ten simulated days (`python -m alphagate_lab.bench.machine`)."""

# Worst first: any FAIL wins, then ERROR, then INCONCLUSIVE; PASS only when everything passed.
ORDER: Final = (Verdict.FAIL, Verdict.ERROR, Verdict.INCONCLUSIVE, Verdict.PASS)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """FAIL > ERROR > INCONCLUSIVE > PASS; nothing judged is INCONCLUSIVE."""
    seen = set(verdicts)
    for v in ORDER:
        if v in seen:
            return v
    return Verdict.INCONCLUSIVE


def overall(checks: Iterable[CheckResult]) -> Verdict:
    """The verdict of a whole evaluation window (see `worst`)."""
    return worst(c.verdict for c in checks)


def _interval(e: Estimate) -> str:
    return (
        f"alpha {_fmt(e.value)} [{_fmt(e.lower)}, {_fmt(e.upper)}] at "
        f"{e.confidence:.0%} ({e.method}, {e.drafts:.0f} drafts, {e.batches} batches)"
    )


# ---------------------------------------------------------------- acceptance

_NO_DATA: Final = {
    NoData.NO_TRAFFIC: (
        "speculating with no traffic (spec-decode series present, every increment zero): alpha "
        "unknown"
    ),
    NoData.SPARSE_SCRAPES: (
        "the range holds fewer than two scrapes, so increase() is empty: alpha unknown "
        "(lengthen intervalSeconds/windowSeconds or scrape more often)"
    ),
    NoData.NO_SPEC_SERIES: "no spec-decode series on the canary although it should speculate",
    NoData.UNKNOWN: "alpha unknown",
}


def check_acceptance(
    estimate: Estimate | None,
    *,
    gate: AcceptanceGate,
    slice: str | None = None,
    error: str | None = None,
    no_data: NoData | None = None,
    judgeable: Judgeability | None = None,
) -> CheckResult:
    """Hysteresis on the confidence bounds: FAIL if upper < disableBelow, PASS if lower >
    enableAbove, else INCONCLUSIVE (band, too few drafts, no estimate: its `no_data` cause,
    UNKNOWN when not given; too few batches: `judgeable` says what would do). ERROR if
    `error`."""
    missing = estimate is None and error is None
    evidence = AcceptanceEvidence(
        disable_below=gate.disable_below,
        enable_above=gate.enable_above,
        min_drafts=gate.min_drafts,
        estimate=estimate if error is None else None,
        no_data=(no_data or NoData.UNKNOWN) if missing else None,
        judgeable=judgeable if estimate is not None and not estimate.conclusive else None,
    )

    def result(verdict: Verdict, reason: str, undecided: Undecided | None = None) -> CheckResult:
        typed = evidence if undecided is None else replace(evidence, undecided=undecided)
        return CheckResult(CheckKind.ACCEPTANCE, verdict, reason, typed, slice)

    where = f" on slice {slice}" if slice else ""
    if error is not None:
        return result(Verdict.ERROR, f"cannot judge alpha{where}: {error}")
    if estimate is None:
        return result(
            Verdict.INCONCLUSIVE,
            f"no drafts{where} in the window: {_NO_DATA[evidence.no_data or NoData.UNKNOWN]}",
            Undecided.NO_DRAFTS,
        )
    if any(math.isnan(x) for x in (estimate.value, estimate.lower, estimate.upper)):
        return result(
            Verdict.INCONCLUSIVE, f"alpha{where} is not a number (bad data)", Undecided.NOT_A_NUMBER
        )
    if not estimate.conclusive:
        return result(
            Verdict.INCONCLUSIVE,
            f"alpha{where} {_fmt(estimate.value)} from {estimate.batches} independent batch(es): "
            f"{_few_batches(evidence.judgeable, estimate)}",
            Undecided.FEW_BATCHES,
        )
    if estimate.drafts < gate.min_drafts:
        return result(
            Verdict.INCONCLUSIVE,
            f"too few drafts{where}: {estimate.drafts:.0f} < minDrafts {gate.min_drafts} "
            f"({_interval(estimate)})",
            Undecided.FEW_DRAFTS,
        )
    if estimate.upper < gate.disable_below:
        return result(
            Verdict.FAIL,
            f"{_interval(estimate)}{where}: upper bound below disableBelow "
            f"{_fmt(gate.disable_below)}",
        )
    if estimate.lower > gate.enable_above:
        return result(
            Verdict.PASS,
            f"{_interval(estimate)}{where}: lower bound above enableAbove "
            f"{_fmt(gate.enable_above)}",
        )
    return result(
        Verdict.INCONCLUSIVE,
        f"{_interval(estimate)}{where}: interval overlaps the band "
        f"[{_fmt(gate.disable_below)}, {_fmt(gate.enable_above)}]",
        Undecided.IN_BAND,
    )


_UNJUDGEABLE: Final = {
    Unjudgeable.REQUESTS_OUTLIVE_WINDOW: "requests decode so long that a batch of one pod needs",
    Unjudgeable.DECODE_TIMES_UNKNOWN: (
        "no decode times (vllm:request_decode_time_seconds) to size blocks by, so a batch of one "
        "pod needs"
    ),
    Unjudgeable.BLOCKS_TOO_LONG: "acceptance.batchSeconds makes a batch of one pod",
    Unjudgeable.DRAFTS_IN_ONE_BLOCK: "every draft came within one block of",
    Unjudgeable.WINDOW_TOO_SHORT: "the window holds fewer than two samples of a pod, each",
}


def _few_batches(j: Judgeability | None, e: Estimate) -> str:
    """Why there are fewer than two batches, and what window or pod count would have two."""
    if j is None:
        return (
            f"fewer than 2 pods or pod blocks of {_fmt(e.block_seconds)} s, so no honest "
            f"interval (more pods or a longer window)"
        )
    return (
        f"{_UNJUDGEABLE[j.cause]} {_fmt(j.block_seconds)} s, so no honest interval in a "
        f"{_fmt(j.current_window_seconds)} s window: a window of {_fmt(j.window_seconds)} s or "
        f"{j.pods} canary pods would be judged"
    )


def check_floor(
    estimate: Estimate | None,
    *,
    min_alpha: float,
    gate: AcceptanceGate,
    slice: str,
    error: str | None = None,
) -> CheckResult:
    """Per-slice floor in combined mode: a veto, so it needs evidence to object, and evidence
    to say it does not (missing data never passes).

    FAIL when the slice's upper bound is below `min_alpha` with at least minDrafts drafts;
    PASS when it is not; INCONCLUSIVE, typed (`FloorEvidence.undecided`), without drafts,
    with too few, with fewer than two independent batches or a NaN estimate. ERROR when the
    slice's pool failed.
    """
    evidence = FloorEvidence(
        min_alpha=min_alpha,
        min_drafts=gate.min_drafts,
        estimate=estimate if error is None else None,
    )

    def result(verdict: Verdict, reason: str, undecided: Undecided | None = None) -> CheckResult:
        typed = evidence if undecided is None else replace(evidence, undecided=undecided)
        return CheckResult(CheckKind.FLOOR, verdict, reason, typed, slice)

    if error is not None:
        return result(Verdict.ERROR, f"cannot check the floor of {slice}: {error}")
    if estimate is None:
        return result(
            Verdict.INCONCLUSIVE,
            f"no drafts on slice {slice}: its floor cannot be judged",
            Undecided.NO_DRAFTS,
        )
    if any(math.isnan(x) for x in (estimate.value, estimate.lower, estimate.upper)):
        return result(
            Verdict.INCONCLUSIVE,
            f"slice {slice}: alpha is not a number (bad data)",
            Undecided.NOT_A_NUMBER,
        )
    if estimate.drafts < gate.min_drafts:
        return result(
            Verdict.INCONCLUSIVE,
            f"slice {slice} has too few drafts to judge its floor ({estimate.drafts:.0f} < "
            f"{gate.min_drafts})",
            Undecided.FEW_DRAFTS,
        )
    if not estimate.conclusive:
        return result(
            Verdict.INCONCLUSIVE,
            f"slice {slice} has {estimate.batches} independent batch(es): too few to judge its "
            "floor",
            Undecided.FEW_BATCHES,
        )
    if estimate.upper < min_alpha:
        return result(
            Verdict.FAIL,
            f"slice {slice}: {_interval(estimate)}: upper bound below its floor "
            f"minAlpha {_fmt(min_alpha)}",
        )
    return result(
        Verdict.PASS,
        f"slice {slice}: {_interval(estimate)}: not below its floor {_fmt(min_alpha)}",
    )


# ---------------------------------------------------------------- how strong a FAIL is


def _failing_alpha(result: CheckResult) -> tuple[Estimate, float] | None:
    """The estimate and threshold of a failing acceptance or floor check, else None."""
    if result.verdict is not Verdict.FAIL:
        return None
    ev = result.evidence
    if isinstance(ev, AcceptanceEvidence) and ev.estimate is not None:
        return ev.estimate, ev.disable_below
    if isinstance(ev, FloorEvidence) and ev.estimate is not None:
        return ev.estimate, ev.min_alpha
    return None


def decisive(result: CheckResult, windows: int) -> bool:
    """Is this failing check as strong as `windows` disjoint failing windows?

    n independent windows that each fail at the one-sided level (1 - confidence) / 2 have a
    joint false rate of ((1 - confidence) / 2) ** n at the gate. One judged window whose upper
    bound at a quarter of that joint level (`pace.decisive_level`: its share of the rule's
    false rollbacks a day), on the estimate's own standard error and degrees of freedom, is
    below the threshold carries the same evidence, so it may roll back alone. Few batches
    have few degrees of freedom and heavy t tails, and below MIN_DECISIVE_DOF the tail is not
    trusted at all: with two or three pods two disjoint windows are always needed. A failing
    latency check: `_decisive_latency`. False for any other kind of check."""
    found = _failing_alpha(result)
    if found is None:
        return _decisive_latency(result, windows)
    e, threshold = found
    if windows <= 1:
        return True
    if not (e.conclusive and math.isfinite(e.std_error) and e.std_error >= 0):
        return False
    if not e.dof >= MIN_DECISIVE_DOF:
        return False
    q = t_quantile(1.0 - pace.decisive_level(e.confidence, windows), e.dof)
    return math.isfinite(q) and e.value + q * e.std_error < threshold


def _decisive_latency(result: CheckResult, windows: int) -> bool:
    """A failing latency check as strong as `windows` disjoint failing windows: its smallest
    p-value, corrected over the window's tests by their weights (`p_adjusted`), at or below
    significance ** windows (the joint false rate of that many independent windows failing at
    `significance`), or the quantile's Fail test over that many adjacent windows pooled
    (core/latency_run.py) rejected at that level."""
    ev = result.evidence
    if result.verdict is not Verdict.FAIL or not isinstance(ev, LatencyEvidence):
        return False
    if windows <= 1 or (ev.pooled is not None and ev.pooled.rejected):
        return True  # a pooled Fail was judged at the joint level of its windows
    return math.isfinite(ev.p_adjusted) and ev.p_adjusted <= ev.significance**windows


def shortfall(result: CheckResult, band: float) -> float:
    """How far below its threshold a failing alpha check's estimate lies, in `band`s
    (enableAbove - disableBelow): what deepens the cooldown. 0 for any other check."""
    found = _failing_alpha(result)
    if found is None or not band > 0:
        return 0.0
    e, threshold = found
    if not math.isfinite(e.value):
        return 0.0
    return max(0.0, (threshold - e.value) / band)
