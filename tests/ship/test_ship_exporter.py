"""The controller's own metrics: names, labels, bounded cardinality, leader-only gauges, HTTP."""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from alphagate.config import LatencyMetric
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    Alert,
    Cause,
    CheckKind,
    CheckResult,
    Estimate,
    Evaluation,
    LatencyEvidence,
    Memory,
    PoolLatency,
    SpeedUp,
    State,
    Transition,
    Verdict,
)
from alphagate.errors import SourceErrorKind
from alphagate.kube.apibudget import BudgetScope
from alphagate.shell import exporter, metric_names
from alphagate.shell import server as metrics_server


def _estimate(value: float, lower: float, upper: float, drafts: float = 400.0) -> Estimate:
    return Estimate(
        value=value,
        lower=lower,
        upper=upper,
        confidence=0.95,
        drafts=drafts,
        draft_tokens=drafts * 4,
        accepted_tokens=drafts * 4 * value,
        batches=8,
        method="batch-means",
    )


def evaluation(
    *,
    at: float = 1_800_000_000.0,
    slices: dict[str, float] | None = None,
    verdict: Verdict = Verdict.FAIL,
    state: State = State.ROLLED_BACK,
    transition: bool = True,
    error_streak: int = 0,
    alerts: tuple[Alert, ...] = (),
) -> Evaluation:
    """A rollback of a canary whose code slice fell below the gate."""
    alphas = slices if slices is not None else {"chat": 0.7, "code": 0.4}
    estimates = {s: _estimate(a, a - 0.05, a + 0.05) for s, a in alphas.items()}
    weights = {s: 1.0 / len(alphas) for s in alphas}
    checks = tuple(
        CheckResult(
            kind=CheckKind.ACCEPTANCE,
            slice=s,
            verdict=Verdict.FAIL if a < 0.55 else Verdict.PASS,
            reason=f"alpha {a}",
            evidence=AcceptanceEvidence(
                disable_below=0.55, enable_above=0.6, min_drafts=100, estimate=estimates[s]
            ),
        )
        for s, a in alphas.items()
    ) + tuple(
        CheckResult(
            kind=CheckKind.LATENCY,
            slice=s,
            verdict=Verdict.PASS,
            reason="p99 within 10%",
            evidence=LatencyEvidence(
                metric=LatencyMetric.PER_TOKEN,
                quantile=0.99,
                max_regression_ratio=0.1,
                significance=0.01,
                min_count=100,
                canary=PoolLatency(1000, 0.011, 0.01, 0.025),
                baseline=PoolLatency(1000, 0.01, 0.005, 0.01),
                speedup=SpeedUp(
                    value=1.25,
                    lower=1.2,
                    upper=1.3,
                    confidence=0.95,
                    canary_mean=0.008,
                    baseline_mean=0.01,
                    canary_count=1000,
                    baseline_count=1000,
                    dof=9,
                    p_regressed=1.0,
                ),
            ),
        )
        for s in alphas
    )
    t = (
        Transition(from_state=State.ON, to_state=state, reason="alpha fell", at=at)
        if transition
        else None
    )
    return Evaluation(
        at=at,
        estimates=estimates,
        weights=weights,
        combined=_estimate(0.55, 0.5, 0.6),
        checks=checks,
        verdict=verdict,
        action=Action.DISABLE if transition else Action.HOLD,
        reason="alpha upper bound 0.45 below disable threshold 0.55 on slice code",
        memory=Memory(state=state, error_streak=error_streak),
        transition=t,
        target_speculation_on=False,
        alerts=alerts,
    )


def scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client import generate_latest

    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, (
        f"{name}{labels} missing; have {sorted(k for k in samples if k[0] == name)}"
    )
    return samples[key]


@pytest.fixture
def recorder() -> exporter.Recorder:
    r = exporter.Recorder(CollectorRegistry())
    r.set_leader(True)
    return r


