"""The SpeculativeCanary status: its pydantic model (half of the CRD schema) and its writer.

Status is where a person (or `kubectl get`, or `kubectl wait --for=condition=...`) reads why
the controller did what it did: the state, per-slice alpha with its interval and sample size,
canary and baseline P99 with the bucket bracket, the last decision and its reason, four
conditions (Ready, SourceHealthy, SpecValid, RolloutComplete), a short transition history, and
the serialised core Memory so a restarted controller resumes where it was. Times are RFC 3339
strings as Kubernetes writes them. Writes go through the status subresource only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, cast

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.core import model
from alphagate.core.model import (
    CheckKind,
    CheckResult,
    Estimate,
    Evaluation,
    Memory,
    Transition,
    Verdict,
)
from alphagate.kube.insights_status import InsightsStatus

HISTORY_LIMIT: Final = 20
FIELD_MANAGER: Final = "alphagate"
"""The name every write of the controller is recorded under in managedFields."""

# Manual commands reach the controller as annotations on the SpeculativeCanary (what
# `alphagate pause NAME` writes, and what `kubectl annotate` can write too). The id makes a
# repeated command a new request; without one, the command text is its id.
ANN_COMMAND: Final = "alphagate.io/command"
ANN_COMMAND_ID: Final = "alphagate.io/command-id"
ANN_COMMAND_BY: Final = "alphagate.io/command-by"
# "true": carry the command past the guards it would obey (cooldown, minimum dwell, flip
# budget for enable; promotion not configured for promote): `alphagate enable --force`
ANN_COMMAND_FORCE: Final = "alphagate.io/command-force"
COMMANDS: Final = ("pause", "resume", "enable", "disable", "promote")
Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def rfc3339(ts: float) -> str:
    """Unix seconds -> `2026-11-30T01:02:03Z` (Kubernetes Time, second precision)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (with or without fraction, `Z` or offset) -> Unix seconds; None if absent/bad."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rounded(x: float | None) -> float | None:
    """Finite and rounded to 6 significant digits (status is read by people), else None."""
    return float(f"{x:.6g}") if x is not None and math.isfinite(x) else None


class _Status(BaseModel):
    """camelCase like Kubernetes; unknown fields ignored so an older controller can read a
    newer status."""

    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        alias_generator=AliasGenerator(alias=to_camel),
    )


class ConditionType(StrEnum):
    READY = "Ready"
    SOURCE_HEALTHY = "SourceHealthy"
    SPEC_VALID = "SpecValid"
    ROLLOUT_COMPLETE = "RolloutComplete"
    # False (reason VerdictStale) while Probing or On without a conclusive verdict for
    # staleness.afterSeconds; True otherwise
    VERDICT_FRESH = "VerdictFresh"
    # False when the interval or window spans fewer than two scrape intervals (core/timing)
    TIMING_FITS = "TimingFits"
    # False (reason ShortOutputs) while outputs are too short for speculation to pay
    # (vllm:request_generation_tokens, core/suitability): no probe starts; True once measured
    # long enough; absent while not measured
    OUTPUTS_LONG_ENOUGH = "OutputsLongEnough"


class Condition(_Status):
    """A Kubernetes-style condition (metav1.Condition shape)."""

    type: str = Field(
        description=(
            "Condition type: Ready, SourceHealthy, SpecValid, RolloutComplete, VerdictFresh, "
            "TimingFits or OutputsLongEnough."
        )
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="A short CamelCase machine reason.",
    )
    message: str = Field(
        default="", description="What people read: why the condition has this status."
    )
    last_transition_time: Time = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The spec generation this condition was computed from."
    )


