"""The shipped chat policy, unmodified, judges one canary pod (beside three baselines) on the
real conversation trace: alpha's blocks are sized from the pod's decode times, so a 300 s
window holds ten of them, and a canary at 0.45 is rolled back while one at 0.70 is confirmed.

Before (batchSeconds 900 s, longer than the window) every such window was one batch: the
interval [0, 1] forever, a 0.45 canary never judged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tracetraffic as tt
import yaml

from alphagate import config
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    CheckKind,
    Evaluation,
    Memory,
    Observation,
    PoolObservation,
    Role,
    Rollout,
    State,
    Undecided,
    Unjudgeable,
    Verdict,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = config.parse(
    yaml.safe_load((ROOT / "policies" / "general-chat-eagle3.yaml").read_text())
).spec
T0 = 2_000_000.0
OLD = T0 - 100_000
SETTLED = Rollout(completed_at=OLD, speculation_on=True)


def _observation(w: tt.Window, at: float) -> Observation:
    """One window of the canary pod, shifted so it ends at `at` (the trace window's samples
    start BURN_IN seconds into the run)."""
    shift = at - SPEC.timing.window_seconds - w.samples[0].start
    samples = tuple(
        dataclasses.replace(s, start=s.start + shift, end=s.end + shift) for s in w.samples
    )
    tokens = sum(s.drafts + s.accepted_tokens for s in samples)
    return Observation(
        at=at,
        window_seconds=SPEC.timing.window_seconds,
        pools=(
            PoolObservation(
                "chat", Role.CANARY, acceptance=samples, lives=w.lives, generation_tokens=tokens
            ),
            PoolObservation("chat", Role.BASELINE, generation_tokens=3 * tokens),
        ),
    )


def _run(alpha: float, seed: int, windows: int, trace: str = "conv") -> list[Evaluation]:
    memory = Memory(state=State.ON, since=OLD, last_flip_at=OLD)
    out = []
    setup = tt.Setup(trace=trace, mix=tt.mix_at(alpha))
    for i, w in enumerate(tt.run(seed, setup, windows=windows)):
        at = T0 + (i + 1) * SPEC.timing.window_seconds
        e = evaluate(SPEC, _observation(w, at), memory, SETTLED, now=at)
        out.append(e)
        memory = e.memory
        if e.action is Action.DISABLE:
            break
    return out


def _acceptance(e: Evaluation) -> AcceptanceEvidence:
    (check,) = [c for c in e.checks if c.kind is CheckKind.ACCEPTANCE]
    assert isinstance(check.evidence, AcceptanceEvidence)
    return check.evidence


def test_the_shipped_policy_rolls_back_one_canary_pod_at_045() -> None:
    for seed in range(3):
        evs = _run(0.45, seed, windows=3)
        first = _acceptance(evs[0])
        assert evs[0].checks[0].verdict is Verdict.FAIL
        assert first.estimate is not None and first.estimate.batches == 10
        assert first.estimate.block_seconds == 30.0 and first.estimate.upper < 0.50
        assert evs[-1].action is Action.DISABLE  # within 15 minutes
        assert len(evs) <= 2


def test_one_canary_pod_on_the_bursty_code_trace_is_rolled_back_within_three_windows() -> None:
    # The code trace (0.65 requests/s on the pod, outputs of 13 tokens, bursts and idle gaps)
    # fills a few of a window's ten 30 s blocks: Kish's dof over their drafts were 1.3-4, so
    # the upper bound stayed above 0.55 for windows on end (16 of these 24 seeds rolled back
    # within 15 minutes). The upper bound now counts each block as one dof (the quasi-
    # likelihood dispersion, core/acceptance.py `_blocks_of_one_pod`): 20 of 24; and a run of
    # windows pooled (core/streak.py) rolls back where an Inconclusive window broke the
    # streak: 22 of 24. A window's alpha itself strays 0.034 (sd) from the truth here, so no
    # honest interval gets all.
    last = [_run(0.45, seed, 3, trace="code")[-1].action for seed in range(24)]
    assert sum(a is Action.DISABLE for a in last) >= 21, last


def test_a_healthy_canary_on_the_code_trace_is_never_failed() -> None:
    for seed in range(4):
        evs = _run(0.62, seed, 4, trace="code")
        assert all(e.checks[0].verdict is not Verdict.FAIL for e in evs)
        assert all(e.action is Action.HOLD for e in evs)


def test_the_shipped_policy_confirms_one_canary_pod_at_070() -> None:
    evs = _run(0.70, 7, windows=6)
    verdicts = [_acceptance(e) for e in evs]
    assert all(v.estimate is not None and v.estimate.lower > 0.60 for v in verdicts)
    assert all(e.action is Action.HOLD and e.memory.state is State.ON for e in evs)
    # the between-request variance was learned: a prior once three windows' worth remains
    # (it forgets with a one-hour time constant, so from the fifth window on)
    assert "chat" in evs[-1].memory.spread
    priors = [v.estimate.prior_dof for v in verdicts if v.estimate is not None]
    assert priors[:4] == [0.0] * 4 and all(p > 0 for p in priors[4:])


def test_a_window_that_cannot_decide_says_what_would() -> None:
    # the shipped policy on a pod whose samples carry no decode times: auto falls back to
    # 900 s blocks, and the check names the cause and the window that would be judged
    w = tt.run(1, tt.Setup(mix=tt.mix_at(0.7)), windows=1)[0]
    obs = _observation(dataclasses.replace(w, lives=None), T0)
    e = evaluate(SPEC, obs, Memory(state=State.ON, since=OLD, last_flip_at=OLD), SETTLED, now=T0)
    ev = _acceptance(e)
    assert ev.undecided is Undecided.FEW_BATCHES
    assert ev.judgeable is not None and ev.judgeable.cause is Unjudgeable.DECODE_TIMES_UNKNOWN
    assert (ev.judgeable.window_seconds, ev.judgeable.pods) == (1800.0, 2)
    assert ev.flat()["unjudgeable"] == "decode-times-unknown"


def test_alpha_zero_in_every_block_fails_even_with_a_prior_learned_at_another_alpha() -> None:
    # The real-vLLM e2e: a varied prompt mix after an hour at alpha ~0.97 gave alpha 0 over
    # 800 drafts the interval [0, 1] (the prior's variance made Korn-Graubard's effective size
    # p (1 - p) / se^2 zero), so a canary that accepted nothing was never rolled back.
    from alphagate.core import acceptance
    from alphagate.core.model import AcceptanceSample
    from alphagate.core.spread import Prior

    blocks = [
        AcceptanceSample(drafts=80.0, draft_tokens=240.0, accepted_tokens=0.0, pod="c0",
                         start=30.0 * i, end=30.0 * (i + 1))
        for i in range(10)
    ]  # fmt: skip
    prior = Prior(1e-3 / (0.97 * 0.03), 40.0)  # se 0.032 at alpha 0.97
    e = acceptance.estimate(blocks, confidence=0.95, batch_seconds=30.0, prior=prior)
    assert e is not None and e.value == 0.0
    assert e.upper < 0.05


def test_alpha_near_zero_fails_with_a_prior_learned_near_one() -> None:
    # The same e2e, a later run: alpha 0.002-0.005 (a few drafts accepted) over 789 drafts
    # read [0.000, 1.000]: the prior's variance, learned at 0.97, was carried unscaled to a
    # window where a request's share can barely spread (core/spread.py).
    from alphagate.core import acceptance
    from alphagate.core.model import AcceptanceSample
    from alphagate.core.spread import Prior

    accepted = [0, 1, 0, 2, 0, 0, 1, 0, 0, 1]
    blocks = [
        AcceptanceSample(drafts=80.0, draft_tokens=240.0, accepted_tokens=float(a), pod="c0",
                         start=30.0 * i, end=30.0 * (i + 1))
        for i, a in enumerate(accepted)
    ]  # fmt: skip
    prior = Prior(1e-3 / (0.97 * 0.03), 40.0)  # se 0.032 at alpha 0.97
    e = acceptance.estimate(blocks, confidence=0.95, batch_seconds=30.0, prior=prior)
    assert e is not None and 0.0 < e.value < 0.01
    # far under the 0.55 gate (0.78 unscaled); wider than the window's own (0.02): the prior
    # keeps the design effect it learned, ~85 requests' worth of clustering per token
    assert e.upper < 0.15
