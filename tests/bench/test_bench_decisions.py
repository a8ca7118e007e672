"""The decision benchmark: its closed loop, its scores, the Kayenta judge, and a --quick smoke
run whose table has the promised shape (no speed is asserted)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from alphagate_lab.bench import __main__ as bench_main
from alphagate_lab.bench.decisions import cli, kayenta, loop, score, suite
from alphagate_lab.bench.decisions.loop import RunResult
from alphagate_lab.sim.fleet import Fleet

# ---------------------------------------------------------------- closed loop


def test_a_flip_restarts_the_canary_pods_and_changes_what_they_serve() -> None:
    # Alpha 0.45 is below the gate: the oracle turns speculation off at its first decision.
    r = loop.run("stationary-0.45", 3, "oracle", 0.25)
    case = suite.BY_NAME["stationary-0.45"]
    assert r.flips == [(30.0, "disable")]
    assert r.restarts == case.canaries
    # While the pods load they serve nothing; once back they serve without speculation.
    loading = [tok for t, tok in zip(r.t, r.tokens, strict=True) if 30 < t <= 30 + 60]
    assert loading and all(tok == 0 for tok in loading)
    assert r.on[-1] == 0.0 and r.drafts[-1] == 0.0 and r.tokens[-1] > 0


def test_policies_meet_the_same_streams_until_they_act() -> None:
    # Nothing flips at alpha 0.70 for the oracle or Argo: both runs are the same fleet.
    a = loop.run("stationary-0.70", 5, "oracle", 0.25)
    b = loop.run("stationary-0.70", 5, "argo-rollouts", 0.25)
    assert a.flips == b.flips == []
    assert a.tokens == b.tokens


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

    def decide(self, ctx: loop.Ctx) -> loop.Want:
        return loop.Want(True, k=2 if ctx.t >= 60 else None)


def test_a_new_k_restarts_the_canary_pods_at_that_k(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "make_policy", lambda name, seed, k=suite.K: _Retune())
    (r,) = loop.run_group("best-k-moves", 2, ["retune-stub"], 0.1)
    case = suite.BY_NAME["best-k-moves"]
    assert r.flips == [(60.0, "retune")] and r.restarts == case.canaries
    loading = [tok for t, tok in zip(r.t, r.tokens, strict=True) if 60 < t <= 60 + 60]
    assert loading and all(tok == 0 for tok in loading)
    assert r.on[-1] == 1.0 and r.drafts[-1] > 0  # back, speculating at the new K


@pytest.mark.slow
def test_a_group_run_is_each_policys_own_run() -> None:
    # Policies share one fleet until each acts; then each continues on its own copy. The
    # result must be exactly the run each would have alone.
    names = ["oracle", "argo-rollouts", "in-engine"]
    group = loop.run_group("stationary-0.45", 6, names, 0.2)
    assert [r.policy for r in group] == names
    assert all(r.flips for r in group)  # every one of them acts: each on its own copy
    for r in group:
        alone = loop.run("stationary-0.45", 6, r.policy, 0.2)
        assert (r.flips, r.restarts, r.tokens, r.on) == (
            alone.flips,
            alone.restarts,
            alone.tokens,
            alone.on,
        )


@pytest.mark.slow
def test_argo_aborts_on_low_alpha_and_never_re_enables() -> None:
    r = loop.run("step-0.70-0.40", 2, "argo-rollouts", 1.0)
    assert [kind for _, kind in r.flips] == ["disable"]
    t_step = 0.25 * 3600
    # Four failed measurements of 1 m each are tolerated (failureLimit 3): not before the 4th.
    assert r.flips[0][0] >= t_step + 4 * 60


def test_the_in_engine_gate_turns_speculation_off_without_a_restart() -> None:
    r = loop.run("stationary-0.45", 4, "in-engine", 0.25)
    assert r.restarts == 0
    assert r.on[-1] == 0.0
    assert (
        sum(kind == "disable" for _, kind in r.flips) == suite.BY_NAME["stationary-0.45"].canaries
    )


# ---------------------------------------------------------------- scores


def _run(should_on: list[bool], on: list[float], flips: list[tuple[float, str]]) -> RunResult:
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
        tokens=[1.0] * n,
        drafts=[10.0] * n,
        flips=flips,
    )


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


def test_coverage_counts_every_honest_interval_not_only_the_decisive_ones() -> None:
    # Three intervals the core stood behind (two in the band: Inconclusive, one decisive that
    # missed) and one window with a single batch ([0, 1], no interval). Counting only the
    # decisive one reads 0%; the target counts all three with two batches or more: 2 of 3.
    r = _run([True] * 20, [1.0] * 20, [])
    r.intervals = [
        (300.0, 0.65, 0.75, 0.0, 2, True, False),
        (330.0, 0.66, 0.74, 30.0, 2, True, False),
        (360.0, 0.71, 0.72, 60.0, 2, True, True),
        (390.0, 0.0, 1.0, 90.0, 1, False, False),
    ]
    s = score.score_run(r)
    assert (s.intervals, s.covered) == (3, 2)
    assert (s.decisive, s.covered_decisive, s.insufficient) == (1, 0, 1)
    agg = score.aggregate([("c", 1, "alphagate", s)])
    cell = agg["cells"][0]
    assert cell["coverage"] == pytest.approx(2 / 3)
    assert cell["decisive_coverage"] == 0.0
    assert cell["insufficient_windows"] == 1


def test_the_window_truth_is_the_expected_alpha_of_the_drafts_inside_it() -> None:
    # Window (60, 120]: steps at 90 and 120 (the step at 60 covers the tick before the
    # window). Set alpha 0.4 then 0.7, with 30 and 10 draft tokens: the pooled ratio the
    # counters converge to is (0.4 * 30 + 0.7 * 10) / 40 = 0.475, not the time mean 0.55.
    r = _run([True] * 5, [1.0] * 5, [])
    r.alpha = [0.9, 0.9, 0.9, 0.4, 0.7]
    r.drafts = [5.0, 5.0, 5.0, 30.0, 10.0]
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx(0.475)
    # What the drafts were drawn to have, when the run recorded it, wins over the set alpha:
    # requests admitted before a change keep their acceptance (the counters lag the change).
    r.drafted_alpha = [0.9, 0.9, 0.9, 0.8, 0.7]
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx((0.8 * 30 + 0.7 * 10) / 40)
    r.drafts = [0.0] * 5  # nothing drafted: the plain mean of the set alpha
    r.drafted_alpha = [math.nan] * 5
    assert score.window_truth(r, 60.0, 120.0) == pytest.approx(0.55)
    assert math.isnan(score.window_truth(r, 200.0, 300.0))


def test_after_a_step_the_drafts_lag_the_set_alpha() -> None:
    # The simulator's expected acceptance of the drafts (the coverage score's truth): the set
    # alpha in steady state; just after alpha steps down, requests in flight keep the old one.
    hours = 0.5
    fleet = Fleet(suite.BY_NAME["step-0.70-0.40"].scenario(hours), seed=3, tick=loop.TICK)
    step = 0.25 * hours * 3600
    seen: dict[float, list[float]] = {}
    while fleet.now + loop.TICK <= step + 600:
        fleet.step()
        canaries = [p for p in fleet.pods.values() if p.spec.role == "canary"]
        seen[fleet.now] = [p.truth.drafted_alpha for p in canaries if p.truth is not None]
    assert seen[step - 60] == pytest.approx([0.70, 0.70], abs=1e-9)
    assert all(0.40 + 0.02 < d < 0.70 for d in seen[step + 30])
    assert seen[step + 600] == pytest.approx([0.40, 0.40], abs=1e-3)


def test_regret_is_the_oracles_tokens_minus_the_policys() -> None:
    oracle = score.score_run(_run([True] * 10, [1.0] * 10, []))
    worse = score.score_run(_run([True] * 10, [1.0] * 10, []))
    worse.tokens = oracle.tokens - 2.5
    agg = score.aggregate([("c", 1, "oracle", oracle), ("c", 1, "alphagate", worse)])
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate")
    assert cell["regret_tokens"] == pytest.approx(2.5)
    assert cell["regret_pct"] == pytest.approx(100 * 2.5 / oracle.tokens)


# ---------------------------------------------------------------- Kayenta's judge


def test_kayenta_classifies_a_clear_increase_high_and_noise_pass() -> None:
    base = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.01]
    up = [v * 1.5 for v in base]
    inc = kayenta.Direction.INCREASE
    assert (
        kayenta.classify(up, base, direction=inc, allowed_increase=1.1)
        is kayenta.Classification.HIGH
    )
    # Significant but below the allowed effect size: Pass.
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


@pytest.mark.slow
def test_quick_run_writes_the_table_json_and_png(tmp_path: Path) -> None:
    assert "decisions" in bench_main.modules()
    assert cli.main([*cli.QUICK_ARGS, "--out", str(tmp_path), "--jobs", "2"]) == 0
    data = json.loads((tmp_path / "decisions.json").read_text())
    cases = [c.name for c in suite.SUITE]
    policies = list(loop.POLICY_NAMES)
    cells = data["aggregate"]["cells"]
    assert [(c["case"], c["policy"]) for c in cells] == [(c, p) for c in cases for p in policies]
    for c in cells:
        assert c["seeds"] == 2
        assert c["false_flips_per_day"] >= 0 and c["restarts_per_day"] >= 0
        assert 0 <= c["wrong_state_pct"] <= 100
        assert c["detected"] + c["missed"] == c["onsets"]
    assert [s["policy"] for s in data["aggregate"]["summary"]] == policies
    assert set(data["aggregate"]["coverage"]) <= set(cases) and data["aggregate"]["coverage"]
    assert set(data["renderings"]) == {
        p for p in policies if p != "oracle" and "alphagate" not in p
    }
    md = (tmp_path / "decisions.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and " | " in line]
    header = next(line for line in rows if line.startswith("| scenario | policy |"))
    assert header.count("|") == 2 + len(report_columns()) + 1
    for case in cases:
        for policy in policies:
            assert any(line.startswith(f"| {case} | {policy} |") for line in rows)
    targets = md.split("## alphagate against issue 12's targets")[1].split("\n## ")[0]
    assert sum(line.endswith((" yes |", " no |")) for line in targets.splitlines()) >= 8
    assert (tmp_path / "decisions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


# ---------------------------------------------------------------- per-day figures over a day


def test_per_day_targets_run_a_simulated_day_unless_hours_overrides() -> None:
    names = [c.name for c in suite.SUITE]
    own = cli.case_hours(cli.parse_args([]).hours, names)
    assert own["stationary-0.45"] == own["drift"] == suite.DAY == 24.0
    assert own["stationary-0.70"] == suite.HOURS
    assert set(cli.case_hours(cli.parse_args(["--hours", "0.5"]).hours, names).values()) == {0.5}
    assert set(cli.case_hours(cli.parse_args(["--quick"]).hours, names).values()) == {0.2}


def test_rollouts_and_pod_restarts_are_counted_apart_and_regret_is_a_mean_of_scenarios() -> None:
    truth = [True] * 10 + [False] * 30
    r = _run(truth, [1.0] * 14 + [0.0] * 26, [(14 * loop.STEP, "disable")])
    r.restarts = 2  # one rollout of two canary pods
    s = score.score_run(r)
    oracle = score.score_run(_run(truth, [1.0] * 10 + [0.0] * 30, [(10 * loop.STEP, "disable")]))
    long_oracle = score.score_run(_run([True] * 400, [1.0] * 400, []))
    long = score.score_run(_run([True] * 400, [1.0] * 400, []))
    long.tokens = long_oracle.tokens  # no regret on the long scenario
    s.tokens = oracle.tokens * 0.9  # 10% on the short one
    agg = score.aggregate(
        [
            ("short", 1, "oracle", oracle),
            ("short", 1, "alphagate", s),
            ("long", 1, "oracle", long_oracle),
            ("long", 1, "alphagate", long),
        ]
    )
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate" and c["case"] == "short")
    assert cell["flips_per_day"] == pytest.approx(1 / s.days)
    assert cell["restarts_per_day"] == pytest.approx(2 / s.days)
    summary = next(x for x in agg["summary"] if x["policy"] == "alphagate")
    # each scenario counts once: (10% + 0%) / 2, not the token-pooled 10% x 40 / 440
    assert summary["regret_pct"] == pytest.approx(5.0)
    assert summary["regret_pooled_pct"] == pytest.approx(100 * 0.1 * 40 / 440)


def test_regret_bins_say_where_the_tokens_were_lost_and_add_up() -> None:
    truth = [True] * 10 + [False] * 30
    # the policy rolls back at step 14 (four steps speculating below break-even), then
    # probes at step 30 (a restart while the truth says off)
    on = [1.0] * 14 + [0.0] * 16 + [1.0] * 10
    pol = _run(truth, on, [(14 * loop.STEP, "disable"), (30 * loop.STEP, "enable")])
    bins = score.regret_bins(pol)
    restart = round((suite.LOAD_SECONDS + loop.WARMUP_SECONDS) / loop.STEP)
    assert bins[10:14] == [1] * 4  # speculating while the truth says off
    assert bins[14 : 15 + restart] == [0] * (restart + 1)  # the rollback's load and warm-up
    assert bins[30 : 31 + restart] == [0] * (restart + 1)
    assert bins[40 - 1] == 1  # the probe speculates below break-even after its warm-up
    mine = score.score_run(pol)
    mine.step_tokens = [1.0 if b == 3 else 0.5 for b in bins]
    mine.tokens = sum(mine.step_tokens)
    oracle = score.score_run(_run(truth, [1.0] * 10 + [0.0] * 30, [(10 * loop.STEP, "disable")]))
    agg = score.aggregate([("c", 1, "oracle", oracle), ("c", 1, "alphagate", mine)])
    cell = next(c for c in agg["cells"] if c["policy"] == "alphagate")
    assert sum(cell["regret_bins_pct"].values()) == pytest.approx(cell["regret_pct"])
    assert cell["regret_bins_pct"]["same state"] == pytest.approx(0.0)
    assert cell["regret_bins_pct"]["restart"] > 0