def test_record_exports_every_named_metric(recorder: exporter.Recorder) -> None:
    recorder.record(
        evaluation(alerts=(Alert.FLIP_BUDGET,)),
        namespace="llm",
        canary="chat",
        duration_seconds=0.02,
        speculation_on=False,
    )
    recorder.source_error(SourceErrorKind.TIMEOUT, namespace="llm", canary="chat")
    recorder.source_error(None, namespace="llm", canary="chat")
    s = scrape(recorder.registry)
    c = {"namespace": "llm", "canary": "chat"}
    assert value(s, "alphagate_alpha_ratio", **c, slice="code") == pytest.approx(0.4)
    assert value(s, "alphagate_alpha_lower_ratio", **c, slice="code") == pytest.approx(0.35)
    assert value(s, "alphagate_alpha_upper_ratio", **c, slice="chat") == pytest.approx(0.75)
    assert value(s, "alphagate_combined_alpha_ratio", **c) == pytest.approx(0.55)
    assert value(s, "alphagate_combined_alpha_upper_ratio", **c) == pytest.approx(0.6)
    assert value(s, "alphagate_alpha_gate_ratio", **c, bound="disable") == 0.55
    assert value(s, "alphagate_alpha_gate_ratio", **c, bound="enable") == 0.6
    assert value(s, "alphagate_window_drafts", **c, slice="chat") == 400
    assert value(s, "alphagate_slice_weight_ratio", **c, slice="chat") == 0.5
    assert value(
        s,
        "alphagate_itl_quantile_seconds",
        **c,
        slice="code",
        role="canary",
        metric="per_token",
        quantile="0.99",
    ) == pytest.approx(0.011)
    assert value(s, "alphagate_latency_ratio", **c, slice="code") == pytest.approx(1.1)
    assert value(s, "alphagate_measured_speedup_ratio", **c, slice="code") == pytest.approx(1.25)
    assert value(s, "alphagate_measured_speedup_lower_ratio", **c, slice="chat") == 1.2
    assert value(s, "alphagate_measured_speedup_upper_ratio", **c, slice="chat") == 1.3
    assert value(s, "alphagate_state", **c, state="RolledBack") == 1
    assert value(s, "alphagate_state", **c, state="On") == 0
    assert value(s, "alphagate_speculation_enabled", **c) == 0
    assert value(s, "alphagate_check_verdict", **c, check="acceptance:code", verdict="Fail") == 1
    assert value(s, "alphagate_check_verdict", **c, check="acceptance:code", verdict="Pass") == 0
    assert (
        value(s, "alphagate_decisions_total", **c, action="disable", reason="fail_acceptance") == 1
    )
    assert value(s, "alphagate_transitions_total", **c, from_state="On", to_state="RolledBack") == 1
    assert value(s, "alphagate_source_errors_total", **c, kind="timeout") == 1
    assert value(s, "alphagate_source_errors_total", **c, kind="unknown") == 1
    assert value(s, "alphagate_evaluation_duration_seconds_count", **c) == 1
    assert value(s, "alphagate_last_evaluation_timestamp_seconds", **c) == 1_800_000_000.0
    assert value(s, "alphagate_last_success_timestamp_seconds", **c) == 1_800_000_000.0
    assert value(s, "alphagate_error_streak", **c) == 0
    assert value(s, "alphagate_leader") == 1
    assert value(s, "alphagate_alert", **c, condition="flip-budget") == 1
    # counters start at 0 so increase() sees the first event
    assert value(s, "alphagate_source_errors_total", **c, kind="unreachable") == 0
    assert value(s, "alphagate_transitions_total", **c, from_state="Off", to_state="Probing") == 0
    names = {name for name, _ in s}
    # verdict age: only while a unit judges (Probing, On); test_verdict_age_follows_the_core
    only_on_demand = {
        "alphagate_predicted_speedup_ratio",
        "alphagate_spec_invalid",
        "alphagate_verdict_age_seconds",
        "alphagate_timing_problem",  # only while the timing does not fit the scrapes
    }
    only_on_demand |= {metric_names.SHARDS, metric_names.SHARD_HELD, metric_names.SHARD_UNITS}
    only_on_demand |= metric_names.INSIGHT_NAMES  # given with insights (core.insights)
    missing = {n for n in metric_names.METRIC_NAMES if n not in only_on_demand} - names
    assert not missing
    # Warning Event counters start at 0 too
    assert value(s, "alphagate_warnings_total", **c, reason="PatchFailed") == 0


