"""The demo's engine: starts the sandbox (API server double, kubelet runner, simulated pods,
Prometheus when installed) and the real controller, plays the scenario and its faults, hears
every evaluation through `on_outcome`, and writes the report."""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alphagate.config import Aggregation, SpeculativeCanary, dump, parse
from alphagate.core.model import Action, State
from alphagate.errors import PolicyError, SandboxError
from alphagate_lab import report
from alphagate_lab.sandbox.demo import results
from alphagate_lab.sandbox.demo.chaos import ChaosRecord, ChaosRunner, chaos_plan
from alphagate_lab.sandbox.demo.feed import ClusterFeed
from alphagate_lab.sandbox.demo.hearing import hear, log_line
from alphagate_lab.sandbox.demo.inputs import (
    check_fit,
    free_port,
    import_controller,
    load_policy,
    load_scenario_text,
    prometheus_binary,
    scaled_policy,
)
from alphagate_lab.sandbox.demo.parts import controller_for, pick_source
from alphagate_lab.sandbox.demo.sandbox import PausedClock, Sandbox
from alphagate_lab.sandbox.demo.view import (
    Decision,
    DemoOptions,
    DemoResult,
    LogLine,
    Snapshot,
)


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
        self.prometheus_binary = prometheus_binary()
        self.source_kind = pick_source(options.source, self.prometheus_binary)
        self.namespace = options.namespace
        self.name = str(self.policy_doc.get("metadata", {}).get("name", "demo"))

        self._stopping = False  # a plain flag: stop() is called from a signal handler
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
        self._chaos_runner: ChaosRunner | None = None
        self._t0_wall = 0.0
        self._clock = PausedClock()
        self._cleanup: list[tuple[str, Callable[[], None]]] = []
        self._threads: list[threading.Thread] = []
        self._notes: list[str] = []
        self._finished = False
        self.endpoints: dict[str, str] = {}
        self._feed = ClusterFeed(self.scenario, self.namespace, self._say, self._notes)
        self._first_rollback: float | None = None  # scenario seconds, for the chaos timing
        self._confirmed: list[float] = []
        # parts
        self.sandbox = Sandbox()
        self.controller: Any = None
        self.canary: SpeculativeCanary | None = None

    # ------------------------------------------------------------ setup

    def sim_now(self) -> float:
        return float(self.sandbox.sim.sim_now()) if self.sandbox.sim is not None else 0.0

    def _wall_to_sim(self, at: float) -> float:
        return (at - self._t0_wall) * self.speed

    def _say(self, source: str, text: str, style: str = "", t: float | None = None) -> None:
        line = LogLine(self.sim_now() if t is None else t, source, text, style)
        with self._lock:
            self._log.append(line)
            self._all_log.append(line)
        if self.on_log is not None:
            with contextlib.suppress(Exception):  # last resort: the view's hook must not stop us
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
        opts = self.options
        # The kubernetes client takes seconds to import; do it while Prometheus starts.
        warm = threading.Thread(target=import_controller, name="demo-import", daemon=True)
        warm.start()
        metrics_port = free_port()
        base_spec = parse(self.policy_doc, where=self.policy_where).spec
        source = self.sandbox.start(
            self.scenario,
            self.namespace,
            source_kind=self.source_kind,
            prometheus_binary=self.prometheus_binary,
            prometheus_timeout=opts.prometheus_timeout,
            interval_wall=base_spec.timing.interval_seconds / self.speed,
            metrics_port=metrics_port,
            speed=self.speed,
            seed=opts.seed,
            clock=self._clock,
            feed=self._feed,
            defer=self._defer,
            wait=self._wait,
            say=self._say,
        )
        api, kubelet, prom = self.sandbox.api, self.sandbox.kubelet, self.sandbox.prometheus
        assert api is not None and kubelet is not None
        pods = sum(p.replicas for p in self.scenario.pools)

        # the controller and the SpeculativeCanary
        self.canary = scaled_policy(
            self.policy_doc,
            speed=self.speed,
            namespace=self.namespace,
            source=source,
            where=self.policy_where,
        )
        warm.join()
        outcomes = self._outcomes
        # The reconciler `alphagate run` uses, telling the demo what each pass did.
        self.controller = controller_for(
            api.url,
            self.namespace,
            metrics_port,
            str(prom.url) if prom is not None else None,
            on_outcome=lambda out: outcomes.put((time.time(), out)),
        )
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
        if prom is not None:
            self.endpoints["prometheus"] = str(prom.url)
        api.put(dump(self.canary))
        self._say(
            "demo",
            f"sandbox up: API {api.url}, {pods} pods, source "
            + (f"Prometheus {prom.url}" if prom else "pod scraping")
            + f", controller metrics {controller.metrics_url}",
        )
        if opts.chaos:
            self._chaos = [
                ChaosRecord(s) for s in chaos_plan(self.duration, prometheus=prom is not None)
            ]
            self._chaos_runner = ChaosRunner(
                self._chaos,
                api=api,
                prometheus=prom,
                kubelet=kubelet,
                namespace=self.namespace,
                pod_deployment=self.canary.spec.canary_deployments()[0].name,
                say=self._say,
                now=self.sim_now,
                prometheus_timeout=opts.prometheus_timeout,
                threads=self._threads,
            )
            if prom is None:
                self._notes.append(
                    "chaos: no Prometheus in this run (pod scraping), so it was not stopped"
                )

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SandboxError(f"demo: timed out after {timeout:g} s waiting for {what}")
            if self._stopping:
                raise KeyboardInterrupt
            time.sleep(0.05)
        return

    # ------------------------------------------------------------ running

    def stop(self) -> None:
        """Ask `run()` to finish early (it still writes the report). Takes no lock: a signal
        handler calls it, on the main thread, maybe while that thread holds one."""
        self._stopping = True

    def run(self, *, tick: float = 0.1) -> DemoResult:
        """Start, play the scenario to its end, stop everything, write the report."""
        wall0 = time.monotonic()
        interrupted = False
        try:
            self.start()
            while not self._stopping:
                now = self.sim_now()
                self.step()
                if now >= self.duration:
                    break
                time.sleep(tick)
            interrupted = self._stopping and self.sim_now() < self.duration
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if interrupted:
                self._say("demo", "stopping: closing every part and writing the report ...")
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
        if self.sandbox.sim is not None and not final:
            try:
                events = self.sandbox.sim.sync()
                truth = self.sandbox.sim.fleet.truth()
            except Exception as exc:  # last resort: a simulator hiccup must not end the demo
                events, truth = [], None
                self._say("demo", f"simulator: {exc!r}", "red")
            for ev in events:
                if ev.kind == "timeline":
                    self._say("scenario", ev.message, "bold cyan", t=ev.t)
            if truth is not None:
                self._truth = {
                    name: {"alpha": s.alpha, "share": s.share} for name, s in truth.slices.items()
                }
        if not final:
            self._feed.pool_events(t)
            self._run_chaos(t)
        if self.sandbox.kubelet is not None:
            for kev in self.sandbox.kubelet.events():
                self._feed.kubelet_line(kev, self._wall_to_sim(kev.at))
        self._feed.k8s_events(force=final)
        while True:
            try:
                wall, out = self._outcomes.get_nowait()
            except queue.Empty:
                break
            self._outcome(wall, out)

    def _outcome(self, wall: float, out: Any) -> None:
        t = self._wall_to_sim(wall)
        heard = hear(
            out,
            t=t,
            wall=wall,
            t0_wall=self._t0_wall,
            truth=self._truth,
            state=self._state,
            speculation_on=self._spec_on,
        )
        decision, point = heard.decision, heard.decision.point
        self._state, self._spec_on = heard.state, heard.speculation_on
        if heard.last_alpha is not None:
            self._last_alpha = heard.last_alpha
        with self._lock:
            self._decisions.append(decision)
            self._last = decision
            if point.transition:
                self._last_transition = decision
        if point.action == Action.DISABLE.value and self._first_rollback is None:
            self._first_rollback = t
        if point.transition == f"{State.PROBING.value} -> {State.ON.value}":
            self._confirmed.append(t)
        line = log_line(decision)
        if line is not None:
            self._say("controller", line[0], line[1], t=t)
        if self.on_decision is not None:
            with contextlib.suppress(Exception):  # last resort: the view's hook must not stop us
                self.on_decision(decision)

    # ------------------------------------------------------------ chaos

    def _run_chaos(self, t: float) -> None:
        if self._chaos_runner is not None:
            self._chaos_runner.run(t, self._first_rollback, self._confirmed)

    def _end_chaos(self, t: float) -> None:
        if self._chaos_runner is not None:
            self._chaos_runner.end_all(t)

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
            except Exception as exc:
                # last resort: a part may fail to stop in any way (a process, a server thread, a
                # temp dir); the rest must still stop, and the note names the error's type
                self._notes.append(f"stopping {what} failed: {type(exc).__name__}: {exc}")

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
                pods=self.sandbox.kubelet.pods() if self.sandbox.kubelet is not None else {},
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
        return results.transitions(self.decisions)

    def milestones(self) -> dict[str, bool]:
        """The default story's beats, in order: enabled, rolled back on P99, re-enabled,
        rolled back on alpha, re-enabled by an early re-probe."""
        return results.milestones(self.transitions())

    def chaos_report(self) -> list[dict[str, Any]]:
        interval = self.canary.spec.timing.interval_seconds * self.speed if self.canary else 0.0
        return results.chaos_report(self._chaos, self.decisions, interval)

    def notes(self) -> list[str]:
        header = (
            f"Scenario {self.scenario.name!r} ({self.scenario_where}), policy {self.policy_where}, "
            f"source {self.source_kind}, speed {self.speed:g}x (times are scenario seconds; the "
            f"controller's own messages count wall seconds)."
        )
        return results.notes(header, self._all_log, self.chaos_report(), self._notes)

    def spans(self) -> list[tuple[float, float, str]]:
        return results.spans(self._chaos)

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