class SliceEvidence(_Status):
    """One slice's acceptance evidence in the last evaluation."""

    name: str = Field(description="Slice name, from spec.slices.")
    weight: float | None = Field(
        default=None,
        description=("The slice's share of generated tokens in the window (its traffic weight)."),
    )
    alpha: float | None = Field(
        default=None,
        description=("Acceptance rate: accepted / proposed draft tokens in the window."),
    )
    lower: float | None = Field(
        default=None, description="Lower bound of alpha's confidence interval."
    )
    upper: float | None = Field(
        default=None, description="Upper bound of alpha's confidence interval."
    )
    confidence: float | None = Field(default=None, description="Confidence level of the interval.")
    drafts: float | None = Field(
        default=None, description="Drafts proposed in the window (the sample size)."
    )
    draft_tokens: float | None = Field(
        default=None, description="Draft tokens proposed in the window."
    )
    accepted_tokens: float | None = Field(
        default=None, description="Draft tokens accepted in the window."
    )
    batches: int | None = Field(
        default=None,
        description=(
            "Independent batches (pod x interval increments) the variance was estimated from."
        ),
    )
    method: str | None = Field(default=None, description="How the interval was computed.")
    mean_acceptance_length: float | None = Field(
        default=None, description="vLLM's mean acceptance length, 1 + accepted / drafts."
    )
    verdict: str | None = Field(
        default=None,
        description=("This slice's acceptance verdict: Pass, Fail, Inconclusive or Error."),
    )
    reason: str = Field(default="", description="Why, with the numbers.")


class LatencyEvidence(_Status):
    """The P99 guard's evidence: canary vs baseline, the bucket brackets, the exceedance test."""

    check: str = Field(description="Which latency check (one per slice, or one overall).")
    slice: str | None = Field(default=None, description="The slice it is about, when per slice.")
    verdict: str = Field(description="Pass, Fail, Inconclusive or Error.")
    reason: str = Field(default="", description="Why, with the numbers.")
    metric: str | None = Field(
        default=None,
        description=("Which latency was compared (perToken, perStepScaled, perStepAbsolute)."),
    )
    quantile: float | None = Field(
        default=None, description="The quantile compared (0.99 for P99)."
    )
    canary_p99_seconds: float | None = Field(
        default=None, description=("The canary's quantile, in seconds (histogram_quantile rules).")
    )
    baseline_p99_seconds: float | None = Field(
        default=None, description="The baseline's quantile, in seconds."
    )
    ratio: float | None = Field(default=None, description="Canary quantile over baseline quantile.")
    canary_bucket_lower_seconds: float | None = Field(
        default=None,
        description=("Lower bound of the histogram bucket holding the canary's quantile."),
    )
    canary_bucket_upper_seconds: float | None = Field(
        default=None,
        description=("Upper bound of the histogram bucket holding the canary's quantile."),
    )
    baseline_bucket_lower_seconds: float | None = Field(
        default=None, description="Lower bound of the bucket holding the baseline's quantile."
    )
    baseline_bucket_upper_seconds: float | None = Field(
        default=None, description="Upper bound of the bucket holding the baseline's quantile."
    )
    limit_seconds: float | None = Field(
        default=None, description="The absolute limit compared against (perStepAbsolute)."
    )
    edge_seconds: float | None = Field(
        default=None, description="The bucket bound the exceedance is counted above."
    )
    exceedance: float | None = Field(
        default=None, description="Fraction of canary observations above the edge."
    )
    expected_exceedance: float | None = Field(
        default=None, description="The fraction expected without a regression."
    )
    p_value: float | None = Field(default=None, description="p-value of the exceedance test.")
    measured_speedup: float | None = Field(
        default=None,
        description=(
            "Baseline over canary mean time per output token (exact _sum/_count): is "
            "speculation net positive at the live concurrency."
        ),
    )
    measured_speedup_lower: float | None = Field(
        default=None, description="Lower 95% bound of the measured speed-up."
    )
    measured_speedup_upper: float | None = Field(
        default=None, description="Upper 95% bound of the measured speed-up."
    )
    canary_mean_seconds: float | None = Field(
        default=None, description="The canary's mean time per output token, in seconds."
    )
    baseline_mean_seconds: float | None = Field(
        default=None, description="The baseline's mean time per output token, in seconds."
    )
    canary_count: float | None = Field(
        default=None, description="Canary observations in the window."
    )
    baseline_count: float | None = Field(
        default=None, description="Baseline observations in the window."
    )
    # Everything the check reported, as text (so nothing the core says is lost).
    details: dict[str, str] = Field(
        default={}, description="Further numbers behind the verdict, as text."
    )


