"""alpha estimates: point values, interval methods, bad data, weights, combination, and the
seeded coverage simulation that shows the 95% interval is honest (and the naive one is not)."""

from __future__ import annotations

import math
import random

import pytest

from alphagate.core import acceptance
from alphagate.core.model import AcceptanceSample, Observation, PoolObservation, Role
from alphagate.core.stats import wilson

K = 5


def sample(
    drafts: float, accepted: float, *, k: int = K, pod: str = "p", start: float = 0.0
) -> AcceptanceSample:
    return AcceptanceSample(
        drafts=drafts,
        draft_tokens=drafts * k,
        accepted_tokens=accepted,
        pod=pod,
        start=start,
        end=start + 30,
    )


# ---------------------------------------------------------------- point estimate and methods


def test_no_drafts_is_none() -> None:
    assert acceptance.estimate([], confidence=0.95) is None
    assert acceptance.estimate([sample(0, 0)], confidence=0.95) is None


def test_alpha_is_ratio_of_sums_and_length_follows() -> None:
    e = acceptance.estimate([sample(100, 300), sample(300, 500)], confidence=0.95)
    assert e is not None
    assert e.value == pytest.approx(800 / 2000)
    assert e.drafts == 400
    assert e.mean_acceptance_length == pytest.approx(1 + 800 / 400)
    assert e.lower <= e.value <= e.upper


def test_few_batches_use_the_conservative_fallback() -> None:
    e = acceptance.estimate([sample(100, 300, pod=f"p{i}") for i in range(3)], confidence=0.95)
    assert e is not None
    # identical ratios: no spread to learn from, so the draft-count bound is used
    assert e.method == acceptance.WILSON_DRAFTS
    lo, hi = wilson(0.6, 300, 0.95)
    assert (e.lower, e.upper) == pytest.approx((lo, hi))
    e2 = acceptance.estimate(
        [sample(100, a, pod=f"p{i}") for i, a in enumerate((250, 300, 350))], confidence=0.95
    )
    assert e2 is not None and e2.method == acceptance.HULL
    assert e2.lower <= wilson(0.6, 300, 0.95)[0]


def test_enough_batches_use_batch_means_with_t() -> None:
    ss = [
        sample(100, a, pod="p", start=30 * i)
        for i, a in enumerate((250, 300, 350, 280, 320, 310, 290, 300))
    ]
    e = acceptance.estimate(ss, confidence=0.95)
    assert e is not None
    assert e.method == acceptance.BATCH_MEANS
    assert e.batches == 8 and e.dof == 7
    # hand computation: ratio 0.6, residuals a_i - 0.6*500
    resid = [a - 300 for a in (250, 300, 350, 280, 320, 310, 290, 300)]
    se = math.sqrt(sum((r / (1 - 1 / 8)) ** 2 for r in resid)) / 4000
    assert e.std_error == pytest.approx(se)
    assert e.upper - e.value == pytest.approx(2.364624 * se, rel=1e-5)


def test_interval_is_clamped_to_unit_range() -> None:
    e = acceptance.estimate([sample(2, 10 * (i % 2)) for i in range(8)], confidence=0.99)
    assert e is not None
    assert 0.0 <= e.lower <= e.upper <= 1.0


BAD = [
    ("nan", AcceptanceSample(drafts=math.nan, draft_tokens=10, accepted_tokens=5, pod="a"), "nan"),
    (
        "negative",
        AcceptanceSample(drafts=-2, draft_tokens=10, accepted_tokens=5, pod="a"),
        "negative",
    ),
    (
        "accepted-above-drafted",
        AcceptanceSample(drafts=2, draft_tokens=10, accepted_tokens=50, pod="a"),
        "exceed",
    ),
    (
        "tokens-without-drafts",
        AcceptanceSample(drafts=0, draft_tokens=10, accepted_tokens=5, pod="a"),
        "drafts",
    ),
    (
        "inf-per-position",
        AcceptanceSample(drafts=2, draft_tokens=10, accepted_tokens=5, per_position=(math.inf,)),
        "per_position",
    ),
]


