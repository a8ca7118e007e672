"""No input crashes the core (issue 21): every entry point the shell, the backtest and the
benchmarks call returns a typed result, never an exception, on extreme and degenerate input:
zero, one or huge counts, NaN and infinities, sums of zero, a single request, a Welch dof near
zero, histograms whose buckets go down, memories from any state with any streaks.

Bounded: each property runs at most PROPS' examples, with no deadline (2 shared cores)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alphagate.config import SpeculativeCanarySpec
from alphagate.core import (
    acceptance,
    checks,
    histogram,
    latency,
    machine,
    pace,
    reprobe,
    shape,
    tuning,
    window,
)
from alphagate.core.batching import Ratio
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import analyse
from alphagate.core.model import (
    AcceptanceSample,
    Action,
    Buckets,
    CheckResult,
    Estimate,
    EstimateMethod,
    Evaluation,
    LatencySample,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    ShapeAxis,
    ShapeMemory,
    ShapeWindow,
    State,
    TrafficShape,
    Verdict,
)
from specs import MACHINE_SPEC, spec_from

PROPS = settings(  # 0.6x the profile's examples (60 under `fast`, 600 under `thorough`): costly
    max_examples=settings().max_examples * 3 // 5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
T0 = 1_700_000_000.0
EXTREMES = (0.0, 1.0, 1e-300, 5e-324, 1e-9, 0.5, 3.0, 1e9, 1e300, math.inf, math.nan, -1.0)
BOUNDS = (0.005, 0.025, 0.05, 0.075, 0.1, 1.0, math.inf)
LENGTHS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf)


def weird(lo: float = -1.0, hi: float = 1e12) -> st.SearchStrategy[float]:
    """Ordinary values, the edges, and what a broken source may send (NaN, inf, negative)."""
    return st.one_of(
        st.sampled_from(EXTREMES), st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    )


def counts(n: int) -> st.SearchStrategy[tuple[float, ...]]:
    """Cumulative counts mostly going up (a histogram), sometimes not (a reset, bad data)."""
    steps = st.lists(st.sampled_from((0.0, 0.0, 1.0, 3.0, 50.0, 1e6)), min_size=n, max_size=n)
    ordered = steps.map(lambda xs: tuple(float(sum(xs[: i + 1])) for i in range(len(xs))))
    return st.one_of(ordered, ordered, st.lists(weird(), min_size=n, max_size=n).map(tuple))


def buckets(bounds: tuple[float, ...] = BOUNDS) -> st.SearchStrategy[Buckets]:
    return st.builds(Buckets, bounds=st.just(bounds), counts=counts(len(bounds)), sum=weird())


@st.composite
def acceptance_samples(draw: st.DrawFn, pods: int) -> tuple[AcceptanceSample, ...]:
    n = draw(st.integers(0, 12))
    out = []
    for i in range(n):
        drafts = draw(st.one_of(st.sampled_from((0.0, 1.0, 2.0, 1e7)), weird()))
        tokens = draw(st.one_of(st.just(drafts * 3), weird()))
        accepted = draw(st.one_of(st.just(tokens * 0.6), st.just(tokens), weird()))
        pos = draw(st.one_of(st.just(()), st.lists(weird(), min_size=3, max_size=3).map(tuple)))
        pod = i % max(1, pods)
        start = T0 - 300 + 30 * (i // max(1, pods))
        out.append(AcceptanceSample(drafts, tokens, accepted, pos, f"p{pod}", start, start + 30))
    return tuple(out)


@st.composite
def latency_samples(draw: st.DrawFn) -> tuple[LatencySample, ...]:
    n = draw(st.integers(0, 6))
    out = []
    for i in range(n):
        count = draw(st.one_of(st.sampled_from((0.0, 1.0, 2.0)), weird()))
        total = draw(st.one_of(st.just(count * 0.02), st.just(0.0), weird()))
        b = draw(st.none() | buckets())
        out.append(
            LatencySample(count, total, b, f"p{i % 2}", T0 - 300 + 60 * i, T0 - 240 + 60 * i)
        )
    return tuple(out)


@st.composite
def pools(draw: st.DrawFn, role: Role) -> PoolObservation:
    pods = draw(st.integers(0, 3))
    return PoolObservation(
        "chat",
        role,
        acceptance=draw(acceptance_samples(pods)) if role is Role.CANARY else (),
        generation_tokens=draw(weird()),
        itl=draw(st.none() | buckets()),
        tpot=draw(st.none() | buckets()),
        tpot_samples=draw(latency_samples()),
        pods=pods,
        error=draw(st.none() | st.just("read failed")),
        output_lengths=draw(st.none() | buckets(LENGTHS)),
        running=draw(st.none() | weird()),
        spec_series=draw(st.none() | st.booleans()),
    )


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    window = draw(st.sampled_from((300.0, 60.0, 1.0, 1e-9, 0.0)))
    members = [draw(pools(Role.CANARY)), draw(pools(Role.BASELINE))]
    kept = draw(st.lists(st.sampled_from((0, 1)), unique=True, max_size=2))
    return Observation(
        at=T0,
        window_seconds=window,
        pools=tuple(members[i] for i in sorted(kept)) if draw(st.booleans()) else tuple(members),
        source_error=draw(st.none() | st.just("unreachable")),
        scrape_interval_seconds=draw(st.none() | weird()),
    )


def _axis(draw: st.DrawFn, n: int) -> ShapeAxis:
    def vec() -> tuple[float, ...]:
        return tuple(draw(st.lists(weird(0.0, 1.0), min_size=n, max_size=n)))

    return ShapeAxis(
        paid=vec(),
        failed=vec(),
        intercept=draw(weird()),
        slope=draw(weird()),
        slope_t=draw(weird()),
        noise=draw(weird()),
        shift=draw(weird()),
        windows=draw(st.integers(0, 30)),
    )


@st.composite
def shape_memories(draw: st.DrawFn) -> ShapeMemory:
    n = len(LENGTHS)
    windows = []
    for i in range(draw(st.integers(0, 8))):
        shares = tuple(draw(st.lists(weird(0.0, 1.0), min_size=n, max_size=n)))
        alpha = draw(st.none() | weird(0.0, 1.0))
        paid, failed = draw(st.booleans()), draw(st.booleans())
        windows.append(
            ShapeWindow(
                at=T0 - 3000 + 300 * i, shares=shares, alpha=alpha, paid=paid, failed=failed
            )
        )
    return ShapeMemory(
        bounds=LENGTHS[:-1],
        recent=tuple(windows),
        last_end=draw(st.sampled_from((0.0, T0 - 600, T0, T0 + 1e6))),
        axis=_axis(draw, n) if draw(st.booleans()) else None,
        returned=draw(st.integers(0, 5)),
        spent=draw(st.booleans()),
    )


@st.composite
def memories(draw: st.DrawFn) -> Memory:
    times = st.sampled_from((0.0, T0 - 1e5, T0 - 700, T0 - 100, T0, T0 + 1e5, math.inf))
    state = draw(st.sampled_from(list(State)))
    return Memory(
        state=state,
        since=draw(times),
        state_before_pause=draw(st.none() | st.sampled_from(list(State))),
        pass_streak=draw(st.integers(0, 5)),
        fail_streak=draw(st.integers(0, 5)),
        error_streak=draw(st.integers(0, 20)),
        streak_end=draw(times),
        cooldown_index=draw(st.integers(0, 60)),
        cooldown_until=draw(times),
        probe_deadline=draw(times),
        flip_times=tuple(draw(st.lists(times, max_size=5))),
        last_alpha=draw(st.dictionaries(st.just("chat"), weird(), max_size=1)),
        good_share_at_rollback=draw(weird()),
        shape=draw(shape_memories()),
        last_flip_at=draw(st.none() | times),
        last_conclusive_at=draw(times),
        paused_by=draw(st.none() | st.sampled_from(("spec", "manual"))),
    )


rollouts = st.builds(
    Rollout,
    in_progress=st.booleans(),
    completed_at=st.none() | st.sampled_from((T0 - 1e5, T0 - 100, T0, T0 + 100)),
    speculation_on=st.booleans(),
)


def _spec(**over: Any) -> SpeculativeCanarySpec:
    return spec_from(MACHINE_SPEC, **over)


SPECS = (
    _spec(),
    # fixed blocks and a one-window rule: the other branches of the core, under the same props
    _spec(
        # fixed blocks (not automatic) and one window: the branches the default skips
        acceptance={"batchSeconds": 30, "consecutiveWindows": 1},  # see above
        latency={"quantile": 0.9},
    ),
    _spec(
        latency={"metric": "perStepScaled"},
        draftLength={"tuning": {"enabled": True}},
        outputs={"withholdProbes": True},
    ),
    _spec(errors={"failSafe": "disable", "failSafeAfter": 1}, staleness={"failSafe": "disable"}),
)
specs = st.sampled_from(SPECS)


def _typed(e: Evaluation) -> None:
    assert isinstance(e.verdict, Verdict) and isinstance(e.action, Action)
    assert isinstance(e.memory, Memory) and e.reason
    assert all(isinstance(c, CheckResult) and isinstance(c.verdict, Verdict) for c in e.checks)


# ---------------------------------------------------------------- the whole evaluation


@PROPS
@given(spec=specs, obs=observations(), memory=memories(), rollout=rollouts)
def test_evaluate_and_what_follows_it_never_raise(
    spec: SpeculativeCanarySpec, obs: Observation, memory: Memory, rollout: Rollout
) -> None:
    """evaluate, then the reconciler's insights (diagnosis, draft length) and the K tuner."""
    e = evaluate(spec, obs, memory, rollout, now=T0)
    _typed(e)
    ins = analyse(
        spec, obs, estimates=e.estimates, combined=e.combined, k=tuning.current_k(spec, e.memory)
    )
    tuned = tuning.retune(spec, e, ins.draft, now=T0, rollout=rollout, window_start=T0 - 300)
    assert isinstance(tuned.memory, Memory) and tuned.k >= 1
    # a second evaluation on the memory the first left
    _typed(evaluate(spec, obs, tuned.memory, rollout, now=T0 + 30))


