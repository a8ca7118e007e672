"""`alphagate demo`: the whole loop on 127.0.0.1, with nothing to configure.

It starts a local sandbox and lets the real controller run in it:

* the **Kubernetes API server double** with the demo namespace, the SpeculativeCanary CRD,
  one baseline and one canary Deployment per traffic slice (from the scenario's pools) and
  the SpeculativeCanary (from the policy, with the scenario's timings);
* the **kubelet runner** (:mod:`alphagate.sandbox.kubelet`), which runs each Deployment's
  pods as simulated vLLM engines (:mod:`alphagate.sim`) and restarts them when the actuator
  patches ``--speculative-config``;
* **Prometheus** (Debian's binary, when installed) scraping every pod through a file-SD list
  (labels pod/namespace/deployment/role/slice) and the controller's own /metrics, or else the
  pod-scrape source, which finds the pods through the API;
* the **controller** itself: `alphagate run`'s `Controller` with the real reconciler, actuator
  and status writer over the real `kubernetes` client, in enforce mode.

A scenario (the default one is package data: `alphagate/data/demo-scenario.yaml`) moves the
traffic mix and the load in simulated seconds; ``speed`` compresses the scenario and the
policy's timings together, so the story is the same, only shorter. Scripted faults
(``chaos``) stop Prometheus, make the API server answer 500 and delete a canary pod for a
while; each shows as Error or Inconclusive and never as a flip. At the end a report (Markdown,
PNG timeline, points) is written with :func:`alphagate.report.write`.

:class:`Demo` is the engine; `alphagate.commands.demo` adds the terminal (rich live view,
``--no-live`` lines, ``--json``). Every part is stopped on exit, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import math
import os
import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from alphagate import report
from alphagate.config import (
    Aggregation,
    SpeculativeCanary,
    SpeculativeCanarySpec,
    dump,
    parse,
)
from alphagate.core.model import (
    Action,
    Cause,
    CheckKind,
    CheckResult,
    Evaluation,
    LatencyEvidence,
    State,
    Verdict,
)
from alphagate.errors import PolicyError, SandboxError, ScenarioError
from alphagate.sandbox.apiserver import ApiServer, DeploymentTemplate
from alphagate.sandbox.kubelet import KubeletEvent, KubeletRunner, SimRuntime

SourceChoice = Literal["auto", "prometheus", "scrape"]

NAMESPACE: Final = "demo"
DEFAULT_SCENARIO: Final = "demo-scenario.yaml"
DEFAULT_POLICY: Final = "demo-policy.yaml"
DEFAULT_OUT: Final = Path("alphagate-demo")
HOST: Final = "127.0.0.1"
MODEL_PORT: Final = 8000
DEBIAN_PROMETHEUS: Final = "/usr/bin/prometheus"

# Policy fields that are durations in scenario seconds (camelCase path under spec): --speed
# divides them all, batch lengths included, so a window holds as many batches at any speed.
_SCALED_SECONDS: Final = (
    ("timing", "intervalSeconds"),
    ("timing", "windowSeconds"),
    ("timing", "warmupSeconds"),
    ("timing", "rolloutTimeoutSeconds"),
    ("timing", "minDwellSeconds"),
    ("timing", "probeSeconds"),
    ("timing", "cooldown", "initialSeconds"),
    ("timing", "cooldown", "maxSeconds"),
    ("acceptance", "batchSeconds"),
    ("latency", "batchSeconds"),
)


# ---------------------------------------------------------------- inputs


def data_text(name: str) -> str:
    """A file shipped in the package's data folder (found on any install)."""
    return resources.files("alphagate").joinpath("data", name).read_text(encoding="utf-8")


def load_scenario_text(path: Path | None) -> tuple[Any, str]:
    """(Scenario, where) from a file or the packaged default."""
    from alphagate.sim import load_scenario, parse_scenario

    if path is None:
        return parse_scenario(data_text(DEFAULT_SCENARIO), f"<default {DEFAULT_SCENARIO}>"), (
            "default"
        )
    return load_scenario(path), str(path)


def load_policy(path: Path | None) -> tuple[dict[str, Any], str]:
    """The SpeculativeCanary as a dict, from a file or the packaged default."""
    where = str(path) if path is not None else f"<default {DEFAULT_POLICY}>"
    try:
        text = path.read_text(encoding="utf-8") if path is not None else data_text(DEFAULT_POLICY)
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror or exc}", where=where) from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid YAML: {exc}", where=where) from exc
    canaries = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SpeculativeCanary"]
    if len(canaries) != 1:
        raise PolicyError(
            f"expected exactly one SpeculativeCanary document, found {len(canaries)}", where=where
        )
    parse(canaries[0], where=where)  # fail early, naming the file and field
    return canaries[0], where


def scaled_policy(
    base: Mapping[str, Any],
    *,
    speed: float,
    namespace: str,
    source: Mapping[str, Any],
    where: str,
) -> SpeculativeCanary:
    """The policy the demo creates: its durations divided by `speed`, the sandbox's source,
    enforce mode, in `namespace`."""
    canary = parse(dict(base), where=where)
    obj = dump(canary)
    obj["metadata"] = {
        "name": canary.metadata.name,
        "namespace": namespace,
        "labels": dict(canary.metadata.labels),
    }
    spec = obj["spec"]
    for path in _SCALED_SECONDS:
        node = spec
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if path[-1] in node:
            node[path[-1]] = float(node[path[-1]]) / speed
    spec["source"] = dict(source)
    spec["mode"] = "enforce"
    return parse(obj, where=f"{where} (scaled for the demo)")


