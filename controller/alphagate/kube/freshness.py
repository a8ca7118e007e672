"""Three conditions that say whether the canary is judged at all.

VerdictFresh is False while some unit is Probing or On without a conclusive verdict for
staleness.afterSeconds: speculation runs unchecked. TimingFits is False when the interval or
window spans fewer than two scrape intervals (`core.timing.advise`), so `increase()` is empty at
times. CanaryJudgeable is False while a window holds fewer than two independent batches of
alpha (core/blocksize.py). All read typed fields only; the words are made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import AcceptanceEvidence, Alert, CheckKind, Evaluation, Judgeability
from alphagate.core.timing import TimingWarning
from alphagate.kube.events import judgeable_message
from alphagate.kube.status.fields import ConditionType, set_condition


def verdict_fresh(
    conditions: list[Any],
    spec: SpeculativeCanarySpec,
    evaluations: Sequence[Evaluation],
    *,
    now: float,
    generation: int,
) -> list[Any]:
    """The oldest verdict age speaks."""
    ages = [e.verdict_age_seconds for e in evaluations if e.verdict_age_seconds is not None]
    stale = any(Alert.VERDICT_STALE in e.alerts for e in evaluations)
    after = spec.staleness.after_seconds
    if stale:
        oldest = max(ages) if ages else after
        return set_condition(
            conditions,
            ConditionType.VERDICT_FRESH,
            False,
            "VerdictStale",
            f"speculating with no conclusive verdict for {oldest:.0f} s (staleness.afterSeconds "
            f"{after:g}, failSafe {spec.staleness.fail_safe.value})",
            now=now,
            generation=generation,
        )
    message = (
        f"last conclusive verdict {max(ages):.0f} s ago (staleness.afterSeconds {after:g})"
        if ages
        else "nothing under judgement (speculation off, paused or promoted)"
    )
    return set_condition(
        conditions,
        ConditionType.VERDICT_FRESH,
        True,
        "Fresh" if ages else "NotJudging",
        message,
        now=now,
        generation=generation,
    )


def timing_fits(
    conditions: list[Any],
    warnings: Sequence[TimingWarning],
    scrape_interval_seconds: float | None,
    *,
    now: float,
    generation: int,
) -> list[Any]:
    if warnings:
        return set_condition(
            conditions,
            ConditionType.TIMING_FITS,
            False,
            "TimingTooShort",
            "; ".join(w.message for w in warnings)[:1024],
            now=now,
            generation=generation,
        )
    known = (
        f"interval and window span at least two scrapes of {scrape_interval_seconds:g} s"
        if scrape_interval_seconds is not None
        else "scrape interval unknown (set scrapeIntervalSeconds on the Prometheus endpoint)"
    )
    return set_condition(
        conditions,
        ConditionType.TIMING_FITS,
        True,
        "Fits" if scrape_interval_seconds is not None else "ScrapeIntervalUnknown",
        known,
        now=now,
        generation=generation,
    )


def unjudgeable(evaluations: Sequence[tuple[str, Evaluation]]) -> list[tuple[str, Judgeability]]:
    out = []
    for unit, e in evaluations:
        for c in e.checks:
            ev = c.evidence
            accepting = c.kind is CheckKind.ACCEPTANCE and isinstance(ev, AcceptanceEvidence)
            if accepting and isinstance(ev, AcceptanceEvidence) and ev.judgeable is not None:
                out.append((c.slice or unit, ev.judgeable))
    return out


def _judged(evaluations: Sequence[tuple[str, Evaluation]]) -> int:
    return sum(
        1
        for _, e in evaluations
        for c in e.checks
        if c.kind is CheckKind.ACCEPTANCE
        and isinstance(c.evidence, AcceptanceEvidence)
        and c.evidence.estimate is not None
        and c.evidence.estimate.conclusive
    )


def canary_judgeable(
    conditions: list[Any],
    evaluations: Sequence[tuple[str, Evaluation]],
    *,
    now: float,
    generation: int,
) -> list[Any]:
    """Unchanged while nothing is judged (speculation off, no drafts, warm-up)."""
    found = unjudgeable(evaluations)
    if found:
        why = found[0][1]
        reason = "".join(part.capitalize() for part in why.cause.value.split("-"))
        return set_condition(
            conditions,
            ConditionType.CANARY_JUDGEABLE,
            False,
            reason,
            "; ".join(judgeable_message(w, u) for u, w in found)[:1024],
            now=now,
            generation=generation,
        )
    if not _judged(evaluations):
        return conditions
    return set_condition(
        conditions,
        ConditionType.CANARY_JUDGEABLE,
        True,
        "Judgeable",
        "the canary's windows hold at least two independent batches of alpha",
        now=now,
        generation=generation,
    )
