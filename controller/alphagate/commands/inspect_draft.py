"""The draft length (K) one /metrics page recommends, for `alphagate inspect`.

The controller's tuner (`core.draft_length.recommend`) on the page's counters since the pod
started: each engine of a model is one batch, and the cost of a draft position is the method's
default adjusted for the running requests on the page, as the controller does when it has no
baseline to measure the cost against. With one engine the tuner keeps K and says why (its
requests share their acceptance, so no interval is honest), and the per-K options are printed
as the point estimates they are.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from alphagate import specconfig
from alphagate.config import AcceptanceGate
from alphagate.core.draft_length import DraftLengthReport, policy_cost, recommend
from alphagate.core.model import AcceptanceSample
from alphagate.core.speedup import DEFAULT_RIDGE_TOKENS

if TYPE_CHECKING:  # the sources package loads when a page is read, not when the CLI starts
    from alphagate.sources.page import Series


def report(series: list[Series], method: str | None) -> DraftLengthReport | None:
    """The recommendation for one model's series (engines), None when it does not speculate."""
    from alphagate.sources.page import Counter, Gauge

    samples = [
        AcceptanceSample(
            drafts=s.counters.get(Counter.DRAFTS, 0.0),
            draft_tokens=s.counters.get(Counter.DRAFT_TOKENS, 0.0),
            accepted_tokens=s.counters.get(Counter.ACCEPTED, 0.0),
            per_position=tuple(s.per_position.get(i, 0.0) for i in range(_k([s]))),
            pod=f"engine {s.engine}",
        )
        for s in series
        if s.speculating
    ]
    k = _k(series)
    if not samples or k < 1:
        return None
    config: dict[str, Any] = {"num_speculative_tokens": k}
    if method:
        config["method"] = method
    d = specconfig.default_cost(config)
    running = [s.gauges[Gauge.RUNNING] for s in series if Gauge.RUNNING in s.gauges]
    per_pod = math.fsum(running) if running else 1.0
    named = specconfig.resolved_method(config)
    if not method:  # vLLM's own fallback without a method: a draft model, the dearest default
        named += " (assumed: give --method)"
    cost = policy_cost(
        d,
        concurrency=per_pod,
        ridge_tokens=DEFAULT_RIDGE_TOKENS,
        detail=f"{d:g} per position for {named} (method default)",
    )
    gate = AcceptanceGate()
    return recommend(
        samples,
        k=k,
        cost=cost,
        confidence=gate.confidence,
        min_drafts=float(gate.min_drafts),
    )


def _k(series: list[Series]) -> int:
    """K as vLLM configured it: it creates one per-position counter per draft position."""
    return max((max(s.per_position) + 1 for s in series if s.per_position), default=0)


def options_text(d: DraftLengthReport) -> str:
    """The tuner's per-K point estimates: tokens per draft step and speed-up over draft steps."""
    parts = [f"K={o.k} {o.tokens_per_step:.2f} tok/step {o.speedup:.2f}x" for o in d.options]
    return (
        "  options (point estimates): " + ("; ".join(parts) or "n/a") + f"; cost: {d.cost.detail}"
    )


def as_json(d: DraftLengthReport) -> dict[str, Any]:
    return {
        "configured_k": d.configured_k,
        "advice": d.advice.value,
        "recommended_k": d.recommended_k,
        "best_k": d.best_k,
        "reason": d.reason,
        "cost_per_position": d.cost.per_position,
        "cost_source": d.cost.source.value,
        "cost_detail": d.cost.detail,
        "drafts": d.drafts,
        "full_length_share": d.full_length_share,
        "position_rates": [p.unconditional for p in d.positions],
        "options": [
            {"k": o.k, "tokens_per_step": o.tokens_per_step, "speedup": o.speedup}
            for o in d.options
        ],
    }


__all__ = ["as_json", "options_text", "report"]
