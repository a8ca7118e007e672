"""evaluate(): estimates, weights, checks and the machine step together, as the shell calls it."""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alphagate.config import LatencyMetric, SpeculativeCanarySpec
from alphagate.core import acceptance, resolution
from alphagate.core.checklist import tokens_per_step
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    AcceptanceEvidence,
    AcceptanceSample,
    Action,
    Buckets,
    Cause,
    CheckKind,
    Command,
    EstimateMethod,
    LatencyEvidence,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
    Verdict,
    WindowEvidence,
)
from specs import spec_from

T0 = 2_000_000.0
K = 5
SETTLED = Rollout(completed_at=T0 - 10_000, speculation_on=True)
OLD = T0 - 10_000


def _slice(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "canary": {"matchLabels": {"slice": name, "track": "canary"}},
        "baseline": {"matchLabels": {"slice": name, "track": "baseline"}},
        **extra,
    }


BASE: dict[str, Any] = {
    "target": {"name": "canary"},
    "baseline": {"name": "baseline"},
    "speculativeConfig": {"method": "ngram", "num_speculative_tokens": K},
    "slices": [_slice("chat")],
    "source": {"kind": "prometheus", "prometheus": {}},
    "acceptance": {"minDrafts": 200},  # = default, stated: tests drop it with `acceptance=`
}


def make_spec(**over: Any) -> SpeculativeCanarySpec:
    """BASE with whole top-level sections replaced (not merged): `acceptance=` drops minDrafts."""
    return spec_from({**BASE, **over})


SPEC = make_spec()
TWO = make_spec(
    slices=[_slice("chat", minAlpha=0.5), _slice("code", minAlpha=0.35)],
)
PER_SLICE = make_spec(
    aggregation="perSlice",
    slices=[
        _slice("chat", deployment={"name": "chat-canary"}),
        _slice("code", deployment={"name": "code-canary"}),
    ],
)

# ~10% steps, as `alphagate plan` writes them (--custom-histogram-buckets): these windows carry
# pooled histograms only (no per-pod sums, so no mean test), and on vLLM's default buckets a
# pooled quantile can never be shown within +10% (tests/core/test_core_checks.py).
ITL = (*resolution.geometric(0.004, 0.3), math.inf)


def hist(values: list[float]) -> Buckets:
    counts = [0.0] * len(ITL)
    for v in values:
        counts[bisect.bisect_left(ITL, v)] += 1
    cum, run = [], 0.0
    for c in counts:
        run += c
        cum.append(run)
    return Buckets(bounds=ITL, counts=tuple(cum))


def spread(n: int, lo: float, hi: float) -> list[float]:
    return [lo + (hi - lo) * (i + 0.5) / n for i in range(n)]


TPOT_OK = hist(spread(1000, 0.02, 0.045))
TPOT_SLOW = hist(spread(900, 0.02, 0.045) + spread(100, 0.2, 0.3))


def samples(alpha: float, *, batches: int = 10, drafts: int = 100) -> tuple[AcceptanceSample, ...]:
    out = []
    for i in range(batches):
        wiggle = (i - (batches - 1) / 2) * 0.5
        out.append(
            AcceptanceSample(
                drafts=drafts,
                draft_tokens=drafts * K,
                accepted_tokens=alpha * drafts * K + wiggle,
                pod=f"pod-{i % 2}",
                start=T0 - 300 + 30 * i,
                end=T0 - 270 + 30 * i,
            )
        )
    return tuple(out)


def pools(
    name: str,
    alpha: float | None,
    *,
    tokens: float = 1000.0,
    canary_tpot: Buckets | None = TPOT_OK,
    canary_error: str | None = None,
    baseline_error: str | None = None,
    acc: tuple[AcceptanceSample, ...] | None = None,
) -> tuple[PoolObservation, PoolObservation]:
    return (
        PoolObservation(
            slice=name,
            role=Role.CANARY,
            acceptance=acc if acc is not None else (samples(alpha) if alpha is not None else ()),
            generation_tokens=tokens * 0.2,
            tpot=canary_tpot,
            itl=canary_tpot,
            error=canary_error,
        ),
        PoolObservation(
            slice=name,
            role=Role.BASELINE,
            generation_tokens=tokens * 0.8,
            tpot=TPOT_OK,
            itl=TPOT_OK,
            error=baseline_error,
        ),
    )


def obs(
    *pool_pairs: tuple[PoolObservation, PoolObservation], source_error: str | None = None
) -> Observation:
    return Observation(
        at=T0,
        window_seconds=300,
        pools=tuple(p for pair in pool_pairs for p in pair),
        source_error=source_error,
    )


