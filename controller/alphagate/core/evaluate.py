"""One evaluation: observation + memory + rollout + `now` -> estimates, checks, decision.

The single entry point the shell calls (live, dry-run, backtest and the simulator alike):

    estimate  alpha per slice, traffic weights, the combined alpha;
    judge     acceptance (combined with per-slice floors, or per slice) and latency per slice;
    decide    the state machine turns the overall verdict into an action and a reason.

While speculation is off (Off, RolledBack, or paused there) vLLM exports no spec-decode series,
so acceptance and latency are not judged (that is expected, not an error); weights are still
computed from the baseline's traffic so a shift in the mix can trigger an early re-probe.
A failed source or pool becomes an ERROR check; data from a rollout or its warm-up becomes
INCONCLUSIVE. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from alphagate.config import Aggregation, SpeculativeCanarySpec
from alphagate.core import (
    acceptance,
    blocksize,
    checklist,
    checks,
    histogram,
    latency,
    latency_run,
    machine,
    moves,
    poolalpha,
    reprobe,
    shape,
    speedup,
    streak,
    timing,
    window,
)
from alphagate.core.model import (
    Action,
    Cause,
    CheckKind,
    CheckResult,
    Command,
    Estimate,
    Evaluation,
    Judgeability,
    LatencyEvidence,
    Memory,
    Observation,
    Role,
    Rollout,
    SourceEvidence,
    Verdict,
    WindowEvidence,
    ev,
)
from alphagate.core.spread import Spread
from alphagate.core.suitability import Suitability, output_length


def _estimates(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    names: Sequence[str],
    memory: Memory,
    now: float,
) -> tuple[dict[str, Estimate], dict[str, Judgeability], dict[str, Spread]]:
    """alpha per slice (core/poolalpha.py: blocks sized from the requests' lives, the learned
    between-request variance as a prior), what would make an unjudgeable slice judgeable, and
    what each slice learned."""
    gate = spec.acceptance
    estimates: dict[str, Estimate] = {}
    judgeable: dict[str, Judgeability] = {}
    learned = dict(memory.spread)
    if observation.source_error is not None:
        return estimates, judgeable, learned
    scrape = timing.scrape_interval(spec, observation.scrape_interval_seconds)
    for name in names:
        canary = observation.pool(name, Role.CANARY)
        if canary is None or canary.error is not None:
            continue
        got = poolalpha.estimate(
            canary,
            confidence=gate.confidence,
            batch_seconds=gate.batch_seconds,
            scrape_interval=scrape,
            learned=learned.get(name),
            now=now,
            window_seconds=observation.window_seconds,
        )
        if got.learned is not None:
            learned[name] = got.learned
        if got.estimate is None:
            continue
        estimates[name] = got.estimate
        why = blocksize.judgeable(
            got.plan, got.estimate, canary.lives, window_seconds=observation.window_seconds
        )
        if why is not None:
            judgeable[name] = why
    return estimates, judgeable, learned


def _fallback_weights(estimates: dict[str, Estimate], names: Sequence[str]) -> dict[str, float]:
    """Traffic shares from the tokens draft steps generated (drafts + accepted) when no
    generation-token counts were measured: the pooled alpha then is the ratio of the counters."""
    made = {n: e.drafts + e.accepted_tokens for n, e in estimates.items()}
    total = math.fsum(made.values())
    if not total > 0:
        return dict.fromkeys(names, 0.0)
    return {n: (made[n] / total if n in made else 0.0) for n in names}


def _evidence(
    combined: Estimate | None,
    estimates: dict[str, Estimate],
    weights: dict[str, float],
    results: Sequence[CheckResult],
    verdict: Verdict,
) -> dict[str, float | str]:
    """The record a transition keeps (for people reading the history; code reads the typed
    checks of the evaluation)."""
    out: dict[str, float | str] = {"verdict": verdict.value}
    if combined is not None:
        out |= {
            "alpha": ev(combined.value),
            "alpha_lower": ev(combined.lower),
            "alpha_upper": ev(combined.upper),
            "drafts": ev(combined.drafts),
            "alpha_method": str(combined.method),
        }
        if len(estimates) > 1:
            out["alpha_traffic_weighted"] = ev(acceptance.traffic_weighted(estimates, weights))
    for name, e in estimates.items():
        out[f"alpha:{name}"] = ev(e.value)
    for c in results:
        lat = c.evidence
        if not isinstance(lat, LatencyEvidence):
            continue
        if lat.canary is not None:
            out[f"{c.name}:canary_quantile_seconds"] = ev(lat.canary.quantile_seconds)
        if lat.baseline is not None:
            out[f"{c.name}:baseline_quantile_seconds"] = ev(lat.baseline.quantile_seconds)
        if lat.tail is not None:
            out[f"{c.name}:tail_within"] = lat.tail.within.value
            out[f"{c.name}:effective_margin"] = ev(lat.tail.effective_margin)
            if lat.tail.fail_test is not None:
                out[f"{c.name}:fraction_above"] = ev(lat.tail.fail_test.fraction)
                out[f"{c.name}:p_value"] = ev(lat.tail.fail_test.p_value)
        if lat.speedup is not None:
            out[f"{c.name}:speedup"] = ev(lat.speedup.value)
            out[f"{c.name}:speedup_lower"] = ev(lat.speedup.lower)
            out[f"{c.name}:speedup_upper"] = ev(lat.speedup.upper)
    decisive = [c for c in results if c.verdict is verdict]
    if decisive and verdict is not Verdict.PASS:
        out["why"] = "; ".join(f"{c.name}: {c.reason}" for c in decisive)
    return out


@dataclass(frozen=True, slots=True)
class Estimated:
    """What the estimate step found: alpha per slice (with whether each can be judged), the
    traffic weights and the combined alpha; `memory` has learned this window's last alphas and
    spread; `good_share` is the traffic share of slices whose last alpha cleared enableAbove."""

    estimates: dict[str, Estimate]
    judgeable: dict[str, Judgeability]
    weights: dict[str, float]
    combined: Estimate | None
    memory: Memory
    good_share: float | None


def evaluate(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    memory: Memory,
    rollout: Rollout,
    *,
    now: float,
    command: Command | None = None,
    slices: Sequence[str] | None = None,
    force: bool = False,
) -> Evaluation:
    """Judge one window and decide: estimate, judge, decide. `slices` restricts the evaluation
    to those slices (perSlice aggregation: one call per slice, each with its own memory);
    unknown names are a programming error (ValueError). `force` carries a manual `command`
    past its guards."""
    known = [s.name for s in spec.slices]
    if slices is not None:
        unknown = sorted(set(slices) - set(known))
        if unknown:
            raise ValueError(f"unknown slices {unknown}; the policy has {known}")
    names = [n for n in known if slices is None or n in slices]
    start = observation.at - observation.window_seconds
    learn = (
        window.speculation_on(memory) and window.not_judgeable(spec, rollout, memory, start) is None
    )
    found = estimate(spec, observation, memory, names, now=now, learn=learn)
    results = judge(spec, observation, found, rollout, names)
    return decide(
        spec, observation, found, rollout, names, results, now=now, command=command, force=force
    )


def estimate(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    memory: Memory,
    names: Sequence[str],
    *,
    now: float,
    learn: bool = True,
) -> Estimated:
    """Alpha per slice, the traffic weights and the combined alpha; the memory learns the
    alphas with enough drafts and the window's spread when `learn` (a window the machine may
    judge: speculating, past the warm-up, no rollout). A window it never judges teaches it
    nothing either: after a rollback the old pod's last requests drain through the window, and
    the requests finishing last are those that accept worst, so chat's alpha read 0.40 there
    and the early re-probe on the mix lost the slice it needed (a demo run)."""
    gate = spec.acceptance
    estimates, judgeable, learned = _estimates(spec, observation, names, memory, now)
    weights = acceptance.weights(observation, names)
    if not math.fsum(weights.values()) > 0:
        weights = _fallback_weights(estimates, names)
    combined = acceptance.combine(estimates, weights, confidence=gate.confidence)
    if combined is None and len(estimates) == 1:
        combined = next(iter(estimates.values()))

    last_alpha = dict(memory.last_alpha)
    for name, e in estimates.items():
        if learn and e.drafts >= gate.min_drafts and math.isfinite(e.value):
            last_alpha[name] = e.value
    if learn:
        memory = memory.model_copy(update={"last_alpha": last_alpha, "spread": learned})
    good_share: float | None = None
    if math.fsum(weights.values()) > 0:
        good_share = math.fsum(
            w for n, w in weights.items() if last_alpha.get(n, -1.0) > gate.enable_above
        )
    return Estimated(estimates, judgeable, weights, combined, memory, good_share)


def judge(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    found: Estimated,
    rollout: Rollout,
    names: Sequence[str],
) -> list[CheckResult]:
    """The window's checks: an ERROR for a failed source; while speculation is off, failed
    pools and an INCONCLUSIVE "not judged"; a window from a rollout or its warm-up
    INCONCLUSIVE; else acceptance (and floors) and latency."""
    memory = found.memory
    window_start = observation.at - observation.window_seconds
    if observation.source_error is not None:
        return [
            CheckResult(
                CheckKind.SOURCE,
                Verdict.ERROR,
                f"metrics source failed: {observation.source_error}",
                SourceEvidence(
                    ((observation.source_error_kind, observation.source_error),),
                    (observation.source_budget,),
                ),
            )
        ]
    if not window.speculation_on(memory):
        return _not_speculating(observation, memory, names)
    unjudged = window.not_judgeable(spec, rollout, memory, window_start)
    if unjudged is not None:
        end = window.warmup_end(spec, rollout, memory)
        return [
            CheckResult(
                CheckKind.WINDOW,
                Verdict.INCONCLUSIVE,
                f"not judged: {unjudged}",
                WindowEvidence(window_start=window_start, warmup_end=end),
            )
        ]
    per_slice = spec.aggregation is Aggregation.PER_SLICE
    suffix = len(spec.slices) > 1  # name checks by slice when the policy has several
    return checklist.run(
        spec,
        observation,
        names,
        found.estimates,
        found.combined,
        per_slice,
        suffix,
        found.judgeable,
    )


def _not_speculating(
    observation: Observation, memory: Memory, names: Sequence[str]
) -> list[CheckResult]:
    """Speculation is off: no spec-decode series are expected, so nothing is judged; a pool
    that failed to read is still an ERROR."""
    results: list[CheckResult] = []
    failed = [p for p in observation.pools if p.slice in names and p.error is not None]
    if failed:
        texts = [f"{p.role.value} pool of slice {p.slice}: {p.error}" for p in failed]
        results.append(
            CheckResult(
                CheckKind.SOURCE,
                Verdict.ERROR,
                "pool read failed: " + "; ".join(texts),
                SourceEvidence(
                    tuple((p.error_kind, t) for p, t in zip(failed, texts, strict=True)),
                    tuple(p.budget for p in failed),
                ),
            )
        )
    state = window.effective_state(memory).value
    results.append(
        CheckResult(
            CheckKind.ACCEPTANCE,
            Verdict.INCONCLUSIVE,
            f"not judged: speculation is off ({state}); no spec-decode series expected",
        )
    )
    return results


def decide(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    found: Estimated,
    rollout: Rollout,
    names: Sequence[str],
    results: Sequence[CheckResult],
    *,
    now: float,
    command: Command | None,
    force: bool,
) -> Evaluation:
    """The overall verdict, the window's shape for the re-probe, then the state machine's
    step; a probe is withheld while outputs are too short to pay (spec.outputs)."""
    gate = spec.acceptance
    window_start = observation.at - observation.window_seconds
    results, memory = _pool_latency(spec, found.memory, results, rollout, window_start, now)
    verdict = checks.overall(results)
    combined = found.combined
    alpha = combined.value if combined is not None else None
    window_shape = shape.of(observation, names, alpha)
    memory = reprobe.observe(
        memory, spec, results, window_shape, start=window_start, now=observation.at
    )
    memory = reprobe.settle_share(memory, spec, found.good_share, now=now)
    band = gate.enable_above - gate.disable_below
    decision = machine.step(
        machine.StepInput(
            memory,
            verdict,
            now=now,
            spec=spec,
            rollout=rollout,
            command=command,
            good_share=found.good_share,
            window_start=window_start,
            fail_kinds=[c.kind for c in results if c.verdict is Verdict.FAIL],
            evidence=_evidence(combined, found.estimates, found.weights, results, verdict),
            force=force,
            decisive=any(
                checks.decisive(
                    c,
                    spec.latency.consecutive_windows
                    if c.kind is CheckKind.LATENCY
                    else gate.consecutive_windows,
                )
                for c in results
            ),
            shortfall=max((checks.shortfall(c, band) for c in results), default=0.0),
            shape=window_shape,
            alpha=streak.window_of(combined, end=observation.at, min_drafts=gate.min_drafts),
        )
    )
    withheld = _withheld(spec, observation, names, decision, command=command)
    if withheld is not None:
        # Outputs too short to pay (vllm:request_generation_tokens): no probe; the machine is
        # asked again next window, so the probe follows once they lengthen.
        decision = moves.Decision(
            memory, Action.HOLD, f"probe withheld: {withheld.reason}", None, decision.alerts
        )
    return Evaluation(
        at=now,
        estimates=found.estimates,
        weights=found.weights,
        combined=combined,
        checks=tuple(results),
        verdict=verdict,
        action=decision.action,
        reason=decision.reason,
        memory=decision.memory,
        transition=decision.transition,
        target_speculation_on=window.speculation_on(decision.memory),
        alerts=decision.alerts,
        predicted_speedup=_predicted_speedup(spec, combined),
        verdict_age_seconds=window.verdict_age(decision.memory, now),
        withheld=withheld,
    )


def _pool_latency(
    spec: SpeculativeCanarySpec,
    memory: Memory,
    results: Sequence[CheckResult],
    rollout: Rollout,
    start: float,
    now: float,
) -> tuple[Sequence[CheckResult], Memory]:
    """On a judged window, the latency guard's quantile Fail test pooled with the previous
    adjacent judged windows' (core/latency_run.py); looks between judged windows, windows
    not judged and windows while speculation is off change nothing."""
    counts = (
        window.speculation_on(memory)
        and window.not_judgeable(spec, rollout, memory, start) is None
        and window.judged(spec, memory, start, now)
    )
    if not counts:
        return results, memory
    pooled, run = latency_run.pool(
        memory.latency_run,
        results,
        start=start,
        end=now,
        window_seconds=spec.timing.window_seconds,
        windows=spec.latency.consecutive_windows,
        significance=spec.latency.significance,
        weight=latency.W_QUANTILE,
    )
    return pooled, memory.model_copy(update={"latency_run": run})


def _withheld(
    spec: SpeculativeCanarySpec,
    observation: Observation,
    names: Sequence[str],
    decision: moves.Decision,
    *,
    command: Command | None,
) -> Suitability | None:
    """Why the machine's probe is withheld (outputs too short to pay), or None: only a probe
    the machine started itself, and only where the policy withholds probes."""
    if not (
        spec.outputs.withhold_probes
        and command is None
        and decision.action is Action.ENABLE
        and decision.transition is not None
        and decision.transition.cause in (Cause.PROBE, Cause.EARLY_REPROBE)
    ):
        return None
    outputs = short_outputs(observation, names, spec.outputs.min_mean_tokens)
    return outputs if outputs.holds else None


def short_outputs(
    observation: Observation, names: Sequence[str], min_mean_tokens: float
) -> Suitability:
    """The short-output condition over the slices' pools (canary and baseline serve the same
    traffic): UNKNOWN without the output-length histogram."""
    hists = [
        p.output_lengths
        for p in observation.pools
        if p.slice in names and p.error is None and p.output_lengths is not None
    ]
    good = [h for h in hists if histogram.problem(h) is None]
    try:
        merged = histogram.merge(*good) if good else None
    except ValueError:  # different bucket layouts
        merged = None
    return output_length(merged, min_mean_tokens=min_mean_tokens)


def _predicted_speedup(spec: SpeculativeCanarySpec, combined: Estimate | None) -> float | None:
    """The policy's own prediction at the combined alpha (K and the gate as break-even)."""
    if combined is None or not 0.0 <= combined.value <= 1.0:
        return None
    return speedup.predicted(combined.value, k=spec.k, breakeven=spec.acceptance.disable_below)