def check_fit(
    spec: SpeculativeCanarySpec, scenario: Any, *, scenario_where: str, policy_where: str
) -> None:
    """The policy must name Deployments and slices the scenario has, or nothing would run."""
    pools = {p.name: p for p in scenario.pools}
    names = {spec.target.name, spec.baseline.name} | {d.name for d in spec.canary_deployments()}
    missing = sorted(n for n in names if n not in pools)
    if missing:
        raise PolicyError(
            f"names Deployments {missing} that {scenario_where} has no pools for "
            f"(pools: {sorted(pools)}); give a matching --policy or --scenario",
            where=policy_where,
        )
    unknown = sorted(s.name for s in spec.slices if s.name not in scenario.slices)
    if unknown:
        raise PolicyError(
            f"slices {unknown} are not in {scenario_where} (slices: {sorted(scenario.slices)})",
            where=policy_where,
        )
    for d in spec.canary_deployments():
        if pools[d.name].role != "canary":
            raise ScenarioError(
                f"{scenario_where}: pool {d.name} is flipped by the policy but has role "
                f"{pools[d.name].role}"
            )


def fleet_scenario(scenario: Any) -> Any:
    """The scenario without its pool changes: in the demo the kubelet runs the pods, so pool
    changes go through the API instead (see `Demo._pool_events`)."""
    timeline = [ev.model_copy(update={"pools": {}, "restart": []}) for ev in scenario.timeline]
    return scenario.model_copy(update={"timeline": timeline})