PROBING = Memory(state=State.PROBING, since=OLD, last_flip_at=OLD, probe_deadline=T0 + 900)
ON = Memory(state=State.ON, since=OLD, last_flip_at=OLD)


def run(spec: SpeculativeCanarySpec, o: Observation, m: Memory, **kw: Any):  # type: ignore[no-untyped-def]
    kw.setdefault("rollout", SETTLED)
    rollout = kw.pop("rollout")
    return evaluate(spec, o, m, rollout, now=o.at, **kw)


def later(o: Observation) -> Observation:
    """The same traffic one whole window later: a disjoint window, new evidence."""
    return dataclasses.replace(o, at=o.at + o.window_seconds)


def test_new_canary_enables_without_judging() -> None:
    e = run(SPEC, obs(pools("chat", None)), Memory())
    assert e.action is Action.ENABLE and e.target_speculation_on
    assert e.verdict is Verdict.INCONCLUSIVE
    assert [(c.kind, c.verdict) for c in e.checks] == [(CheckKind.ACCEPTANCE, Verdict.INCONCLUSIVE)]
    assert e.checks[0].evidence is None  # nothing measured: speculation is off
    assert e.weights == {"chat": 1.0}


def test_probing_good_alpha_passes_and_confirms() -> None:
    e = run(SPEC, obs(pools("chat", 0.75)), PROBING)
    assert e.verdict is Verdict.PASS, [c.reason for c in e.checks]
    assert {c.kind for c in e.checks} == {CheckKind.ACCEPTANCE, CheckKind.LATENCY}
    assert e.estimates["chat"].value == pytest.approx(0.75)
    assert e.combined is not None and e.combined.value == pytest.approx(0.75)
    assert e.memory.last_alpha == {"chat": pytest.approx(0.75)}
    again = run(SPEC, obs(pools("chat", 0.75)), e.memory)  # the same window: no new evidence
    assert again.memory.state is State.PROBING and again.memory.pass_streak == 1
    e2 = run(SPEC, later(obs(pools("chat", 0.75))), e.memory)
    assert e2.memory.state is State.ON and e2.transition is not None
    assert e2.transition.evidence["alpha"] == pytest.approx(0.75)


def test_predicted_speedup_comes_from_the_policy() -> None:
    # K and the gate (disableBelow as the break-even) are the policy's numbers: the prediction
    # is 1 at the gate and grows with alpha above it; nothing is assumed beside them.
    gate = SPEC.acceptance.disable_below
    e = run(SPEC, obs(pools("chat", 0.75)), PROBING)
    assert e.combined is not None and e.predicted_speedup is not None
    a = e.combined.value
    assert e.predicted_speedup == pytest.approx((1 + K * a) / (1 + K * gate))
    assert e.predicted_speedup > 1.0
    stricter = make_spec(acceptance={"disableBelow": 0.7, "enableAbove": 0.72})
    e2 = run(stricter, obs(pools("chat", 0.75)), PROBING)
    assert e2.predicted_speedup is not None and e2.predicted_speedup < e.predicted_speedup
    off = run(SPEC, obs(pools("chat", None)), Memory())
    assert off.combined is None and off.predicted_speedup is None


def test_low_alpha_rolls_back_with_evidence() -> None:
    e = run(SPEC, obs(pools("chat", 0.3)), ON)
    assert e.verdict is Verdict.FAIL and e.action is Action.HOLD
    assert run(SPEC, obs(pools("chat", 0.3)), e.memory).action is Action.HOLD  # same window
    e = run(SPEC, later(obs(pools("chat", 0.3))), e.memory)
    assert e.action is Action.DISABLE and not e.target_speculation_on
    assert e.transition is not None
    ev = e.transition.evidence
    assert ev["verdict"] == "Fail" and ev["alpha"] == pytest.approx(0.3)
    assert isinstance(ev["alpha_upper"], float) and ev["alpha_upper"] < 0.55
    assert "upper bound below disableBelow" in str(ev["why"])  # the record for people
    assert e.transition.cause is Cause.POLICY_FAIL
    acc = next(c for c in e.checks if c.kind is CheckKind.ACCEPTANCE)
    assert isinstance(acc.evidence, AcceptanceEvidence) and acc.evidence.estimate is not None
    assert acc.evidence.estimate.upper < acc.evidence.disable_below


