"""The decision benchmark: its suite, closed loop, anchors, scores, the Kayenta judge, and a
tiny slice of the suite run end to end through the command (no speed is asserted)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from alphagate import config
from alphagate_lab.bench import __main__ as bench_main
from alphagate_lab.bench.decisions import (
    anchors,
    calibrate,
    checklist,
    cli,
    kayenta,
    loop,
    report,
    score,
    suite,
)
from alphagate_lab.bench.decisions.loop import RunResult
from alphagate_lab.bench.decisions.policies import POLICIES_DIR, Ctx, Want, shipped_spec
from alphagate_lab.sim.fleet import Fleet

# ---------------------------------------------------------------- the suite


def test_the_policy_benchmarked_is_the_shipped_file_apart_from_its_selectors() -> None:
    data = yaml.safe_load((POLICIES_DIR / suite.SHIPPED_POLICY).read_text(encoding="utf-8"))
    shipped = config.parse(data, where="shipped").spec
    ours = shipped_spec()
    assert ours.model_copy(update={"slices": shipped.slices}) == shipped
    assert [s.canary.match_labels for s in ours.slices] == [{"slice": "chat", "role": "canary"}]
    # the canary pods run the file's speculative config, and the truth's gate is the file's
    assert shipped.speculative_config == suite.SPEC
    assert shipped.acceptance.disable_below == suite.GATE


def test_every_case_builds_a_valid_fleet_with_its_topology() -> None:
    for case in suite.BY_NAME.values():
        sc = case.scenario(0.1)
        topo = suite.TOPOLOGIES[case.topology]
        canaries = [p for p in sc.pools if p.role == "canary"]
        assert sum(p.replicas for p in canaries) == topo.canaries
        assert sum(p.replicas for p in sc.pools if p.role == "baseline") == topo.baselines
        assert all(p.speculative_config == suite.spec_config(case.k) for p in canaries)
    two = suite.BY_NAME["2c70-conv-a0.62"].scenario(0.1)
    assert sorted(p.traffic_weight for p in two.pools if p.role == "canary") == [0.6, 1.4]
    assert suite.BY_NAME["16c-code-a0.45"].scenario(0.1).slices["chat"].trace.scale == 0.25
    day = [c for c in suite.SUITE if c.per_day]
    assert len(day) == 12 and all(c.policies == ("oracle", "alphagate") for c in day)
    assert {(c.topology, c.traffic) for c in day} == {
        (t, r) for t in ("1c3b", "1c1b", "2c70", "16c") for r in ("conv", "code", "poisson")
    }
    assert "1c3b-poisson-mix-returns-alpha-not" in suite.group_names()["acceptance"]
    assert len(suite.group_names()["latency"]) == 12


def test_the_geometric_layout_steps_ten_percent_and_reaches_past_the_tail() -> None:
    h = calibrate.Healthy(0.007, 0.012, 0.004, 0.0106, 0.004, 0.0105, (0.004,), 9.0, 11.0)
    bounds = calibrate.geometric_bounds(h)
    fine = [b for b in bounds if b <= 0.06]
    ratios = [b / a for a, b in itertools.pairwise(fine)]
    assert bounds[0] == pytest.approx(0.002, rel=1e-3) and max(bounds) == 80.0
    assert all(1.09 < r < 1.11 for r in ratios)
    assert list(bounds) == sorted(set(bounds))


# ---------------------------------------------------------------- closed loop


def test_a_flip_restarts_the_canary_pod_and_changes_what_it_serves() -> None:
    # Alpha 0.45 is below the gate: the oracle turns speculation off at its first decision.
    r = loop.run("1c3b-conv-a0.45", 3, "oracle", 0.25)
    assert r.flips == [(30.0, "disable")]
    assert r.restarts == 1 and r.restart_log == [(30.0, 1)]
    # While the pod loads it serves nothing; once back it serves without speculation.
    loading = [tok for t, tok in zip(r.t, r.tokens, strict=True) if 30 < t <= 30 + 60]
    assert loading and all(tok == 0 for tok in loading)
    assert r.on[-1] == 0.0 and r.drafts[-1] == 0.0 and r.tokens[-1] > 0
    assert r.value[-1] == 0.0 and r.value[1] < 0  # the first 30 s speculated at 0.45: a cost


def test_policies_meet_the_same_streams_until_they_act() -> None:
    a = loop.run("1c3b-conv-a0.7", 5, "oracle", 0.25)
    b = loop.run("1c3b-conv-a0.7", 5, "kayenta", 0.25)
    assert a.flips == b.flips == []
    assert a.tokens == b.tokens and a.value == b.value


def test_the_chain_fixes_per_position_acceptance_whatever_k_runs() -> None:
    """A draft-length case gives the simulator the alpha of the K that runs: the first
    position's acceptance (and every later one) is then the same at every K."""
    from alphagate_lab.sim.acceptance import acceptance_table

    p, decay = 0.9, 0.6
    firsts = []
    for k in (1, 2, 3, 5):
        probs = acceptance_table(k, decay).probs(suite.chain_alpha(p, decay, k))
        firsts.append(float(probs[1:].sum()))  # P(at least one accepted)
    assert firsts == pytest.approx([p] * 4, abs=2e-3)
    case = suite.BY_NAME["best-k-moves"]
    assert case.alpha_at(0.5) == pytest.approx(suite.chain_alpha(0.9, 0.6, 5))
    assert case.alpha_at(0.5, 2) > case.alpha_at(0.5)  # a shorter draft accepts a larger share


