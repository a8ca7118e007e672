"""`alphagate run`: the long-running controller (what the Deployment in deploy/ starts).

It wires the parts together: a Kubernetes client (in-cluster, kubeconfig or `--server`), the
reconciler (watch + per-canary interval), leader election on a Lease (on by default: a standby
replica keeps its cache warm and takes over within the lease duration), the exporter's metrics
with `/healthz` and `/readyz`, and JSON logs. SIGTERM stops it cleanly and releases the Lease.
`Controller` is the same thing as an object, for tests and the demo.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from alphagate import logs
from alphagate.commands.control import CONTEXT, KUBECONFIG, SERVER
from alphagate.exporter import Health, Recorder, new_registry, serve
from alphagate.kube.client import Kube, load_configuration
from alphagate.kube.events import EventRecorder
from alphagate.kube.lease import DEFAULT_LEASE_NAME, LeaderElector, default_identity
from alphagate.reconciler import Outcome, Reconciler, SourceFactory
from alphagate.verdicts import VerdictApi


def _pod_namespace() -> str:
    """The controller's own namespace in a cluster (for the Lease), else `default`."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"


@dataclass
class RunOptions:
    """Everything `alphagate run` can be told."""

    server: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool | None = None
    namespace: str | None = None  # None: all namespaces
    selector: str | None = None
    dry_run: bool = False
    leader_elect: bool = True
    lease_namespace: str | None = None
    lease_name: str = DEFAULT_LEASE_NAME
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8080
    serve_metrics: bool = True
    watch_timeout: float = 60.0


class Controller:
    """One controller replica: reconciler + leader election + metrics/health server."""

    def __init__(
        self,
        opts: RunOptions,
        *,
        kube: Kube | None = None,
        source_factory: SourceFactory | None = None,
        registry: Any = None,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.opts = opts
        self.kube = kube or Kube.from_configuration(
            load_configuration(
                server=opts.server,
                kubeconfig=opts.kubeconfig,
                context=opts.context,
                in_cluster=opts.in_cluster,
            )
        )
        self.identity = opts.identity or default_identity()
        # process metrics (CPU, memory, open files, GC) for the controller's own dashboard row
        self.registry = registry if registry is not None else new_registry(process=True)
        self.recorder = Recorder(self.registry)
        self.health = Health(stale_after_seconds=max(60.0, 4 * opts.watch_timeout))
        self.health.set_ready(False, "initial list of SpeculativeCanary resources pending")
        self.events = EventRecorder(
            self.kube.api_client,
            instance=self.identity,
            on_warning=lambda ref, reason: self.recorder.warning_event(
                namespace=ref.namespace, name=ref.name, reason=reason
            ),
        )
        self.reconciler = Reconciler(
            self.kube,
            source_factory=source_factory,
            recorder=self.recorder,
            events=self.events,
            namespace=opts.namespace,
            label_selector=opts.selector,
            dry_run=opts.dry_run,
            watch_timeout_seconds=opts.watch_timeout,
            health=self.health,
            on_outcome=on_outcome,
        )
        self.elector: LeaderElector | None = None
        if opts.leader_elect:
            self.reconciler.leading.clear()
            self.elector = LeaderElector(
                self.kube.api_client,
                namespace=opts.lease_namespace or _pod_namespace(),
                name=opts.lease_name,
                identity=self.identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                on_started_leading=self._started_leading,
                on_stopped_leading=self._stopped_leading,
            )
            self.reconciler.may_act = lambda: self.elector is not None and self.elector.is_leader
        else:
            self.recorder.set_leader(True)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server: Any = None
        self._log = logs.get("controller").bind(identity=self.identity)

    # ------------------------------------------------------------ leadership

    def _started_leading(self) -> None:
        self._log.info("leading")
        self.reconciler.forget_memories()  # resume from the cluster, not from a stale cache
        self.recorder.set_leader(True)
        self.reconciler.leading.set()
        self.reconciler.wake()

    def _stopped_leading(self) -> None:
        self._log.warning("not_leading")
        self.reconciler.leading.clear()
        self.recorder.set_leader(False)

    @property
    def is_leader(self) -> bool:
        return self.reconciler.leading.is_set()

    # ------------------------------------------------------------ lifecycle

    @property
    def metrics_url(self) -> str:
        if self.server is None:
            raise RuntimeError("metrics server not started")
        return str(self.server.url)

    def start(self) -> Controller:
        if self.opts.serve_metrics:
            self.server = serve(
                self.opts.metrics_port,
                self.registry,
                self.opts.metrics_host,
                health=self.health,
                # each canary's verdict as JSON, for Argo Rollouts and Flagger (any replica)
                api=VerdictApi(self.kube, namespace=self.opts.namespace),
            )
            self._log.info("metrics_listening", url=self.server.url)
        run = threading.Thread(
            target=self.reconciler.run, args=(self._stop,), daemon=True, name="alphagate-loop"
        )
        ready = threading.Thread(
            target=self._ready_when_synced, daemon=True, name="alphagate-ready"
        )
        self._threads = [run, ready]
        for t in self._threads:
            t.start()
        if self.elector is not None:
            self.elector.start()
        self._log.info(
            "started",
            namespace=self.opts.namespace or "*",
            selector=self.opts.selector,
            leader_elect=self.opts.leader_elect,
            dry_run=self.opts.dry_run,
        )
        return self

    def _ready_when_synced(self) -> None:
        while not self._stop.is_set():
            if self.reconciler.synced.wait(0.2):
                self.health.set_ready(True)
                return

    def stop(self, *, release: bool = True, timeout: float = 10.0) -> None:
        """Stop; `release=False` leaves the Lease to expire (what a crash looks like)."""
        if self.elector is not None:
            self.elector.stop(release=release)
        self.reconciler.leading.clear()
        self._stop.set()
        self.reconciler.wake()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        if self.server is not None:
            self.server.close()
            self.server = None
        self.kube.close()
        self._log.info("stopped")

    def wait(self, timeout: float | None = None) -> bool:
        return self._stop.wait(timeout)

    def request_stop(self) -> None:
        self._stop.set()
        self.reconciler.wake()


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
    server: str | None = SERVER,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
) -> None:
    """Run the controller: watch SpeculativeCanary resources and gate speculation."""
    if log_format not in ("json", "console", "auto"):
        raise typer.BadParameter("one of json, console, auto", param_hint="--log-format")
    logs.configure(fmt=log_format, level=log_level)  # type: ignore[arg-type]
    opts = RunOptions(
        server=server,
        kubeconfig=kubeconfig,
        context=context,
        in_cluster=True if in_cluster else None,
        namespace=namespace,
        selector=selector,
        dry_run=dry_run,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        watch_timeout=watch_timeout,
    )
    controller = Controller(opts).start()

    def _terminate(signum: int, _frame: Any) -> None:
        logs.get("controller").info("signal", signal=signal.Signals(signum).name)
        controller.request_stop()

    previous = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        controller.wait(exit_after)
    finally:
        controller.stop(release=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def register(app: typer.Typer) -> None:
    """Add `run` to the CLI."""
    app.command("run")(run)