@pytest.mark.parametrize(("bad", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_samples_are_named_and_skipped(bad: AcceptanceSample, needle: str) -> None:
    found = acceptance.problem([sample(10, 20), bad])
    assert found is not None and needle in found.lower()
    e = acceptance.estimate([sample(10, 20), bad], confidence=0.95)
    assert e is not None and e.drafts == 10  # the bad one did not leak in
    assert acceptance.estimate([bad], confidence=0.95) is None


EDGE = [
    math.nan,
    math.inf,
    -math.inf,
    -1.0,
    -0.0,
    0,
    0.5,
    10,
    10.010001,
    10.0101,
    1e15,
    1.0000001e15,
]
EDGE_PER_POSITION: list[tuple[float, ...]] = [
    (),
    (0,),
    (-0.0, 3),
    (1, 2, 3),
    (math.nan,),
    (1, math.nan, 2),
    (math.nan, 1),
    (math.inf,),
    (-math.inf, 1),
    (math.inf, -math.inf),
    (2, -1),
    (1e15, 1e15),
    (1, 1.0000001e15),
]


def test_fast_range_check_agrees_with_the_worded_check() -> None:
    """`problem` and the estimate run the cheap numeric check and word the message only when it
    fails: both must judge every sample alike, edge values (NaN, infinities, -0, the bounds)
    included, and `problem` must word the same message it always did."""
    checked = bad = 0
    for drafts in EDGE:
        for tokens in EDGE:
            for accepted in EDGE:
                for per_position in EDGE_PER_POSITION:
                    s = AcceptanceSample(drafts, tokens, accepted, per_position, pod="p")
                    worded = acceptance._sample_problem(s)
                    assert acceptance._sane(s) is (worded is None), s
                    assert acceptance.problem([sample(10, 20), s]) == worded
                    checked += 1
                    bad += worded is not None
    assert checked > bad > 0 and checked - bad > 50


def test_batch_range_check_agrees_with_the_per_sample_check() -> None:
    """The whole-batch shortcut says "all sane" exactly when every sample is, and `problem`,
    `estimate` and `per_position` answer alike for a tuple, a list and a one-shot iterator."""
    rng = random.Random(7)
    pool = [
        AcceptanceSample(d, t, a, pp, pod=f"p{i}")
        for i, (d, t, a, pp) in enumerate(
            (rng.choice(EDGE), rng.choice(EDGE), rng.choice(EDGE), rng.choice(EDGE_PER_POSITION))
            for _ in range(400)
        )
    ]
    good = [sample(100 + i, 200 + i, pod=f"g{i}") for i in range(20)]
    saw_bad = saw_clean = 0
    for _ in range(300):
        batch = rng.sample(good, rng.randrange(0, 6))
        if rng.random() < 0.6:
            batch.insert(rng.randrange(len(batch) + 1), rng.choice(pool))
        every = all(acceptance._sane(s) for s in batch)
        assert acceptance._all_sane(batch) is every
        assert acceptance._all_sane(tuple(batch)) is every
        assert acceptance._all_sane(iter(batch)) is False  # not a tuple or list: per sample
        worded = next((w for w in map(acceptance._sample_problem, batch) if w is not None), None)
        for form in (tuple(batch), list(batch), iter(batch)):
            assert acceptance.problem(form) == worded
        expected = [s for s in batch if acceptance._sane(s) and s.draft_tokens > 0]
        assert acceptance._usable(tuple(batch)) == expected
        assert acceptance.estimate(batch, confidence=0.9) == acceptance.estimate(
            expected, confidence=0.9
        )
        assert acceptance.per_position(tuple(batch)) == acceptance.per_position(iter(batch))
        saw_bad += not every
        saw_clean += every and len(batch) > 1
    assert saw_bad > 50 and saw_clean > 50


def test_per_position_rates() -> None:
    s = AcceptanceSample(
        drafts=100, draft_tokens=300, accepted_tokens=150, per_position=(80, 50, 20)
    )
    assert acceptance.per_position([s]) == pytest.approx((0.8, 0.5, 0.2))
    assert acceptance.per_position([sample(10, 5)]) == ()


# ---------------------------------------------------------------- weights and combination


def _pool(slice_: str, role: Role, tokens: float, error: str | None = None) -> PoolObservation:
    return PoolObservation(slice=slice_, role=role, generation_tokens=tokens, error=error)


def test_weights_from_generation_tokens_of_both_pools() -> None:
    obs = Observation(
        at=0,
        window_seconds=300,
        pools=(
            _pool("chat", Role.CANARY, 100),
            _pool("chat", Role.BASELINE, 600),
            _pool("code", Role.CANARY, 50),
            _pool("code", Role.BASELINE, 250),
            _pool("code", Role.BASELINE, math.nan),
            _pool("other", Role.BASELINE, 1000, error="down"),
        ),
    )
    w = acceptance.weights(obs)
    assert w == pytest.approx({"chat": 0.7, "code": 0.3, "other": 0.0})
    assert acceptance.weights(obs, ["code"]) == pytest.approx({"code": 1.0})
    empty = Observation(at=0, window_seconds=300, pools=(_pool("chat", Role.CANARY, 0),))
    assert acceptance.weights(empty) == {"chat": 0.0}


def _batches(alpha: float, n: int = 10, drafts: int = 1000) -> list[AcceptanceSample]:
    # slightly different ratios so batch means applies; mean exactly alpha
    out = []
    for i in range(n):
        wiggle = (i - (n - 1) / 2) * 2
        out.append(sample(drafts, alpha * drafts * K + wiggle, start=30 * i))
    return out


def test_combined_alpha_is_traffic_weighted_design_example() -> None:
    chat = acceptance.estimate(_batches(0.7), confidence=0.95)
    code = acceptance.estimate(_batches(0.4), confidence=0.95)
    assert chat is not None and code is not None
    c = acceptance.combine(
        {"chat": chat, "code": code}, {"chat": 0.7, "code": 0.3}, confidence=0.95
    )
    assert c is not None
    assert c.value == pytest.approx(0.61)
    var = 0.49 * chat.std_error**2 + 0.09 * code.std_error**2
    assert c.std_error == pytest.approx(math.sqrt(var))
    assert c.lower < 0.61 < c.upper
    assert c.drafts == chat.drafts + code.drafts
    assert c.method.startswith("weighted(")


def test_combine_renormalises_over_slices_with_estimates() -> None:
    chat = acceptance.estimate(_batches(0.7), confidence=0.95)
    assert chat is not None
    c = acceptance.combine({"chat": chat}, {"chat": 0.5, "code": 0.5}, confidence=0.95)
    assert c == chat
    assert acceptance.combine({"chat": chat}, {"chat": 0.0}, confidence=0.95) is None
    assert acceptance.combine({}, {"chat": 1.0}, confidence=0.95) is None


# ---------------------------------------------------------------- coverage simulation

# Each request has its own difficulty (per-token acceptance p, shared by all its drafts); a
# draft's tokens are accepted until the first rejection. Both correlations are what makes the
# token count overstate the evidence.
P_MIX = (0.5, 0.9)
TRUE_ALPHA = sum(sum(p**j for j in range(1, K + 1)) for p in P_MIX) / len(P_MIX) / K


def _accepted(rng: random.Random, p: float) -> int:
    """Leading accepted tokens of one K-token draft: P(accepted >= j) = p**j."""
    u = rng.random()
    return K if u <= 0.0 else min(K, int(math.log(u) / math.log(p)))


def _batch(
    rng: random.Random, max_requests: int, pod: str, start: float, *, clustered: bool
) -> AcceptanceSample:
    drafts = accepted = 0
    for _ in range(rng.randint(1, max_requests)):
        p = rng.choice(P_MIX)
        for _ in range(rng.randint(1, 30)):
            if not clustered:
                p = rng.choice(P_MIX)
            drafts += 1
            accepted += _accepted(rng, p)
    return AcceptanceSample(
        drafts=drafts,
        draft_tokens=drafts * K,
        accepted_tokens=accepted,
        pod=pod,
        start=start,
        end=start + 30,
    )


def _run(seed: int, pods: int, intervals: int, *, clustered: bool = True) -> list[AcceptanceSample]:
    rng = random.Random(seed)
    return [
        _batch(rng, 10, f"pod-{j}", 30.0 * i, clustered=clustered)
        for j in range(pods)
        for i in range(intervals)
    ]


def test_interval_covers_true_alpha_about_95_percent_and_naive_does_not() -> None:
    runs = 1000
    covered = naive_covered = 0
    methods = set()
    for seed in range(runs):
        e = acceptance.estimate(_run(seed, pods=4, intervals=4), confidence=0.95)
        assert e is not None
        methods.add(e.method)
        covered += e.lower <= TRUE_ALPHA <= e.upper
        lo, hi = wilson(e.value, e.draft_tokens, 0.95)  # tokens as if independent
        naive_covered += lo <= TRUE_ALPHA <= hi
    coverage, naive = covered / runs, naive_covered / runs
    print(f"batch-means coverage {coverage:.3f}; naive token-count Wilson {naive:.3f}")
    assert methods == {acceptance.BATCH_MEANS}
    assert 0.93 <= coverage <= 0.97
    assert naive < 0.6  # why the naive interval is not used


def test_draft_unit_fallback_is_conservative_for_within_draft_correlation() -> None:
    runs = 400
    covered = 0
    for seed in range(runs):
        e = acceptance.estimate(
            _run(10_000 + seed, pods=1, intervals=1, clustered=False), confidence=0.95
        )
        assert e is not None and e.method == acceptance.WILSON_DRAFTS
        covered += e.lower <= TRUE_ALPHA <= e.upper
    print(f"wilson-over-drafts coverage {covered / runs:.3f}")
    assert covered / runs >= 0.95


def test_combined_interval_covers_weighted_alpha() -> None:
    runs = 600
    covered = 0
    w = {"a": 0.7, "b": 0.3}
    for seed in range(runs):
        ea = acceptance.estimate(_run(20_000 + seed, pods=3, intervals=4), confidence=0.95)
        eb = acceptance.estimate(_run(40_000 + seed, pods=3, intervals=4), confidence=0.95)
        assert ea is not None and eb is not None
        c = acceptance.combine({"a": ea, "b": eb}, w, confidence=0.95)
        assert c is not None
        covered += c.lower <= TRUE_ALPHA <= c.upper
    print(f"combined coverage {covered / runs:.3f}")
    assert 0.93 <= covered / runs <= 0.975
