"""The status block for `core.insights`: the draft length that pays, the P99-trap diagnosis and
whether outputs are too short, as people read them in `kubectl get -o yaml`.

Typed strings (advice, shape, mitigation:support) that tools may branch on; `reason` fields are
for people. Kept apart from kube/status/ so the block evolves with core/insights.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from alphagate.core.insights import Insights
from alphagate.core.model import DraftMemory


class _Block(BaseModel):
    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
    )


def _r(x: float) -> float | None:
    return float(f"{x:.4g}") if math.isfinite(x) else None


class DraftLengthStatus(_Block):
    """What the per-position counters say about num_speculative_tokens."""

    advice: str = Field(
        description="keep, shorten, nonePays, longerMayPay or insufficient (core.draft_length)."
    )
    configured_k: int = Field(description="num_speculative_tokens the canary runs.")
    recommended_k: int = Field(description="The K the evidence supports (shortened only on "
                               "confident evidence).")  # fmt: skip
    best_k: int = Field(description="The K with the best point estimate of the speed-up.")
    position_rates: list[float] = Field(
        default=[], description="Accepted share of drafts at each draft position (0 first)."
    )
    speedups: list[float] = Field(
        default=[], description="Predicted speed-up over draft steps for K' = 1..K."
    )
    cost_per_position: float | None = Field(
        default=None, description="Cost of one draft position relative to a plain step."
    )
    cost_source: str = Field(default="", description="policy or measured.")
    reason: str = Field(default="", description="Why, with the numbers.")


class DiagnosisStatus(_Block):
    """Canary against baseline per token: the shape and what to try."""

    shape: str = Field(description="bothBetter, bothWorse, meanBetterTailWorse, "
                       "meanWorseTailBetter, unchanged or unknown.")  # fmt: skip
    mean_change: float | None = Field(default=None, description="Relative change of the mean.")
    tail_change: float | None = Field(default=None, description="Relative change of the tail.")
    causes: list[str] = Field(default=[], description="Likely causes (core.diagnosis.Cause).")
    mitigations: list[str] = Field(
        default=[], description="mitigation:support, best supported first."
    )
    reason: str = Field(default="", description="The diagnosis for people.")


class OutputsStatus(_Block):
    """Whether outputs are long enough for speculation to pay."""

    finding: str = Field(description="holds (too short), clear or unknown.")
    mean_output_tokens: float | None = Field(default=None, description="Mean output length.")
    reason: str = Field(default="", description="Why, with the numbers.")


class DraftTuningStatus(_Block):
    """The opt-in draft-length tuner (spec.draftLength.tuning): the K it runs and why."""

    k: int = Field(description="num_speculative_tokens the canary runs when speculating.")
    good_k: int = Field(description="The last K confirmed good; a regressing K returns to it.")
    trial: bool = Field(default=False, description="The K changed and is not yet confirmed.")
    last_change: str = Field(
        default="",
        description="Cause of the last K decision: shorten, lengthen, revert, confirmed or "
        "spec-changed (core.model.DraftCause).",
    )
    last_change_reason: str = Field(default="", description="Why, with the numbers.")
    cooldown_until: str | None = Field(
        default=None, description="No K change before this time (RFC 3339; after a revert)."
    )


class InsightsStatus(_Block):
    """Beyond on and off: draft length, diagnosis and output length of the last window."""

    draft_length: DraftLengthStatus | None = Field(
        default=None, description="The draft length that pays (speculation on)."
    )
    diagnosis: DiagnosisStatus | None = Field(
        default=None, description="Mean against tail latency, canary against baseline."
    )
    outputs: OutputsStatus | None = Field(default=None, description="Short outputs.")
    findings: list[str] = Field(
        default=[],
        description="Causes the last window points at (core.diagnosis.Cause); a change of this "
        "set emits one LatencyDiagnosis Event.",
    )
    tuning: DraftTuningStatus | None = Field(
        default=None, description="The draft-length tuner, when spec.draftLength.tuning is on."
    )


def tuning_status(d: DraftMemory, k: int, spec_k: int) -> DraftTuningStatus:
    last = d.history[-1] if d.history else None
    return DraftTuningStatus(
        k=k,
        good_k=d.good_k if d.good_k is not None else spec_k,
        trial=d.trial,
        last_change=last.cause.value if last is not None else "",
        last_change_reason=last.reason if last is not None else "",
        cooldown_until=(
            datetime.fromtimestamp(d.cooldown_until, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if d.cooldown_until > 0
            else None
        ),
    )


def insights_status(ins: Insights, tuning: DraftTuningStatus | None = None) -> InsightsStatus:
    d = ins.draft
    draft = None
    if d is not None:
        draft = DraftLengthStatus(
            advice=d.advice.value,
            configured_k=d.configured_k,
            recommended_k=d.recommended_k,
            best_k=d.best_k,
            position_rates=[v for p in d.positions if (v := _r(p.unconditional)) is not None],
            speedups=[v for o in d.options if (v := _r(o.speedup)) is not None],
            cost_per_position=_r(d.cost.per_position),
            cost_source=d.cost.source.value,
            reason=d.reason,
        )
    g = ins.diagnosis
    diag = None
    if g is not None:
        diag = DiagnosisStatus(
            shape=g.shape.value,
            mean_change=_r(g.mean_change),
            tail_change=_r(g.tail_change),
            causes=[c.value for c in g.causes],
            mitigations=[f"{m.mitigation.value}:{m.support.name.lower()}" for m in g.mitigations],
            reason=g.reason,
        )
    o = ins.outputs
    mean = o.evidence.get("mean_output_tokens")
    outputs = OutputsStatus(
        finding=o.finding.value,
        mean_output_tokens=_r(mean) if isinstance(mean, float) else None,
        reason=o.reason,
    )
    return InsightsStatus(
        draft_length=draft,
        diagnosis=diag,
        outputs=outputs,
        findings=[c.value for c in ins.findings()],
        tuning=tuning,
    )