# ---------------------------------------------------------------- the machine and its window


@PROPS
@given(
    spec=specs,
    memory=memories(),
    rollout=rollouts,
    verdict=st.sampled_from(list(Verdict)),
    start=st.sampled_from((T0 - 300, T0 - 60, T0, T0 + 1, -math.inf, math.nan)),
    decisive=st.booleans(),
    shortfall=weird(),
    good_share=st.none() | weird(),
)
def test_the_machine_step_and_window_reads_never_raise(
    spec: SpeculativeCanarySpec,
    memory: Memory,
    rollout: Rollout,
    verdict: Verdict,
    start: float,
    decisive: bool,
    shortfall: float,
    good_share: float | None,
) -> None:
    d = machine.step(
        machine.StepInput(
            memory,
            verdict,
            now=T0,
            spec=spec,
            rollout=rollout,
            window_start=start,
            good_share=good_share,
            decisive=decisive,
            shortfall=shortfall,
        )
    )
    assert isinstance(d.action, Action) and isinstance(d.memory.state, State) and d.reason
    lo, hi = window.read_window(spec, rollout, T0, memory=memory)
    assert lo <= hi == T0
    assert isinstance(window.judged(spec, memory, lo, hi), bool)
    assert isinstance(window.shared_window(spec, [(memory, rollout)], T0), tuple)
    assert window.verdict_age(memory, T0) is None or window.verdict_age(memory, T0) >= 0
    b = pace.budget(spec, pace.alpha_checks(spec))
    assert 0 <= b.per_day < math.inf