def test_a_sharded_replica_exports_its_shards_and_their_units(
    recorder: exporter.Recorder,
) -> None:
    assert not any(n.startswith("alphagate_shard") for n, _ in scrape(recorder.registry))
    held = {frozenset({1, 3})}
    shard = {"a": 1, "b": 3, "c": 2}  # c's shard is another replica's
    recorder.set_shards(4, lambda: next(iter(held)), lambda ns, name: shard[name])
    for canary in ("a", "b/chat", "b/code", "c"):  # b is perSlice: two units
        recorder.record(
            evaluation(), namespace="llm", canary=canary, duration_seconds=0.01,
            speculation_on=True,
        )  # fmt: skip
    s = scrape(recorder.registry)
    assert value(s, "alphagate_shards") == 4
    assert {dict(k)["shard"] for n, k in s if n == "alphagate_shard_held"} == {"1", "3"}
    assert value(s, "alphagate_shard_units", shard="1") == 1
    assert value(s, "alphagate_shard_units", shard="3") == 2
    # a rebalance shows at the next scrape: shard 3 lost, its canary forgotten
    held.clear()
    held.add(frozenset({1}))
    recorder.forget([("llm", "b")])
    s = scrape(recorder.registry)
    assert {dict(k)["shard"] for n, k in s if n == "alphagate_shard_held"} == {"1"}
    assert value(s, "alphagate_shard_units", shard="1") == 1


def test_warning_events_count_and_an_invalid_spec_shows_until_evaluated(
    recorder: exporter.Recorder,
) -> None:
    c = {"namespace": "llm", "canary": "chat"}
    recorder.track(**c)
    recorder.warning_event(namespace="llm", name="chat", reason="Forbidden")
    recorder.warning_event(namespace="llm", name="chat", reason="Forbidden")
    recorder.warning_event(namespace="llm", name="chat", reason="InvalidSpec")
    s = scrape(recorder.registry)
    assert value(s, "alphagate_warnings_total", **c, reason="Forbidden") == 2
    assert value(s, "alphagate_warnings_total", **c, reason="PatchFailed") == 0
    assert value(s, "alphagate_spec_invalid", **c) == 1
    # a perSlice unit of the same canary evaluated: the spec parses again
    recorder.record(
        evaluation(), namespace="llm", canary="chat/code", duration_seconds=0.01,
        speculation_on=False,
    )  # fmt: skip
    s = scrape(recorder.registry)
    assert ("alphagate_spec_invalid", frozenset(c.items())) not in s
    recorder.warning_event(namespace="llm", name="chat", reason="InvalidSpec")
    recorder.forget([(c["namespace"], c["canary"])])
    s = scrape(recorder.registry)
    assert not [k for k in s if k[0] in ("alphagate_spec_invalid", "alphagate_warnings_total")]


def test_vanished_slice_series_are_removed(recorder: exporter.Recorder) -> None:
    recorder.record(
        evaluation(), namespace="llm", canary="chat", duration_seconds=0.01, speculation_on=False
    )
    recorder.record(
        evaluation(slices={"chat": 0.7}, transition=False, state=State.ON, verdict=Verdict.PASS),
        namespace="llm",
        canary="chat",
        duration_seconds=0.01,
        speculation_on=True,
    )
    s = scrape(recorder.registry)
    slices = {dict(labels).get("slice") for name, labels in s if name == "alphagate_alpha_ratio"}
    assert slices == {"chat"}
    checks = {dict(lb)["check"] for n, lb in s if n == "alphagate_check_verdict"}
    assert checks == {"acceptance:chat", "latency:chat"}
    assert value(s, "alphagate_speculation_enabled", namespace="llm", canary="chat") == 1


def test_error_keeps_last_success_time_and_counts_streak(recorder: exporter.Recorder) -> None:
    recorder.record(
        evaluation(at=100.0), namespace="n", canary="c", duration_seconds=0.0, speculation_on=True
    )
    failed = evaluation(at=200.0, verdict=Verdict.ERROR, transition=False, error_streak=3)
    recorder.record(failed, namespace="n", canary="c", duration_seconds=0.0, speculation_on=True)
    s = scrape(recorder.registry)
    assert value(s, "alphagate_last_evaluation_timestamp_seconds", namespace="n", canary="c") == 200
    assert value(s, "alphagate_last_success_timestamp_seconds", namespace="n", canary="c") == 100
    assert value(s, "alphagate_error_streak", namespace="n", canary="c") == 3
    assert (
        value(
            s, "alphagate_decisions_total", namespace="n", canary="c", action="hold", reason="error"
        )
        == 1
    )


def test_losing_leadership_drops_per_canary_gauges(recorder: exporter.Recorder) -> None:
    recorder.record(
        evaluation(), namespace="llm", canary="chat", duration_seconds=0.01, speculation_on=False
    )
    recorder.set_leader(False)
    s = scrape(recorder.registry)
    assert value(s, "alphagate_leader") == 0
    assert not [n for n, _ in s if n in ("alphagate_state", "alphagate_alpha_ratio")]
    # counters stay: increase() over them must not see a reset
    assert (
        value(
            s,
            "alphagate_transitions_total",
            namespace="llm",
            canary="chat",
            from_state="On",
            to_state="RolledBack",
        )
        == 1
    )