class _Retune:
    """Keeps speculation on and asks for K=2 from the second decision on."""

    name = "retune-stub"
    interval = 30.0

    def decide(self, ctx: Ctx) -> Want:
        return Want(True, k=2 if ctx.t >= 60 else None)


def test_a_new_k_restarts_the_canary_pods_at_that_k(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "make_policy", lambda *a, **kw: _Retune())
    (r,) = loop.run_group("best-k-moves", 2, ["retune-stub"], 0.1)
    case = suite.BY_NAME["best-k-moves"]
    assert r.flips == [(60.0, "retune")] and r.restarts == case.canaries
    loading = [tok for t, tok in zip(r.t, r.tokens, strict=True) if 60 < t <= 60 + 60]
    assert loading and all(tok == 0 for tok in loading)
    assert r.on[-1] == 1.0 and r.drafts[-1] > 0  # back, speculating at the new K


class _Raises:
    """Raises at its third decision, as the core did on a real trace."""

    name = "raises"
    interval = 30.0

    def __init__(self) -> None:
        self.calls = 0

    def decide(self, ctx: Ctx) -> Want:
        self.calls += 1
        if self.calls == 3:
            raise OverflowError("math range error")
        return Want(ctx.t < 200)


def test_a_policy_that_raises_is_recorded_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loop, "make_policy", lambda *a, **kw: _Raises())
    (r,) = loop.run_group("1c3b-conv-a0.7", 1, ["raises"], 0.1)
    assert len(r.exceptions) == 1 and "OverflowError: math range error" in r.exceptions[0]
    assert r.exceptions[0].startswith("t=90s")
    assert r.flips == [(210.0, "disable")]  # it held through the error, then decided again
    assert score.score_run(r).exceptions == 1


@pytest.mark.slow
def test_a_group_run_is_each_policys_own_run() -> None:
    # Policies share one fleet until each acts; then each continues on its own copy. The
    # result must be exactly the run each would have alone.
    names = ["oracle", "argo-rollouts", "in-engine"]
    group = loop.run_group("1c3b-conv-a0.45", 6, names, 0.2)
    assert [r.policy for r in group] == names
    assert all(r.flips for r in group)  # every one of them acts: each on its own copy
    for r in group:
        alone = loop.run("1c3b-conv-a0.45", 6, r.policy, 0.2)
        assert (r.flips, r.restarts, r.tokens, r.on, r.value) == (
            alone.flips,
            alone.restarts,
            alone.tokens,
            alone.on,
            alone.value,
        )


