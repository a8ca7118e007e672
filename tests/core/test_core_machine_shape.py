"""The early re-probe on a return of the traffic's shape (core/shape.py, core/reprobe.py).

Shapes are vLLM's output-length histograms (1-2-5 buckets): chat turns with a median of 512
tokens, code answers 1.56x longer, log-normal with sigma 1, drawn request by request from a
seeded generator, with the code share of each window wandering by a few points as real
traffic does. A re-probe must fire when the shape the failure came with is gone, back toward
the shape that paid, for several windows in a row; never on the window-to-window wander of
the shares, never when alpha did not move with the shape, never past the dwell or the flip
budget, only after the first rollback in a row, and once; its failure keeps the cooldown."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from statistics import NormalDist
from typing import Any

import pytest

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import machine, moves, reprobe, shape
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
    ShapeMemory,
    State,
    TrafficShape,
    Verdict,
)
from alphagate.kube.status.resource import decode_memories, encode_memories
from specs import MACHINE_SPEC, spec_from

BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
CHAT, CODE = 512.0, 800.0
# the shipped policies' cooldown (12 h, 24 h): the shape re-probe is what comes sooner
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


def history(
    seed: int,
    windows: list[tuple[float, float | None, str]],
    *,
    wander: float = 0.04,
    n: int = 3000,
) -> ShapeMemory:
    """Recent windows, 300 s apart, ending at T0 - 700: (code share, alpha, "paid"/"failed"/""),
    each window's share wandering by N(0, wander) as real traffic's does."""
    rng = random.Random(seed)
    track = ShapeMemory()
    at = T0 - 700 - 300 * len(windows)
    for share, alpha, kind in windows:
        at += 300
        wandered = min(1.0, max(0.0, share + rng.gauss(0.0, wander)))
        shp = TrafficShape(bounds=BOUNDS, counts=draw(rng, n, wandered), alpha=alpha)
        track = shape.record(track, shp, at=at, paid=kind == "paid", failed=kind == "failed")
    return track


def chat_then_code(seed: int, paid: int = 10, **kw: Any) -> ShapeMemory:
    """Paying windows of chat (alpha ~0.70), then two failing ones of 70% code (~0.49)."""
    rng = random.Random(seed + 7)
    rows = [(0.0, 0.70 + rng.gauss(0, 0.01), "paid") for _ in range(paid)]
    rows += [(0.7, 0.49 + rng.gauss(0, 0.01), "failed") for _ in range(2)]
    return history(seed, rows, **kw)


def rolled_back(track: ShapeMemory, **kw: Any) -> Memory:
    """Rolled back 700 s ago on alpha (past the dwell), cooling down for hours, first
    rollback; the axis learned from `track`."""
    axis = shape.learn(track).axis
    fields: dict[str, Any] = {
        "state": State.ROLLED_BACK,
        "since": T0 - 700,
        "last_flip_at": T0 - 700,
        "flip_times": (T0 - 700,),
        "cooldown_until": T0 + 40_000,
        "cooldown_index": 1,
        "shape": track.model_copy(update={"axis": axis, "last_end": T0 - 700}),
    }
    fields.update(kw)
    return Memory(**fields)


def cooling(m: Memory, seed: int, code_share: float, now: float) -> moves.Decision:
    """One evaluation of a whole window while off: the shape is recorded, then the machine
    steps (as `evaluate` does)."""
    shp = traffic(seed, code_share)
    m = reprobe.observe(m, SPEC, [], shp, start=now - 300, now=now)
    return machine.step(
        machine.StepInput(m, Verdict.INCONCLUSIVE, now=now, spec=SPEC, rollout=ROLLED, shape=shp)
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


def test_a_real_shift_learns_its_line_noise_and_relation() -> None:
    learned = shape.learn(chat_then_code(1))
    assert learned.finding is shape.Finding.RETURNED and learned.axis is not None
    axis = learned.axis
    assert axis.shift >= shape.MIN_SHIFT
    assert 0 < axis.noise < 0.2  # a 4-point wander against a 70-point shift
    assert axis.slope == pytest.approx(0.21, abs=0.03) and axis.slope_t >= shape.T_RELATION
    assert axis.intercept == pytest.approx(0.49, abs=0.02)
    back = shape.returned(axis, traffic(3, 0.0), enable_above=0.60)
    assert back.finding is shape.Finding.RETURNED and 0.7 < back.back < 1.3
    assert back.predicted_alpha >= 0.60 and back.off_axis < shape.MAX_OFF_AXIS
    still = shape.returned(axis, traffic(4, 0.7), enable_above=0.60)
    assert still.finding is shape.Finding.NOT_BACK and abs(still.back) < 0.3
    # summaries of ~40 tokens: neither the chat mix nor the code mix
    short = TrafficShape(bounds=BOUNDS, counts=draw(random.Random(6), 3000, 0.0, 40 / CHAT))
    assert shape.returned(axis, short, enable_above=0.60).finding is shape.Finding.ELSEWHERE


def test_part_way_back_waits_for_the_alpha_the_relation_predicts() -> None:
    """Two thirds of the way back: enough when speculation paid at 0.75 (the relation predicts
    ~0.67 there), not when it paid at 0.62 (~0.58, below enableAbove)."""
    rows_high = [(0.0, 0.75, "paid")] * 8 + [(0.7, 0.50, "failed")] * 2
    rows_low = [(0.0, 0.62, "paid")] * 8 + [(0.7, 0.50, "failed")] * 2
    now = traffic(5, 0.25, n=20_000)
    high = shape.learn(history(1, rows_high, n=20_000)).axis
    low = shape.learn(history(1, rows_low, n=20_000)).axis
    assert high is not None and low is not None
    h = shape.returned(high, now, enable_above=0.60)
    lo = shape.returned(low, now, enable_above=0.60)
    assert 0.5 < h.back < 0.85 and h.back == pytest.approx(lo.back)
    assert h.finding is shape.Finding.RETURNED and h.predicted_alpha >= 0.60
    assert lo.finding is shape.Finding.NOT_BACK and lo.predicted_alpha < 0.60


def test_a_shift_within_the_window_to_window_wander_is_no_shift() -> None:
    """100 seeds of one traffic whose code share wanders by 4 points a window (far beyond
    multinomial noise at 3,000 requests), alpha falling for another reason in the last two
    windows: the failed and paid shapes differ by the wander only, so the shape gets no say
    (a multinomial chi-square called most of these a shift)."""
    learned = [
        shape.learn(history(s, [(0.3, 0.70, "paid")] * 10 + [(0.3, 0.49, "failed")] * 2))
        for s in range(100)
    ]
    axes = [x for x in learned if x.axis is not None]
    assert len(axes) <= 2
    assert Counter(x.finding for x in learned)[shape.Finding.NO_SHIFT] >= 95


def test_alpha_that_did_not_move_with_the_shape_gives_it_no_say() -> None:
    """The mix moved to code while alpha still paid there, then alpha fell on code: the shape
    did not carry alpha, so its return says nothing."""
    rows = [(0.0, 0.70, "paid")] * 6 + [(0.7, 0.70, "paid")] * 6 + [(0.7, 0.48, "failed")] * 2
    learned = shape.learn(history(2, rows))
    assert learned.finding is shape.Finding.NO_RELATION and learned.axis is None


def test_too_few_windows_are_no_evidence() -> None:
    one_paid = history(1, [(0.0, 0.70, "paid"), (0.7, 0.49, "failed")] + [(0.7, None, "")] * 4)
    assert shape.learn(one_paid).finding is shape.Finding.NO_SHAPES
    assert shape.learn(ShapeMemory()).finding is shape.Finding.NO_SHAPES
    axis = shape.learn(chat_then_code(1)).axis
    assert axis is not None
    few = shape.returned(axis, traffic(3, 0.0, n=150), enable_above=0.60)
    assert few.finding is shape.Finding.NO_SHAPES


def test_the_record_keeps_recent_whole_disjoint_windows() -> None:
    track = chat_then_code(1, paid=30)
    assert len(track.recent) == shape.MAX_RECENT
    assert [w.failed for w in track.recent[-2:]] == [True, True]
    assert all(len(w.shares) == len(BOUNDS) + 1 for w in track.recent)
    # a new bucket layout starts over
    other = TrafficShape(bounds=BOUNDS[:-1], counts=(1.0,) * len(BOUNDS) + (200.0,))
    assert len(shape.record(track, other, at=T0, paid=False, failed=False).recent) == 1
    # observe: a window that overlaps the last one recorded, or is not whole, adds nothing
    m = Memory(state=State.ON, shape=track.model_copy(update={"last_end": T0}))
    shp = traffic(9, 0.0, 0.70)
    passing = [passed(CheckKind.ACCEPTANCE)]
    assert reprobe.observe(m, SPEC, passing, shp, start=T0 - 270, now=T0 + 30) == m
    assert reprobe.observe(m, SPEC, passing, shp, start=T0, now=T0 + 200) == m
    got = reprobe.observe(m, SPEC, passing, shp, start=T0, now=T0 + 300).shape.recent[-1]
    assert (got.at, got.alpha, got.paid, got.failed) == (T0 + 300, 0.70, True, False)


def passed(kind: CheckKind, verdict: Verdict = Verdict.PASS) -> CheckResult:
    return CheckResult(kind, verdict, "")


def test_a_window_paid_when_its_alpha_passed_whatever_latency_said() -> None:
    """Paid when every acceptance check passed while speculating (a latency check still
    undecided says nothing about what is generated); failed on an acceptance or floor FAIL;
    neither, and without an alpha, in a warm-up or while off."""
    shp = traffic(1, 0.0, 0.70)
    on = Memory(state=State.ON)

    def last(m: Memory, results: list[CheckResult]) -> tuple[bool, bool, float | None]:
        w = reprobe.observe(m, SPEC, results, shp, start=T0 - 300, now=T0).shape.recent[-1]
        return w.paid, w.failed, w.alpha

    undecided = passed(CheckKind.LATENCY, Verdict.INCONCLUSIVE)
    assert last(on, [passed(CheckKind.ACCEPTANCE), undecided]) == (True, False, 0.70)
    assert last(on, [passed(CheckKind.ACCEPTANCE, Verdict.INCONCLUSIVE)]) == (False, False, 0.70)
    assert last(on, [passed(CheckKind.ACCEPTANCE, Verdict.FAIL)]) == (False, True, 0.70)
    floor = [passed(CheckKind.ACCEPTANCE), passed(CheckKind.FLOOR, Verdict.FAIL)]
    assert last(on, floor) == (True, True, 0.70)
    assert last(on, [passed(CheckKind.WINDOW, Verdict.INCONCLUSIVE)]) == (False, False, None)
    off = Memory(state=State.ROLLED_BACK)
    assert last(off, [passed(CheckKind.ACCEPTANCE)]) == (False, False, None)


# ---------------------------------------------------------------- the machine


def test_a_return_reprobes_after_two_windows_in_a_row_with_typed_evidence() -> None:
    m = rolled_back(chat_then_code(1))
    assert m.shape.axis is not None
    d = cooling(m, 3, 0.7, T0)  # still code
    d = cooling(d.memory, 4, 0.0, T0 + 300)  # one window back: not yet
    assert d.action is Action.HOLD and d.memory.shape.returned == 1
    d = cooling(d.memory, 5, 0.7, T0 + 600)  # code again: the count starts over
    assert d.action is Action.HOLD and d.memory.shape.returned == 0
    d = cooling(d.memory, 6, 0.0, T0 + 900)
    go = cooling(d.memory, 7, 0.0, T0 + 1200)
    assert go.action is Action.ENABLE and go.memory.state is State.PROBING
    assert go.transition is not None and go.transition.cause is Cause.EARLY_REPROBE
    ev = go.transition.evidence
    assert ev["early_basis"] == reprobe.Basis.SHAPE.value
    assert ev["shape"] == shape.Finding.RETURNED.value
    assert ev["shape_returned_windows"] == 2.0
    assert isinstance(ev["shape_back"], float) and ev["shape_back"] > 0.5
    assert go.memory.flip_times[-1] == T0 + 1200  # a flip: it spends the budget


def test_no_reprobe_when_the_shape_did_not_change() -> None:
    """The failure came on the same shape (a drift, a new model): no axis, however long the
    cooldown and whatever the shape does."""
    m = rolled_back(history(1, [(0.0, 0.70, "paid")] * 10 + [(0.0, 0.45, "failed")] * 2))
    assert m.shape.axis is None
    for i in range(20):
        d = cooling(m, 100 + i, 0.7 if i % 2 else 0.0, T0 + 300 * i)
        assert d.action is Action.HOLD and d.memory.state is State.ROLLED_BACK
        m = d.memory


def test_shape_reprobe_obeys_dwell_and_flip_budget() -> None:
    track = chat_then_code(1)
    for kw in (
        {"last_flip_at": T0 - 100, "flip_times": (T0 - 100,)},  # minimum dwell 600 s
        {"flip_times": (T0 - 3000, T0 - 2000, T0 - 700)},  # no room for an enable + rollback
        {"cooldown_index": 2},  # only the first rollback in a row
    ):
        m = rolled_back(track, **kw)
        m = m.model_copy(update={"shape": m.shape.model_copy(update={"returned": 1})})
        d = cooling(m, 3, 0.0, T0 + 300)
        assert d.action is Action.HOLD and d.memory.state is State.ROLLED_BACK


def test_the_rollback_learns_the_axis_only_on_alpha() -> None:
    on = Rollout(completed_at=T0 - 50_000, speculation_on=True)
    m = Memory(
        state=State.ON,
        since=T0 - 40_000,
        last_flip_at=T0 - 40_000,
        fail_streak=1,
        streak_end=T0 - 300,
        shape=chat_then_code(1),
    )
    alpha = machine.step(
        machine.StepInput(m, Verdict.FAIL, now=T0, spec=SPEC, rollout=on, fail_kinds=[ACC])
    )
    assert alpha.memory.state is State.ROLLED_BACK and alpha.memory.shape.axis is not None
    late = machine.step(
        machine.StepInput(m, Verdict.FAIL, now=T0, spec=SPEC, rollout=on, fail_kinds=[LAT])
    )
    assert late.memory.state is State.ROLLED_BACK and late.memory.shape.axis is None


ACC, LAT = CheckKind.ACCEPTANCE, CheckKind.LATENCY


def test_a_failed_early_reprobe_keeps_the_cooldown_and_is_not_repeated() -> None:
    """The whole loop: rolled back on code, the chat shape returns (early re-probe), alpha
    does not come back: the rollback keeps the cooldown the re-probe interrupted (no doubling)
    and the next return waits for it; a confirmed probe later makes the shape count again."""
    m = rolled_back(chat_then_code(1))
    t = T0 + 900
    m = cooling(m, 20, 0.0, t).memory
    d = cooling(m, 21, 0.0, t + 300)
    assert d.transition is not None and d.transition.cause is Cause.EARLY_REPROBE
    m, t = d.memory, t + 300
    probing = Rollout(completed_at=t + 60, speculation_on=True)
    t2 = t + 480  # the first judged window after the warm-up fails: alpha did not return
    d = machine.step(
        machine.StepInput(m, Verdict.FAIL, now=t2, spec=SPEC, rollout=probing, fail_kinds=[ACC])
    )
    m = d.memory
    assert m.state is State.ROLLED_BACK  # one window ends an early re-probe
    assert m.cooldown_until == T0 + 40_000 and m.cooldown_index == 1  # kept, not doubled
    assert m.shape.spent and "interrupted stands" in d.reason
    off = Rollout(completed_at=t2 + 60, speculation_on=False)
    for i in range(6):  # chat again for half an hour: no second early look
        t2 += 300
        shp = traffic(40 + i, 0.0)
        m = reprobe.observe(m, SPEC, [], shp, start=t2 - 300, now=t2)
        d = machine.step(
            machine.StepInput(m, Verdict.INCONCLUSIVE, now=t2, spec=SPEC, rollout=off, shape=shp)
        )
        assert d.action is Action.HOLD
        m = d.memory
    # a later probe confirmed: the shape may speak again after a future rollback
    probing_m = m.model_copy(
        update={"state": State.PROBING, "pass_streak": 1, "streak_end": t2, "probe_deadline": t2}
    )
    on = machine.step(
        machine.StepInput(probing_m, Verdict.PASS, now=t2 + 300, spec=SPEC, rollout=probing)
    )
    assert on.memory.state is State.ON and not on.memory.shape.spent


def test_an_early_reprobe_ends_on_its_first_failing_window_an_ordinary_probe_does_not() -> None:
    """An early re-probe is a bet on the shape's evidence (one per confirmation): its first
    judged failing window rolls it back, where a probe after a cooldown needs two."""
    m = rolled_back(chat_then_code(1))
    t = T0 + 900
    m = cooling(m, 20, 0.0, t).memory
    d = cooling(m, 21, 0.0, t + 300)
    assert d.transition is not None and d.transition.cause is Cause.EARLY_REPROBE
    probing = Rollout(completed_at=t + 360, speculation_on=True)
    first = machine.StepInput(
        d.memory, Verdict.FAIL, now=t + 780, spec=SPEC, rollout=probing, fail_kinds=[ACC]
    )
    early = machine.step(first)
    assert early.memory.state is State.ROLLED_BACK and early.action is Action.DISABLE
    assert early.memory.cooldown_until == T0 + 40_000  # the cooldown it interrupted
    plain = d.memory.model_copy(update={"history": ()})  # the same probe, not an early one
    ordinary = machine.step(replace(first, memory=plain))
    assert ordinary.memory.state is State.PROBING and ordinary.memory.fail_streak == 1


def test_memory_with_shapes_survives_the_record() -> None:
    m = rolled_back(chat_then_code(1))
    back = decode_memories(encode_memories({"": m}))[""]
    assert back == m
    assert back.shape.axis is not None and back.shape.recent[-1].failed
