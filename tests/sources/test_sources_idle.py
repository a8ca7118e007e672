"""An idle speculating canary, and ranges shorter than the scrape interval, are "no data".

A canary that runs --speculative-config but serves nothing exports its spec-decode counters
at zero: that is speculating with no traffic (Inconclusive), never "speculation off", and
`alphagate evaluate` must not propose to enable it. A range that holds fewer than two
scrapes makes every `increase()` empty: the series exist, so it is SPARSE_SCRAPES, typed,
and the scrape interval the source saw comes with the observation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from evaluate_support import POLICY, chat_scenario, scrape_target_args
from typer.testing import CliRunner

from alphagate.cli import app
from alphagate.config import SpeculativeCanarySpec
from alphagate.core import timing
from alphagate.core.evaluate import evaluate
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    CheckKind,
    Memory,
    NoData,
    Role,
    Rollout,
    State,
    Verdict,
)
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.endpoints import PrometheusEndpoint
from alphagate.sources.prometheus import PrometheusSource
from alphagate.sources.promql import parse_duration
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer, available

runner = CliRunner()


def idle_scenario() -> Scenario:
    """A speculating canary and a plain baseline that receive no requests at all."""
    chat = {"alpha": 0.7, "output_tokens": 64, "output_sigma": 0}
    return chat_scenario("idle-canary", seed=3, rate=0.0, chat=chat)


@pytest.fixture
def idle() -> Iterator[SimServer]:
    fleet = Fleet(idle_scenario())
    fleet.advance_to(60.0)
    with SimServer(fleet) as sim:
        yield sim


def _targets(sim: SimServer) -> dict[tuple[str, Role], list[Target]]:
    out: dict[tuple[str, Role], list[Target]] = {}
    for name in sim.ports:
        role = Role.CANARY if "canary" in name else Role.BASELINE
        out.setdefault(("chat", role), []).append(Target(sim.url(name), pod=name))
    return out


def test_evaluate_reports_an_idle_canary_as_speculating_with_no_data(
    tmp_path: Path, idle: SimServer
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    args = scrape_target_args(idle)
    result = runner.invoke(app, ["evaluate", "--policy", str(policy), *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["assumed_state"] == "On"  # the spec-decode series are there, at zero
    canary = next(p for p in data["pools"] if p["role"] == "canary")
    assert canary["speculating"] is True and canary["batches"] == 0
    assert canary["no_data"] == NoData.NO_TRAFFIC.value
    baseline = next(p for p in data["pools"] if p["role"] == "baseline")
    assert baseline["speculating"] is False
    (acc,) = [c for c in data["checks"] if c["kind"] == "acceptance"]
    assert acc["verdict"] == "Inconclusive"
    assert acc["evidence"]["no_data"] == NoData.NO_TRAFFIC.value
    assert data["action"] == "hold" and data["target_speculation_on"] is True


def test_scrape_source_types_first_scrape_and_idle_counters(idle: SimServer) -> None:
    spec = SpeculativeCanarySpec.model_validate({**_spec_doc(), "source": {"kind": "podScrape"}})
    with ScrapeSource(StaticDiscovery(_targets(idle))) as source:
        now = time.time()
        first = source.observe(spec, start=now - 10, end=now, interval_seconds=2.0)
        idle.fleet.advance_to(62.0)
        second = source.observe(spec, start=now - 10, end=now + 2, interval_seconds=2.0)
    for obs, why in ((first, NoData.SPARSE_SCRAPES), (second, NoData.NO_TRAFFIC)):
        canary, baseline = obs.pool("chat", Role.CANARY), obs.pool("chat", Role.BASELINE)
        assert canary is not None and baseline is not None
        assert canary.acceptance == () and canary.spec_series is True and canary.speculating
        assert canary.no_data is why
        assert baseline.spec_series is False and baseline.no_data is None
        assert obs.scrape_interval_seconds == 2.0  # the controller's own cadence


def test_parse_duration() -> None:
    assert parse_duration("15s") == 15.0
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2h") == 7200.0
    assert parse_duration("") is None and parse_duration("15") is None
    assert parse_duration("1m junk") is None


# ---------------------------------------------------------------- the real Prometheus


def _spec_doc() -> dict[str, Any]:
    return {
        "target": {"name": "chat-canary"},
        "baseline": {"name": "chat-baseline"},
        "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
        "slices": [
            {
                "name": "chat",
                "canary": {"matchLabels": {"role": "canary", "slice": "chat"}},
                "baseline": {"matchLabels": {"role": "baseline", "slice": "chat"}},
            }
        ],
        "latency": {"enabled": False},
        # compressed: seconds of a real Prometheus scraping every 2 s
        "timing": {"intervalSeconds": 1, "windowSeconds": 12, "warmupSeconds": 0},
        "source": {"kind": "prometheus", "prometheus": {"timeoutSeconds": 5}},
    }


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed")
def test_prometheus_idle_canary_and_sparse_scrapes_are_typed(tmp_path: Path) -> None:
    fleet = Fleet(idle_scenario())
    prom = PrometheusServer(scrape_interval=2.0)
    sim = SimServer(fleet, file_sd=prom.targets_path)
    try:
        sim.start()
        prom.start()
        prom.wait_for_targets(3, timeout=40)
        # three scrapes of every pod: a 6 s range holds two samples
        prom.wait_for("min(count_over_time(vllm:generation_tokens_total[20s])) >= 4", timeout=40)
        spec = SpeculativeCanarySpec.model_validate(_spec_doc())
        end = time.time()
        with PrometheusSource(PrometheusEndpoint(url=prom.url), backoff_seconds=0.1) as source:
            wide = source.observe(spec, start=end - 12, end=end, interval_seconds=6.0)
            narrow = source.observe(spec, start=end - 12, end=end, interval_seconds=1.0)
        configured = PrometheusEndpoint(url=prom.url, scrape_interval_seconds=7)
        with PrometheusSource(configured, backoff_seconds=0.1) as source:
            told = source.observe(spec, start=end - 12, end=end, interval_seconds=6.0)
        # `alphagate evaluate` over the same Prometheus says the same, and warns
        policy = tmp_path / "policy.yaml"
        doc = yaml.safe_load(POLICY)
        # the same compressed timing as `_spec_doc`
        doc["spec"].update(timing={"intervalSeconds": 1, "windowSeconds": 12, "warmupSeconds": 0})
        doc["spec"]["source"] = {"kind": "prometheus", "prometheus": {}}
        policy.write_text(yaml.safe_dump(doc))
        cli = runner.invoke(
            app, ["evaluate", "--policy", str(policy), "--prometheus", prom.url, "--json"]
        )
    finally:
        prom.close()
        sim.close()

    assert told.scrape_interval_seconds == 7.0  # the admin's word wins
    assert cli.exit_code == 0, cli.output
    data = json.loads(cli.stdout)
    assert data["assumed_state"] == "On" and data["action"] == "hold"
    assert data["scrape_interval_seconds"] == 2.0
    assert {w["problem"] for w in data["timing"]} == {"interval-too-short"}
    for obs, why in ((wide, NoData.NO_TRAFFIC), (narrow, NoData.SPARSE_SCRAPES)):
        assert obs.source_error is None
        assert obs.scrape_interval_seconds == 2.0  # the targets' scrapeInterval
        canary, baseline = obs.pool("chat", Role.CANARY), obs.pool("chat", Role.BASELINE)
        assert canary is not None and baseline is not None and canary.error is None
        assert canary.acceptance == () and canary.spec_series is True
        assert canary.no_data is why, obs
        assert baseline.spec_series is False

    # the core: Inconclusive with the typed cause, never a flip; and the timing advice
    memory = Memory(state=State.ON, since=end - 1000, last_flip_at=end - 1000)
    ev = evaluate(spec, narrow, memory, Rollout(speculation_on=True), now=end)
    (acc,) = [c for c in ev.checks if c.kind is CheckKind.ACCEPTANCE]
    assert acc.verdict is Verdict.INCONCLUSIVE and isinstance(acc.evidence, AcceptanceEvidence)
    assert acc.evidence.no_data is NoData.SPARSE_SCRAPES
    assert ev.action is Action.HOLD and ev.target_speculation_on
    problems = {w.problem for w in timing.advise(spec, narrow.scrape_interval_seconds)}
    assert timing.TimingProblem.INTERVAL_TOO_SHORT in problems