def test_latency_regression_fails_and_names_metric() -> None:
    spec = make_spec(latency={"consecutiveWindows": 1})  # one window: the check is under test
    e = run(spec, obs(pools("chat", 0.75, canary_tpot=TPOT_SLOW)), ON)
    lat = next(c for c in e.checks if c.kind is CheckKind.LATENCY)
    assert lat.verdict is Verdict.FAIL and "per token" in lat.reason
    assert isinstance(lat.evidence, LatencyEvidence)
    assert lat.evidence.metric is LatencyMetric.PER_TOKEN
    assert e.action is Action.DISABLE  # latency needs only one window here


def test_per_step_scaled_uses_measured_acceptance_length() -> None:
    spec = make_spec(latency={"metric": "perStepScaled"})
    canary_step = hist(spread(1000, 0.06, 0.09))  # ~2x the baseline per step...
    base_step = hist(spread(1000, 0.03, 0.045))
    o = Observation(
        at=T0,
        window_seconds=300,
        pools=(
            PoolObservation(
                slice="chat",
                role=Role.CANARY,
                acceptance=samples(0.6),
                itl=canary_step,
                generation_tokens=1,
            ),
            PoolObservation(slice="chat", role=Role.BASELINE, itl=base_step, generation_tokens=1),
        ),
    )
    e = run(spec, o, PROBING)
    lat = next(c for c in e.checks if c.kind is CheckKind.LATENCY)
    # ... but each step carries 1 + 5 * 0.6 = 4 tokens
    assert lat.verdict is Verdict.PASS, lat.reason
    assert isinstance(lat.evidence, LatencyEvidence)
    assert lat.evidence.tokens_per_step == pytest.approx(4.0)


def test_per_step_scaled_divides_by_tokens_per_step_not_acceptance_length() -> None:
    # Half the engine steps carry no draft (n-gram without a match): 2,000 ITL observations for
    # 1,000 drafts that accepted 3,000 tokens. A step carries 1 + 3000/2000 = 2.5 tokens, not
    # the mean acceptance length 4, so the canary is 0.024-0.036 s per token against a
    # baseline of 0.015-0.0225 s: a regression the old scaling (0.015-0.0225) hid.
    # one window decides: the per-step scaling is under test, not the streak
    spec = make_spec(latency={"metric": "perStepScaled", "consecutiveWindows": 1})
    canary_step = hist(spread(2000, 0.06, 0.09))
    base_step = hist(spread(2000, 0.015, 0.0225))
    o = Observation(
        at=T0,
        window_seconds=300,
        pools=(
            PoolObservation(
                slice="chat",
                role=Role.CANARY,
                acceptance=samples(0.6),
                itl=canary_step,
                generation_tokens=1,
            ),
            PoolObservation(slice="chat", role=Role.BASELINE, itl=base_step, generation_tokens=1),
        ),
    )
    e = run(spec, o, PROBING)
    lat = next(c for c in e.checks if c.kind is CheckKind.LATENCY)
    assert isinstance(lat.evidence, LatencyEvidence)
    assert lat.evidence.tokens_per_step == pytest.approx(2.5)
    assert lat.verdict is Verdict.FAIL, lat.reason


def test_tokens_per_step_on_the_real_capture() -> None:
    # vllm-real-metrics.txt: 277 drafts, 96 accepted, 1,181 ITL observations (decode steps).
    est = acceptance.estimate(
        [
            AcceptanceSample(drafts=277, draft_tokens=666, accepted_tokens=96, pod="a"),
        ],
        confidence=0.95,
    )
    assert est is not None
    canary = PoolObservation(
        slice="chat", role=Role.CANARY, itl=Buckets(bounds=(math.inf,), counts=(1181.0,))
    )
    assert tokens_per_step(canary, est) == pytest.approx(1 + 96 / 1181)
    assert est.mean_acceptance_length == pytest.approx(1 + 96 / 277)  # 25% more
    assert tokens_per_step(None, est) is None
    assert tokens_per_step(PoolObservation(slice="chat", role=Role.CANARY), est) is None


def test_warmup_window_is_not_judged() -> None:
    rollout = Rollout(completed_at=T0 - 200, speculation_on=True)
    e = run(SPEC, obs(pools("chat", 0.3)), ON, rollout=rollout)
    assert [c.kind for c in e.checks] == [CheckKind.WINDOW]
    assert e.verdict is Verdict.INCONCLUSIVE
    w = e.checks[0].evidence
    assert isinstance(w, WindowEvidence) and w.warmup_end is not None
    assert w.window_start < w.warmup_end
    assert e.memory.fail_streak == 0
    assert "chat" in e.estimates  # still estimated, for display