def test_the_in_engine_gate_turns_speculation_off_without_a_restart() -> None:
    r = loop.run("1c3b-conv-a0.45", 4, "in-engine", 0.25)
    assert r.restarts == 0
    assert r.on[-1] == 0.0
    assert [kind for _, kind in r.flips] == ["disable"]
    # the threshold sits one band below the gate, in accepted tokens per draft
    assert anchors.InEngine(1).threshold == pytest.approx(suite.K * 0.50)


def test_a_latency_regression_is_injected_as_the_case_says() -> None:
    case = suite.BY_NAME["1c3b-conv-tail-1.5x-geo"]
    h = calibrate.healthy(case)
    assert h.p99_canary < h.p99_baseline  # a healthy canary's tail is not the baseline's
    m = calibrate.tail_factor(h, 1.5)
    achieved = calibrate.achieved_ratio(calibrate._key(case), "tail", m)
    assert achieved == pytest.approx(1.5, rel=0.08)
    # Uniform: every canary step slower, its mean per token 1.5x the baseline's (not its P99
    # only: a speculating canary's P99 is far below the baseline's, see above).
    uni = suite.BY_NAME["1c3b-conv-uniform-1.5x-def"]
    mean, p99 = calibrate.injected_ratios(uni)
    assert mean == pytest.approx(1.5, rel=0.05)
    assert p99 >= 1.5 * 0.95
    args = calibrate.layout_args(case)
    assert args[0] == "--custom-histogram-buckets"
    sc = case.scenario(0.1, args)
    assert all(p.extra_args == list(args) for p in sc.pools)  # canary and baseline alike
    assert calibrate.layout_args(suite.BY_NAME["1c3b-conv-tail-1.5x-def"]) == ()


# ---------------------------------------------------------------- anchors


def _fleet_ctx(case: str, t: float, fleet: Fleet) -> Ctx:
    snap = fleet.snapshot()
    return Ctx(t, snap.time, snap, loop._rollout(fleet, True, False), fleet, True)


def test_flagger_promotes_after_its_analysis_and_then_stops_checking() -> None:
    case = suite.BY_NAME["1c3b-conv-a0.7"]
    fleet = Fleet(case.scenario(1.0), seed=1, tick=loop.TICK)
    flagger = anchors.Flagger(shipped_spec(), duration_limit=math.inf)
    wants = []
    for minute in range(1, 9):
        fleet.advance_to(60.0 * minute)
        wants.append(flagger.decide(_fleet_ctx(case.name, 60.0 * minute, fleet)))
    assert flagger.promoted and flagger.advances == anchors.FLAGGER_STEPS
    assert all(w.on for w in wants)
    # promoted: whatever the canary does now, nothing is checked and nothing rolls back
    flagger.duration_limit = 0.0
    assert flagger.decide(_fleet_ctx(case.name, 600.0, fleet)).on


def test_flagger_fails_a_check_on_request_duration_and_rolls_back_at_its_threshold() -> None:
    case = suite.BY_NAME["1c3b-conv-a0.7"]
    fleet = Fleet(case.scenario(1.0), seed=1, tick=loop.TICK)
    flagger = anchors.Flagger(shipped_spec(), duration_limit=1e-6)  # nothing passes
    for minute in range(1, 6):
        fleet.advance_to(60.0 * minute)
        want = flagger.decide(_fleet_ctx(case.name, 60.0 * minute, fleet))
    assert flagger.failed_checks == 5 and not want.on and not flagger.promoted


def test_argo_measures_the_p99_ratio_and_aborts_past_its_failure_limit() -> None:
    case = suite.BY_NAME["1c3b-conv-a0.7"]
    fleet = Fleet(case.scenario(1.0), seed=1, tick=loop.TICK)
    argo = anchors.Argo(shipped_spec())
    argo.max_ratio = 1e-6  # every latency measurement fails
    for minute in range(1, 6):
        fleet.advance_to(60.0 * minute - 30.0)
        argo.watch(_fleet_ctx(case.name, 60.0 * minute - 30.0, fleet))  # the scrape between
        fleet.advance_to(60.0 * minute)
        want = argo.decide(_fleet_ctx(case.name, 60.0 * minute, fleet))
    assert argo.failed == {"alpha": 0, "latency": 4} and not want.on