def test_forget_drops_every_series_of_a_deleted_canary(recorder: exporter.Recorder) -> None:
    for canary in ("a", "a/chat", "ab", "b"):
        recorder.record(
            evaluation(), namespace="n", canary=canary, duration_seconds=0.01, speculation_on=False
        )
    recorder.api_deferred(BudgetScope.CANARY, namespace="n", canary="a")
    recorder.api_deferred(BudgetScope.NAMESPACE, namespace="n", canary="b")
    assert value(scrape(recorder.registry), metric_names.API_DEFERRALS, namespace="n",
                 canary="a", scope="canary") == 1  # fmt: skip
    recorder.forget([("n", "a")])  # and its perSlice unit a/chat, not ab
    s = scrape(recorder.registry)
    assert {dict(lb).get("canary") for _, lb in s} - {None} == {"ab", "b"}
    assert recorder.canaries() == [("n", "ab"), ("n", "b")]


def test_reason_label_is_a_bounded_kind_not_the_sentence(recorder: exporter.Recorder) -> None:
    for verdict in Verdict:
        recorder.record(
            evaluation(verdict=verdict, transition=False, state=State.ON),
            namespace="n",
            canary="c",
            duration_seconds=0.0,
            speculation_on=True,
        )
    recorder.record(
        evaluation(state=State.PAUSED, transition=False),
        namespace="n",
        canary="c",
        duration_seconds=0.0,
        speculation_on=True,
    )
    s = scrape(recorder.registry)
    reasons = {dict(lb)["reason"] for n, lb in s if n == "alphagate_decisions_total"}
    assert reasons <= set(metric_names.REASON_KINDS)
    assert reasons == {"pass", "fail_acceptance", "inconclusive", "error", "paused"}


def test_non_finite_estimates_are_not_exported(recorder: exporter.Recorder) -> None:
    ev = evaluation(slices={"chat": float("nan")}, transition=False)
    recorder.record(ev, namespace="n", canary="c", duration_seconds=0.0, speculation_on=True)
    s = scrape(recorder.registry)
    assert not [n for n, _ in s if n == "alphagate_alpha_ratio"]
    assert value(s, "alphagate_window_drafts", namespace="n", canary="c", slice="chat") == 400


def test_gate_from_spec_and_speedup_from_the_core(recorder: exporter.Recorder) -> None:
    from alphagate import config

    spec = config.SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "canary"},
            "baseline": {"name": "baseline"},
            "speculativeConfig": {
                "method": "eagle3",
                "model": "x/eagle3",
                "num_speculative_tokens": 4,
            },
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"a": "b"}},
                    "baseline": {"matchLabels": {"a": "c"}},
                }
            ],
            "acceptance": {"disableBelow": 0.5, "enableAbove": 0.65},
            "source": {"kind": "prometheus", "prometheus": {}},
        }
    )
    ev = evaluation(transition=False)
    ev = Evaluation(
        **{**{f: getattr(ev, f) for f in ev.__slots__}, "checks": (), "predicted_speedup": 1.23}
    )
    recorder.record(
        ev, namespace="n", canary="c", duration_seconds=0.0, speculation_on=True, spec=spec
    )
    s = scrape(recorder.registry)
    assert value(s, "alphagate_alpha_gate_ratio", namespace="n", canary="c", bound="disable") == 0.5
    assert value(s, "alphagate_alpha_gate_ratio", namespace="n", canary="c", bound="enable") == 0.65
    # the exporter shows the core's number; it computes none of its own
    assert value(s, "alphagate_predicted_speedup_ratio", namespace="n", canary="c") == 1.23


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_server_serves_metrics_and_probes(recorder: exporter.Recorder) -> None:
    now = [0.0]
    health = metrics_server.Health(stale_after_seconds=60, clock=lambda: now[0])
    with metrics_server.serve(0, recorder.registry, health=health) as server:
        assert server.host == "127.0.0.1"
        status, body = _get(server.url + "/metrics")
        assert status == 200 and "alphagate_leader 1.0" in body
        assert _get(server.url + "/healthz")[0] == 200
        status, body = _get(server.url + "/readyz")
        assert status == 503 and "starting" in body
        health.set_ready(True)
        assert _get(server.url + "/readyz")[0] == 200
        now[0] = 61.0  # the control loop stopped beating
        status, body = _get(server.url + "/healthz")
        assert status == 503 and "silent" in body
        assert _get(server.url + "/readyz")[0] == 503
        health.beat()
        assert _get(server.url + "/healthz")[0] == 200
        assert _get(server.url + "/nope")[0] == 404


