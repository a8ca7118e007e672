"""The demo's parts that take some wiring: which metrics source it uses, the Prometheus that
scrapes the pods, and the controller, configured as an admin would configure it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.demo.inputs import HOST, SourceChoice, free_port


def pick_source(choice: SourceChoice, binary: str | None) -> str:
    """prometheus when asked for (or, on auto, when its binary is there), else podScrape."""
    if choice == "scrape":
        return "podScrape"
    if choice == "prometheus":
        if binary is None:
            raise SandboxError(
                "--source prometheus: no prometheus binary (install Debian's `prometheus` "
                "package, or set ALPHAGATE_PROMETHEUS, or use --source scrape)"
            )
        return "prometheus"
    return "prometheus" if binary is not None else "podScrape"


def prometheus_for(
    binary: str | None, *, interval_wall: float, metrics_port: int, workdir: Path
) -> Any:
    """A Prometheus (not started) scraping the pods a few times per interval and the
    controller's /metrics on `metrics_port` once per interval, its data in `workdir`.

    The controller's gauges change once per evaluation, so a scrape per interval sees each;
    scraped with the pods (five times a second at 4x) its page cost a tenth of the demo's CPU.
    """
    from alphagate_lab.testing.prometheus import PrometheusServer

    scrape = max(0.2, min(1.0, round(interval_wall / 3, 3)))
    controller_scrape = max(scrape, round(interval_wall, 3))
    prom = PrometheusServer(
        binary=binary,
        scrape_interval=scrape,
        evaluation_interval=max(scrape, 1.0),
        port=free_port(),
        scrape_configs=[
            {
                "job_name": "alphagate",
                "scrape_interval": f"{max(1, round(controller_scrape * 1000))}ms",
                "static_configs": [{"targets": [f"{HOST}:{metrics_port}"]}],
            }
        ],
    )
    prom.workdir = workdir
    prom.workdir.mkdir()
    return prom


def controller_for(
    api_url: str,
    namespace: str,
    metrics_port: int,
    prometheus_url: str | None,
    *,
    on_outcome: Callable[[Any], None],
) -> Any:
    """The controller `alphagate run` starts, pointed at the double, with the demo's
    Prometheus as its one endpoint (the policy names it, never its URL)."""
    from alphagate.shell.controller import Controller, RunOptions
    from alphagate.sources.endpoints import SourcesConfig

    opts = RunOptions(
        server=api_url,
        namespace=namespace,
        leader_elect=False,
        metrics_host=HOST,
        metrics_port=metrics_port,
        watch_timeout=30.0,
        sources=(
            SourcesConfig.single(prometheus_url, timeout_seconds=30.0)
            if prometheus_url is not None
            else SourcesConfig()
        ),
    )
    return Controller(opts, on_outcome=on_outcome)