# ---------------------------------------------------------------- shapes and the re-probe


@PROPS
@given(
    spec=specs,
    memory=memories(),
    counts_=counts(len(LENGTHS)),
    alpha=st.none() | weird(),
    good_share=st.none() | weird(),
)
def test_shapes_and_the_reprobe_never_raise(
    spec: SpeculativeCanarySpec,
    memory: Memory,
    counts_: tuple[float, ...],
    alpha: float | None,
    good_share: float | None,
) -> None:
    hist = Buckets(LENGTHS, counts_)
    obs = Observation(T0, 300.0, (PoolObservation("chat", Role.BASELINE, output_lengths=hist),))
    got = shape.of(obs, ["chat"], alpha)
    assert got is None or got.total >= shape.MIN_REQUESTS
    learned = shape.learn(memory.shape)
    assert isinstance(learned.finding, shape.Finding)
    now = got or TrafficShape(bounds=LENGTHS[:-1], counts=tuple(float(c) for c in range(11)))
    if memory.shape.axis is not None:
        r = shape.returned(memory.shape.axis, now, enable_above=0.6)
        assert isinstance(r.finding, shape.Finding) and isinstance(r.evidence(), dict)
    m = reprobe.observe(memory, spec, [], got, start=T0 - 300, now=T0)
    assert isinstance(m, Memory)
    early = reprobe.early(m, spec, now=T0, good_share=good_share, shape=got)
    assert early is None or isinstance(early.basis, reprobe.Basis)
    assert isinstance(reprobe.at_rollback(m, ()), ShapeMemory)


# ---------------------------------------------------------------- estimates and checks


def test_batches_too_small_to_square_are_an_estimate_not_a_crash() -> None:
    """Found by the property below: denominators whose squares underflow to 0 made Kish's
    effective number of batches divide by zero."""
    tiny = [
        AcceptanceSample(5e-324, 5e-324, 0.0, (), f"p{i}", T0 - 300, T0 - 270) for i in range(2)
    ]
    e = acceptance.estimate(tiny, confidence=0.95, batch_seconds=30.0)
    assert e is not None and isinstance(e.method, EstimateMethod)
    assert checks.check_acceptance(e, gate=SPECS[0].acceptance).verdict is Verdict.INCONCLUSIVE


