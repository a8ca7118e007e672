"""The running controller: one replica's reconciler, leader election and metrics server.

It wires the parts together: a Kubernetes client (in-cluster, kubeconfig or `--server`), the
reconciler (watch + per-canary interval), leader election on a Lease (a standby replica keeps
its cache warm and takes over within the lease duration), the exporter's metrics with
`/healthz` and `/readyz`. `alphagate run` (commands/run.py) is its command line; tests and the
demo start it as an object and hear about every evaluation through `on_outcome`. It parses no
flags and installs no signal handlers: that is the command's job.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from alphagate import logs
from alphagate.config import SpeculativeCanarySpec
from alphagate.kube.apibudget import ApiBudget, BudgetConfig
from alphagate.kube.client import Kube, load_configuration
from alphagate.kube.coordination import DEFAULT_LEASE_NAME, Refusal
from alphagate.kube.events import EventRecorder, EventType, ObjectRef, Reason
from alphagate.kube.lease import LeaderElector, default_identity
from alphagate.kube.shards import ShardLeases, shard_of
from alphagate.shell.exporter import Recorder
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
from alphagate.shell.server import Health, serve
from alphagate.shell.shard_metrics import new_registry
from alphagate.shell.source_cache import SourceFactory
from alphagate.sources import Source, budget, make_source, querybudget
from alphagate.sources.endpoints import SourcesConfig
from alphagate.verdict_auth import Auth, OpenAuth, TokenReviewAuth
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
    shards: int = 0  # > 0: split the canaries over replicas by shard Leases (no single leader)
    # The Prometheus endpoints policies may name (URLs and credentials: the admin's, never a
    # policy's); `--config` and `--prometheus-url`.
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    # What the controller may ask of the Kubernetes API, per canary, per namespace and overall
    # (`--api-*-qps`, `--api-*-burst`; kube/apibudget.py).
    api_budget: BudgetConfig = field(default_factory=BudgetConfig)
    # Who may read the verdict API: "tokenreview" (callers' bearer tokens reviewed by the API
    # server, namespaces by SubjectAccessReview) or "none" (anyone who reaches the port reads
    # every watched namespace: the admin's switch, `--verdict-api-auth none`).
    verdict_auth: str = "tokenreview"


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
        # A client given by the caller keeps its own budget (or none).
        self.kube = kube or Kube.from_configuration(
            load_configuration(
                server=opts.server,
                kubeconfig=opts.kubeconfig,
                context=opts.context,
                in_cluster=opts.in_cluster,
            ),
            budget=ApiBudget(opts.api_budget),
        )
        self.identity = opts.identity or default_identity()
        # process metrics (CPU, memory, open files, GC) for the controller's own dashboard row
        self.registry = registry if registry is not None else new_registry(process=True)
        self.recorder = Recorder(self.registry)
        budget.configure(opts.sources.pod_scrape.budgets)  # the admin's, for every read
        querybudget.configure(opts.sources.prometheus_budgets)  # Prometheus queries a second
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
            source_factory=source_factory or self._source,
            recorder=self.recorder,
            events=self.events,
            namespace=opts.namespace,
            label_selector=opts.selector,
            dry_run=opts.dry_run,
            watch_timeout_seconds=opts.watch_timeout,
            health=self.health,
            on_outcome=on_outcome,
        )
        self.health.watch(self.reconciler.overdue)  # reads far past every deadline: stuck
        self.elector: LeaderElector | None = None
        self.shards: ShardLeases | None = None
        self.lease_namespace = opts.lease_namespace or _pod_namespace()
        self._coordinate(opts)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server: Any = None
        self._log = logs.get("controller").bind(identity=self.identity)

    def _coordinate(self, opts: RunOptions) -> None:
        """Who works on what: shard leases (every replica, its shards' canaries), a leader
        election (one replica acts), or this replica alone."""
        if opts.shards > 0:
            # Every replica works, each on the canaries of the shards it holds.
            self.shards = ShardLeases(
                self.kube.api_client,
                namespace=self.lease_namespace,
                shards=opts.shards,
                group=opts.lease_name,
                identity=self.identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                on_change=self._shards_changed,
                on_refusal=self._refusal_changed,
            )
            self.reconciler.loop.owns = self.shards.owns
            self.reconciler.loop.resume_schedule = True
            self.recorder.set_leader(True)
            count = opts.shards
            self.recorder.set_shards(
                count, self.shards.held, lambda ns, name: shard_of(ns, name, count)
            )
        elif opts.leader_elect:
            self.reconciler.loop.leading.clear()
            self.elector = LeaderElector(
                self.kube.api_client,
                namespace=self.lease_namespace,
                name=opts.lease_name,
                identity=self.identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                on_started_leading=self._started_leading,
                on_stopped_leading=self._stopped_leading,
                on_refusal=self._refusal_changed,
            )
            self.reconciler.may_act = lambda: self.elector is not None and self.elector.is_leader
        else:
            self.recorder.set_leader(True)

    def _source(self, spec: SpeculativeCanarySpec, namespace: str, name: str) -> Source:
        """A canary's source: the admin's endpoints; its pod discovery paid from its budget."""
        core = self.kube.charged_core(namespace, name)
        return make_source(
            spec, namespace=namespace, core_api=core, endpoints=self.opts.sources, name=name
        )

    # ------------------------------------------------------------ leadership

    def _started_leading(self) -> None:
        self._log.info("leading")
        self.reconciler.forget_memories()  # resume from the cluster, not from a stale cache
        self.recorder.set_leader(True)
        self.reconciler.loop.leading.set()
        self.reconciler.loop.wake()

    def _stopped_leading(self) -> None:
        self._log.warning("not_leading")
        self.reconciler.loop.leading.clear()
        self.recorder.set_leader(False)

    def _shards_changed(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        """Called on the lease thread, which must renew on time: log, and leave the work on
        the canaries (hundreds of reads and forgets) to the scheduling thread."""
        self._log.info("shards_changed", gained=sorted(gained), lost=sorted(lost))
        self.reconciler.loop.defer(lambda: self._move_canaries(gained, lost))

    def _move_canaries(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        """Lost shards: forget their canaries' memories (the new owner resumes from the
        cluster). Gained ones: evaluate their canaries one interval after their last
        evaluation, whoever made it. Until this runs, the schedule already skips what this
        replica no longer owns, and every write checks ownership again."""
        assert self.shards is not None
        moved_away: list[tuple[str, str]] = []
        taken: list[tuple[str, str]] = []
        for namespace, name in self.reconciler.loop.cached():
            shard = shard_of(namespace, name, self.shards.shards)
            if shard in lost:
                moved_away.append((namespace, name))
            elif shard in gained:
                taken.append((namespace, name))
        if taken:
            self.reconciler.loop.take_over(taken)
        if moved_away:  # forgetting scans every series once, even for none
            self.reconciler.hand_over(moved_away)

    def _refusal_changed(self, refusal: Refusal | None) -> None:
        """The coordination Lease disagrees (or agrees again) with this replica's --shards /
        --leader-elect: say so on the Lease (an Event) and in the metrics; the Lease modules
        have logged it and stopped acting already."""
        self.recorder.ownership_refused.set(1.0 if refusal is not None else 0.0)
        ref = ObjectRef(
            namespace=self.lease_namespace,
            name=self.opts.lease_name,
            kind="Lease",
            api_version="coordination.k8s.io/v1",
        )
        if refusal is not None:
            # emit, not warning(): the warnings counter is per canary, and a Lease is none
            self.events.emit(ref, EventType.WARNING, Reason.OWNERSHIP_REFUSED, refusal.message)
        else:
            self.events.emit(
                ref,
                EventType.NORMAL,
                Reason.OWNERSHIP_RESUMED,
                f"replica {self.identity} agrees with the Lease's record again and may own "
                "canaries",
            )

    @property
    def is_leader(self) -> bool:
        return self.reconciler.loop.leading.is_set()

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
                # each canary's verdict as JSON, for Argo Rollouts and Flagger (any replica),
                # from the watch cache
                api=VerdictApi(
                    self.reconciler.loop, auth=self._verdict_auth(), namespace=self.opts.namespace
                ),
            )
            self._log.info("metrics_listening", url=self.server.url)
        run = threading.Thread(
            target=self.reconciler.loop.run, args=(self._stop,), daemon=True, name="alphagate-loop"
        )
        ready = threading.Thread(
            target=self._ready_when_synced, daemon=True, name="alphagate-ready"
        )
        self._threads = [run, ready]
        for t in self._threads:
            t.start()
        if self.elector is not None:
            self.elector.start()
        if self.shards is not None:
            self.shards.start()
        self._log.info(
            "started",
            namespace=self.opts.namespace or "*",
            selector=self.opts.selector,
            leader_elect=self.opts.leader_elect and not self.opts.shards,
            shards=self.opts.shards,
            dry_run=self.opts.dry_run,
        )
        return self

    def _verdict_auth(self) -> Auth:
        if self.opts.verdict_auth == "none":
            self._log.warning(
                "verdict_api_open",
                detail="--verdict-api-auth none: anyone who reaches the metrics port reads "
                "every watched namespace's verdicts and evidence",
            )
            return OpenAuth()
        return TokenReviewAuth(self.kube)

    def _ready_when_synced(self) -> None:
        while not self._stop.is_set():
            if self.reconciler.loop.synced.wait(0.2):
                self.health.set_ready(True)
                return

    def stop(self, *, release: bool = True, timeout: float = 10.0) -> None:
        """Stop; `release=False` leaves the Lease to expire (what a crash looks like)."""
        if self.elector is not None:
            self.elector.stop(release=release)
        if self.shards is not None:
            self.shards.stop(release=release)
        self.reconciler.loop.leading.clear()
        self._stop.set()
        self.reconciler.loop.wake()
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
        self.reconciler.loop.wake()


__all__ = ["Controller", "RunOptions"]