# ---------------------------------------------------------------- scores


def _run(
    should_on: list[bool], on: list[float], flips: list[tuple[float, str]], **kw: Any
) -> RunResult:
    n = len(should_on)
    return RunResult(
        case="x",
        seed=1,
        policy="p",
        hours=n * loop.STEP / 3600,
        t=[i * loop.STEP for i in range(n)],
        alpha=[0.7 if s else 0.4 for s in should_on],
        should_on=should_on,
        on=on,
        tokens=[100.0] * n,
        drafts=[10.0] * n,
        value=[10.0 * o if s else -10.0 * o for o, s in zip(on, should_on, strict=True)],
        ready=[1] * n,
        flips=flips,
        **kw,
    )


def test_saving_is_priced_at_the_shipped_gate() -> None:
    assert loop.saving(suite.GATE, 3) == pytest.approx(0.0)
    assert loop.saving(0.70, 3) == pytest.approx(1 - 2.65 / 3.1)
    assert loop.saving(0.45, 3) < 0


def test_a_rollback_while_the_truth_says_on_is_a_false_flip() -> None:
    n = 40
    r = _run([True] * n, [1.0] * 20 + [0.0] * 20, [(20 * loop.STEP, "disable")])
    s = score.score_run(r)
    assert (s.false_flips, s.false_rollbacks, s.onsets, s.missed) == (1, 1, 0, 0)
    assert s.wrong_seconds == pytest.approx(20 * loop.STEP)


def test_detection_delay_and_misses_follow_the_truth() -> None:
    truth = [True] * 10 + [False] * 30
    caught = _run(truth, [1.0] * 14 + [0.0] * 26, [(14 * loop.STEP, "disable")])
    s = score.score_run(caught)
    assert (s.onsets, s.missed, s.false_flips) == (1, 0, 0)
    assert s.delays == [4 * loop.STEP]
    assert s.delay_drafts == [40.0]
    never = score.score_run(_run(truth, [1.0] * 40, []))
    assert (never.onsets, never.missed, never.delays) == (1, 1, [])


def test_coverage_counts_every_honest_interval_and_the_misses_below() -> None:
    # Three intervals the core stood behind and one window with a single batch ([0, 1]).
    # The truth is 0.7: one honest interval misses it from above (truth below its lower
    # bound). Width counts every window, the one-batch [0, 1] included.
    r = _run([True] * 20, [1.0] * 20, [])
    r.intervals = [
        (300.0, 0.65, 0.75, 0.0, 2, True, False),
        (330.0, 0.66, 0.74, 30.0, 2, True, False),
        (360.0, 0.71, 0.72, 60.0, 2, True, True),
        (390.0, 0.0, 1.0, 90.0, 1, False, False),
    ]
    s = score.score_run(r)
    assert (s.intervals, s.covered, s.below) == (3, 2, 1)
    assert (s.decisive, s.covered_decisive, s.insufficient) == (1, 0, 1)
    assert sorted(s.widths) == pytest.approx([0.01, 0.08, 0.1, 1.0])
    agg = score.aggregate([("c", 1, "alphagate", s)])
    cell = agg["cells"][0]
    assert cell["coverage"] == pytest.approx(2 / 3)
    assert cell["below_lower"] == pytest.approx(1 / 3)
    assert cell["width_median"] == pytest.approx(0.09)
    assert cell["insufficient_windows"] == 1