def test_rollout_in_progress_is_not_judged() -> None:
    e = run(SPEC, obs(pools("chat", 0.3)), ON, rollout=Rollout(in_progress=True, completed_at=OLD))
    assert e.verdict is Verdict.INCONCLUSIVE and e.action is Action.HOLD


def test_source_error_is_error_and_holds() -> None:
    e = run(SPEC, obs(pools("chat", 0.3), source_error="prometheus unreachable"), ON)
    assert e.verdict is Verdict.ERROR and e.action is Action.HOLD
    assert e.checks[0].kind is CheckKind.SOURCE and "unreachable" in e.checks[0].reason
    assert e.estimates == {}
    assert e.memory.error_streak == 1


def test_pool_error_is_error() -> None:
    e = run(SPEC, obs(pools("chat", 0.75, canary_error="scrape timeout")), ON)
    assert e.verdict is Verdict.ERROR
    assert any("scrape timeout" in c.reason for c in e.checks)


BAD_DATA = [
    (
        "nan-accepted",
        AcceptanceSample(drafts=10, draft_tokens=50, accepted_tokens=math.nan, pod="a"),
    ),
    (
        "negative-increment",
        AcceptanceSample(drafts=-10, draft_tokens=-50, accepted_tokens=-20, pod="a"),
    ),
    ("zero-over-zero", AcceptanceSample(drafts=0, draft_tokens=0, accepted_tokens=0, pod="a")),
    (
        "inf-drafts",
        AcceptanceSample(drafts=math.inf, draft_tokens=math.inf, accepted_tokens=1, pod="a"),
    ),
]


@pytest.mark.parametrize("bad", [b[1] for b in BAD_DATA], ids=[b[0] for b in BAD_DATA])
def test_bad_acceptance_data_never_crashes_or_flips(bad: AcceptanceSample) -> None:
    e = run(SPEC, obs(pools("chat", None, acc=(bad,))), ON)
    acc = next(c for c in e.checks if c.kind is CheckKind.ACCEPTANCE)
    assert acc.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE)
    assert e.action is Action.HOLD and e.memory.state is State.ON


def test_bad_histogram_data_is_error() -> None:
    nan_hist = Buckets(bounds=(0.1, math.inf), counts=(math.nan, 1))
    e = run(SPEC, obs(pools("chat", 0.75, canary_tpot=nan_hist)), ON)
    lat = next(c for c in e.checks if c.kind is CheckKind.LATENCY)
    assert lat.verdict is Verdict.ERROR and e.action is Action.HOLD


def test_combined_alpha_design_example_with_floors() -> None:
    o = obs(pools("chat", 0.7, tokens=7000), pools("code", 0.4, tokens=3000))
    e = run(TWO, o, PROBING)
    assert e.weights == pytest.approx({"chat": 0.7, "code": 0.3})
    # The gate reads the pooled (effective) alpha: what the fleet's drafts accept, 0.583 at
    # K = 5, inside the 0.55-0.60 band; the lesson's traffic-weighted 0.61 is shown beside it.
    pooled = (0.7 * 0.7 / 4.5 + 0.3 * 0.4 / 3) / (0.7 / 4.5 + 0.3 / 3)
    assert e.combined is not None and e.combined.value == pytest.approx(pooled, abs=1e-6)
    assert e.combined.method is EstimateMethod.POOLED
    assert acceptance.traffic_weighted(e.estimates, e.weights) == pytest.approx(0.61)
    assert [(c.kind, c.slice) for c in e.checks] == [
        (CheckKind.ACCEPTANCE, None),
        (CheckKind.FLOOR, "chat"),
        (CheckKind.FLOOR, "code"),
        (CheckKind.LATENCY, "chat"),
        (CheckKind.LATENCY, "code"),
    ]
    gate = e.checks[0]
    assert gate.verdict is Verdict.INCONCLUSIVE, gate.reason
    assert all(c.verdict is Verdict.PASS for c in e.checks[1:]), [c.reason for c in e.checks]


def test_floor_vetoes_a_slice_riding_on_the_mix() -> None:
    o = obs(pools("chat", 0.9, tokens=9000), pools("code", 0.2, tokens=1000))
    e = run(TWO, o, PROBING)
    assert e.combined is not None and e.combined.lower > 0.6  # the mix alone would pass
    floor = next(c for c in e.checks if c.kind is CheckKind.FLOOR and c.slice == "code")
    assert floor.verdict is Verdict.FAIL and e.verdict is Verdict.FAIL