class Decision(_Status):
    """The last decision: what, why, and whether it was applied."""

    at: Time = Field(description="When it was decided (RFC 3339).")
    action: str = Field(description="enable, disable or hold.")
    verdict: str = Field(description="The combined verdict that drove it.")
    reason: str = Field(description="The state machine's reason.")
    why: str = Field(default="", description="The checks that decided it, with their numbers.")
    summary: str = Field(default="", description="One short line for kubectl get.")
    state: str = Field(description="The state after the decision.")
    speculation_on: bool = Field(
        default=False, description="What the canary should run after this decision."
    )
    applied: bool = Field(
        default=False,
        description=("The Deployment was patched (false: unchanged, dry-run or refused)."),
    )
    dry_run: bool = Field(
        default=False, description="Decided in dryRun mode: recorded, not applied."
    )
    deployments: list[str] = Field(
        default=[], description="The Deployments this decision is about."
    )
    alerts: list[str] = Field(
        default=[],
        description=(
            "Alert conditions raised with it (flip-budget, probe-stalled,"
            " rollout-timeout, source-errors, verdict-stale)."
        ),
    )


class HistoryEntry(_Status):
    from_state: str = Field(description="State before the transition.")
    to_state: str = Field(description="State after the transition.")
    reason: str = Field(description="Why, in words.")
    at: Time = Field(description="When (RFC 3339).")
    cause: str | None = Field(
        default=None,
        description="Why, as a stable kind: policy-fail, policy-pass, probe, manual, refused, ...",
    )
    evidence: dict[str, str] = Field(
        default={}, description=("The numbers behind it (alpha, interval, samples, P99s), as text.")
    )
    forced: bool = Field(
        default=False, description="A manual command carried out with --force past its guards."
    )
    guards: list[str] = Field(
        default=[],
        description=(
            "The guards that refused the command (cause refused) or that --force overrode: "
            "cooldown, min-dwell, flip-budget, promotion-disabled, ..."
        ),
    )


class CommandRecord(_Status):
    """The last manual command (annotation) the controller handled, so it acts once."""

    command: str = Field(
        description=("The manual command (pause, resume, enable, disable, promote).")
    )
    id: str = Field(description="The command id from the alphagate.io/command-id annotation.")
    handled_at: Time = Field(description="When the controller handled it (RFC 3339).")
    result: str = Field(default="", description="What came of it.")
    forced: bool = Field(
        default=False, description="Sent with --force (alphagate.io/command-force: true)."
    )


class UnitStatus(_Status):
    """perSlice aggregation: one entry per independently flipped Deployment group."""

    name: str = Field(
        description=("The decision unit: the slice (perSlice) or the canary (combined).")
    )
    deployments: list[str] = Field(default=[], description="The Deployments this unit flips.")
    state: str = Field(description="The unit's state.")
    speculation_on: bool | None = Field(
        default=None, description="Whether the unit's Deployments run speculation."
    )
    last_decision: Decision | None = Field(default=None, description="The unit's last decision.")