def test_the_window_truth_is_the_realised_alpha_of_the_drafts_inside_it() -> None:
    # Window (60, 120]: steps at 90 and 120 (the step at 60 covers the tick before the
    # window). Set alpha 0.4 then 0.7, with 30 and 10 draft tokens: the pooled ratio the
    # counters converge to is (0.4 * 30 + 0.7 * 10) / 40 = 0.475, not the time mean 0.55.
    r = _run([True] * 5, [1.0] * 5, [])
    r.alpha = [0.9, 0.9, 0.9, 0.4, 0.7]
    r.drafts = [5.0, 5.0, 5.0, 30.0, 10.0]
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx(0.475)
    r.drafted_alpha = [0.9, 0.9, 0.9, 0.8, 0.7]  # around the set alpha: not the truth
    r.realised_alpha = [0.9, 0.9, 0.9, 0.78, 0.73]  # each pod's wander in: the truth
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx((0.78 * 30 + 0.73 * 10) / 40)
    r.drafts = [0.0] * 5  # nothing drafted: the plain mean of the set alpha
    r.realised_alpha = [math.nan] * 5
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx(0.55)
    assert math.isnan(score.window_truth(r, 200.0, 300.0))


def test_the_realised_alpha_carries_the_pods_own_wander() -> None:
    # One canary pod: the set alpha stays 0.70, the pod's acceptance wanders around it; the
    # realised truth follows the wander, the expected-around-the-set one does not.
    fleet = Fleet(suite.BY_NAME["1c3b-conv-a0.7"].scenario(0.2), seed=2, tick=30.0)
    drafted, realised = [], []
    while fleet.now + 30.0 <= 600.0:
        fleet.step()
        truth = fleet.pods["chat-canary-0"].truth
        assert truth is not None
        drafted.append(truth.drafted_alpha)
        realised.append(truth.realised_alpha)
    assert drafted[-1] == pytest.approx(0.70 + fleet.pods["chat-canary-0"].engine.alpha_offset)
    assert max(abs(r - d) for r, d in zip(realised, drafted, strict=True)) > 1e-3
    assert max(abs(r - d) for r, d in zip(realised, drafted, strict=True)) < 0.06


def test_after_a_step_the_drafts_lag_the_set_alpha() -> None:
    # Long outputs (4,000 tokens: ~20 s each) so requests in flight span several ticks.
    sc = suite.BY_NAME["1c3b-poisson-a0.7"].scenario(0.2)
    chat = sc.slices["chat"].model_copy(update={"output_tokens": 4000, "output_sigma": 0.0})
    step = 300.0
    timeline = [{"at": step, "slices": {"chat": {"alpha": 0.40}}}]
    sc = sc.model_copy(update={"slices": {"chat": chat}, "timeline": []})
    sc = type(sc).model_validate({**sc.model_dump(), "timeline": timeline})
    fleet = Fleet(sc, seed=3, tick=5.0)
    seen: dict[float, float] = {}
    while fleet.now + 5.0 <= step + 120:
        fleet.step()
        truth = fleet.pods["chat-canary-0"].truth
        assert truth is not None
        seen[fleet.now] = truth.drafted_alpha
    assert seen[step - 5] == pytest.approx(0.70, abs=1e-9)
    assert 0.40 + 0.02 < seen[step + 5] < 0.70 - 0.02
    assert seen[step + 120] == pytest.approx(0.40, abs=1e-3)


def test_regret_is_the_oracles_net_saving_minus_the_policys_per_seed() -> None:
    truth = [True] * 10 + [False] * 30
    oracle = score.score_run(_run(truth, [1.0] * 10 + [0.0] * 30, []))
    late = score.score_run(_run(truth, [1.0] * 20 + [0.0] * 20, []))
    # 10 steps speculating below break-even at -10 each, against the oracle's 4,000 tokens
    assert oracle.value - late.value == pytest.approx(100.0)
    agg = score.aggregate([("c", 1, "oracle", oracle), ("c", 1, "alphagate", late)])
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate")
    assert cell["regret_pct"] == pytest.approx(100 * 100 / 4000)
    assert cell["regret_seeds"] == {"1": pytest.approx(2.5)}
    assert math.isnan(cell["regret_lo"])  # one seed: no interval