def test_weights_fall_back_to_draft_tokens_without_generation_counts() -> None:
    o = obs(pools("chat", 0.7, tokens=0), pools("code", 0.4, tokens=0))
    e = run(TWO, o, PROBING)
    # shares of the tokens draft steps made (drafts + accepted): the pooled alpha is then the
    # plain ratio of the counters
    assert e.weights == pytest.approx({"chat": 4500 / 7500, "code": 3000 / 7500})
    assert e.combined is not None
    assert e.combined.value == pytest.approx((0.7 * 5000 + 0.4 * 5000) / 10_000)


def test_per_slice_evaluates_only_the_given_slice() -> None:
    o = obs(pools("chat", 0.75), pools("code", 0.3))
    e = run(PER_SLICE, o, ON, slices=["code"])
    assert [(c.kind, c.slice) for c in e.checks] == [
        (CheckKind.ACCEPTANCE, "code"),
        (CheckKind.LATENCY, "code"),
    ]
    assert set(e.estimates) == {"code"}
    assert e.verdict is Verdict.FAIL
    with pytest.raises(ValueError, match="unknown slices"):
        run(PER_SLICE, o, ON, slices=["nope"])


def rolled_back(*, ago: float, share: float) -> Memory:
    """Rolled back on chat (0.72) and code (0.35) `ago` seconds before T0, cooling down, with
    `share` of the traffic on the good slice at the rollback."""
    return Memory(
        state=State.ROLLED_BACK,
        since=T0 - ago,
        last_flip_at=T0 - ago,
        cooldown_until=T0 + 5000,
        last_alpha={"chat": 0.72, "code": 0.35},
        good_share_at_rollback=share,
    )


def test_rolled_back_small_mix_shift_keeps_cooling_down() -> None:
    m = rolled_back(ago=700, share=0.3)
    # speculation is off: no spec series; chat (the only slice whose last alpha cleared
    # enableAbove) grew from 30% to 40% of the traffic: less than reprobeMixShift 0.15
    e = run(TWO, obs(pools("chat", None, tokens=4000), pools("code", None, tokens=6000)), m)
    assert e.action is Action.HOLD and e.transition is None
    assert e.memory.cooldown_until > T0 and e.memory.state is State.ROLLED_BACK
    assert e.weights["chat"] == pytest.approx(0.4)
    assert e.verdict is Verdict.INCONCLUSIVE


def test_rolled_back_reprobes_early_when_mix_moves_to_good_slices() -> None:
    m = rolled_back(ago=700, share=0.3)
    e = run(TWO, obs(pools("chat", None, tokens=5000), pools("code", None, tokens=5000)), m)
    assert e.action is Action.ENABLE
    assert e.transition is not None and e.transition.cause is Cause.EARLY_REPROBE
    assert e.memory.last_alpha == {"chat": 0.72, "code": 0.35}  # kept while off


def test_the_share_that_failed_is_read_for_one_window_after_the_rollback() -> None:
    # Rolled back 100 s ago on a window that still held traffic from before the shift (good
    # share 0.5); the traffic that failed (10% on the good slice) is read within one window
    # after it and becomes the reference, so a return to 45% is a shift of 0.35, not -0.05.
    m = rolled_back(ago=100, share=0.5)
    e = run(TWO, obs(pools("chat", None, tokens=1000), pools("code", None, tokens=9000)), m)
    assert e.action is Action.HOLD
    assert e.memory.good_share_at_rollback == pytest.approx(0.1)
    back = dataclasses.replace(
        obs(pools("chat", None, tokens=4500), pools("code", None, tokens=5500)), at=T0 + 600
    )
    e = evaluate(TWO, back, e.memory, SETTLED, now=back.at)
    assert e.action is Action.ENABLE
    assert e.transition is not None and e.transition.cause is Cause.EARLY_REPROBE


def test_a_window_never_judged_teaches_no_alpha() -> None:
    # After a rollback the old pod's last requests drain through the window; the ones that
    # finish last accept worst. What it reads must not replace the alpha the slice was judged
    # at, or the early re-probe on the mix loses the good slice it needs.
    m = rolled_back(ago=100, share=0.1)
    draining = obs(pools("chat", 0.40, tokens=1000), pools("code", 0.35, tokens=9000))
    e = run(TWO, draining, m)
    assert e.estimates["chat"].value == pytest.approx(0.40, abs=0.02)  # it is read and shown
    assert e.memory.last_alpha == {"chat": 0.72, "code": 0.35}
    assert e.memory.spread == m.spread
    # the same window while speculating and past the warm-up is judged, and learned from
    e = run(TWO, draining, ON)
    assert e.memory.last_alpha["chat"] == pytest.approx(0.40, abs=0.02)


