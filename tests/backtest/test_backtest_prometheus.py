"""Backtest over a range of the real Prometheus (1 s scrapes) that scraped simulated vLLM pods.

The fleet serves alpha 0.75, then 0.30 once Prometheus holds enough history. When Prometheus
holds the whole range, the backtest reads it at every step with the controller's own PromQL and
must decide: probe and confirm before the drop, never disable before it, and disable within a
bounded time after. About 30 s (Prometheus needs ~5 s before its first scrape).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from alphagate.config import SpeculativeCanarySpec
from alphagate.sources.endpoints import PrometheusEndpoint as PrometheusSettings
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.backtest import run_range
from alphagate_lab.commands import backtest as backtest_command
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import Scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing.prometheus import PrometheusServer, available

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

SPEED = 2.0  # simulated seconds per wall second: more counts per scrape
BEFORE = 12.0  # wall seconds before alpha drops from 0.75 to 0.30 (a whole judged window
# after the probe confirms it, with a window of room for late scrapes) ...
AFTER = 10.0  # ... and after
STEP = 2.0
WINDOW = 6.0

SCENARIO = Scenario.model_validate(
    {
        "name": "backtest-prometheus",
        "seed": 5,
        "tick": 0.5,
        "traffic": {"rate": 30},
        # Alike requests of one length: this test is about the Prometheus path, and its
        # 12-simulated-second windows must not carry realistic per-request spread.
        "slices": {
            "chat": {"alpha": 0.75, "output_tokens": 64, "output_sigma": 0, "request_spread": 1e4}
        },
        "pools": [
            {
                "name": "chat-canary",
                "role": "canary",
                "slice": "chat",
                "replicas": 2,
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
            },
            {"name": "chat-baseline", "role": "baseline", "slice": "chat", "replicas": 2},
        ],
    }
)


def policy(url: str) -> dict[str, Any]:
    return {
        "apiVersion": "alphagate.io/v1alpha1",
        "kind": "SpeculativeCanary",
        "metadata": {"name": "prom-backtest"},
        "spec": {
            "target": {"name": "chat-canary"},
            "baseline": {"name": "chat-baseline"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"slice": "chat", "role": "canary"}},
                    "baseline": {"matchLabels": {"slice": "chat", "role": "baseline"}},
                }
            ],
            # a recording of minutes: one judged window decides, on a hundred drafts
            "acceptance": {"minDrafts": 100, "consecutiveWindows": 1},
            "latency": {"enabled": False},
            "timing": {
                "intervalSeconds": STEP,  # compressed: the test runs minutes at most
                "windowSeconds": WINDOW,  # compressed with the interval
                "warmupSeconds": 0,  # sandbox pods need no warm-up
                "minDwellSeconds": 0,  # flips follow the verdicts at once
                "maxFlipsPerHour": 60,  # the flip budget is not under test here
                "cooldown": {"initialSeconds": 3600},  # compressed (12-24 h in the policies)
            },
            "source": {"kind": "prometheus", "prometheus": {"timeoutSeconds": 5}},
        },
    }


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[PrometheusServer, float, float, float]]:
    """(prometheus, range start, drop time, range end), wall clock; Prometheus still running."""
    prom = PrometheusServer(scrape_interval=1.0)
    fleet = Fleet(SCENARIO, start_epoch=time.time())
    sim = SimServer(fleet, speed=SPEED, file_sd=prom.targets_path)
    try:
        sim.start()
        prom.start()
        prom.wait_for_targets(4, timeout=40)
        # Enough history before the drop for a probe and its confirmation: poll until
        # Prometheus holds BEFORE seconds of canary samples.
        prom.wait_for(
            f'min(count_over_time(vllm:spec_decode_num_drafts_total{{role="canary"}}[1m])) '
            f">= {BEFORE + 2}",
            timeout=BEFORE + 30,
        )
        with sim.lock:
            sim.sync()
            fleet.slices["chat"] = fleet.slices["chat"].model_copy(update={"alpha": 0.30})
            drop = time.time()
        start, end = drop - BEFORE, drop + AFTER
        # Poll until Prometheus has scraped past the end of the range; the fleet keeps serving.
        prom.wait_for(
            f"min(timestamp(vllm:generation_tokens_total)) >= {end + 1}",
            timeout=AFTER + 30,
        )
        yield prom, start, drop, end
    finally:
        prom.close()
        sim.close()


def test_backtest_over_a_prometheus_range_disables_after_the_drop(
    recorded: tuple[PrometheusServer, float, float, float],
) -> None:
    prom, start, drop, end = recorded
    spec = SpeculativeCanarySpec.model_validate(policy(prom.url)["spec"])
    with PrometheusSource(PrometheusSettings(url=prom.url), backoff_seconds=0.1) as source:
        result = run_range(spec, source, start=start, end=end, step=STEP)
    points = result.units[0].points
    assert len(points) == int((end - start) / STEP + 1e-6) + 1
    flips = [(p.at, p.action) for p in points if p.action in ("enable", "disable")]
    enables = [t for t, a in flips if a == "enable"]
    disables = [t for t, a in flips if a == "disable"]

    assert enables and enables[0] < drop, flips
    assert any(p.state == "On" and p.at < drop for p in points), "never confirmed before drop"
    assert all(t > drop for t in disables), f"disabled while alpha was 0.75: {flips}"
    # All batches in the window come from after the drop by drop + WINDOW; one more step to
    # evaluate and one for the scrape and `increase()` edges.
    assert disables and disables[0] <= drop + WINDOW + 2 * STEP, (flips, drop)
    assert points[-1].state == "RolledBack"

    before = [p.alphas["chat"].value for p in points if "chat" in p.alphas and p.at < drop - 1]
    assert before and all(abs(a - 0.75) < 0.08 for a in before), before
    judged = [p for p in points if p.at > drop + WINDOW + 1 and "chat" in p.alphas]
    assert all(abs(p.alphas["chat"].value - 0.30) < 0.08 for p in judged), judged


def test_cli_over_the_same_range_gives_the_same_transitions(
    recorded: tuple[PrometheusServer, float, float, float], tmp_path: Path
) -> None:
    prom, start, _, end = recorded
    import yaml

    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy("http://127.0.0.1:1")), encoding="utf-8")
    app = typer.Typer()
    backtest_command.register(app)

    @app.callback()
    def _root() -> None:
        """Keep `backtest` a subcommand."""

    args = ["backtest", "-p", str(path), "--prometheus", prom.url, "--start", repr(start)]
    args += ["--end", repr(end), "--step", f"{STEP:g}s", "--json"]
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["source"]["kind"] == "range" and data["source"]["url"] == prom.url
    transitions = [t["transition"] for t in data["units"][0]["transitions"]]
    assert transitions[:2] == ["Off -> Probing", "Probing -> On"]
    assert "On -> RolledBack" in transitions
    assert "truth" not in data["units"][0]  # a Prometheus range carries no truth
    assert json.loads(second.stdout)["units"] == data["units"]  # same range, same decisions