class CanaryStatus(_Status):
    """What the controller reports about one SpeculativeCanary."""

    state: str | None = Field(
        default=None, description="Off, Probing, On, RolledBack, Paused or Promoted."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation last evaluated."
    )
    speculation_on: bool | None = Field(
        default=None, description="Whether the canary runs speculative decoding now."
    )
    mode: str | None = Field(default=None, description="enforce or dryRun, as evaluated.")
    combined_alpha: float | None = Field(
        default=None,
        description=(
            "The pooled alpha across slices in the last window (what a combined canary gates on)."
        ),
    )
    combined_lower: float | None = Field(
        default=None, description="Lower confidence bound of the pooled alpha."
    )
    combined_upper: float | None = Field(
        default=None, description="Upper confidence bound of the pooled alpha."
    )
    p99_ratio: float | None = Field(
        default=None,
        description=("The worst canary-over-baseline latency ratio of the last window."),
    )
    slices: list[SliceEvidence] = Field(
        default=[], description="Per-slice acceptance evidence from the last evaluation."
    )
    latency: list[LatencyEvidence] = Field(
        default=[], description="Latency evidence from the last evaluation."
    )
    last_decision: Decision | None = Field(
        default=None, description="The last decision with its reason."
    )
    last_evaluated: Time | None = Field(
        default=None, description="When the canary was last evaluated (RFC 3339)."
    )
    last_flip: Time | None = Field(
        default=None, description="When speculation was last turned on or off (RFC 3339)."
    )
    conditions: list[Condition] = Field(
        default=[],
        description=("Standard conditions: Ready, SourceHealthy, SpecValid, RolloutComplete."),
    )
    history: list[HistoryEntry] = Field(
        default=[], description="The latest state transitions, newest last."
    )
    units: list[UnitStatus] = Field(
        default=[],
        description=("Per decision unit (perSlice: one per slice) state and last decision."),
    )
    last_command: CommandRecord | None = Field(
        default=None, description="The last manual command handled."
    )
    insights: InsightsStatus | None = Field(
        default=None,
        description=(
            "Beyond on and off: the draft length that pays, the mean-vs-tail diagnosis and "
            "whether outputs are too short (the last evaluation; perSlice: the first unit)."
        ),
    )
    # The core's Memory as JSON: for combined aggregation one Memory, for perSlice an object
    # {unit name: Memory}. Read back with `memories()`.
    memory: str | None = Field(
        default=None,
        description=("The controller's decision memory as JSON (resumes after a restart)."),
    )

    def condition(self, kind: str | ConditionType) -> Condition | None:
        for c in self.conditions:
            if c.type == str(kind):
                return c
        return None

    def memories(self) -> dict[str, Memory]:
        """The stored Memory per unit (`""` for combined); {} if absent or unreadable."""
        return decode_memories(self.memory)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def pending_command(obj: Mapping[str, Any], status: CanaryStatus) -> tuple[str, str] | None:
    """(command, id) from the resource's annotations when not yet handled, else None.

    An unknown command text is returned too, so the caller can refuse it visibly.
    """
    annotations = ((obj.get("metadata") or {}).get("annotations")) or {}
    command = str(annotations.get(ANN_COMMAND, "")).strip().lower()
    if not command:
        return None
    ident = str(annotations.get(ANN_COMMAND_ID) or command)
    if status.last_command is not None and status.last_command.id == ident:
        return None
    return command, ident


def command_forced(obj: Mapping[str, Any]) -> bool:
    """Whether the pending command asks to go past its guards (`--force`)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANN_COMMAND_FORCE, "")).strip().lower() == "true"


def decode_memories(text: str | None) -> dict[str, Memory]:
    """JSON from `encode_memories` (or a bare Memory) -> {unit: Memory}; {} when unreadable."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return {}
    try:
        if (
            isinstance(raw, dict)
            and "state" in raw
            and not any(isinstance(v, dict) and "state" in v for v in raw.values())
        ):
            return {"": Memory.model_validate(raw)}
        if isinstance(raw, dict):
            return {str(k): Memory.model_validate(v) for k, v in raw.items()}
    except ValidationError:
        return {}
    return {}


def encode_memories(memories: Mapping[str, Memory]) -> str:
    """{"": m} -> a bare Memory JSON; several units -> {unit: Memory}."""
    if set(memories) == {""}:
        return memories[""].model_dump_json()
    return json.dumps(
        {k: json.loads(m.model_dump_json()) for k, m in sorted(memories.items())},
        separators=(",", ":"),
    )


def parse_status(obj: Mapping[str, Any] | None) -> CanaryStatus:
    """The status block of a resource (dict) -> CanaryStatus; an unreadable one is empty."""
    raw = (obj or {}).get("status") if obj is not None else None
    if not isinstance(raw, dict):
        return CanaryStatus()
    try:
        return CanaryStatus.model_validate(raw)
    except ValidationError:
        return CanaryStatus()


# ---------------------------------------------------------------- conditions


def set_condition(
    conditions: Sequence[Condition],
    kind: str | ConditionType,
    status: bool | None,
    reason: str,
    message: str = "",
    *,
    now: float,
    generation: int | None = None,
) -> list[Condition]:
    """Replace one condition; lastTransitionTime moves only when the status flips."""
    text: Literal["True", "False", "Unknown"] = (
        "Unknown" if status is None else ("True" if status else "False")
    )
    out: list[Condition] = []
    replaced = False
    for c in conditions:
        if c.type == str(kind):
            stamp = c.last_transition_time if c.status == text else rfc3339(now)
            out.append(
                Condition(
                    type=str(kind),
                    status=text,
                    reason=reason,
                    message=message[:1024],
                    last_transition_time=stamp,
                    observed_generation=generation,
                )
            )
            replaced = True
        else:
            out.append(c)
    if not replaced:
        out.append(
            Condition(
                type=str(kind),
                status=text,
                reason=reason,
                message=message[:1024],
                last_transition_time=rfc3339(now),
                observed_generation=generation,
            )
        )
    order = [t.value for t in ConditionType]
    out.sort(key=lambda c: (order.index(c.type) if c.type in order else len(order), c.type))
    return out