def test_the_share_at_rollback_is_not_lowered_past_one_window() -> None:
    # 700 s after the rollback the traffic read is no longer the traffic that failed: a slow
    # drift (a daily cycle) must not lower the reference the re-probe is measured from.
    m = rolled_back(ago=700, share=0.3)
    e = run(TWO, obs(pools("chat", None, tokens=1000), pools("code", None, tokens=9000)), m)
    assert e.action is Action.HOLD
    assert e.memory.good_share_at_rollback == pytest.approx(0.3)


def test_manual_command_passes_through() -> None:
    e = run(SPEC, obs(pools("chat", 0.75)), ON, command=Command.PAUSE)
    assert e.memory.state is State.PAUSED
    assert e.transition is not None and e.transition.cause is Cause.MANUAL
    assert e.transition.command is Command.PAUSE
    assert e.target_speculation_on


def test_every_check_has_reason_and_json_safe_evidence() -> None:
    for o, m in [
        (obs(pools("chat", 0.7, tokens=7000), pools("code", 0.4, tokens=3000)), PROBING),
        (obs(pools("chat", None), pools("code", None)), Memory()),
    ]:
        e = run(TWO, o, m)
        for c in e.checks:
            assert c.reason
            for v in c.flat_evidence().values():
                assert isinstance(v, str) or math.isfinite(v)


# ---------------------------------------------------------------- garbage in, verdicts out

floats = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.floats(0, 1e6)


@given(
    d=floats,
    t=floats,
    a=floats,
    counts=st.lists(floats, min_size=2, max_size=2),
    tokens=floats,
)
def test_garbage_never_crashes(
    d: float, t: float, a: float, counts: list[float], tokens: float
) -> None:
    sample = AcceptanceSample(drafts=d, draft_tokens=t, accepted_tokens=a, pod="x")
    h = Buckets(bounds=(0.1, math.inf), counts=(counts[0], counts[1]))
    o = Observation(
        at=T0,
        window_seconds=300,
        pools=(
            PoolObservation(
                slice="chat",
                role=Role.CANARY,
                acceptance=(sample,) * 10,
                tpot=h,
                generation_tokens=tokens,
            ),
            PoolObservation(slice="chat", role=Role.BASELINE, tpot=h, generation_tokens=tokens),
        ),
    )
    for m in (ON, PROBING, Memory()):
        e = run(SPEC, o, m)
        assert e.verdict in Verdict
        bad = any(not math.isfinite(x) or x < 0 for x in (d, t, a))
        if bad and m is not Memory():
            acc = next((c for c in e.checks if c.kind is CheckKind.ACCEPTANCE), None)
            if acc is not None and m.state is not State.OFF:
                assert acc.verdict is Verdict.ERROR


@given(
    completed_ago=st.floats(0, 1000),
    flip_ago=st.none() | st.floats(0, 1000),
    alpha=st.sampled_from([0.2, 0.75]),
    state=st.sampled_from([State.PROBING, State.ON]),
)
def test_warmup_data_is_never_judged(
    completed_ago: float, flip_ago: float | None, alpha: float, state: State
) -> None:
    m = Memory(
        state=state,
        since=OLD,
        last_flip_at=OLD if flip_ago is None else T0 - flip_ago,
        pass_streak=5,
        fail_streak=5,
        probe_deadline=T0 + 900,
    )
    rollout = Rollout(completed_at=T0 - completed_ago, speculation_on=True)
    e = run(SPEC, obs(pools("chat", alpha)), m, rollout=rollout)
    warm_end = max(T0 - completed_ago, m.last_flip_at or OLD) + SPEC.timing.warmup_seconds
    if abs(warm_end - (T0 - 300)) < 1e-6:
        return  # on the boundary: either reading is right
    if warm_end > T0 - 300:
        assert [c.kind for c in e.checks] == [CheckKind.WINDOW]
        assert e.action is Action.HOLD and e.memory.state is state
        # not judged: no evidence either way, so no streak moves (and nothing flips)
        assert e.memory.pass_streak == 5 and e.memory.fail_streak == 5
    else:
        assert any(c.kind is CheckKind.ACCEPTANCE for c in e.checks)