def test_reason_kinds_for_manual_budget_and_pause() -> None:
    ev = evaluation(transition=False, verdict=Verdict.FAIL, alerts=(Alert.FLIP_BUDGET,))
    assert metric_names.reason_kind(ev) == "flip_budget"

    def with_transition(cause: Cause, reason: str) -> Evaluation:
        t = Transition(from_state=State.ON, to_state=State.OFF, reason=reason, at=1.0, cause=cause)
        return Evaluation(**{**{f: getattr(ev, f) for f in ev.__slots__}, "transition": t})

    # the cause decides, whatever the sentence says
    assert metric_names.reason_kind(with_transition(Cause.MANUAL, "by alice")) == "manual"
    assert metric_names.reason_kind(with_transition(Cause.REFUSED, "no")) == "manual"
    assert (
        metric_names.reason_kind(with_transition(Cause.POLICY_FAIL, "manual: x"))
        == "fail_acceptance"
    )
    assert metric_names.reason_kind(evaluation(transition=False, state=State.PAUSED)) == "paused"


@pytest.mark.parametrize(
    ("metric", "label"),
    [
        (LatencyMetric.PER_TOKEN, "per_token"),
        (LatencyMetric.PER_STEP_SCALED, "per_step_scaled"),
        (LatencyMetric.PER_STEP_ABSOLUTE, "per_step"),
    ],
)
def test_latency_metric_label(metric: LatencyMetric, label: str) -> None:
    assert metric_names.latency_metric_label(metric) == label


def test_single_slice_checks_without_suffix_are_labelled_with_the_slice(
    recorder: exporter.Recorder,
) -> None:
    ev = evaluation(slices={"chat": 0.7}, transition=False, state=State.ON, verdict=Verdict.PASS)
    unsuffixed = tuple(dataclasses.replace(c, slice=None) for c in ev.checks)
    ev = Evaluation(**{**{f: getattr(ev, f) for f in ev.__slots__}, "checks": unsuffixed})
    recorder.record(ev, namespace="n", canary="c", duration_seconds=0.0, speculation_on=True)
    s = scrape(recorder.registry)
    assert value(s, "alphagate_latency_ratio", namespace="n", canary="c", slice="chat") == (
        pytest.approx(1.1)
    )
    assert (
        value(
            s, "alphagate_check_verdict", namespace="n", canary="c", check="latency", verdict="Pass"
        )
        == 1
    )


def test_verdict_age_follows_the_core(recorder: exporter.Recorder) -> None:
    """alphagate_verdict_age_seconds: exported while a unit judges, gone when it stops."""
    judging = dataclasses.replace(evaluation(), verdict_age_seconds=1234.0)
    recorder.record(
        judging, namespace="llm", canary="chat", duration_seconds=0.01, speculation_on=True
    )
    s = scrape(recorder.registry)
    assert value(s, "alphagate_verdict_age_seconds", namespace="llm", canary="chat") == 1234.0
    recorder.record(
        evaluation(), namespace="llm", canary="chat", duration_seconds=0.01, speculation_on=False
    )
    s = scrape(recorder.registry)
    assert not [k for k in s if k[0] == "alphagate_verdict_age_seconds"]


def test_timing_problems_show_while_they_hold(recorder: exporter.Recorder) -> None:
    """alphagate_timing_problem: 1 per current problem, removed once it clears or the canary
    is forgotten (set every evaluation by shell.timing_warnings)."""
    recorder.timing(
        namespace="llm", canary="chat", problems=["interval-too-short", "window-too-short"]
    )
    recorder.timing(namespace="llm", canary="code", problems=["window-too-short"])
    s = scrape(recorder.registry)
    assert value(s, "alphagate_timing_problem", namespace="llm", canary="chat",
                 problem="interval-too-short") == 1  # fmt: skip
    recorder.timing(namespace="llm", canary="chat", problems=["window-too-short"])
    s = scrape(recorder.registry)
    shown = {(dict(k[1])["canary"], dict(k[1])["problem"]) for k in s
             if k[0] == "alphagate_timing_problem"}  # fmt: skip
    assert shown == {("chat", "window-too-short"), ("code", "window-too-short")}
    recorder.timing(namespace="llm", canary="chat", problems=[])
    recorder.forget([("llm", "code")])
    s = scrape(recorder.registry)
    assert not [k for k in s if k[0] == "alphagate_timing_problem"]
