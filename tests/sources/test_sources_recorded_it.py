"""Recorded rates against raw counters, through the core: on the same pods and the same window,
the shipped recording rules give the decision the raw queries give, and recorded rates that do
not reach the window's end give no decision at all.

The real Prometheus scrapes simulated pods every second and evaluates the shipped rules scaled
as shipped (group interval = scrape interval, rate range = three of them: 30 s / 90 s there,
1 s / 3 s here; over two, a pod whose scrape is in flight at every rule evaluation had no
recorded point at all, and the fixture waited for it in vain beside the suite's workers).
Two slices, four canary pods each: one far above the gate (a Pass), one far below it (a Fail
strong enough to roll back alone); every canary is Probing with its warm-up over.

Tolerance, alpha recorded against raw: 0.03. Both sum the same counters; the recorded window
lags the raw one by up to one rule interval and reaches two intervals further back (each point
is a rate over three intervals), so up to 3 s of a 6 s window differ, and the simulator's
per-request acceptance noise (alpha_noise 0.01, some 150 drafts a second per slice) moves
alpha by about 0.01 over 2 s. Everything else typed (action, verdicts, causes) must be equal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    Action,
    CheckKind,
    Evaluation,
    Memory,
    Observation,
    Role,
    Rollout,
    State,
    Verdict,
)
from alphagate.errors import SourceErrorKind
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.promanswers import RECORDED_LAG_EVALUATIONS
from alphagate.sources.prombatch import observe_many
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.promql import recorded_name
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer, available
from fleets import per_slice_fleet, slice_spec

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

RULES = Path(__file__).resolve().parents[2] / "deploy/monitoring/rules/alphagate-batches.yaml"
EVERY = 1  # scrape and rule interval, seconds
INTERVAL = 2.0  # the policy's: two scrapes, so the raw increase() has data
WINDOW = 6.0
ALPHAS = {"good": 0.85, "poor": 0.3}
DRAFTS = recorded_name("vllm:spec_decode_num_drafts_total")
ACCEPTED = recorded_name(vllm.SPEC_ACCEPTED)

SCENARIO = per_slice_fleet(
    "recorded-rates", 16, list(ALPHAS), list(ALPHAS.values()), rate=40, canary_pods=4
)


SPECS = [slice_spec(s, interval=INTERVAL, window=WINDOW) for s in ALPHAS]


def scaled_rules(*, without: str = "") -> str:
    """The shipped rules at this module's pace, less the rule recording `without`."""
    text = (
        RULES.read_text()
        .replace("interval: 30s", f"interval: {EVERY}s")
        .replace("[90s]", f"[{3 * EVERY}s]")
    )
    if not without:
        return text
    doc = yaml.safe_load(text)
    for group in doc["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("record") != without]
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    rules = tmp_path_factory.mktemp("rules") / "alphagate-batches.yaml"
    rules.write_text(scaled_rules())
    prom = PrometheusServer(scrape_interval=EVERY, evaluation_interval=EVERY, rule_files=[rules])
    sim = SimServer(Fleet(SCENARIO), file_sd=prom.targets_path)
    try:
        sim.start()
        prom.start()
        prom.wait_for_targets(10, timeout=40)
        # the recorded rates cover the window for every canary pod: one point per second, one
        # of them allowed missing. Beside the suite's workers a scrape of the simulated pods
        # (1 s timeout) or a rule evaluation runs late now and then: all six on time for all 8
        # pods at once took over 40 s on a clean CI run, and never came in 90 s twice in
        # `make test` (the windows the tests read are their own, later, and tolerate a gap)
        points = int(WINDOW / EVERY) - 1
        prom.wait_for(
            f"count(count_over_time({DRAFTS}[{WINDOW:g}s]) >= {points}) >= 8", timeout=120
        )
        yield prom
    finally:
        prom.close()
        sim.close()


def covered_end(stack: PrometheusServer) -> float:
    """The newest instant every recorded series reaches: the oldest of their newest points.
    Beside the suite's workers the rules or the scrapes run seconds behind now and then, and a
    window past this end is (rightly) held as stale, which is not what these tests ask."""
    every = 'label_replace({__name__=~"alphagate:vllm_.+:rate"}, "rule", "$1", "__name__", "(.+)")'
    got = stack.query(f"min(timestamp({every}))")
    assert got, "no recorded rates at all"
    return min(float(got[0]["value"][1]), time.time() - 1.5)


def probing(spec: SpeculativeCanarySpec, obs: Observation, now: float) -> Evaluation:
    """The evaluation of a canary that is Probing, its warm-up long over."""
    memory = Memory(state=State.PROBING, probe_deadline=now + 900)
    return evaluate(spec, obs, memory, Rollout(completed_at=0.0, speculation_on=True), now=now)


def typed(e: Evaluation) -> tuple[object, ...]:
    """Everything typed about a decision but the numbers."""
    checks = tuple(
        (
            c.kind,
            c.verdict,
            getattr(c.evidence, "no_data", None),
            getattr(c.evidence, "undecided", None),
        )
        for c in e.checks
    )
    cause = e.transition.cause if e.transition else None
    return (e.action, e.verdict, cause, e.target_speculation_on, checks)


def recorded_source(url: str) -> PrometheusSource:
    return PrometheusSource(PrometheusEndpoint(url=url, recorded_rules_interval_seconds=EVERY))


def test_recorded_rates_decide_as_raw_counters_once_they_cover_the_window(
    stack: PrometheusServer,
) -> None:
    end = covered_end(stack)
    start = end - WINDOW
    with PrometheusSource(PrometheusEndpoint(url=stack.url)) as raw:
        want = [raw.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in SPECS]
    with recorded_source(stack.url) as rec:
        assert rec.reads_recorded(INTERVAL) == EVERY
        alone = [rec.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in SPECS]
        batched = observe_many(rec, SPECS, start=start, end=end, interval_seconds=INTERVAL)
    for spec, w, a, b in zip(SPECS, want, alone, batched, strict=True):
        raw_ev, alone_ev, batched_ev = (probing(spec, o, end) for o in (w, a, b))
        assert typed(alone_ev) == typed(raw_ev) == typed(batched_ev)
        assert raw_ev.combined is not None and alone_ev.combined is not None
        assert alone_ev.combined.value == pytest.approx(raw_ev.combined.value, abs=0.03)
        # at least the canary pods: automatic blocks cut each pod by its decode times, and the
        # recorded points fall on other instants than the raw scrapes, so the cuts may differ
        assert alone_ev.combined.batches >= 4 and raw_ev.combined.batches >= 4
    good, poor = (probing(s, o, end) for s, o in zip(SPECS, alone, strict=True))
    # what was decided: far above the gate alpha passes (confirming needs a second judged
    # window); far below it (0.29 against 0.55) one window is decisive: its bound at the joint
    # level of two windows clears the gate on the canary pods' batches
    assert good.checks[0].verdict is Verdict.PASS and good.action is Action.HOLD
    assert poor.verdict is Verdict.FAIL and poor.action is Action.DISABLE


def held_for_stale(obs: Observation, spec: SpeculativeCanarySpec, now: float) -> None:
    """Every pool is a typed `stale` Error, and the canary holds: nothing judged."""
    assert [p.error_kind for p in obs.pools] == [SourceErrorKind.STALE] * 2
    e = probing(spec, obs, now)
    assert e.action is Action.HOLD and e.transition is None
    assert e.verdict is Verdict.ERROR
    assert not [c for c in e.checks if c.verdict in (Verdict.PASS, Verdict.FAIL)]
    assert e.combined is None


def test_recorded_rates_behind_the_window_end_hold_instead_of_judging_older_points(
    stack: PrometheusServer,
) -> None:
    # The window ends 3 s past the newest recorded point, as when the rules run behind:
    # its first half still holds recorded points, which alone would roll the poor canary back.
    end = time.time() + 1.0 + RECORDED_LAG_EVALUATIONS * EVERY
    start = end - WINDOW
    held = stack.query(f"count_over_time({DRAFTS}[{WINDOW:g}s])", at=end)
    assert held and all(float(r["value"][1]) >= 1 for r in held)
    with recorded_source(stack.url) as rec:
        alone = [rec.observe(s, start=start, end=end, interval_seconds=INTERVAL) for s in SPECS]
        batched = observe_many(rec, SPECS, start=start, end=end, interval_seconds=INTERVAL)
    for spec, a, b in zip(SPECS, alone, batched, strict=True):
        held_for_stale(a, spec, end)
        held_for_stale(b, spec, end)


def test_missing_recorded_rates_hold_even_with_points_left_in_the_window(
    stack: PrometheusServer,
) -> None:
    """It removes the rules from the shared Prometheus (what follows puts back its own)."""
    stack.rule_files = []
    stack.reload()
    # the removed group's series are marked stale at once; the raw counters go on
    # (a bounded poll, not a timing: a busy Prometheus is slow)
    stack.wait_for(f"count({DRAFTS})", lambda got: not got, timeout=60)
    end = time.time() - 0.5
    left = stack.query(f"count_over_time({DRAFTS}[{WINDOW:g}s])", at=end)
    assert left, "the window still holds recorded points from before the removal"
    with recorded_source(stack.url) as rec:
        got = [
            rec.observe(s, start=end - WINDOW, end=end, interval_seconds=INTERVAL) for s in SPECS
        ]
    for spec, obs in zip(SPECS, got, strict=True):
        held_for_stale(obs, spec, end)
    with PrometheusSource(PrometheusEndpoint(url=stack.url)) as raw:
        poor = raw.observe(SPECS[1], start=end - WINDOW, end=end, interval_seconds=INTERVAL)
    assert probing(SPECS[1], poor, end).checks[0].kind is CheckKind.ACCEPTANCE
    assert probing(SPECS[1], poor, end).checks[0].verdict is Verdict.FAIL


def test_one_recording_rule_missing_holds_instead_of_reading_its_counter_short(
    stack: PrometheusServer, tmp_path: Path
) -> None:
    """After the removal above, the rules come back but for the accepted-tokens one (a
    hand-edited file): drafts are recorded, accepted tokens are not, and summed as they are
    the good canary's alpha would read 0. Every rule the source reads has its reach checked,
    so both canaries hold on their canary pool, whose reason names the missing rule alone."""
    rules = tmp_path / "alphagate-batches.yaml"
    rules.write_text(scaled_rules(without=ACCEPTED))
    stack.rule_files = [str(rules)]
    stack.reload()
    # recorded again for a few seconds, so the reach is checked on points past the reload
    stack.wait_for(f"count(count_over_time({DRAFTS}[3s]) >= 3) >= 8", timeout=60)
    stack.wait_for(f"count({ACCEPTED})", lambda got: not got, timeout=60)
    end = covered_end(stack)
    with recorded_source(stack.url) as rec:
        alone = [
            rec.observe(s, start=end - WINDOW, end=end, interval_seconds=INTERVAL) for s in SPECS
        ]
        batched = observe_many(rec, SPECS, start=end - WINDOW, end=end, interval_seconds=INTERVAL)
    for spec, a, b in zip(SPECS, alone, batched, strict=True):
        for obs in (a, b):
            # the baseline pods do not speculate: no accepted-tokens counter, nothing missing
            kinds = {p.role: p.error_kind for p in obs.pools}
            assert kinds == {Role.CANARY: SourceErrorKind.STALE, Role.BASELINE: None}
            canary = next(p for p in obs.pools if p.role is Role.CANARY)
            assert canary.error is not None and ACCEPTED in canary.error
            assert DRAFTS not in canary.error
            e = probing(spec, obs, end)
            assert e.action is Action.HOLD and e.transition is None
            assert e.verdict is Verdict.ERROR and e.combined is None
