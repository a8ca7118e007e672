"""The early re-probe on a return of the traffic's shape (core/shape.py, core/reprobe.py).

Shapes are vLLM's output-length histograms (1-2-5 buckets): chat turns with a median of 512
tokens, code answers 1.56x longer, log-normal with sigma 1, drawn request by request from a
seeded generator. A re-probe must fire when the shape the failure came with is gone, back
toward the shape that paid; never on sampling noise, never when the failure came on an
unchanged shape, never past the dwell or the flip budget, and only after the first rollback
in a row."""

from __future__ import annotations

import math
import random
from collections import Counter
from statistics import NormalDist
from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import machine, reprobe, shape
from alphagate.core.model import (
    Action,
    Buckets,
    Cause,
    CheckKind,
    CheckResult,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
    TrafficShape,
    Verdict,
)
from alphagate.kube.status import decode_memories, encode_memories
from specs import MACHINE_SPEC, spec_from

BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
CHAT, CODE = 512.0, 800.0
SPEC: SpeculativeCanarySpec = spec_from(
    MACHINE_SPEC, timing={"cooldown": {"initialSeconds": 43200, "factor": 2, "maxSeconds": 86400}}
)
T0 = 1_000_000.0
ROLLED = Rollout(completed_at=T0 - 50_000, speculation_on=False)


def _cdf(length: float, code_share: float, median_scale: float = 1.0) -> float:
    """P(output <= length) of the chat/code mixture (log-normal, sigma 1)."""
    z = NormalDist()
    return (1 - code_share) * z.cdf(math.log(length / (CHAT * median_scale))) + code_share * z.cdf(
        math.log(length / (CODE * median_scale))
    )


def draw(
    rng: random.Random, n: int, code_share: float, median_scale: float = 1.0
) -> tuple[float, ...]:
    """Requests per bucket (the last above 5000) of n requests, a share of them code."""
    cum = [_cdf(b, code_share, median_scale) for b in BOUNDS] + [1.0]
    picks = Counter(rng.choices(range(len(cum)), cum_weights=cum, k=n))
    return tuple(float(picks.get(i, 0)) for i in range(len(cum)))


def traffic(
    seed: int, code_share: float, alpha: float | None = None, n: int = 3000
) -> TrafficShape:
    return TrafficShape(bounds=BOUNDS, counts=draw(random.Random(seed), n, code_share), alpha=alpha)


def rolled_back(paid: TrafficShape | None, failed: TrafficShape | None, **kw: Any) -> Memory:
    """Rolled back 700 s ago (past the dwell), cooling down for hours, first rollback."""
    fields: dict[str, Any] = {
        "state": State.ROLLED_BACK,
        "since": T0 - 700,
        "last_flip_at": T0 - 700,
        "flip_times": (T0 - 700,),
        "cooldown_until": T0 + 40_000,
        "cooldown_index": 1,
        "shape_paid": paid,
        "shape_failed": failed,
    }
    fields.update(kw)
    return Memory(**fields)


def off_step(m: Memory, now_shape: TrafficShape | None, now: float = T0) -> machine.Decision:
    return machine.step(
        m, Verdict.INCONCLUSIVE, now=now, spec=SPEC, rollout=ROLLED, shape=now_shape
    )


# ---------------------------------------------------------------- the statistics


def test_shape_of_merges_every_pool_into_per_bucket_counts() -> None:
    bounds = (*BOUNDS, math.inf)
    canary = Buckets(bounds, tuple(float(10 * (i + 1)) for i in range(len(bounds))))
    baseline = Buckets(bounds, tuple(float(20 * (i + 1)) for i in range(len(bounds))))
    obs = Observation(
        at=T0,
        window_seconds=300,
        pools=(
            PoolObservation("chat", Role.CANARY, output_lengths=canary),
            PoolObservation("chat", Role.BASELINE, output_lengths=baseline),
            PoolObservation("code", Role.BASELINE, output_lengths=baseline),  # not this unit's
        ),
    )
    got = shape.of(obs, ["chat"], 0.61)
    assert got is not None
    assert got.bounds == BOUNDS
    assert got.counts == tuple(30.0 for _ in bounds)  # cumulative 30, 60, ... -> 30 each
    assert got.alpha == 0.61
    assert shape.of(obs, ["chat"], math.nan) is not None
    assert shape.of(obs, ["chat"], math.nan).alpha is None  # type: ignore[union-attr]
    few = Observation(
        at=T0,
        window_seconds=300,
        pools=(PoolObservation("chat", Role.CANARY, output_lengths=Buckets(bounds, (0.0,) * 13)),),
    )
    assert shape.of(few, ["chat"], 0.6) is None  # no requests: no evidence
    other = Buckets((10.0, math.inf), (50.0, 400.0))
    mixed = Observation(
        at=T0,
        window_seconds=300,
        pools=(
            PoolObservation("chat", Role.CANARY, output_lengths=canary),
            PoolObservation("chat", Role.BASELINE, output_lengths=other),
        ),
    )
    assert shape.of(mixed, ["chat"], 0.6) is None  # layouts differ


