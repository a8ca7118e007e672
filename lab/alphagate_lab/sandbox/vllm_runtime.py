"""A pod runtime for the kubelet runner that runs every pod as a real vLLM CPU server.

:class:`~alphagate_lab.sandbox.kubelet.KubeletRunner` turns Deployments into pods through a
:class:`~alphagate_lab.sandbox.pod_runtime.PodRuntime`. This one maps a pod's container args onto a
:class:`~alphagate_lab.sandbox.vllm_server.VllmServer` (`VllmServer.from_args`: the sandbox owns
host, port and model; ``--served-model-name``, ``--speculative-config`` and every other flag
come from the Deployment), so when the actuator patches ``--speculative-config`` the runner
stops the old vLLM process and starts a new one with the new argv, exactly as a real kubelet
would restart the container. A pod is ready when its ``/health`` answers 200 and
``/v1/models`` lists its served model name (so a stranger on the port is never taken for it).
Ports come from below the kernel's ephemeral range (:func:`pick_port`).

Prometheus finds the pods through a file-SD list (labels ``pod``, ``namespace``,
``deployment``, ``role``, ``slice``, as the sandbox's Kubernetes SD relabelling would give),
rewritten atomically whenever a pod starts or stops.

Every container start is kept as a :class:`VllmIncarnation`: the argv that was run, the
command line the kernel reports for the process once it is ready (``/proc/PID/cmdline``), the
metric families it exposed when it became ready and right before it was stopped, and the
timings. Tests read these to prove what a restart really changed, without racing the
controller for a scrape of a process that is about to be replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.pod_runtime import PodLaunch
from alphagate_lab.sandbox.vllm_server import HOST, VllmServer, pick_port

SPEC_PREFIX: Final = "vllm:spec_decode"


# ---------------------------------------------------------------- one /metrics page


@dataclass(frozen=True, slots=True)
class MetricsPage:
    """One parsed /metrics page: sample name -> summed value over every label set.

    Family names are kept as vLLM writes them (``vllm:...``); sums over labels are what a
    single-engine pod's counters mean.
    """

    families: frozenset[str]
    totals: Mapping[str, float]
    at: float  # unix seconds

    def total(self, sample: str) -> float:
        """A sample summed over its label sets; 0 when absent."""
        return float(self.totals.get(sample, 0.0))

    @property
    def spec_families(self) -> frozenset[str]:
        """The ``vllm:spec_decode_*`` families present (none when speculation is off)."""
        return frozenset(f for f in self.families if f.startswith(SPEC_PREFIX))

    @property
    def accepted_tokens(self) -> float:
        return self.total("vllm:spec_decode_num_accepted_tokens_total")

    @property
    def draft_tokens(self) -> float:
        return self.total("vllm:spec_decode_num_draft_tokens_total")

    @property
    def drafts(self) -> float:
        return self.total("vllm:spec_decode_num_drafts_total")

    @property
    def generation_tokens(self) -> float:
        return self.total("vllm:generation_tokens_total")


def parse_metrics(text: str, *, at: float | None = None) -> MetricsPage:
    """Parse an exposition page with prometheus_client's own parser."""
    families: set[str] = set()
    totals: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        families.add(fam.name)
        for s in fam.samples:
            totals[s.name] = totals.get(s.name, 0.0) + float(s.value)
    return MetricsPage(frozenset(families), totals, time.time() if at is None else at)


def scrape_metrics(url: str, *, timeout_s: float = 5.0) -> MetricsPage:
    """GET and parse a /metrics page; SandboxError naming the URL on any failure."""
    try:
        resp = httpx.get(url, timeout=timeout_s)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise SandboxError(f"scrape {url}: {type(exc).__name__}: {exc}") from exc
    try:
        return parse_metrics(resp.text)
    except ValueError as exc:
        raise SandboxError(f"scrape {url}: unparsable exposition: {exc}") from exc


# ---------------------------------------------------------------- what ran


