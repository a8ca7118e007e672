"""Draft-length tuning: K moves only on agreeing evidence, under the flip safeguards, and a K
that regresses goes back to the last good one."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from alphagate.config import LatencyMetric, SpeculativeCanarySpec
from alphagate.core.draft_length import CostSource, DraftAdvice, DraftCost, recommend
from alphagate.core.model import (
    AcceptanceSample,
    Action,
    CheckKind,
    CheckResult,
    DraftCause,
    Evaluation,
    LatencyEvidence,
    Memory,
    Rollout,
    SpeedUp,
    State,
    Verdict,
)
from alphagate.core.tuning import Tuned, TuneHold, current_k, retune, speculative_config
from alphagate.errors import PolicyError

CODE = (0.75, 0.35, 0.2, 0.1, 0.1)  # tail positions rarely accepted: best K is short
CHAT = (0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95)  # every position pays
ROLLOUT = Rollout(completed_at=0.0, speculation_on=True)


def _spec(make_spec: Callable[..., SpeculativeCanarySpec], **tuning: Any) -> SpeculativeCanarySpec:
    return make_spec(
        speculativeConfig={"method": "eagle3", "model": "head", "num_speculative_tokens": 5},
        timing={
            "intervalSeconds": 30,  # = default
            "windowSeconds": 30,  # one interval: every evaluation is a judged window
            "warmupSeconds": 60,  # two windows: the warm-up after a K change is under test
            "minDwellSeconds": 600,  # = default
            "maxFlipsPerHour": 6,  # room for the K changes and reverts a test makes
        },
        draftLength={
            "tuning": {"enabled": True, "consecutiveWindows": 3, "cooldownSeconds": 1800, **tuning}
        },
    )


def _report(cond: tuple[float, ...], k: int, *, seed: int = 1, drafts: int = 400, d: float = 0.3):
    rng = random.Random(seed)
    samples = []
    for b in range(8):
        per = [0] * k
        for _ in range(drafts):
            for i in range(k):
                if rng.random() >= cond[i]:
                    break
                per[i] += 1
        samples.append(
            AcceptanceSample(
                drafts=drafts,
                draft_tokens=k * drafts,
                accepted_tokens=sum(per),
                per_position=tuple(float(v) for v in per),
                pod=f"p{b}",
            )
        )
    return recommend(samples, k=k, cost=DraftCost(d, CostSource.POLICY))


def _latency(value: float, upper: float) -> CheckResult:
    sp = SpeedUp(value, value - 0.05, upper, 0.95, 0.01, 0.012, 500, 500, 50.0, 0.5)
    ev = LatencyEvidence(LatencyMetric.PER_TOKEN, 0.99, 1.2, 0.05, 10, speedup=sp)
    return CheckResult(CheckKind.LATENCY, Verdict.PASS, "", ev)


def _eval(
    memory: Memory,
    now: float,
    *,
    verdict: Verdict = Verdict.PASS,
    action: Action = Action.HOLD,
    speedup: tuple[float, float] | None = None,
) -> Evaluation:
    checks = (_latency(*speedup),) if speedup is not None else ()
    return Evaluation(now, {}, {}, None, checks, verdict, action, "", memory)


def _on() -> Memory:
    return Memory(state=State.ON, since=0.0, last_flip_at=0.0, flip_times=(0.0,))


def _run(
    spec: SpeculativeCanarySpec,
    memory: Memory,
    report: Any,
    now: float,
    **kw: Any,
) -> Tuned:
    return retune(spec, _eval(memory, now, **kw), report, now=now, rollout=ROLLOUT)


def test_disabled_tuning_keeps_the_spec_k_and_forgets_tuned_state(make_spec) -> None:
    spec = make_spec()
    memory = _on().model_copy(update={"draft": _on().draft.model_copy(update={"k": 2})})
    out = _run(spec, memory, _report(CODE, 5), 1000.0)
    assert out.hold is TuneHold.DISABLED and out.k == spec.k and out.change is None
    assert out.memory.draft.k is None
    assert speculative_config(spec, out.memory)["num_speculative_tokens"] == 5


def test_shorten_needs_agreeing_disjoint_windows_then_counts_as_a_flip(make_spec) -> None:
    spec = _spec(make_spec)
    m = _on()
    holds = []
    for i, now in enumerate((1000.0, 1030.0)):
        out = _run(spec, m, _report(CODE, 5, seed=i), now)
        holds.append(out.hold)
        m = out.memory
    assert holds == [TuneHold.AGREEING, TuneHold.AGREEING]
    # an overlapping window (starts before the last counted one ended) is no new evidence
    over = retune(
        spec, _eval(m, 1040.0), _report(CODE, 5, seed=5), now=1040.0, rollout=ROLLOUT,
        window_start=1020.0,
    )  # fmt: skip
    assert over.hold is TuneHold.AGREEING and over.memory.draft.streak == 2
    out = _run(spec, m, _report(CODE, 5, seed=3), 1060.0)
    assert out.change is not None and out.change.cause is DraftCause.SHORTEN and out.restarts
    assert out.change.from_k == 5 and out.change.to_k == out.k < 5
    assert out.memory.last_flip_at == 1060.0 and 1060.0 in out.memory.flip_times
    assert out.memory.draft.trial and current_k(spec, out.memory) == out.k
    assert speculative_config(spec, out.memory)["num_speculative_tokens"] == out.k
    assert out.change.evidence["draft_length_advice"] == "shorten"


def test_insufficient_evidence_never_moves_k_and_keeps_the_streak(make_spec) -> None:
    spec = _spec(make_spec)
    m = _on()
    for i, now in enumerate((1000.0, 1030.0)):
        m = _run(spec, m, _report(CODE, 5, seed=i), now).memory
    thin = _report(CODE, 5, drafts=5)
    assert thin.advice is DraftAdvice.INSUFFICIENT
    for now in (1060.0, 1090.0, 1120.0):
        out = _run(spec, m, thin, now)
        assert out.hold is TuneHold.NO_EVIDENCE and out.change is None
    out = _run(spec, m, None, 1150.0)
    assert out.hold is TuneHold.NO_EVIDENCE and out.memory.draft.streak == 2
    for verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR):
        out = _run(spec, m, _report(CODE, 5), 1180.0, verdict=verdict)
        assert out.change is None and out.memory.draft.streak == 2


@pytest.mark.parametrize(
    ("update", "hold"),
    [
        ({"last_flip_at": 900.0}, TuneHold.DWELL),
        ({"flip_times": (700.0, 720.0, 740.0, 760.0, 780.0)}, TuneHold.FLIP_BUDGET),
    ],
)
def test_dwell_and_flip_budget_hold_a_change(make_spec, update: dict, hold: TuneHold) -> None:
    spec = _spec(make_spec)
    m = _on().model_copy(update=update)
    out = None
    for i, now in enumerate((1000.0, 1030.0, 1060.0)):
        out = _run(spec, m, _report(CODE, 5, seed=i), now)
        m = out.memory
    assert out is not None and out.hold is hold and out.change is None and out.k == 5


def test_nothing_moves_outside_on_or_in_warmup_or_when_the_machine_acted(make_spec) -> None:
    spec = _spec(make_spec)
    report = _report(CODE, 5)
    probing = _on().model_copy(update={"state": State.PROBING})
    assert _run(spec, probing, report, 1000.0).hold is TuneHold.NOT_ON
    warm = _on().model_copy(update={"last_flip_at": 990.0})
    assert _run(spec, warm, report, 1000.0).hold is TuneHold.UNJUDGED
    acted = _run(spec, _on(), report, 1000.0, action=Action.DISABLE)
    assert acted.hold is TuneHold.MACHINE_ACTED


def _shortened(spec: SpeculativeCanarySpec) -> Tuned:
    m = _on()
    out = None
    for i, now in enumerate((1000.0, 1030.0, 1060.0)):
        out = _run(spec, m, _report(CODE, 5, seed=i), now, speedup=(1.3, 1.4))
        m = out.memory
    assert out is not None and out.change is not None and out.memory.draft.trial
    return out


def test_a_failing_window_on_trial_reverts_to_the_last_good_k_and_cools_down(make_spec) -> None:
    spec = _spec(make_spec)
    moved = _shortened(spec)
    assert moved.memory.draft.good_speedup == 1.3  # measured at the good K before the move
    now = 1060.0 + 60 + 30  # after the warm-up
    out = _run(spec, moved.memory, _report(CODE, moved.k), now, verdict=Verdict.FAIL)
    assert out.change is not None and out.change.cause is DraftCause.REVERT and out.restarts
    assert out.k == 5 and not out.memory.draft.trial
    assert out.memory.draft.cooldown_until == now + 1800.0 and out.memory.last_flip_at == now
    # during the cooldown the same evidence moves nothing
    m = out.memory
    later = now + 600.0
    for i in range(3):
        res = _run(spec, m, _report(CODE, 5, seed=10 + i), later + 30.0 * i)
        m = res.memory
    assert res.hold is TuneHold.COOLDOWN and res.k == 5


def test_a_measured_speedup_drop_on_trial_reverts(make_spec) -> None:
    spec = _spec(make_spec)
    moved = _shortened(spec)
    now = 1060.0 + 90.0
    kept = _run(spec, moved.memory, None, now, speedup=(1.28, 1.35))
    assert kept.hold is TuneHold.TRIAL
    out = _run(spec, moved.memory, None, now, speedup=(1.0, 1.1))
    assert out.change is not None and out.change.cause is DraftCause.REVERT and out.k == 5


def test_passing_windows_confirm_the_trial_k(make_spec) -> None:
    spec = _spec(make_spec)
    moved = _shortened(spec)
    m, now = moved.memory, 1060.0 + 90.0
    results = []
    for i in range(3):
        out = _run(spec, m, None, now + 30.0 * i, speedup=(1.35, 1.45))
        results.append(out)
        m = out.memory
    assert [r.hold for r in results[:2]] == [TuneHold.TRIAL, TuneHold.TRIAL]
    last = results[-1]
    assert last.change is not None and last.change.cause is DraftCause.CONFIRMED
    assert not last.restarts and last.memory.draft.good_k == moved.k
    assert not last.memory.draft.trial and last.memory.draft.good_speedup == 1.35


def test_lengthen_one_position_at_a_time_up_to_max_k(make_spec) -> None:
    spec = _spec(make_spec, maxK=6)
    m = _on()
    out = None
    for i, now in enumerate((1000.0, 1030.0, 1060.0)):
        report = _report(CHAT, 5, seed=i, d=0.05)
        assert report.advice is DraftAdvice.LONGER_MAY_PAY
        out = _run(spec, m, report, now)
        m = out.memory
    assert out is not None and out.change is not None
    assert out.change.cause is DraftCause.LENGTHEN and out.k == 6
    # at maxK the same evidence keeps K
    at_top = m.model_copy(
        update={"draft": m.draft.model_copy(update={"trial": False}), "last_flip_at": 0.0}
    )
    res = _run(spec, at_top, _report(CHAT, 6, d=0.05), 2000.0)
    assert res.hold is TuneHold.KEEP and res.k == 6


def test_lengthened_positions_that_do_not_pay_are_reverted(make_spec) -> None:
    spec = _spec(make_spec, maxK=6)
    m = _on().model_copy(update={"draft": _on().draft.model_copy(update={"spec_k": 5})})
    m = m.model_copy(update={"draft": m.draft.model_copy(update={"k": 6, "trial": True})})
    out = _run(spec, m, _report((*CODE, 0.1), 6), 2000.0)
    assert out.change is not None and out.change.cause is DraftCause.REVERT and out.k == 5


def test_a_rollback_during_a_trial_puts_k_back_without_another_restart(make_spec) -> None:
    spec = _spec(make_spec)
    moved = _shortened(spec)
    flips = moved.memory.flip_times
    out = _run(spec, moved.memory, None, 1200.0, action=Action.DISABLE)
    assert out.change is not None and out.change.cause is DraftCause.REVERT
    assert out.k == 5 and out.memory.flip_times == flips


def test_a_new_spec_k_restarts_tuning(make_spec) -> None:
    spec = _spec(make_spec)
    moved = _shortened(spec)
    spec3 = _spec(make_spec).model_copy(
        update={"speculative_config": {"method": "eagle3", "model": "head",
                                       "num_speculative_tokens": 3}}
    )  # fmt: skip
    assert current_k(spec3, moved.memory) == 3  # the memory belongs to another K
    out = _run(spec3, moved.memory, None, 1200.0)
    assert out.change is not None and out.change.cause is DraftCause.SPEC_CHANGED
    assert out.memory.draft.spec_k == 3 and out.memory.draft.k is None and out.k == 3


@pytest.mark.parametrize(
    ("tuning", "needle"),
    [
        ({"minK": 6}, "must lie within minK"),
        ({"maxK": 4}, "must lie within minK"),
        ({"minK": 3, "maxK": 2}, "maxK (2) must not be below minK (3)"),
    ],
)
def test_tuning_bounds_are_checked(make_spec, tuning: dict, needle: str) -> None:
    from alphagate import config

    doc = {
        "apiVersion": "alphagate.io/v1alpha1",
        "kind": "SpeculativeCanary",
        "metadata": {"name": "x"},
        "spec": _spec(make_spec).model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    doc["spec"]["draftLength"]["tuning"] |= tuning
    with pytest.raises(PolicyError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        config.parse(doc, where="t")


def test_a_probe_is_withheld_while_outputs_are_too_short(make_spec) -> None:
    """vllm:request_generation_tokens under 50 tokens a request: the machine's probe is not
    started (typed `withheld`, with the numbers); long outputs let it start."""
    from alphagate.core.evaluate import evaluate
    from alphagate.core.model import Buckets, Observation, PoolObservation, Role
    from alphagate.core.suitability import Condition, Finding

    spec = make_spec(outputs={"withholdProbes": True})
    bounds = (10.0, 20.0, 50.0, 100.0, 200.0, float("inf"))

    def obs(mean: float) -> Observation:
        n = 40.0
        lengths = Buckets(bounds, (0.0, 0.0, n, n, n, n) if mean < 50 else (0, 0, 0, 0, n, n),
                          mean * n)  # fmt: skip
        pools = (
            PoolObservation("chat", Role.CANARY, generation_tokens=1e3, pods=2),
            PoolObservation("chat", Role.BASELINE, generation_tokens=4e3, pods=2,
                            output_lengths=lengths),
        )  # fmt: skip
        return Observation(at=1000.0, window_seconds=300.0, pools=pools)

    short = evaluate(spec, obs(30.0), Memory(), Rollout(), now=1000.0)
    assert short.action is Action.HOLD and short.transition is None
    assert short.memory.state is State.OFF and not short.target_speculation_on
    assert short.withheld is not None and short.withheld.condition is Condition.SHORT_OUTPUTS
    assert short.withheld.finding is Finding.HOLDS
    assert short.withheld.evidence["mean_output_tokens"] == 30.0
    long = evaluate(spec, obs(150.0), Memory(), Rollout(), now=1000.0)
    assert long.action is Action.ENABLE and long.withheld is None
    # a person's enable is not withheld
    from alphagate.core.model import Command

    manual = evaluate(spec, obs(30.0), Memory(), Rollout(), now=1000.0, command=Command.ENABLE)
    assert manual.action is Action.ENABLE and manual.withheld is None
    # opt-in: by default the condition is reported and the probe still starts
    default = evaluate(make_spec(), obs(30.0), Memory(), Rollout(), now=1000.0)
    assert default.action is Action.ENABLE and default.withheld is None