def test_a_return_along_the_line_it_failed_on_is_found() -> None:
    paid, failed = traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49)
    back = shape.returned(paid, failed, traffic(3, 0.0), enable_above=0.60)
    assert back.finding is shape.Finding.RETURNED
    assert back.shift >= shape.MIN_SHIFT
    assert 0.7 < back.back < 1.3
    assert back.off_axis < shape.MAX_OFF_AXIS
    assert back.predicted_alpha >= 0.60
    still = shape.returned(paid, failed, traffic(4, 0.7), enable_above=0.60)
    assert still.finding is shape.Finding.NOT_BACK
    assert abs(still.back) < 0.3


def test_part_way_back_waits_for_the_alpha_the_mix_predicts() -> None:
    """Two thirds of the way back: enough when speculation paid at 0.75 (the mixture line
    predicts ~0.67 now), not when it paid at 0.62 (~0.58, below enableAbove)."""
    failed, now = traffic(2, 0.7, 0.50, n=20_000), traffic(5, 0.25, None, n=20_000)
    high = shape.returned(traffic(1, 0.0, 0.75, n=20_000), failed, now, enable_above=0.60)
    low = shape.returned(traffic(1, 0.0, 0.62, n=20_000), failed, now, enable_above=0.60)
    assert 0.5 < high.back < 0.8 and high.back == low.back
    assert high.finding is shape.Finding.RETURNED and high.predicted_alpha >= 0.60
    assert low.finding is shape.Finding.NOT_BACK and low.predicted_alpha < 0.60


def test_new_traffic_elsewhere_is_not_a_return() -> None:
    paid, failed = traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49)
    # summaries of ~40 tokens: neither the chat mix nor the code mix
    short = TrafficShape(bounds=BOUNDS, counts=draw(random.Random(6), 3000, 0.0, 40 / CHAT))
    got = shape.returned(paid, failed, short, enable_above=0.60)
    assert got.finding is shape.Finding.ELSEWHERE


@pytest.mark.parametrize("n", [300, 1500])
def test_noise_never_reprobes(n: int) -> None:
    """100 seeds each: paid, failed and now drawn from one traffic (alpha fell on an unchanged
    shape: only time may tell), and a real shift whose traffic has not come back (now drawn
    like the failed window). Neither ever fires."""
    same = [
        s
        for s in range(100)
        if shape.returned(
            traffic(3 * s, 0.3, 0.70, n),
            traffic(3 * s + 1, 0.3, 0.49, n),
            traffic(3 * s + 2, 0.3, None, n),
            enable_above=0.60,
        ).fires
    ]
    stayed = [
        s
        for s in range(100)
        if shape.returned(
            traffic(3 * s, 0.0, 0.70, n),
            traffic(3 * s + 1, 0.7, 0.49, n),
            traffic(3 * s + 2, 0.7, None, n),
            enable_above=0.60,
        ).fires
    ]
    assert same == [] and stayed == []


def test_too_few_requests_are_no_evidence() -> None:
    paid, failed = traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49)
    got = shape.returned(paid, failed, traffic(3, 0.0, None, n=150), enable_above=0.60)
    assert got.finding is shape.Finding.NO_SHAPES
    assert shape.returned(None, failed, paid, enable_above=0.6).finding is shape.Finding.NO_SHAPES


# ---------------------------------------------------------------- the machine


def test_shape_return_reprobes_early_with_typed_evidence() -> None:
    m = rolled_back(traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49))
    wait = off_step(m, traffic(3, 0.7))
    assert wait.action is Action.HOLD and wait.memory.state is State.ROLLED_BACK
    go = off_step(m, traffic(4, 0.0))
    assert go.action is Action.ENABLE
    assert go.memory.state is State.PROBING
    assert go.transition is not None and go.transition.cause is Cause.EARLY_REPROBE
    ev = go.transition.evidence
    assert ev["early_basis"] == reprobe.Basis.SHAPE.value
    assert ev["shape"] == shape.Finding.RETURNED.value
    assert isinstance(ev["shape_back"], float) and ev["shape_back"] > 0.5
    assert go.memory.flip_times[-1] == T0  # a flip: it spends the budget


def test_no_reprobe_when_the_shape_did_not_change() -> None:
    """The failure came on the same shape (a drift, a new model): the same shape now says
    nothing, however long the cooldown."""
    m = rolled_back(traffic(1, 0.0, 0.70), traffic(2, 0.0, 0.45))
    for i in range(20):
        d = off_step(m, traffic(100 + i, 0.0), now=T0 + 30 * i)
        assert d.action is Action.HOLD
        assert d.memory.state is State.ROLLED_BACK