@PROPS
@given(
    samples=acceptance_samples(pods=3),
    confidence=st.sampled_from((0.5001, 0.9, 0.95, 0.999999)),
    batch=st.sampled_from((1e-9, 30.0, 900.0, 1e12)),
)
def test_estimates_and_checks_never_raise(
    samples: tuple[AcceptanceSample, ...], confidence: float, batch: float
) -> None:
    gate = SPECS[0].acceptance
    e = acceptance.estimate(samples, confidence=confidence, batch_seconds=batch)
    assert e is None or isinstance(e.method, EstimateMethod)
    result = checks.check_acceptance(e, gate=gate)
    assert isinstance(result.verdict, Verdict)
    floor = checks.check_floor(e, min_alpha=0.5, gate=gate, slice="chat")
    assert isinstance(floor.verdict, Verdict)
    for c in (result, floor):
        assert isinstance(checks.decisive(c, 2), bool)
        assert checks.shortfall(c, 0.05) >= 0
    if e is not None:
        both = acceptance.combine({"a": e, "b": e}, {"a": 0.5, "b": 0.5}, confidence=confidence)
        assert both is None or isinstance(both, Estimate)


@PROPS
@given(
    value=weird(),
    lower=weird(),
    upper=weird(),
    se=weird(),
    dof=st.sampled_from((0.0, 1e-12, 1e-3, 0.5, 1.0, 2.0, 1e6, math.inf, math.nan)),
    batches=st.integers(0, 50),
)
def test_checks_take_any_estimate(
    value: float, lower: float, upper: float, se: float, dof: float, batches: int
) -> None:
    e = Estimate(
        value=value,
        lower=lower,
        upper=upper,
        confidence=0.95,
        drafts=1e4,
        draft_tokens=3e4,
        accepted_tokens=1e4,
        batches=batches,
        method=EstimateMethod.BATCH_MEANS,
        std_error=se,
        dof=dof,
    )
    c = checks.check_acceptance(e, gate=SPECS[0].acceptance)
    assert isinstance(c.verdict, Verdict)
    assert isinstance(checks.decisive(c, 2), bool) and checks.shortfall(c, 0.05) >= 0


ratios = st.builds(
    Ratio,
    value=weird(),
    num=weird(),
    den=weird(),
    se=weird(),
    dof=st.sampled_from((0.0, 1e-300, 1e-12, 1e-3, 0.2, 1.0, 5.0, math.inf, math.nan)),
    batches=st.integers(0, 10),
)


@PROPS
@given(canary=ratios, baseline=ratios, margin=st.sampled_from((0.0, 0.1, 10.0)))
def test_the_measured_speedup_never_raises(canary: Ratio, baseline: Ratio, margin: float) -> None:
    """A Welch dof near zero (a handful of requests) made exp() overflow (issue 21)."""
    s = latency.speedup(canary, baseline, margin=margin, confidence=0.95)
    assert s is None or math.isnan(s.value) or s.value >= 0


@PROPS
@given(hist=buckets(), q=st.sampled_from((0.0, 0.5, 0.99, 1.0, math.nan)), limit=weird())
def test_histogram_reads_never_raise(hist: Buckets, q: float, limit: float) -> None:
    assert isinstance(histogram.quantile(q, hist), float)
    assert isinstance(histogram.bracket(q, hist), tuple)
    histogram.exceedance(limit, hist)
    assert isinstance(histogram.fraction_above(limit, hist), float)
    assert histogram.problem(hist) is None or histogram.problem(hist)


def test_a_shape_memory_read_back_with_garbage_is_no_evidence() -> None:
    """Found by the property above: shares of 1e300 in a memory read back from the resource
    overflowed the projection. Windows with shares outside [0, 1] are ignored."""
    bad = (0.0,) * 9 + (1e300, 0.0)
    windows = tuple(
        ShapeWindow(at=T0 + 300 * i, shares=bad, alpha=0.7, paid=True, failed=i == 5)
        for i in range(6)
    )
    track = ShapeMemory(bounds=LENGTHS[:-1], recent=windows)
    assert shape.learn(track).finding is shape.Finding.NO_SHAPES
    axis = ShapeAxis(
        paid=bad, failed=bad, intercept=0.5, slope=0.2, slope_t=9.0, noise=0.1, shift=0.2, windows=9
    )
    now = TrafficShape(bounds=LENGTHS[:-1], counts=(100.0,) * 11)
    assert shape.returned(axis, now, enable_above=0.6).finding is shape.Finding.LAYOUT
