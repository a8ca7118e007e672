"""End to end with a real Prometheus: it scrapes simulated vLLM pods (canary speculating,
baseline plain) and the controller's exporter, evaluates the shipped recording and alerting
rules, and every dashboard panel's query returns data.

The exporter is fed real Evaluations: the Prometheus source reads the pools from this very
Prometheus, the decision core judges them, and a manual disable gives a real transition.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ship_support as ship
import yaml

from alphagate import config
from alphagate.core.evaluate import evaluate
from alphagate.core.insights import analyse
from alphagate.core.model import Command, Memory, Rollout, State
from alphagate.shell import exporter, shard_metrics
from alphagate.shell import server as metrics_server
from alphagate.sources.endpoints import SourcesConfig
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import parse_scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.testing import prometheus as testprom

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

NAMESPACE = "llm"
CANARY = "chat"
SPEED = 20.0  # simulated seconds per real second: requests finish within a scrape or two

SCENARIO = """
name: ship-dashboards
seed: 11
duration: 2h
traffic: {rate: 12}
slices:
  chat: {share: 1.0, alpha: 0.7, prompt_tokens: 128, output_tokens: 64}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 1}
  - name: chat-canary
    role: canary
    slice: chat
    replicas: 1
    speculative_config: {method: eagle3, model: x/EAGLE3-head, num_speculative_tokens: 4}