def test_shape_reprobe_obeys_dwell_and_flip_budget() -> None:
    paid, failed, back = traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49), traffic(3, 0.0)
    early = rolled_back(paid, failed, last_flip_at=T0 - 100, flip_times=(T0 - 100,))
    assert off_step(early, back).action is Action.HOLD  # minimum dwell 600 s
    busy = rolled_back(paid, failed, flip_times=(T0 - 3000, T0 - 2000, T0 - 700))
    d = off_step(busy, back)
    assert d.action is Action.HOLD  # 3 flips in the hour: no room for an enable and rollback
    assert d.memory.state is State.ROLLED_BACK


def test_only_the_first_rollback_in_a_row_is_undone_by_a_shape() -> None:
    paid, failed = traffic(1, 0.0, 0.70), traffic(2, 0.7, 0.49)
    second = rolled_back(paid, failed, cooldown_index=2)
    assert off_step(second, traffic(3, 0.0)).action is Action.HOLD


def test_shape_returns_alpha_does_not_one_reprobe_then_the_cooldown() -> None:
    """The whole loop on the machine: On with chat, rolled back on code, the chat shape returns
    (early re-probe), but alpha stays low: it rolls back again, and the next return of the
    shape waits for the cooldown."""
    spec = SPEC
    on = Rollout(completed_at=T0 - 50_000, speculation_on=True)
    m = Memory(state=State.ON, since=T0 - 40_000, last_flip_at=T0 - 40_000)
    t = T0
    m = reprobe.remember_paid(m, [passed(CheckKind.ACCEPTANCE)], traffic(1, 0.0, 0.70))
    assert m.shape_paid is not None and m.shape_paid.alpha == 0.70
    for i in range(2):  # two disjoint failing windows on the code mix
        t += 300
        shp = traffic(10 + i, 0.7, 0.49)
        d = machine.step(m, Verdict.FAIL, now=t, spec=spec, rollout=on, shape=shp)
        m = d.memory
    assert m.state is State.ROLLED_BACK and m.shape_failed is not None
    assert m.shape_failed.alpha == 0.49
    assert m.shape_paid is not None and m.shape_paid.alpha == 0.70  # a FAIL never records it
    off = Rollout(completed_at=t + 150, speculation_on=False)
    t += 900  # past the dwell
    d = machine.step(m, Verdict.INCONCLUSIVE, now=t, spec=spec, rollout=off, shape=traffic(20, 0.0))
    assert d.transition is not None and d.transition.cause is Cause.EARLY_REPROBE
    m = d.memory
    probing = Rollout(completed_at=t + 150, speculation_on=True)
    t += 300  # the rollout and its warm-up
    for i in range(2):  # alpha did not come back with the shape
        t += 300
        shp = traffic(30 + i, 0.0, 0.48)
        d = machine.step(m, Verdict.FAIL, now=t, spec=spec, rollout=probing, shape=shp)
        m = d.memory
    assert m.state is State.ROLLED_BACK and m.cooldown_index == 2
    off = Rollout(completed_at=t + 150, speculation_on=False)
    for i in range(40):  # code, then chat again, for 20 minutes: the cooldown rules now
        t += 30
        shp = traffic(40 + i, 0.7 if i < 20 else 0.0)
        d = machine.step(m, Verdict.INCONCLUSIVE, now=t, spec=spec, rollout=off, shape=shp)
        assert d.action is Action.HOLD
        m = d.memory


def passed(kind: CheckKind, verdict: Verdict = Verdict.PASS) -> CheckResult:
    return CheckResult(kind, verdict, "")


def test_the_paid_shape_is_the_one_alpha_cleared_the_gate_on() -> None:
    """Recorded when every acceptance check passed while speculating, whatever latency said
    (a latency check still undecided says nothing about what is generated); never on a
    failing or undecided alpha, a failing floor, or while off."""
    shp = traffic(1, 0.0, 0.70)
    on = Memory(state=State.ON)
    undecided_latency = [
        passed(CheckKind.ACCEPTANCE),
        passed(CheckKind.LATENCY, Verdict.INCONCLUSIVE),
    ]
    assert reprobe.remember_paid(on, undecided_latency, shp).shape_paid == shp
    for results in (
        [passed(CheckKind.ACCEPTANCE, Verdict.INCONCLUSIVE)],
        [passed(CheckKind.ACCEPTANCE, Verdict.FAIL)],
        [passed(CheckKind.ACCEPTANCE), passed(CheckKind.FLOOR, Verdict.FAIL)],
        [passed(CheckKind.LATENCY)],
    ):
        assert reprobe.remember_paid(on, results, shp).shape_paid is None
    off = Memory(state=State.ROLLED_BACK)
    assert reprobe.remember_paid(off, [passed(CheckKind.ACCEPTANCE)], shp).shape_paid is None


def test_memory_with_shapes_survives_the_record() -> None:
    m = rolled_back(traffic(1, 0.0, 0.70), traffic(2, 0.7, None))
    back = decode_memories(encode_memories({"": m}))[""]
    assert back == m
    assert back.shape_failed is not None and back.shape_failed.alpha is None