@dataclass(frozen=True, slots=True)
class VllmIncarnation:
    """One container start of one pod: what ran, when, and what it exposed."""

    pod: str
    namespace: str
    deployment: str
    labels: Mapping[str, str]
    container_args: tuple[str, ...]  # the Deployment's args, as the kubelet got them
    argv: tuple[str, ...]  # the command line started
    port: int
    pid: int | None
    log_path: str
    started_at: float  # unix seconds
    ready_at: float | None = None
    cmdline: tuple[str, ...] = ()  # /proc/PID/cmdline once ready: what the kernel runs
    metrics_at_ready: MetricsPage | None = None
    metrics_at_stop: MetricsPage | None = None
    stopped_at: float | None = None
    exit_code: int | None = None
    notes: tuple[str, ...] = ()  # scrapes that failed, and similar

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def speculative(self) -> bool:
        """Was it started with --speculative-config (in any spelling vLLM accepts)?"""
        return has_flag(self.argv, "--speculative-config") or has_flag(
            self.argv, "--speculative_config"
        )

    @property
    def ready_seconds(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.started_at

    @property
    def stop_seconds(self) -> float | None:
        """From the stop request's scrape to the process group gone."""
        if self.stopped_at is None or self.metrics_at_stop is None:
            return None
        return self.stopped_at - self.metrics_at_stop.at


@dataclass(slots=True)
class _Running:
    server: VllmServer
    record: VllmIncarnation
    last_probe: float = 0.0
    ready: bool = False


def _cmdline(pid: int | None) -> tuple[str, ...]:
    if pid is None:
        return ()
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(p.decode(errors="replace") for p in raw.split(b"\0") if p)


# ---------------------------------------------------------------- the runtime


class VllmRuntime:
    """Real vLLM servers as pods (implements the kubelet runner's ``PodRuntime``).

    `env` gives extra environment per Deployment name (e.g. ``VLLM_CPU_OMP_THREADS_BIND`` so
    two servers on a small machine do not pin their workers to the same core). `file_sd` is
    the Prometheus file-SD list to keep current. Thread-safe: the runner calls it from its
    loop while tests read :meth:`incarnations` from theirs.
    """

    def __init__(
        self,
        *,
        home: Path | None = None,
        file_sd: Path | None = None,
        env: Mapping[str, Mapping[str, str]] | None = None,
        log_dir: Path | None = None,
        label_role: str = "role",
        label_slice: str = "slice",
        probe_period_s: float = 0.5,
        probe_timeout_s: float = 2.0,
        stop_timeout_s: float = 20.0,
        scrape_timeout_s: float = 5.0,
    ) -> None:
        self.home = home
        self.file_sd = file_sd
        self.env = {k: dict(v) for k, v in (env or {}).items()}
        self.log_dir = log_dir
        self.label_role = label_role
        self.label_slice = label_slice
        self.probe_period_s = probe_period_s
        self.probe_timeout_s = probe_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.scrape_timeout_s = scrape_timeout_s
        self._lock = threading.RLock()
        self._running: dict[str, _Running] = {}
        self._history: list[VllmIncarnation] = []
        self._http = httpx.Client(timeout=probe_timeout_s)
        if file_sd is not None:
            self._write_targets()

    # ------------------------------------------------------------ PodRuntime

    def start(self, pod: PodLaunch) -> int:
        """Spawn the pod's vLLM server on a free 127.0.0.1 port; returns at once."""
        with self._lock:
            held = self._running.get(pod.name)
            if held is not None and held.server.running():
                raise SandboxError(f"pod {pod.namespace}/{pod.name}: already running")
        if held is not None:  # the container died: keep its record, start a new one
            self.stop(pod.name)
        port = pick_port()
        server = VllmServer.from_args(
            port,
            pod.args,
            home=self.home,
            env=self.env.get(pod.deployment),
            log_dir=self.log_dir,
        )
        server.start()
        record = VllmIncarnation(
            pod=pod.name,
            namespace=pod.namespace,
            deployment=pod.deployment,
            labels=dict(pod.labels),
            container_args=tuple(pod.args),
            argv=tuple(server.argv),
            port=port,
            pid=server.pid,
            log_path=str(server.log_path),
            started_at=time.time(),
        )
        with self._lock:
            self._running[pod.name] = _Running(server, record)
            self._write_targets()
        return port

    def ready(self, name: str) -> bool:
        """/health == 200 and /v1/models serves the pod's model (probed at most every
        `probe_period_s`); stays ready while the process lives.

        The first time it passes, the process's real command line and its /metrics page
        are recorded before readiness is reported, so they always precede any rollout
        the readiness completes.
        """
        with self._lock:
            run = self._running.get(name)
            if run is None or not run.server.running():
                return False
            if run.ready:
                return True
            now = time.monotonic()
            if now - run.last_probe < self.probe_period_s:
                return False
            run.last_probe = now
            url = run.server.url
        try:
            ok = self._http.get(f"{url}/health").status_code == 200
            # ... and it is this pod's server, not a stranger on the port.
            ok = ok and run.server.served_model_name in self._model_ids(url)
        except (httpx.HTTPError, ValueError):
            ok = False
        if not ok:
            return False
        notes: list[str] = []
        page: MetricsPage | None = None
        try:
            page = scrape_metrics(f"{url}/metrics", timeout_s=self.scrape_timeout_s)
        except SandboxError as exc:
            notes.append(f"scrape at ready failed: {exc}")
        with self._lock:
            if self._running.get(name) is not run:
                return False
            run.ready = True
            run.record = replace(
                run.record,
                ready_at=time.time(),
                cmdline=_cmdline(run.server.pid),
                metrics_at_ready=page,
                notes=(*run.record.notes, *notes),
            )
        return True

    def _model_ids(self, url: str) -> set[str]:
        body = self._http.get(f"{url}/v1/models").json()
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return set()
        return {str(m.get("id")) for m in data if isinstance(m, dict)}

    def alive(self, name: str) -> bool:
        with self._lock:
            run = self._running.get(name)
            return run is not None and run.server.running()

    def stop(self, name: str) -> None:
        """Scrape /metrics one last time (if it serves), then stop the process group."""
        with self._lock:
            run = self._running.pop(name, None)
            if run is None:
                return
            self._write_targets()
        notes: list[str] = []
        page: MetricsPage | None = None
        if run.ready and run.server.running():
            try:
                page = scrape_metrics(run.server.metrics_url, timeout_s=self.scrape_timeout_s)
            except SandboxError as exc:
                notes.append(f"scrape at stop failed: {exc}")
        code = run.server.stop(timeout_s=self.stop_timeout_s)
        record = replace(
            run.record,
            metrics_at_stop=page,
            stopped_at=time.time(),
            exit_code=code,
            notes=(*run.record.notes, *notes),
        )
        with self._lock:
            self._history.append(record)

    def close(self) -> None:
        """Stop every server this runtime started (idempotent)."""
        with self._lock:
            names = list(self._running)
        for name in names:
            with contextlib.suppress(Exception):
                self.stop(name)
        self._http.close()

    def kill(self, name: str) -> None:
        """Make the container die (chaos): the runner sees it gone and restarts it."""
        with self._lock:
            run = self._running.get(name)
        if run is not None:
            run.server.stop(timeout_s=0.0)

    def __enter__(self) -> VllmRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ views

    def incarnations(self, deployment: str | None = None) -> list[VllmIncarnation]:
        """Every container start so far, oldest first (stopped ones, then running ones)."""
        with self._lock:
            out = [*self._history, *(r.record for r in self._running.values())]
        out.sort(key=lambda r: r.started_at)
        return [r for r in out if deployment is None or r.deployment == deployment]

    def current(self, deployment: str) -> VllmIncarnation | None:
        """The newest running incarnation of a Deployment's pod, ready or not."""
        with self._lock:
            runs = [r.record for r in self._running.values() if r.record.deployment == deployment]
        return max(runs, key=lambda r: r.started_at) if runs else None

    def ready_url(self, deployment: str) -> str | None:
        """Base URL of a ready pod of `deployment` (the newest), or None."""
        with self._lock:
            runs = [
                r
                for r in self._running.values()
                if r.record.deployment == deployment and r.ready and r.server.running()
            ]
        if not runs:
            return None
        return max(runs, key=lambda r: r.record.started_at).server.url

    def targets(self) -> list[dict[str, object]]:
        """Prometheus file-SD target groups, one per running pod."""
        with self._lock:
            runs = sorted(self._running.values(), key=lambda r: r.record.pod)
            return [
                {
                    "targets": [f"{HOST}:{r.record.port}"],
                    "labels": {
                        "pod": r.record.pod,
                        "namespace": r.record.namespace,
                        "deployment": r.record.deployment,
                        "role": r.record.labels.get(self.label_role, ""),
                        "slice": r.record.labels.get(self.label_slice, ""),
                    },
                }
                for r in runs
            ]

    def _write_targets(self) -> None:
        """Rewrite the file-SD list atomically (Prometheus may read it at any moment)."""
        if self.file_sd is None:
            return
        data = json.dumps(self.targets(), indent=1) + "\n"
        self.file_sd.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".sd-", suffix=".json", dir=self.file_sd.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(data)
            os.replace(tmp, self.file_sd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def alpha_between(before: MetricsPage, after: MetricsPage) -> tuple[float, float, float]:
    """(alpha, accepted, drafted tokens) from two pages of the same process; NaN alpha when
    nothing was drafted. Raises SandboxError when a counter went backwards (a restart)."""
    accepted = after.accepted_tokens - before.accepted_tokens
    drafted = after.draft_tokens - before.draft_tokens
    if accepted < 0 or drafted < 0:
        raise SandboxError(
            "alpha_between: counters went backwards (the pages are from different processes)"
        )
    return (accepted / drafted if drafted > 0 else float("nan")), accepted, drafted


def has_flag(argv: Sequence[str], flag: str) -> bool:
    """`--flag VALUE` or `--flag=VALUE` anywhere in an argv."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)


__all__ = [
    "SPEC_PREFIX",
    "MetricsPage",
    "VllmIncarnation",
    "VllmRuntime",
    "alpha_between",
    "has_flag",
    "parse_metrics",
    "scrape_metrics",
]