"""


def _policy(url: str) -> config.SpeculativeCanary:
    return config.parse(
        {
            "apiVersion": config.API_VERSION,
            "kind": config.KIND,
            "metadata": {"name": CANARY, "namespace": NAMESPACE},
            "spec": {
                "target": {"name": "chat-canary"},
                "baseline": {"name": "chat-baseline"},
                "speculativeConfig": {
                    "method": "eagle3",
                    "model": "x/eagle3",
                    "num_speculative_tokens": 4,
                },
                "slices": [
                    {
                        "name": "chat",
                        "canary": {"matchLabels": {"slice": "chat", "role": "canary"}},
                        "baseline": {"matchLabels": {"slice": "chat", "role": "baseline"}},
                    }
                ],
                "acceptance": {"minDrafts": 1},  # any drafts: the test reads the series
                # one pod per role: its 5 s blocks are the latency batches (60 s > the window)
                "latency": {"minCount": 1, "batchSeconds": 5},  # seconds-long test: see above
                # compressed: seconds of a real Prometheus, no rollout to warm up after
                "timing": {"intervalSeconds": 5, "windowSeconds": 20, "warmupSeconds": 0},
                "source": {"kind": "prometheus", "prometheus": {}},
            },
        }
    )


def _fast_rules(tmp: Path) -> list[Path]:
    """The shipped rule files with every group evaluated each second (same expressions)."""
    out = []
    for path in ship.RULES:
        doc = ship.yaml_load(path.read_text())
        for group in doc["groups"]:
            group["interval"] = "1s"
        copy = tmp / path.name
        copy.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(copy)
    return out


def _finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result if "value" in r)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not testprom.available():
        pytest.skip("prometheus binary missing: apt-get install --no-install-recommends prometheus")
    tmp = tmp_path_factory.mktemp("ship-prometheus")
    recorder = exporter.Recorder(shard_metrics.new_registry())
    recorder.set_leader(True)
    recorder.track(namespace=NAMESPACE, canary=CANARY)
    # as a sharded replica (run --shards 4) holding shards 0 and 2: the shard panel has data
    recorder.set_shards(4, lambda: frozenset({0, 2}), lambda ns, name: 0)
    sim = SimServer(Fleet(parse_scenario(SCENARIO)), speed=SPEED)
    with sim, metrics_server.serve(0, recorder.registry) as metrics:
        # What the PodMonitor's labelmap gives in a cluster: pod labels on every series.
        targets = []
        for group in sim.targets():
            labels = dict(group["labels"])
            labels["namespace"] = NAMESPACE
            targets.append({"targets": group["targets"], "labels": labels})
        # What the ServiceMonitor gives: target labels of the controller pod (its own
        # namespace) and the ServiceMonitor's honorLabels.
        (monitor,) = ship.load_all(ship.DEPLOY / "monitoring" / "servicemonitor.yaml")
        (endpoint,) = monitor["spec"]["endpoints"]
        controller_job = {
            "job_name": "alphagate-metrics",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "static_configs": [
                {
                    "targets": [f"127.0.0.1:{metrics.port}"],
                    "labels": {"namespace": "alphagate-system", "pod": "alphagate-controller-0"},
                }
            ],
        }
        with testprom.PrometheusServer(
            targets=targets,
            scrape_configs=[controller_job],
            rule_files=_fast_rules(tmp),
            scrape_interval=1.0,
            evaluation_interval=1.0,
        ) as prom:
            prom.wait_for("alphagate_leader", timeout=30)
            prom.wait_for(
                'namespace_model_slice_role:vllm_request_time_per_output_token_seconds:p99_rate5m{role="baseline"}',
                _finite,
                timeout=60,
            )
            prom.wait_for(
                "namespace_model_slice:vllm_request_time_per_output_token_seconds_p99:canary_over_baseline",
                _finite,
                timeout=60,
            )
            yield {"prom": prom, "recorder": recorder, "sim": sim}


def _evaluate_into(stack: dict[str, Any]) -> list[Any]:
    """Two real evaluations of the policy over the live Prometheus, recorded by the exporter:
    a normal one while On, then a manual disable (a transition)."""
    prom, recorder = stack["prom"], stack["recorder"]
    canary = _policy(prom.url)
    spec = canary.spec
    out = []
    memory = Memory(state=State.ON, since=time.time() - 3600)
    rollout = Rollout(in_progress=False, completed_at=time.time() - 3600, speculation_on=True)
    with PrometheusSource.from_spec(spec, SourcesConfig.single(str(prom.url))) as source:
        # Two batches per pool need a whole window of history: wait (bounded) until the core
        # can measure the speed-up, so every panel has something to show.
        deadline = time.monotonic() + 3 * spec.timing.window_seconds
        while time.monotonic() < deadline:
            now = time.time()
            observation = source.observe(
                spec,
                start=now - spec.timing.window_seconds,
                end=now,
                interval_seconds=spec.timing.interval_seconds,
            )
            probe = evaluate(spec, observation, memory, rollout, now=now)
            if any(getattr(c.evidence, "speedup", None) is not None for c in probe.checks):
                break
            time.sleep(1.0)
        for command in (None, Command.DISABLE):
            now = time.time()
            started = time.perf_counter()
            observation = source.observe(
                spec,
                start=now - spec.timing.window_seconds,
                end=now,
                interval_seconds=spec.timing.interval_seconds,
            )
            ev = evaluate(spec, observation, memory, rollout, now=now, command=command)
            insights = analyse(spec, observation, estimates=ev.estimates, combined=ev.combined)
            recorder.record(
                ev,
                namespace=NAMESPACE,
                canary=CANARY,
                duration_seconds=time.perf_counter() - started,
                speculation_on=rollout.speculation_on,
                spec=spec,
                insights=insights,
            )
            out.append(ev)
            memory = ev.memory
            if command is None and ev.verdict_age_seconds is not None:
                # while On the age is exported; let Prometheus scrape it before the disable
                # removes it, so the verdict-age panel has a sample in its range
                prom.wait_for(f'alphagate_verdict_age_seconds{{canary="{CANARY}"}}', timeout=30)
    return out


def test_every_dashboard_panel_query_returns_data(stack: dict[str, Any]) -> None:
    evaluations = _evaluate_into(stack)
    first, disable = evaluations
    assert first.estimates, f"the core found no alpha: {first.reason}"
    assert 0.5 < first.estimates["chat"].value < 0.9  # the simulated 0.7
    assert disable.transition is not None
    prom = stack["prom"]
    prom.wait_for(f'alphagate_state{{canary="{CANARY}",state="RolledBack"}} == 1', timeout=30)
    prom.wait_for("alphagate_evaluation_duration_seconds_count", timeout=30)

    queries = [(where, ship.substitute(expr)) for _, where, expr in ship.dashboard_queries()]
    missing: dict[str, str] = {}
    deadline = time.monotonic() + 60
    pending = dict(queries)
    while pending and time.monotonic() < deadline:
        for where, expr in list(pending.items()):
            if _finite(prom.query(expr)):
                del pending[where]
        if pending:
            time.sleep(0.5)
    missing = pending
    assert not missing, "panels without data:\n" + "\n".join(
        f"  {w}: {e}" for w, e in missing.items()
    )


def test_dashboard_variables_have_values(stack: dict[str, Any]) -> None:
    prom = stack["prom"]
    prom.wait_for("alphagate_slice_weight_ratio", timeout=60)
    for _, name, selector in ship.variable_queries():
        result = prom.query(ship.substitute(selector))
        assert result, f"variable {name}: {selector} selects nothing"


def test_shipped_rules_evaluate_without_errors(stack: dict[str, Any]) -> None:
    """Every recording and alerting rule ran against real series with health ok."""
    prom = stack["prom"]
    deadline = time.monotonic() + 30
    while True:
        groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        assert time.monotonic() < deadline, "rules never evaluated"
        time.sleep(0.5)
    shipped = {
        r.get("alert") or r.get("record")
        for path in ship.RULES
        for g in ship.yaml_load(path.read_text())["groups"]
        for r in g["rules"]
    }
    assert {r["name"] for r in rules} == shipped
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not bad
    recorded = [r["name"] for r in rules if r["type"] == "recording"]
    empty = [name for name in recorded if not prom.query(name)]
    # the per-slice alpha, P99s and their ratio exist for the simulated pair
    assert not empty, f"recording rules with no series: {empty}"
    alpha = prom.query(
        'namespace_model_slice_role:vllm_spec_decode_alpha:ratio_rate5m{role="canary"}'
    )
    assert 0.5 < float(alpha[0]["value"][1]) < 0.9


def test_grafana_and_prometheus_alert_queries_run(stack: dict[str, Any]) -> None:
    prom = stack["prom"]
    for rule in ship.grafana_alert_rules():
        prom.query(rule["data"][0]["model"]["expr"])  # raises on a query error