def test_a_restart_is_charged_its_load_and_warm_up_at_the_pods_rate() -> None:
    r = _run([True] * 40, [1.0] * 40, [(300.0, "enable")])
    r.restart_log = [(300.0, 1)]
    values = score.step_values(r)
    rate = 100.0 / loop.STEP  # tokens per ready pod-second
    assert values[10] == pytest.approx(10.0 - rate * score.RESTART_SECONDS)
    assert sum(values) == pytest.approx(400.0 - rate * score.RESTART_SECONDS)


def test_a_switch_inside_the_engine_is_charged_as_a_restart() -> None:
    # The same accounting for every policy: the in-engine gate's switch costs what the
    # oracle's restart costs, so no policy beats the oracle by how it switches.
    restarted = _run([False] * 40, [1.0] * 10 + [0.0] * 30, [(300.0, "disable")])
    restarted.restart_log = [(300.0, 1)]
    gated = _run([False] * 40, [1.0] * 10 + [0.0] * 30, [(300.0, "disable")])
    gated.switch_log = [(300.0, 1)]
    assert score.step_values(gated) == pytest.approx(score.step_values(restarted))
    r = loop.run("1c3b-conv-a0.45", 4, "in-engine", 0.25)
    assert r.restarts == 0 and [n for _, n in r.switch_log] == [1]


def test_suite_regret_is_a_mean_of_scenarios_per_seed_with_an_interval_over_seeds() -> None:
    runs = []
    for seed, (short, long_) in enumerate([(10.0, 0.0), (20.0, 0.0), (30.0, 0.0)], start=1):
        for case, lost in (("short", short), ("long", long_)):
            o = score.score_run(_run([True] * 10, [1.0] * 10, []))
            p = score.score_run(_run([True] * 10, [1.0] * 10, []))
            p.value = o.value - lost * o.tokens / 100  # `lost` % of the oracle's tokens
            runs += [(case, seed, "oracle", o), (case, seed, "alphagate", p)]
    agg = score.aggregate(runs, ["short", "long"])
    s = next(x for x in agg["summary"] if x["policy"] == "alphagate")
    assert s["regret_pct"] == pytest.approx(10.0)  # seeds: 5, 10, 15
    _, lo, hi = score.mean_interval([5.0, 10.0, 15.0])
    assert (s["regret_lo"], s["regret_hi"]) == pytest.approx((lo, hi))
    assert lo < 10.0 < hi and hi - lo == pytest.approx(2 * 4.303 * 5 / math.sqrt(3), rel=1e-3)
    assert (s["regret_cases"], s["regret_seeds"]) == (2, 3)
    only_short = score.aggregate(runs, ["short"])
    assert next(x for x in only_short["summary"] if x["policy"] == "alphagate")[
        "regret_pct"
    ] == pytest.approx(20.0)


def test_regret_bins_say_where_the_time_was_lost_and_add_up() -> None:
    truth = [True] * 10 + [False] * 30
    on = [1.0] * 14 + [0.0] * 16 + [1.0] * 10
    pol = _run(truth, on, [(14 * loop.STEP, "disable"), (30 * loop.STEP, "enable")])
    pol.restart_log = [(14 * loop.STEP, 1), (30 * loop.STEP, 1)]
    bins = score.regret_bins(pol)
    restart = round((suite.LOAD_SECONDS + loop.WARMUP_SECONDS) / loop.STEP)
    assert bins[10:14] == [1] * 4  # speculating while the truth says off
    assert bins[14 : 15 + restart] == [0] * (restart + 1)  # the rollback's load and warm-up
    assert bins[39] == 1  # the probe speculates below break-even after its warm-up
    mine = score.score_run(pol)
    oracle = score.score_run(_run(truth, [1.0] * 10 + [0.0] * 30, []))
    agg = score.aggregate([("c", 1, "oracle", oracle), ("c", 1, "alphagate", mine)])
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate")
    assert sum(cell["regret_bins_pct"].values()) == pytest.approx(cell["regret_pct"])
    assert cell["regret_bins_pct"]["restart"] > 0
    assert cell["regret_bins_pct"]["below break-even"] > 0