def deployment_objects(scenario: Any, namespace: str) -> list[dict[str, Any]]:
    """One Deployment per scenario pool. Canaries use Recreate: a GPU canary has no room to
    surge, and the old pod's readiness then never stands in for the new one's."""
    from alphagate.sim import spec_args

    out = []
    for pool in scenario.pools:
        args = [
            "--model",
            scenario.model_name,
            "--port",
            str(MODEL_PORT),
            *pool.extra_args,
            *spec_args(pool.speculative_config),
        ]
        labels = {"app.kubernetes.io/name": "vllm", "role": pool.role, "slice": pool.slice}
        dep = DeploymentTemplate(
            pool.name, namespace, args=args, replicas=pool.replicas, labels=labels
        ).build()
        dep["spec"]["strategy"] = (
            {"type": "Recreate"}
            if pool.role == "canary"
            else {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        )
        out.append(dep)
    return out


# ---------------------------------------------------------------- chaos


@dataclass(frozen=True)
class ChaosStep:
    """A scripted fault lasting `seconds` (scenario seconds).

    It starts at a quiet moment of the story when there is one (`after`: "rollback" = a few
    seconds into the first rollback's cooldown, "previous" = after the step before it ended,
    "confirmed" = once the third probe was confirmed), and at `latest` otherwise.
    """

    kind: Literal["prometheus", "apiserver", "pod"]
    seconds: float
    what: str
    after: Literal["rollback", "previous", "confirmed"]
    latest: float


def chaos_plan(duration: float, *, prometheus: bool) -> list[ChaosStep]:
    """Prometheus down, then the API failing, both inside the first rollback's cooldown (so
    neither can hide a decision the story needs), and a canary pod deleted near the end."""
    steps = []
    if prometheus:
        steps.append(
            ChaosStep("prometheus", 12.0, "Prometheus stopped", "rollback", 0.35 * duration)
        )
    steps.append(
        ChaosStep(
            "apiserver",
            10.0,
            "API server answers 500",
            "previous" if prometheus else "rollback",
            0.45 * duration,
        )
    )
    steps.append(ChaosStep("pod", 10.0, "a chat canary pod deleted", "confirmed", duration - 14.0))
    return steps


@dataclass
class ChaosRecord:
    step: ChaosStep
    started: float | None = None  # scenario seconds
    ended: float | None = None
    detail: str = ""
    fault: Any = None  # the API double's Fault while it is active
    recovered: float | None = None  # when the part works again (Prometheus takes a while)


# ---------------------------------------------------------------- what the view shows


@dataclass(frozen=True)
class LogLine:
    t: float  # scenario seconds
    source: str  # scenario, controller, kubelet, event, chaos, demo
    text: str
    style: str = ""


@dataclass(frozen=True)
class Decision:
    """One evaluation as the demo saw it (from the reconciler's Outcome)."""

    t: float
    point: report.Point
    evaluation: Evaluation | None
    error: str = ""  # the evaluation could not happen (API) or the decision was not applied
    applied: bool = False


@dataclass
class Snapshot:
    """Everything the live view renders (a copy, safe to read from another thread)."""

    scenario: str
    t: float
    duration: float
    speed: float
    source: str
    gate: tuple[float, float]
    last: Decision | None
    last_transition: Decision | None
    state: str
    speculation_on: bool | None
    log: list[LogLine]
    truth: dict[str, dict[str, float]]
    pods: dict[str, dict[str, Any]]
    chaos_active: list[str]
    last_alpha: dict[str, float]
    finished: bool = False


# ---------------------------------------------------------------- options and result


@dataclass
class DemoOptions:
    scenario: Path | None = None
    policy: Path | None = None
    duration: float | None = None  # scenario seconds; default: the scenario's
    speed: float = 1.5
    source: SourceChoice = "auto"
    chaos: bool = False
    out: Path = DEFAULT_OUT
    seed: int | None = None
    namespace: str = NAMESPACE
    log_file: Path | None = None  # controller logs (structlog + logging); None: leave as is
    prometheus_timeout: float = 60.0


@dataclass
class DemoResult:
    scenario: str
    source: str
    speed: float
    sim_seconds: float
    wall_seconds: float
    decisions: list[Decision]
    transitions: list[dict[str, Any]]
    chaos: list[dict[str, Any]]
    paths: dict[str, Path]
    interrupted: bool
    milestones: dict[str, bool]
    notes: list[str]
    endpoints: dict[str, str]

    def summary(self) -> dict[str, Any]:
        """The `--json` output."""
        points = [d.point for d in self.decisions]
        base = report.summary(points, title=f"alphagate demo: {self.scenario}")
        return {
            "scenario": self.scenario,
            "source": self.source,
            "speed": self.speed,
            "scenario_seconds": round(self.sim_seconds, 1),
            "wall_seconds": round(self.wall_seconds, 1),
            "interrupted": self.interrupted,
            "evaluations": base["evaluations"],
            "errors": sum(1 for d in self.decisions if d.point.verdict == Verdict.ERROR.value),
            "flips": base["flips"],
            "seconds_in_state": {k: round(v, 1) for k, v in base["seconds_in_state"].items()},
            "transitions": self.transitions,
            "milestones": self.milestones,
            "chaos": self.chaos,
            "notes": self.notes,
            "endpoints": self.endpoints,
            "report": {k: str(v) for k, v in self.paths.items()},
        }


# ---------------------------------------------------------------- helpers


class _PausedClock:
    """Monotonic time that stands still until `go()`: pods are created and Prometheus
    discovers them before the scenario's first second passes."""

    def __init__(self) -> None:
        self._t0: float | None = None

    def go(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0


def _fault_end(rec: ChaosRecord) -> float:
    """When the faulty part worked again (Prometheus: once restarted), in scenario seconds."""
    for t in (rec.recovered, rec.ended, rec.started):
        if t is not None:
            return t
    return 0.0


def _import_controller() -> None:
    """Load the controller's modules and the API classes it builds (their import is slow)."""
    with contextlib.suppress(Exception):
        from kubernetes import client

        import alphagate.shell.controller  # noqa: F401

        for name in ("AppsV1Api", "CoreV1Api", "CustomObjectsApi", "CoordinationV1Api"):
            getattr(client, name)


def prometheus_binary() -> str | None:
    """$ALPHAGATE_PROMETHEUS, `prometheus` on PATH, or Debian's /usr/bin/prometheus."""
    from alphagate.testing import prometheus as prom

    found = prom.find_binary()
    if found is None and os.access(DEBIAN_PROMETHEUS, os.X_OK):
        found = DEBIAN_PROMETHEUS
    return found


def _free_port() -> int:
    from alphagate.testing.prometheus import free_port

    return free_port()


def failing_checks(evaluation: Evaluation | None) -> list[CheckResult]:
    if evaluation is None:
        return []
    return [c for c in evaluation.checks if c.verdict is Verdict.FAIL]


def cause_of(checks: Sequence[CheckResult]) -> str:
    """ "latency", "acceptance" (floor included) or "" for a disable's failing checks."""
    kinds = {c.kind for c in checks}
    if kinds and kinds <= {CheckKind.LATENCY}:
        return "latency"
    if kinds & {CheckKind.ACCEPTANCE, CheckKind.FLOOR}:
        return "acceptance"
    return ""


def why_text(evaluation: Evaluation | None) -> str:
    """The failing (or, failing that, erroring/inconclusive) checks' own sentences."""
    if evaluation is None:
        return ""
    for verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.INCONCLUSIVE):
        hits = [c for c in evaluation.checks if c.verdict is verdict]
        if hits:
            return "; ".join(f"{c.name}: {c.reason}" for c in hits)
    return ""


def latency_by_slice(evaluation: Evaluation | None) -> dict[str, dict[str, Any]]:
    """slice -> {canary, baseline (seconds), verdict, metric} from the latency checks."""
    out: dict[str, dict[str, Any]] = {}
    if evaluation is None:
        return out
    for c in evaluation.checks:
        ev = c.evidence
        if not isinstance(ev, LatencyEvidence):
            continue
        out[c.slice or ""] = {
            "canary": ev.canary.quantile_seconds if ev.canary is not None else math.nan,
            "baseline": ev.baseline.quantile_seconds if ev.baseline is not None else math.nan,
            "verdict": c.verdict.value,
            "metric": ev.metric.value,
        }
    return out


# ---------------------------------------------------------------- the demo


class Demo:
    """Runs the sandbox and the controller through a scenario. Use `run()` (blocking) and
    `stop()` from another thread (or Ctrl-C in the calling one)."""

    def __init__(
        self,
        options: DemoOptions,
        *,
        on_decision: Callable[[Decision], None] | None = None,
        on_log: Callable[[LogLine], None] | None = None,
    ) -> None:
        if not options.speed > 0:
            raise SandboxError(f"--speed must be > 0, got {options.speed}")
        self.options = options
        self.on_decision = on_decision
        self.on_log = on_log
        self.scenario, self.scenario_where = load_scenario_text(options.scenario)
        self.policy_doc, self.policy_where = load_policy(options.policy)
        base_spec = parse(self.policy_doc, where=self.policy_where).spec
        check_fit(
            base_spec,
            self.scenario,
            scenario_where=self.scenario_where,
            policy_where=self.policy_where,
        )
        if base_spec.aggregation is not Aggregation.COMBINED and not base_spec.slices:
            raise PolicyError("needs at least one slice", where=self.policy_where)
        self.duration = float(options.duration or self.scenario.duration)
        if not self.duration > 0:
            raise SandboxError(f"--duration must be > 0, got {self.duration}")
        self.speed = float(options.speed)
        self.gate = (base_spec.acceptance.disable_below, base_spec.acceptance.enable_above)
        self.source_kind = self._pick_source(options.source)
        self.namespace = options.namespace
        self.name = str(self.policy_doc.get("metadata", {}).get("name", "demo"))

        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._outcomes: queue.Queue[tuple[float, Any]] = queue.Queue()
        self._decisions: list[Decision] = []
        self._log: deque[LogLine] = deque(maxlen=200)
        self._all_log: list[LogLine] = []
        self._last: Decision | None = None
        self._last_transition: Decision | None = None
        self._state = State.OFF.value
        self._spec_on: bool | None = None
        self._last_alpha: dict[str, float] = {}
        self._truth: dict[str, dict[str, float]] = {}
        self._chaos: list[ChaosRecord] = []
        self._seen_events: set[str] = set()
        self._t0_wall = 0.0
        self._clock = _PausedClock()
        self._cleanup: list[tuple[str, Callable[[], None]]] = []
        self._threads: list[threading.Thread] = []
        self._notes: list[str] = []
        self._finished = False
        self.endpoints: dict[str, str] = {}
        self._next_pool_event = 0
        self._events_checked = 0.0
        self._first_rollback: float | None = None  # scenario seconds, for the chaos timing
        self._confirmed: list[float] = []
        # parts
        self.api: ApiServer | None = None
        self.sim: Any = None
        self.kubelet: KubeletRunner | None = None
        self.prometheus: Any = None
        self.controller: Any = None
        self.workdir: Path | None = None
        self.canary: SpeculativeCanary | None = None

    # ------------------------------------------------------------ setup

    def _pick_source(self, choice: SourceChoice) -> str:
        self.prometheus_binary = prometheus_binary()
        if choice == "scrape":
            return "podScrape"
        if choice == "prometheus":
            if self.prometheus_binary is None:
                raise SandboxError(
                    "--source prometheus: no prometheus binary (install Debian's `prometheus` "
                    "package, or set ALPHAGATE_PROMETHEUS, or use --source scrape)"
                )
            return "prometheus"
        return "prometheus" if self.prometheus_binary is not None else "podScrape"

    def sim_now(self) -> float:
        return float(self.sim.sim_now()) if self.sim is not None else 0.0

    def _wall_to_sim(self, at: float) -> float:
        return (at - self._t0_wall) * self.speed

    def _say(self, source: str, text: str, style: str = "", t: float | None = None) -> None:
        line = LogLine(self.sim_now() if t is None else t, source, text, style)
        with self._lock:
            self._log.append(line)
            self._all_log.append(line)
        if self.on_log is not None:
            with contextlib.suppress(Exception):
                self.on_log(line)

    def _defer(self, what: str, fn: Callable[[], None]) -> None:
        self._cleanup.append((what, fn))

    def start(self) -> None:
        """Start every part; on failure, stop what started and raise SandboxError."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        from alphagate.kube.crd import build_crd
        from alphagate.sim import Fleet, SimServer

        opts = self.options
        # The kubernetes client takes seconds to import; do it while Prometheus starts.
        warm = threading.Thread(target=_import_controller, name="demo-import", daemon=True)
        warm.start()
        self.workdir = Path(tempfile.mkdtemp(prefix="alphagate-demo-"))
        workdir = self.workdir
        self._defer("workdir", lambda: shutil.rmtree(workdir, ignore_errors=True))

        # 1. the API server double, the namespace, the CRD and the Deployments
        self.api = ApiServer(kubelet=None)
        self.api.start()
        api = self.api
        self._defer("API server", api.stop)
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        api.put(build_crd())
        for dep in deployment_objects(self.scenario, self.namespace):
            api.put(dep)

        # 2. Prometheus (its targets file is rewritten by the simulator)
        metrics_port = _free_port()
        file_sd: Path | None = None
        base_spec = parse(self.policy_doc, where=self.policy_where).spec
        interval_wall = base_spec.timing.interval_seconds / self.speed
        if self.source_kind == "prometheus":
            from alphagate.testing.prometheus import PrometheusServer

            scrape = max(0.2, min(1.0, round(interval_wall / 3, 3)))
            prom = PrometheusServer(
                binary=self.prometheus_binary,
                scrape_interval=scrape,
                evaluation_interval=max(scrape, 1.0),
                port=_free_port(),
                scrape_configs=[
                    {
                        "job_name": "alphagate",
                        "static_configs": [{"targets": [f"{HOST}:{metrics_port}"]}],
                    }
                ],
            )
            prom.workdir = workdir / "prometheus"  # ours: kept across a chaos restart
            prom.workdir.mkdir()
            self.prometheus = prom
            self._defer("Prometheus", prom.close)
            prom.start(timeout=opts.prometheus_timeout)
            file_sd = prom.targets_path
            # The controller is configured with this Prometheus (as an admin would); the policy
            # names it (`default`) and never holds its URL.
            source = {
                "kind": "prometheus",
                "prometheus": {"timeoutSeconds": max(1.0, interval_wall)},
            }
        else:
            source = {"kind": "podScrape", "scrape": {"timeoutSeconds": max(1.0, interval_wall)}}

        # 3. the simulated fleet (paused) and the kubelet runner: pods are created, loading
        fleet = Fleet(fleet_scenario(self.scenario), seed=opts.seed, create_pools=False)
        self.sim = SimServer(fleet, speed=self.speed, file_sd=file_sd, clock=self._clock)
        self.sim.start()
        self._defer("simulated pods", self.sim.close)
        runtime = SimRuntime(self.sim)
        self.kubelet = KubeletRunner(
            api,
            runtime,
            namespace=self.namespace,
            seed=opts.seed or 0,
            poll_seconds=min(0.1, max(0.02, interval_wall / 10)),
        )
        api.kubelet = self.kubelet.hook
        kubelet = self.kubelet
        self._defer("kubelet runner", kubelet.stop)
        kubelet.start()
        pods = sum(p.replicas for p in self.scenario.pools)
        self._wait(lambda: len(kubelet.pods()) >= pods, 30.0, f"{pods} pods created")
        if self.prometheus is not None:
            self._say("demo", f"Prometheus {self.prometheus.url}: waiting until it sees the pods")
            self.prometheus.wait_for(
                'up{job="vllm"}', lambda r: len(r) >= pods, timeout=opts.prometheus_timeout
            )

        # 4. the controller and the SpeculativeCanary
        self.canary = scaled_policy(
            self.policy_doc,
            speed=self.speed,
            namespace=self.namespace,
            source=source,
            where=self.policy_where,
        )
        warm.join()
        self.controller = self._controller(metrics_port)
        self._clock.go()
        self._t0_wall = time.time()
        controller = self.controller

        def stop_controller() -> None:
            # The API goes first: its watch streams end at once instead of at their timeout.
            controller.request_stop()
            api.stop()
            controller.stop(release=False)

        self._defer("controller", stop_controller)
        controller.start()
        self.endpoints = {"api": api.url, "metrics": str(controller.metrics_url)}
        if self.prometheus is not None:
            self.endpoints["prometheus"] = str(self.prometheus.url)
        api.put(dump(self.canary))
        self._say(
            "demo",
            f"sandbox up: API {api.url}, {pods} pods, source "
            + (f"Prometheus {self.prometheus.url}" if self.prometheus else "pod scraping")
            + f", controller metrics {controller.metrics_url}",
        )
        if opts.chaos:
            self._chaos = [
                ChaosRecord(s)
                for s in chaos_plan(self.duration, prometheus=self.prometheus is not None)
            ]
            if self.prometheus is None:
                self._notes.append(
                    "chaos: no Prometheus in this run (pod scraping), so it was not stopped"
                )

    def _controller(self, metrics_port: int) -> Any:
        from alphagate.shell.controller import Controller, RunOptions
        from alphagate.sources.endpoints import SourcesConfig

        assert self.api is not None
        opts = RunOptions(
            server=self.api.url,
            namespace=self.namespace,
            leader_elect=False,
            metrics_host=HOST,
            metrics_port=metrics_port,
            watch_timeout=30.0,
            sources=(
                SourcesConfig.single(str(self.prometheus.url), timeout_seconds=30.0)
                if self.prometheus is not None
                else SourcesConfig()
            ),
        )
        outcomes = self._outcomes
        # The reconciler `alphagate run` uses, telling the demo what each pass did.
        return Controller(opts, on_outcome=lambda out: outcomes.put((time.time(), out)))

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SandboxError(f"demo: timed out after {timeout:g} s waiting for {what}")
            if self._stop.wait(0.05):
                raise KeyboardInterrupt
        return

    # ------------------------------------------------------------ running

    def stop(self) -> None:
        """Ask `run()` to finish early (it still writes the report)."""
        self._stop.set()

    def run(self, *, tick: float = 0.1) -> DemoResult:
        """Start, play the scenario to its end, stop everything, write the report."""
        wall0 = time.monotonic()
        interrupted = False
        try:
            self.start()
            while not self._stop.is_set():
                now = self.sim_now()
                self.step()
                if now >= self.duration:
                    break
                self._stop.wait(tick)
            interrupted = self._stop.is_set() and self.sim_now() < self.duration
        except KeyboardInterrupt:
            interrupted = True
        finally:
            end_t = min(self.sim_now(), self.duration)
            self._end_chaos(end_t)
            self.close()
            self.step(final=True)
            self._finished = True
        if interrupted:
            self._notes.append(f"interrupted at t={end_t:.0f} s of {self.duration:.0f} s")
        paths = self.write_report()
        return self.result(time.monotonic() - wall0, end_t, interrupted, paths)

    def step(self, *, final: bool = False) -> None:
        """One pass of the demo's own loop: scenario events, chaos, kubelet, decisions."""
        t = self.sim_now()
        if self.sim is not None and not final:
            try:
                events = self.sim.sync()
            except Exception as exc:  # a sim hiccup must not end the demo
                events = []
                self._say("demo", f"simulator: {exc!r}", "red")
            for ev in events:
                if ev.kind == "timeline":
                    self._say("scenario", ev.message, "bold cyan", t=ev.t)
            with contextlib.suppress(Exception):
                truth = self.sim.fleet.truth()
                self._truth = {
                    name: {"alpha": s.alpha, "share": s.share} for name, s in truth.slices.items()
                }
        if not final:
            self._pool_events(t)
            self._run_chaos(t)
        if self.kubelet is not None:
            for kev in self.kubelet.events():
                self._kubelet_line(kev)
        self._k8s_events(force=final)
        while True:
            try:
                wall, out = self._outcomes.get_nowait()
            except queue.Empty:
                break
            self._outcome(wall, out)

    def _pool_events(self, t: float) -> None:
        """Scenario changes to pools, as a person would make them: `replicas` scales the
        Deployment, `restart` deletes its pods; other pool fields are not applied here."""
        while self._next_pool_event < len(self.scenario.timeline):
            ev = self.scenario.timeline[self._next_pool_event]
            if ev.at > t:
                return
            self._next_pool_event += 1
            if self.api is None:
                continue
            for name, patch in ev.pools.items():
                fields = patch.model_fields_set
                if "replicas" in fields and patch.replicas is not None:
                    dep = self.api.get("deployments", self.namespace, name, group="apps")
                    dep["spec"]["replicas"] = patch.replicas
                    self.api.put(dep)
                    self._say("scenario", f"{name} scaled to {patch.replicas}", t=ev.at)
                ignored = sorted(f for f in fields if f != "replicas")
                if ignored:
                    note = (
                        f"t={ev.at:.0f} s: the scenario's change of {', '.join(ignored)} on "
                        f"pool {name} is not applied in the demo (the controller owns the "
                        "canary's config; the kubelet runs the pods)"
                    )
                    self._notes.append(note)
                    self._say("demo", note, "yellow", t=ev.at)
            for name in ev.restart:
                for pod in self.api.objects("pods", self.namespace):
                    if pod["metadata"].get("labels", {}).get("app") == name:
                        with contextlib.suppress(Exception):
                            self.api.delete("pods", self.namespace, pod["metadata"]["name"])
                self._say("scenario", f"{name}: pods restarted", t=ev.at)

    def _kubelet_line(self, ev: KubeletEvent) -> None:
        """Rollouts, and pods that went away or failed (not every start and ready)."""
        if ev.kind in ("deleted", "restarted", "failed", "rollout"):
            style = "red" if ev.kind in ("failed", "restarted", "deleted") else "dim"
            self._say("kubelet", ev.message, style, t=self._wall_to_sim(ev.at))

    def _k8s_events(self, *, force: bool = False) -> None:
        """Events the controller wrote to Kubernetes (what `kubectl get events` shows)."""
        if self.api is None:
            return
        now = time.monotonic()
        if now - self._events_checked < 0.5 and not force:
            return
        self._events_checked = now
        try:
            events = self.api.objects("events", self.namespace)
        except Exception:
            return
        for ev in events:
            uid = ev.get("metadata", {}).get("uid", "")
            count = ev.get("count", 1)
            key = f"{uid}/{count}"
            if key in self._seen_events:
                continue
            self._seen_events.add(key)
            kind = ev.get("type", "Normal")
            if ev.get("reason") in (
                "SpeculationEnabled",
                "SpeculationDisabled",
                "SourceErrors",
                "PatchFailed",
                "FlipRefused",
                "RolloutTimeout",
            ):
                self._say(
                    "event",
                    f"{kind} {ev.get('reason')}: {str(ev.get('message', ''))[:160]}",
                    "yellow" if kind == "Warning" else "",
                )

    def _outcome(self, wall: float, out: Any) -> None:
        t = self._wall_to_sim(wall)
        unit = out.units[0] if out.units else None
        evaluation: Evaluation | None = unit.evaluation if unit is not None else None
        error = ""
        if out.spec_error:
            error = out.spec_error
        elif unit is not None and unit.error is not None:
            error = f"not applied: {unit.error}"
        if evaluation is not None:
            truth = math.nan
            if self._truth and evaluation.weights and evaluation.combined is not None:
                w = {k: v for k, v in evaluation.weights.items() if k in self._truth}
                total = math.fsum(w.values())
                if total > 0:
                    truth = math.fsum(self._truth[k]["alpha"] * v for k, v in w.items()) / total
            point = report.point(evaluation, start=self._t0_wall, truth_alpha=truth)
            point = dataclasses.replace(point, t=t)
            if error and unit is not None and unit.error is not None:
                point = dataclasses.replace(point, reason=f"{point.reason} — {error}")
            memory = unit.memory if unit is not None and unit.memory is not None else None
            state = (memory or evaluation.memory).state.value
            self._state = state
            self._spec_on = unit.speculation_on if unit is not None else None
            self._last_alpha = dict((memory or evaluation.memory).last_alpha)
        else:
            point = report.Point(
                t=t,
                at=wall,
                state=self._state,
                action=Action.HOLD.value,
                reason=f"not evaluated: {error}" if error else "not evaluated",
                verdict=Verdict.ERROR.value,
                speculation_on=bool(self._spec_on),
            )
        decision = Decision(
            t=t,
            point=point,
            evaluation=evaluation,
            error=error,
            applied=bool(unit and unit.applied),
        )
        with self._lock:
            self._decisions.append(decision)
            self._last = decision
            if point.transition:
                self._last_transition = decision
        if point.action == Action.DISABLE.value and self._first_rollback is None:
            self._first_rollback = t
        if point.transition == f"{State.PROBING.value} -> {State.ON.value}":
            self._confirmed.append(t)
        if point.transition:
            why = ""
            if point.action == Action.DISABLE.value:
                why = f" [{cause_of(failing_checks(evaluation)) or 'see checks'}]"
            self._say(
                "controller",
                f"{point.transition}: {point.action}{why} — {point.reason}",
                "bold green"
                if point.action == Action.ENABLE.value
                else "bold red"
                if point.action == Action.DISABLE.value
                else "bold",
                t=t,
            )
        elif error:
            self._say("controller", f"{point.verdict}: {error[:200]}", "red", t=t)
        if self.on_decision is not None:
            with contextlib.suppress(Exception):
                self.on_decision(decision)

    # ------------------------------------------------------------ chaos

    def _chaos_due(self, i: int) -> float:
        """When step `i` should start (scenario seconds)."""
        rec = self._chaos[i]
        step = rec.step
        due = math.inf
        if step.after == "rollback" and self._first_rollback is not None:
            due = self._first_rollback + 3.0
        elif step.after == "previous":
            if i == 0:
                due = 0.0
            else:
                back = self._chaos[i - 1].recovered
                due = back + 3.0 if back is not None else math.inf
        elif step.after == "confirmed" and len(self._confirmed) >= 3:
            due = self._confirmed[2] + 4.0
        return min(due, step.latest)

    def _run_chaos(self, t: float) -> None:
        for i, rec in enumerate(self._chaos):
            if rec.started is None and t >= self._chaos_due(i):
                rec.started = t
                self._chaos_begin(rec)
            elif (
                rec.started is not None
                and rec.ended is None
                and t >= rec.started + rec.step.seconds
            ):
                rec.ended = t
                self._chaos_end(rec)

    def _end_chaos(self, t: float) -> None:
        for rec in self._chaos:
            if rec.started is not None and rec.ended is None:
                rec.ended = t
                with contextlib.suppress(Exception):
                    self._chaos_end(rec)

    def _chaos_begin(self, rec: ChaosRecord) -> None:
        step = rec.step
        if step.kind == "prometheus" and self.prometheus is not None:
            self.prometheus.stop()
            rec.detail = "Prometheus process stopped (SIGTERM); its data dir is kept"
        elif step.kind == "apiserver" and self.api is not None:
            # Deployments and Pods (what the actuator and pod discovery call): a transient
            # failure of the apps API; the resource itself stays readable.
            fault = self.api.faults.add(
                "*",
                r"^/apis/apps/|^/api/v1/namespaces/[^/]+/pods",
                500,
                times=None,
                message="injected fault: the demo's API chaos",
            )
            rec.detail = "every Deployment and Pod request answered HTTP 500"
            rec.fault = fault
        elif step.kind == "pod" and self.api is not None and self.kubelet is not None:
            victims = [
                n
                for n, p in self.kubelet.pods().items()
                if p["deployment"] == self._chaos_pod_deployment()
            ]
            if victims:
                from kubernetes import client

                api_client = client.ApiClient(self.api.configuration())
                try:
                    client.CoreV1Api(api_client).delete_namespaced_pod(
                        victims[0], self.namespace, _preload_content=False
                    )
                    rec.detail = f"pod {victims[0]} deleted through the API (kubectl delete pod)"
                except Exception as exc:
                    rec.detail = f"deleting pod {victims[0]} failed: {exc}"
                finally:
                    api_client.close()  # type: ignore[no-untyped-call]
            else:
                rec.detail = "no pod to delete"
        self._say("chaos", f"{step.what}: {rec.detail}", "bold magenta")

    def _chaos_pod_deployment(self) -> str:
        assert self.canary is not None
        deps = self.canary.spec.canary_deployments()
        return deps[0].name

    def _chaos_end(self, rec: ChaosRecord) -> None:
        step = rec.step
        if step.kind == "prometheus" and self.prometheus is not None:
            prom = self.prometheus

            def restart() -> None:
                try:
                    prom.start(timeout=self.options.prometheus_timeout)
                    self._say("chaos", "Prometheus started again (same port, same data)", "magenta")
                except Exception as exc:
                    self._say("chaos", f"Prometheus did not come back: {exc}", "red")
                rec.recovered = self.sim_now()

            th = threading.Thread(target=restart, name="demo-prometheus-restart", daemon=True)
            self._threads.append(th)
            th.start()
            return
        rec.recovered = rec.ended
        if step.kind == "apiserver" and self.api is not None:
            fault = rec.fault
            if fault is not None:
                self.api.faults.remove(fault)
            self._say("chaos", "API server answers normally again", "magenta")
            return
        if step.kind == "pod":
            self._say("chaos", "pod fault over (the Deployment replaced the pod)", "magenta")

    # ------------------------------------------------------------ stopping

    def close(self) -> None:
        """Stop every part that started, newest first (idempotent)."""
        for th in self._threads:
            th.join(timeout=self.options.prometheus_timeout)
        self._threads.clear()
        while self._cleanup:
            what, fn = self._cleanup.pop()
            try:
                fn()
            except Exception as exc:  # keep stopping the rest
                self._notes.append(f"stopping {what} failed: {exc!r}")

    # ------------------------------------------------------------ results

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                scenario=self.scenario.name,
                t=min(self.sim_now(), self.duration),
                duration=self.duration,
                speed=self.speed,
                source=self.source_kind,
                gate=self.gate,
                last=self._last,
                last_transition=self._last_transition,
                state=self._state,
                speculation_on=self._spec_on,
                log=list(self._log),
                truth=copy.deepcopy(self._truth),
                pods=self.kubelet.pods() if self.kubelet is not None else {},
                chaos_active=[
                    r.step.what for r in self._chaos if r.started is not None and r.ended is None
                ],
                last_alpha=dict(self._last_alpha),
                finished=self._finished,
            )

    @property
    def decisions(self) -> list[Decision]:
        with self._lock:
            return list(self._decisions)

    def transitions(self) -> list[dict[str, Any]]:
        out = []
        for d in self.decisions:
            p = d.point
            if not p.transition:
                continue
            checks = failing_checks(d.evaluation)
            entry: dict[str, Any] = {
                "t": round(p.t, 1),
                "transition": p.transition,
                "from": p.transition.split(" -> ")[0],
                "to": p.transition.split(" -> ")[-1],
                "action": p.action,
                "reason": p.reason,
                "failing_checks": [c.name for c in checks],
                "failing": [{"kind": c.kind.value, "slice": c.slice} for c in checks],
                "transition_cause": p.cause.value if p.cause is not None else None,
            }
            if p.action == Action.DISABLE.value:
                entry["cause"] = cause_of(checks)
            if p.action == Action.ENABLE.value:
                entry["early_reprobe"] = p.cause is Cause.EARLY_REPROBE
            out.append(entry)
        return out

    def milestones(self) -> dict[str, bool]:
        """The default story's beats, in order: enabled, rolled back on P99, re-enabled,
        rolled back on alpha, re-enabled by an early re-probe."""
        want: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
            ("enabled", lambda e: e["action"] == "enable"),
            ("rolled_back_on_p99", lambda e: e.get("cause") == "latency"),
            ("re_enabled", lambda e: e["action"] == "enable"),
            ("rolled_back_on_alpha", lambda e: e.get("cause") == "acceptance"),
            ("early_reprobe", lambda e: e["action"] == "enable" and bool(e.get("early_reprobe"))),
        ]
        found = dict.fromkeys((k for k, _ in want), False)
        i = 0
        for entry in self.transitions():
            if i < len(want) and want[i][1](entry):
                found[want[i][0]] = True
                i += 1
        return found

    def chaos_report(self) -> list[dict[str, Any]]:
        out = []
        decisions = self.decisions
        interval = self.canary.spec.timing.interval_seconds * self.speed if self.canary else 0.0
        for rec in self._chaos:
            if rec.started is None:
                out.append({"kind": rec.step.kind, "what": rec.step.what, "ran": False})
                continue
            end = _fault_end(rec)
            # Evaluations during the fault (and one interval after, while data recovers).
            inside = [d for d in decisions if rec.started <= d.t <= end + interval]
            verdicts: dict[str, int] = {}
            for d in inside:
                verdicts[d.point.verdict] = verdicts.get(d.point.verdict, 0) + 1
            flips = [
                d.point.action
                for d in inside
                if d.point.action in (Action.ENABLE.value, Action.DISABLE.value)
            ]
            shown = [d for d in inside if d.point.verdict in ("Error", "Inconclusive")]
            # The evaluation that shows this fault best: one naming it, if any does.
            mark = {"prometheus": "unreachable", "apiserver": "HTTP 500", "pod": "rollout"}
            naming = [d for d in shown if mark[rec.step.kind] in self._shown_as(d)]
            shown = naming or shown
            out.append(
                {
                    "kind": rec.step.kind,
                    "what": rec.step.what,
                    "ran": True,
                    "start": round(rec.started, 1),
                    "end": round(end, 1),
                    "detail": rec.detail,
                    "evaluations": len(inside),
                    "verdicts": verdicts,
                    "flips": len(flips),
                    "example": self._shown_as(shown[0]) if shown else "",
                }
            )
        return out

    @staticmethod
    def _shown_as(d: Decision) -> str:
        """How the view showed one evaluation: verdict, decision and the checks behind it."""
        why = why_text(d.evaluation) or d.error
        text = f"{d.point.verdict}: {d.point.reason}"
        if why and why not in text:
            text += f" ({why})"
        return text[:400]

    def notes(self) -> list[str]:
        notes = [
            f"Scenario {self.scenario.name!r} ({self.scenario_where}), policy {self.policy_where}, "
            f"source {self.source_kind}, speed {self.speed:g}x (times are scenario seconds; the "
            f"controller's own messages count wall seconds).",
        ]
        for line in self._all_log:
            if line.source == "scenario":
                notes.append(f"t={line.t:.0f} s scenario: {line.text}")
        for c in self.chaos_report():
            if not c["ran"]:
                notes.append(f"chaos {c['what']}: not reached before the end")
                continue
            verdicts = ", ".join(f"{n} {v}" for v, n in sorted(c["verdicts"].items())) or "none"
            flip = "no flip" if c["flips"] == 0 else f"{c['flips']} FLIPS"
            notes.append(
                f"chaos t={c['start']:.0f}-{c['end']:.0f} s: {c['what']} ({c['detail']}); "
                f"{c['evaluations']} evaluations: {verdicts}; {flip}."
                + (f" Shown as: {c['example']}" if c["example"] else "")
            )
        notes.extend(self._notes)
        return notes

    def spans(self) -> list[tuple[float, float, str]]:
        return [
            (r.started, _fault_end(r), r.step.what) for r in self._chaos if r.started is not None
        ]

    def write_report(self) -> dict[str, Path]:
        points = [d.point for d in self.decisions]
        title = f"alphagate demo: {self.scenario.name} ({self.source_kind}, {self.speed:g}x)"
        return report.write(
            points,
            self.options.out,
            title=title,
            gate=self.gate,
            notes=self.notes(),
            spans=self.spans(),
        )

    def result(
        self, wall: float, sim_t: float, interrupted: bool, paths: dict[str, Path]
    ) -> DemoResult:
        return DemoResult(
            scenario=self.scenario.name,
            source=self.source_kind,
            speed=self.speed,
            sim_seconds=sim_t,
            wall_seconds=wall,
            decisions=self.decisions,
            transitions=self.transitions(),
            chaos=self.chaos_report(),
            paths=paths,
            interrupted=interrupted,
            milestones=self.milestones(),
            notes=self.notes(),
            endpoints=dict(self.endpoints),
        )


