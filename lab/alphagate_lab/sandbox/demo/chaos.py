"""The demo's scripted faults: Prometheus stopped, the API server answering 500, a canary pod
deleted; when each starts (at a quiet moment of the story) and when its part worked again."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import urllib3.exceptions

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.apiserver import ApiError, ApiServer
from alphagate_lab.sandbox.kubelet import KubeletRunner


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
    neither can hide a decision the story needs), and a canary pod deleted near the end. The
    latest starts are after the load spike (70-140 s of the default story): a Prometheus
    stopped earlier can cut the spike's second failing window, and with it the rollback."""
    steps = []
    if prometheus:
        steps.append(
            ChaosStep("prometheus", 12.0, "Prometheus stopped", "rollback", 0.42 * duration)
        )
    steps.append(
        ChaosStep(
            "apiserver",
            10.0,
            "API server answers 500",
            "previous" if prometheus else "rollback",
            0.50 * duration,
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


def fault_end(rec: ChaosRecord) -> float:
    """When the faulty part worked again (Prometheus: once restarted), in scenario seconds."""
    for t in (rec.recovered, rec.ended, rec.started):
        if t is not None:
            return t
    return 0.0


def chaos_due(
    records: list[ChaosRecord], i: int, first_rollback: float | None, confirmed: list[float]
) -> float:
    """When step `i` should start (scenario seconds)."""
    rec = records[i]
    step = rec.step
    due = math.inf
    if step.after == "rollback" and first_rollback is not None:
        due = first_rollback + 3.0
    elif step.after == "previous":
        if i == 0:
            due = 0.0
        else:
            back = records[i - 1].recovered
            due = back + 3.0 if back is not None else math.inf
    elif step.after == "confirmed" and len(confirmed) >= 3:
        due = confirmed[2] + 4.0
    return min(due, step.latest)


class ChaosRunner:
    """Starts and ends the scripted faults on the demo's parts (Prometheus, the API server
    double, the kubelet's pods), and says what it did through `say`."""

    def __init__(
        self,
        records: list[ChaosRecord],
        *,
        api: ApiServer,
        prometheus: Any,
        kubelet: KubeletRunner,
        namespace: str,
        pod_deployment: str,
        say: Callable[[str, str, str], None],
        now: Callable[[], float],
        prometheus_timeout: float,
        threads: list[threading.Thread],
    ) -> None:
        self.records = records
        self.api = api
        self.prometheus = prometheus
        self.kubelet = kubelet
        self.namespace = namespace
        self.pod_deployment = pod_deployment
        self.say = say
        self.now = now
        self.prometheus_timeout = prometheus_timeout
        self._threads = threads

    def run(self, t: float, first_rollback: float | None, confirmed: list[float]) -> None:
        """Start the steps that are due at `t` and end those whose time is up."""
        for i, rec in enumerate(self.records):
            if rec.started is None and t >= chaos_due(self.records, i, first_rollback, confirmed):
                rec.started = t
                self._begin(rec)
            elif (
                rec.started is not None
                and rec.ended is None
                and t >= rec.started + rec.step.seconds
            ):
                rec.ended = t
                self._end(rec)

    def end_all(self, t: float) -> None:
        """The demo ends: end every fault still running."""
        for rec in self.records:
            if rec.started is not None and rec.ended is None:
                rec.ended = t
                with contextlib.suppress(ApiError, SandboxError, OSError):
                    self._end(rec)

    def _begin(self, rec: ChaosRecord) -> None:
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
                n for n, p in self.kubelet.pods().items() if p["deployment"] == self.pod_deployment
            ]
            if victims:
                from kubernetes import client

                api_client = client.ApiClient(self.api.configuration())
                try:
                    client.CoreV1Api(api_client).delete_namespaced_pod(
                        victims[0], self.namespace, _preload_content=False
                    )
                    rec.detail = f"pod {victims[0]} deleted through the API (kubectl delete pod)"
                except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                    rec.detail = f"deleting pod {victims[0]} failed: {exc}"
                finally:
                    api_client.close()
            else:
                rec.detail = "no pod to delete"
        self.say("chaos", f"{step.what}: {rec.detail}", "bold magenta")

    def _end(self, rec: ChaosRecord) -> None:
        step = rec.step
        if step.kind == "prometheus" and self.prometheus is not None:
            prom = self.prometheus

            def restart() -> None:
                try:
                    prom.start(timeout=self.prometheus_timeout)
                    self.say("chaos", "Prometheus started again (same port, same data)", "magenta")
                except (SandboxError, OSError) as exc:
                    self.say("chaos", f"Prometheus did not come back: {exc}", "red")
                rec.recovered = self.now()

            th = threading.Thread(target=restart, name="demo-prometheus-restart", daemon=True)
            self._threads.append(th)
            th.start()
            return
        rec.recovered = rec.ended
        if step.kind == "apiserver" and self.api is not None:
            fault = rec.fault
            if fault is not None:
                self.api.faults.remove(fault)
            self.say("chaos", "API server answers normally again", "magenta")
            return
        if step.kind == "pod":
            self.say("chaos", "pod fault over (the Deployment replaced the pod)", "magenta")