def test_latency_cases_count_confirmed_windows_and_are_not_priced() -> None:
    r = _run([True] * 10 + [False] * 30, [1.0] * 40, [], regression_at=300.0)
    r.case = "1c3b-conv-tail-1.5x-def"
    r.extra = {"latency": [(t, "Pass" if t < 700 else "Inconclusive") for t in r.t]}
    s = score.score_run(r)
    # windows wholly inside the regression: from 600 s; Pass at 600, 630, 660, 690
    assert (s.latency_pass, s.latency_judged) == (4, 20)
    o = score.score_run(_run([True] * 10 + [False] * 30, [1.0] * 10 + [0.0] * 30, []))
    agg = score.aggregate([(r.case, 1, "oracle", o), (r.case, 1, "alphagate", s)])
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate")
    assert cell["latency_confirmed"] == pytest.approx(0.2) and cell["regret_pct"] is None


def test_a_pass_confirms_the_tail_within_only_where_its_quantile_part_showed_it() -> None:
    # A Pass on the exact mean that reports the P99 unresolvable claims nothing of the tail;
    # only a Pass whose quantile part showed "within" confirms it.
    r = _run([True] * 10 + [False] * 30, [1.0] * 40, [], regression_at=300.0)
    r.case = "1c3b-conv-tail-1.5x-def"
    tails = ["unresolvable"] * 30 + ["shown"] * 5 + ["none"] * 5
    r.extra = {"latency": [(t, "Pass", tail) for t, tail in zip(r.t, tails, strict=True)]}
    s = score.score_run(r)
    # judged from 600 s (step 20): 10 unresolvable, 5 shown, 5 with no quantile part
    assert (s.latency_judged, s.latency_pass) == (20, 20)
    assert (s.latency_tail_within, s.latency_unresolvable, s.latency_tail_seen) == (5, 10, 15)
    agg = score.aggregate([(r.case, 1, "alphagate", s)])
    rows = {name: met for name, _, met in checklist.checklist(agg)}
    assert [met for name, met in rows.items() if name.startswith("tail-only 1.5x never")] == [False]
    r.extra = {"latency": [(t, "Pass", "unresolvable") for t in r.t]}
    agg = score.aggregate([(r.case, 1, "alphagate", score.score_run(r))])
    rows = {name: met for name, _, met in checklist.checklist(agg)}
    assert [met for name, met in rows.items() if name.startswith("tail-only 1.5x never")] == [True]


def test_mix_returns_alpha_not_is_scored() -> None:
    assert suite.BY_NAME["1c3b-poisson-mix-returns-alpha-not"].scored


# ---------------------------------------------------------------- Kayenta's judge


def test_kayenta_classifies_a_clear_increase_high_and_noise_pass() -> None:
    base = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.01]
    up = [v * 1.5 for v in base]
    inc = kayenta.Direction.INCREASE
    assert (
        kayenta.classify(up, base, direction=inc, allowed_increase=1.1)
        is kayenta.Classification.HIGH
    )
    small = [v * 1.05 for v in base]
    assert (
        kayenta.classify(small, base, direction=inc, allowed_increase=1.1)
        is kayenta.Classification.PASS
    )
    assert kayenta.classify(base, base, direction=inc) is kayenta.Classification.PASS
    assert kayenta.classify([float("nan")], base, direction=inc) is kayenta.Classification.NODATA
    low = [0.45] * 5 + [0.47] * 5
    dec = kayenta.Direction.DECREASE
    assert kayenta.classify(low, [0.55] * 10, direction=dec) is kayenta.Classification.LOW


def test_kayenta_scores_groups_and_fails_on_missing_data() -> None:
    weights = {"latency": 50.0, "acceptance": 50.0}
    p, h, n = (
        kayenta.Classification.PASS,
        kayenta.Classification.HIGH,
        kayenta.Classification.NODATA,
    )
    assert kayenta.score([("latency", p), ("acceptance", p)], weights) == 100.0
    assert kayenta.score([("latency", h), ("acceptance", p)], weights) == 50.0
    assert kayenta.score([("latency", n), ("acceptance", p)], weights) == 0.0