# ---------------------------------------------------------------- evidence from an Evaluation


def _fmt(value: float | str) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _slice_check(evaluation: Evaluation, name: str, only: bool) -> CheckResult | None:
    """The slice's own acceptance verdict: perSlice acceptance, a combined-mode floor, or the
    policy's only acceptance check when it has one slice."""
    for kind in (CheckKind.ACCEPTANCE, CheckKind.FLOOR):
        for c in evaluation.checks:
            if c.kind is kind and c.slice == name:
                return c
    if only:
        for c in evaluation.checks:
            if c.kind is CheckKind.ACCEPTANCE and c.slice is None:
                return c
    return None


def slice_evidence(evaluation: Evaluation) -> list[SliceEvidence]:
    """Per-slice acceptance evidence: estimates, weights, and the slice's acceptance verdict."""
    names = list(dict.fromkeys([*evaluation.weights, *evaluation.estimates]))
    out = []
    for name in names:
        est: Estimate | None = evaluation.estimates.get(name)
        check = _slice_check(evaluation, name, len(names) == 1)
        out.append(
            SliceEvidence(
                name=name,
                weight=rounded(evaluation.weights.get(name)),
                alpha=rounded(est.value) if est else None,
                lower=rounded(est.lower) if est else None,
                upper=rounded(est.upper) if est else None,
                confidence=rounded(est.confidence) if est else None,
                drafts=rounded(est.drafts) if est else None,
                draft_tokens=rounded(est.draft_tokens) if est else None,
                accepted_tokens=rounded(est.accepted_tokens) if est else None,
                batches=est.batches if est else None,
                method=est.method if est else None,
                mean_acceptance_length=rounded(est.mean_acceptance_length) if est else None,
                verdict=str(check.verdict) if check else None,
                reason=check.reason if check else "",
            )
        )
    return out


def latency_evidence(checks: Iterable[CheckResult]) -> list[LatencyEvidence]:
    """The latency checks' typed evidence as status entries (numbers rounded for people)."""
    out = []
    for c in checks:
        ev = c.evidence
        if not isinstance(ev, model.LatencyEvidence):
            continue
        canary, baseline, test, sp = ev.canary, ev.baseline, ev.test, ev.speedup
        worst = ev.worst_bound
        out.append(
            LatencyEvidence(
                check=c.name,
                slice=c.slice,
                verdict=str(c.verdict),
                reason=c.reason,
                metric=ev.metric.value,
                quantile=rounded(ev.quantile),
                canary_p99_seconds=rounded(canary.quantile_seconds) if canary else None,
                baseline_p99_seconds=rounded(baseline.quantile_seconds) if baseline else None,
                ratio=rounded(ev.ratio),
                canary_bucket_lower_seconds=rounded(canary.bucket_lo) if canary else None,
                canary_bucket_upper_seconds=rounded(canary.bucket_hi) if canary else None,
                baseline_bucket_lower_seconds=rounded(baseline.bucket_lo) if baseline else None,
                baseline_bucket_upper_seconds=rounded(baseline.bucket_hi) if baseline else None,
                limit_seconds=rounded(ev.limit_seconds),
                edge_seconds=rounded(test.edge if test else worst.bound if worst else None),
                exceedance=rounded(
                    test.fraction if test else worst.canary_fraction if worst else None
                ),
                expected_exceedance=rounded(
                    test.expected_fraction if test else worst.allowed_fraction if worst else None
                ),
                p_value=rounded(test.p_value if test else worst.p_value if worst else None),
                measured_speedup=rounded(sp.value) if sp else None,
                measured_speedup_lower=rounded(sp.lower) if sp else None,
                measured_speedup_upper=rounded(sp.upper) if sp else None,
                canary_mean_seconds=rounded(sp.canary_mean) if sp else None,
                baseline_mean_seconds=rounded(sp.baseline_mean) if sp else None,
                canary_count=rounded(canary.count) if canary else None,
                baseline_count=rounded(baseline.count) if baseline else None,
                details={k: _fmt(v) for k, v in sorted(ev.flat().items())},
            )
        )
    return out


