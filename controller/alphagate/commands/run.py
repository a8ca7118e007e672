"""`alphagate run`: the long-running controller; SIGTERM/SIGINT stop it cleanly, releasing the
Lease. The controller and its sources (aiohttp) are imported when it runs, not for `--help` or
the CLI's help."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import typer

from alphagate.commands.kubeopts import CONTEXT, KUBECONFIG, SERVER
from alphagate.kube.apibudget import (
    DEFAULT_CANARY,
    DEFAULT_NAMESPACE,
    DEFAULT_OVERALL,
    BudgetConfig,
    Rate,
)
from alphagate.kube.coordination import DEFAULT_LEASE_NAME

SIGNAL_POLL_SECONDS = 0.2  # how soon the main thread sees a SIGTERM/SIGINT it was sent


def run(
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="Watch one namespace (default: all namespaces)."
    ),
    selector: str | None = typer.Option(
        None, "--selector", "-l", help="Only canaries with these labels (shard the work)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Decide and record for every canary, never patch."
    ),
    leader_elect: bool = typer.Option(
        True, "--leader-elect/--no-leader-elect", help="Leader election on a Lease."
    ),
    shards: int = typer.Option(
        0,
        "--shards",
        min=0,
        max=1024,
        help="Split the canaries into this many shards, one Lease each, shared by every "
        "replica (instead of one leader); 0: off.",
    ),
    lease_namespace: str | None = typer.Option(
        None, "--lease-namespace", help="Namespace of the Lease (default: the pod's own)."
    ),
    lease_name: str = typer.Option(DEFAULT_LEASE_NAME, "--lease-name"),
    lease_duration: float = typer.Option(15.0, "--lease-duration", min=1.0),
    renew_deadline: float = typer.Option(10.0, "--renew-deadline", min=0.1),
    retry_period: float = typer.Option(2.0, "--retry-period", min=0.05),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Bind address (0.0.0.0 in a pod)."
    ),
    metrics_port: int = typer.Option(8080, "--metrics-port", help="/metrics, /healthz, /readyz."),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="Use the service account."),
    watch_timeout: float = typer.Option(60.0, "--watch-timeout", min=1.0),
    exit_after: float | None = typer.Option(
        None, "--exit-after", help="Stop after this many seconds (demos and tests)."
    ),
    log_format: str = typer.Option("auto", "--log-format", help="json, console or auto."),
    log_level: str = typer.Option("INFO", "--log-level"),
    config_file: Path | None = typer.Option(
        None,
        "--config",
        help="Controller config (YAML): the Prometheus endpoints policies may name, with URLs "
        "and credentials.",
    ),
    prometheus_url: str | None = typer.Option(
        None,
        "--prometheus-url",
        help="Shorthand for one Prometheus endpoint named `default`, without credentials.",
    ),
    prometheus_scrape_interval: float | None = typer.Option(
        None,
        "--prometheus-scrape-interval",
        min=1.0,
        max=3600.0,
        help=(
            "Seconds between the --prometheus-url Prometheus's scrapes of vLLM (else read from "
            "its targets API): policies whose interval or window span fewer than two get a "
            "TimingFits=False warning."
        ),
    ),
    api_qps: float = typer.Option(
        DEFAULT_OVERALL.per_second,
        "--api-qps",
        min=0.0,
        help="Kubernetes API requests a second for the whole controller (0: no limit).",
    ),
    api_burst: int = typer.Option(DEFAULT_OVERALL.burst, "--api-burst", min=1),
    api_namespace_qps: float = typer.Option(
        DEFAULT_NAMESPACE.per_second,
        "--api-namespace-qps",
        min=0.0,
        help="API requests a second for the canaries of one namespace together (0: no limit).",
    ),
    api_namespace_burst: int = typer.Option(
        DEFAULT_NAMESPACE.burst, "--api-namespace-burst", min=1
    ),
    api_canary_qps: float = typer.Option(
        DEFAULT_CANARY.per_second,
        "--api-canary-qps",
        min=0.0,
        help="API requests a second for one canary (0: no limit); a canary that spends it is "
        "evaluated late, alone, with WithinApiBudget=False.",
    ),
    api_canary_burst: int = typer.Option(
        DEFAULT_CANARY.burst,
        "--api-canary-burst",
        min=1,
        help="At least one evaluation of the largest canary (64 slices: 258 requests).",
    ),
    verdict_api_auth: str = typer.Option(
        "tokenreview",
        "--verdict-api-auth",
        help="tokenreview: callers of /api/v1/ send a bearer token the API server reviews and "
        "see the namespaces RBAC lets them read; none: anyone who reaches the port reads every "
        "watched namespace's verdicts (Flagger's webhooks send no token).",
    ),
    server: str | None = SERVER,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
) -> None:
    """Run the controller: watch SpeculativeCanary resources and gate speculation."""
    from alphagate import logs
    from alphagate.sources.endpoints import SourcesConfig
    from alphagate.sources.endpoints import load as load_sources

    if log_format not in ("json", "console", "auto"):
        raise typer.BadParameter("one of json, console, auto", param_hint="--log-format")
    logs.configure(fmt=log_format, level=log_level)  # type: ignore[arg-type]
    if verdict_api_auth not in ("tokenreview", "none"):
        raise typer.BadParameter("tokenreview or none", param_hint="--verdict-api-auth")
    sources = load_sources(config_file) if config_file is not None else SourcesConfig()
    if prometheus_url is not None:
        single = (
            SourcesConfig.single(prometheus_url)
            if prometheus_scrape_interval is None
            else SourcesConfig.single(
                prometheus_url, scrapeIntervalSeconds=prometheus_scrape_interval
            )
        )
        sources = sources.merged(single)
    from alphagate.shell.controller import Controller, RunOptions  # once the options are valid

    opts = RunOptions(
        server=server,
        kubeconfig=kubeconfig,
        context=context,
        in_cluster=True if in_cluster else None,
        namespace=namespace,
        selector=selector,
        dry_run=dry_run,
        leader_elect=leader_elect,
        shards=shards,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        watch_timeout=watch_timeout,
        sources=sources,
        api_budget=BudgetConfig(
            overall=_rate(api_qps, api_burst),
            namespace=_rate(api_namespace_qps, api_namespace_burst),
            canary=_rate(api_canary_qps, api_canary_burst),
        ),
        verdict_auth=verdict_api_auth,
    )
    controller = Controller(opts).start()
    received = StopSignals()
    previous = {s: signal.signal(s, received) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        deadline = None if exit_after is None else time.monotonic() + exit_after
        while not received and not controller.wait(SIGNAL_POLL_SECONDS):
            if deadline is not None and time.monotonic() >= deadline:
                break
        if received:
            logs.get("controller").info("signal", signal=signal.Signals(received[0]).name)
    finally:
        controller.stop(release=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


class StopSignals(list[int]):
    """The SIGTERM/SIGINT received, for the main thread to act on. The handler only notes it:
    it runs on the main thread between any two bytecodes, maybe while that thread holds the
    log's write lock or an Event's (neither reentrant), so logging or setting an Event from it
    could wait for itself forever."""

    def __call__(self, signum: int, _frame: Any) -> None:
        self.append(signum)


def _rate(qps: float, burst: int) -> Rate | None:
    """0 requests a second: not enforced."""
    return Rate(qps, burst) if qps > 0 else None


def register(app: typer.Typer) -> None:
    app.command("run")(run)