# ---------------------------------------------------------------- the command

SLICE = (
    "1c3b-conv-a0.45,1c3b-code-a0.62,1c3b-conv-tail-1.5x-geo,day-1c1b-code-a0.57,2c70-conv-a0.62"
)


@pytest.mark.slow
def test_a_slice_of_the_suite_runs_end_to_end_and_reports_the_checklist(tmp_path: Path) -> None:
    assert "decisions" in bench_main.modules()
    argv = ["--cases", SLICE, "--seeds", "1", "--hours", "0.1", "--out", str(tmp_path)]
    assert cli.main([*argv, "--jobs", "2"]) == 0
    data = json.loads((tmp_path / "decisions.json").read_text())
    cells = data["aggregate"]["cells"]
    cases = SLICE.split(",")
    expected = [(c, p) for c in cases for p in (suite.BY_NAME[c].policies or loop.POLICY_NAMES)]
    assert sorted((c["case"], c["policy"]) for c in cells) == sorted(expected)
    for c in cells:
        assert c["seeds"] == 1 and c["exceptions"] == 0
        assert c["detected"] + c["missed"] == c["onsets"]
        assert 0 <= c["wrong_state_pct"] <= 100
    assert data["meta"]["scored"] == ["1c3b-conv-a0.45", "1c3b-code-a0.62", "2c70-conv-a0.62"]
    assert data["meta"]["commit"] and data["aggregate"]["task_failures"] == []
    assert set(data["renderings"]) == set(anchors.RENDERING)
    md = (tmp_path / "decisions.md").read_text()
    checks = md.split("## Done when (issue 21)")[1].split("\n## ")[0]
    rows = [line for line in checks.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 6 and all(r.endswith((" PASS |", " FAIL |", " - |")) for r in rows[1:])
    header = next(line for line in md.splitlines() if line.startswith("| scenario | policy |"))
    assert header.count("|") == len(report.COLUMNS) + 1
    assert (tmp_path / "decisions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = tmp_path / "again"
    assert cli.main(["--from-json", str(tmp_path / "decisions.json"), "--out", str(again)]) == 0
    assert (again / "decisions.md").read_text() == md


def test_the_plan_runs_per_day_cases_on_fewer_seeds_and_heavy_tasks_first() -> None:
    args = cli.parse_args(["--seeds", "3", "--day-seeds", "1"])
    cases, policies, tasks, hours = cli.plan(args)
    assert cases == [c.name for c in suite.SUITE] and policies == list(loop.POLICY_NAMES)
    day = [t for t in tasks if suite.BY_NAME[t[0]].per_day]
    assert {t[1] for t in day} == {1} and all(t[2] == ("oracle", "alphagate") for t in day)
    assert hours["day-16c-conv-a0.57"] == 24.0 and hours["1c3b-conv-a0.7"] == 1.0
    first_seed = [t for t in tasks if t[1] == 1]
    costs = [cli._cost(t) for t in first_seed]
    assert costs == sorted(costs, reverse=True)
    quick = cli.parse_args(["--quick"])
    assert (quick.seeds, quick.day_seeds, quick.hours) == (1, 1, cli.QUICK_HOURS)
    groups = cli.plan(cli.parse_args(["--cases", "latency"]))[0]
    assert groups == list(suite.group_names()["latency"])
    with pytest.raises(SystemExit, match="unknown 'nope'"):
        cli.plan(cli.parse_args(["--cases", "nope"]))


def report_columns() -> tuple[tuple[str, str], ...]:
    from alphagate_lab.bench.decisions import report

    return report.COLUMNS


def test_ktuning_prints_one_row_per_chain_case(capsys: pytest.CaptureFixture[str]) -> None:
    from alphagate_lab.bench.decisions import ktuning

    assert ktuning.main(["--seeds", "1", "--hours", "0.1", "--max-minutes", "5"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("best-k-moves")]
    assert len(rows) == 1 and "K=5" in rows[0]  # 6 minutes: too short to move K
    with pytest.raises(SystemExit):
        ktuning.main(["--seeds", "0"])