class _SafeStream(io.TextIOBase):
    """A log file that drops writes after it is closed: a thread that outlives the demo's
    shutdown must not crash on its last log line."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if self._fh.closed:
                return len(text)
            return int(self._fh.write(text))

    def flush(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()
        super().close()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def logging_to(path: Path | None) -> Iterator[None]:
    """Send structlog, stdlib logging and stray stderr output (HTTP servers' tracebacks) to
    `path` for the demo's duration, then restore."""
    if path is None:
        yield
        return
    import logging

    import structlog

    from alphagate import logs

    saved = structlog.get_config()
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = _SafeStream(path.open("a", encoding="utf-8"))
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_level = root.level
    try:
        logs.configure(fmt="json", level="INFO", stream=stream)
        for h in saved_handlers:
            root.removeHandler(h)
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stderr(stream):
            yield
    finally:
        root.removeHandler(handler)
        for h in saved_handlers:
            root.addHandler(h)
        root.setLevel(saved_level)
        structlog.configure(**saved)
        stream.close()


__all__ = [
    "ChaosStep",
    "Decision",
    "Demo",
    "DemoOptions",
    "DemoResult",
    "LogLine",
    "Snapshot",
    "chaos_plan",
    "data_text",
    "deployment_objects",
    "latency_by_slice",
    "load_policy",
    "logging_to",
    "scaled_policy",
    "why_text",
]