def history_entries(
    transitions: Iterable[Transition], limit: int = HISTORY_LIMIT
) -> list[HistoryEntry]:
    items = [
        HistoryEntry(
            from_state=str(t.from_state),
            to_state=str(t.to_state),
            reason=t.reason,
            at=rfc3339(t.at),
            cause=t.cause.value,
            evidence={k: _fmt(v) for k, v in sorted(t.evidence.items())},
            forced=t.forced,
            guards=[g.value for g in t.guards],
        )
        for t in transitions
    ]
    return items[-limit:]


_PARENS: Final = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)")


def decisive(evaluation: Evaluation) -> list[CheckResult]:
    """The checks whose verdict is the window's verdict (what decided it)."""
    return [c for c in evaluation.checks if c.verdict is evaluation.verdict]


def why(evaluation: Evaluation) -> str:
    """The deciding checks with their numbers: `acceptance: alpha 0.400 [0.362, 0.440] ...`."""
    return "; ".join(f"{c.name}: {c.reason}" for c in decisive(evaluation))


def summary(evaluation: Evaluation, *, dry_run: bool = False) -> str:
    """One short line for printer columns: the action and what drove it.

    A failing or erroring window names its first deciding check (`disable: alpha 0.40 [0.36,
    0.44] ...`); otherwise the state machine's reason."""
    head = f"{evaluation.action}" + (" (dry-run)" if dry_run else "")
    lead = decisive(evaluation)
    if evaluation.verdict in (Verdict.FAIL, Verdict.ERROR) and lead:
        reason = lead[0].reason
    else:
        reason = evaluation.reason
    reason = reason.strip().splitlines()[0] if reason.strip() else ""
    reason = " ".join(_PARENS.sub("", reason).split())  # "(hull(...), 600 drafts)" is detail
    text = f"{head}: {reason}" if reason else head
    return text if len(text) <= 80 else text[:77] + "..."


def p99_ratio(latency: Sequence[LatencyEvidence]) -> float | None:
    """The worst (largest) canary/baseline ratio over the latency checks."""
    ratios = [e.ratio for e in latency if e.ratio is not None]
    return max(ratios) if ratios else None


# ---------------------------------------------------------------- writing


class StatusWriter:
    """Reads SpeculativeCanary objects and writes their status through `/status` only."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        """The whole resource as a dict."""
        from alphagate.kube.client import call

        result = call(
            f"read {PLURAL}.{GROUP} {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            ),
        )
        return cast(dict[str, Any], result)

    def write(self, namespace: str, name: str, status: CanaryStatus) -> dict[str, Any]:
        """Replace the whole status (JSON patch `add /status`: no stale leftovers, no
        resourceVersion race with spec edits, which the status subresource ignores)."""
        from alphagate.kube.client import call

        body = [{"op": "add", "path": "/status", "value": status.dump()}]
        result = call(
            f"write status of {PLURAL}.{GROUP} {namespace}/{name}",
            lambda: self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type="application/json-patch+json",
            ),
        )
        return cast(dict[str, Any], result)


__all__ = [
    "ANN_COMMAND",
    "ANN_COMMAND_BY",
    "ANN_COMMAND_FORCE",
    "ANN_COMMAND_ID",
    "COMMANDS",
    "HISTORY_LIMIT",
    "CanaryStatus",
    "CommandRecord",
    "Condition",
    "ConditionType",
    "Decision",
    "HistoryEntry",
    "LatencyEvidence",
    "SliceEvidence",
    "StatusWriter",
    "UnitStatus",
    "command_forced",
    "decode_memories",
    "encode_memories",
    "history_entries",
    "latency_evidence",
    "p99_ratio",
    "parse_status",
    "parse_time",
    "pending_command",
    "rfc3339",
    "rounded",
    "set_condition",
    "slice_evidence",
    "summary",
    "why",
]
