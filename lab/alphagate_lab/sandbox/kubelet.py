"""A local runner that plays kubelet (and the Deployment controller) against the API double.

No cluster runs here, so something must turn Deployments into running pods and report back
the way Kubernetes does, or the controller's actuator would patch into a void. For every
Deployment the runner keeps ``spec.replicas`` pods running through a pluggable
:class:`PodRuntime` (simulated vLLM pods now; real vLLM processes can plug in the same way),
and keeps the API in step:

* a **Pod object** per pod: the template's labels plus ``pod-template-hash``, an owner
  reference, ``status.podIP`` 127.0.0.1, the port as a container port named ``http`` and as
  the ``prometheus.io/port`` annotation, and a ``Ready`` condition that follows the runtime's
  readiness (a model that is still loading is not ready);
* **rollouts**: when the pod template changes (the actuator patched the args) the pods are
  replaced with pods of the new template, by the Deployment's strategy (``Recreate``, or
  ``RollingUpdate`` with maxSurge/maxUnavailable), and the Deployment's status says what the
  real controllers would: ``observedGeneration``, ``replicas``, ``updatedReplicas``,
  ``readyReplicas``, ``availableReplicas`` and the ``Progressing`` condition, whose reason
  becomes ``NewReplicaSetAvailable`` only once every new pod is ready;
* **pods that go away**: a Pod deleted through the API is stopped and replaced; a container
  that died is restarted (``restartCount`` goes up); a container that cannot start is retried
  with back-off and shown as waiting with the reason.

The runner reads and writes the double's store directly (as a node agent on the same host
would, and unaffected by the faults a test injects into the controller's HTTP requests).
Its loop is bounded by a poll period and stops cleanly; :meth:`KubeletRunner.sync` does one
pass for tests. The runtimes are in `pod_runtime`, the Pod objects it writes in `pod_objects`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from alphagate.errors import AlphagateError
from alphagate_lab.sandbox.apiserver import ApiError, ApiServer, deployment_status, now_rfc3339
from alphagate_lab.sandbox.pod_objects import (
    HOST,
    PORT_ANNOTATION,
    OwnedPod,
    pod_object,
    pod_status,
)
from alphagate_lab.sandbox.pod_runtime import PodLaunch, PodRuntime

HASH_LABEL: Final = "pod-template-hash"
_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for suffixes


# ---------------------------------------------------------------- bookkeeping


@dataclass(frozen=True, slots=True)
class KubeletEvent:
    """Something the runner did, for logs and the demo's event list."""

    at: float
    deployment: str
    pod: str
    kind: str  # started, ready, not-ready, deleted, replaced, restarted, failed, rollout
    message: str


@dataclass(slots=True)
class _Rollout:
    generation: int = 0
    template_hash: str = ""
    complete_stamp: str = ""  # when the current template's pods all became ready
    progress_stamp: str = ""
    announced: bool = False


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable short hash of a pod template (what the ReplicaSet name carries)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def _int_or_percent(value: Any, replicas: int, *, round_up: bool, default: str) -> int:
    raw = default if value is None else value
    if isinstance(raw, int) and not isinstance(raw, bool):
        return max(raw, 0)
    text = str(raw).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1]) / 100.0
        except ValueError:
            pct = float(default.rstrip("%")) / 100.0
        n = replicas * pct
        return max(math.ceil(n - 1e-9) if round_up else math.floor(n + 1e-9), 0)
    try:
        return max(int(text), 0)
    except ValueError:
        return 0


def _container_of(deployment: Mapping[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"].get("containers") or [{}]
    first: dict[str, Any] = containers[0]
    return first


# ---------------------------------------------------------------- the runner


class KubeletRunner:
    """Keeps each Deployment's pods running through `runtime` and reports to the API double.

    Install :meth:`hook` as the double's kubelet (``ApiServer(kubelet=runner.hook)``) so a
    patched template is acted on at once; otherwise the poll picks it up.
    """

    def __init__(
        self,
        api: ApiServer,
        runtime: PodRuntime,
        *,
        namespace: str | None = None,
        poll_seconds: float = 0.1,
        seed: int = 0,
        node_name: str = "alphagate-sandbox",
        max_backoff_seconds: float = 30.0,
        on_event: Callable[[KubeletEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.runtime = runtime
        self.namespace = namespace
        self.poll_seconds = poll_seconds
        self.node_name = node_name
        self.max_backoff_seconds = max_backoff_seconds
        self.on_event = on_event
        self._clock = clock
        self._rng = random.Random(seed)
        self._pods: dict[tuple[str, str], OwnedPod] = {}
        self._rollouts: dict[tuple[str, str], _Rollout] = {}
        self._events: deque[KubeletEvent] = deque(maxlen=1000)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: deque[str] = deque(maxlen=50)  # unexpected failures of a pass
        self._listed: tuple[int, list[dict[str, Any]], list[dict[str, Any]]] | None = None

    # ------------------------------------------------------------ lifecycle

    def hook(self, server: ApiServer, deployment: dict[str, Any]) -> None:
        """The API double's kubelet hook: a Deployment is new or its template changed."""
        self._wake.set()

    def start(self) -> KubeletRunner:
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="sandbox-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, stop_pods: bool = True, timeout: float = 10.0) -> None:
        """Stop the loop and (by default) every pod it started."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if stop_pods:
            with self._lock:
                pods = list(self._pods.values())
                self._pods.clear()
            for pod in pods:
                with contextlib.suppress(Exception):
                    self.runtime.stop(pod.name)

    def __enter__(self) -> KubeletRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # last resort: one bad pass must not kill the node
                self.errors.append(repr(exc))  # the repr names the type
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

    # ------------------------------------------------------------ views

    def events(self) -> list[KubeletEvent]:
        """Everything that happened since the last call."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
        return out

    def pods(self, deployment: str | None = None) -> dict[str, dict[str, Any]]:
        """The runner's pods: name -> {deployment, hash, port, ready, restarts, error}."""
        with self._lock:
            return {
                p.name: {
                    "namespace": p.namespace,
                    "deployment": p.deployment,
                    "template_hash": p.template_hash,
                    "port": p.port,
                    "ready": p.ready,
                    "restarts": p.restarts,
                    "error": p.error,
                    "args": list(p.launch.args),
                }
                for p in self._pods.values()
                if deployment is None or p.deployment == deployment
            }

    def _emit(self, pod: OwnedPod | None, deployment: str, kind: str, message: str) -> None:
        ev = KubeletEvent(time.time(), deployment, pod.name if pod else "", kind, message)
        self._events.append(ev)
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(ev)

    # ------------------------------------------------------------ one pass

    def sync(self) -> None:
        """Bring pods and statuses in line with the Deployments once."""
        with self._lock:
            deployments, pods = self._listing()
            api_pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
            self._reap(api_pods)
            self._probe(api_pods)
            wanted = set()
            for dep in deployments:
                meta = dep["metadata"]
                key = (meta["namespace"], meta["name"])
                wanted.add(key)
                try:
                    self._reconcile(dep)
                except ApiError:
                    continue  # the Deployment went away meanwhile
            for key in [k for k in self._rollouts if k not in wanted]:
                self._rollouts.pop(key, None)
            for pod in [
                p for p in self._pods.values() if (p.namespace, p.deployment) not in wanted
            ]:
                self._delete(pod, "its Deployment is gone")

    def _listing(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Deployments and Pods, listed again only once the store changed (a pass runs many times
        a second; it only reads them). The version is read first: a write meanwhile relists."""
        rv = self.api.resource_version
        if self._listed is None or self._listed[0] != rv:
            deployments = self.api.objects("deployments", self.namespace, group="apps")
            self._listed = (rv, deployments, self.api.objects("pods", self.namespace))
        return self._listed[1], self._listed[2]

    def _reap(self, api_pods: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        """Pods deleted through the API are stopped; dead containers are restarted."""
        for key, pod in list(self._pods.items()):
            obj = api_pods.get(key)
            if obj is None or (pod.uid and obj["metadata"].get("uid") != pod.uid):
                self._pods.pop(key, None)
                with contextlib.suppress(Exception):
                    self.runtime.stop(pod.name)
                self._emit(pod, pod.deployment, "deleted", f"pod {pod.name} deleted: stopped")
                continue
            if pod.port is not None and not self.runtime.alive(pod.name):
                pod.restarts += 1
                pod.port = None
                pod.ready = False
                pod.backoff = 1.0
                pod.retry_at = 0.0
                self._emit(
                    pod,
                    pod.deployment,
                    "restarted",
                    f"container of {pod.name} died: restarting (restart {pod.restarts})",
                )
            if pod.port is None and self._clock() >= pod.retry_at:
                self._run_container(pod)

    def _run_container(self, pod: OwnedPod) -> None:
        try:
            pod.port = self.runtime.start(pod.launch)
        except (AlphagateError, OSError, ValueError) as exc:
            pod.error = str(exc)
            pod.retry_at = self._clock() + pod.backoff
            pod.backoff = min(pod.backoff * 2, self.max_backoff_seconds)
            self._emit(pod, pod.deployment, "failed", f"{pod.name} cannot start: {exc}")
            self._write_pod(pod)
            return
        pod.error = ""
        pod.started = now_rfc3339()
        pod.ready = False
        self._emit(
            pod, pod.deployment, "started", f"{pod.name} started on {HOST}:{pod.port} (loading)"
        )
        self._write_pod(pod)

    def _probe(self, api_pods: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        for pod in self._pods.values():
            ready = pod.port is not None and self.runtime.ready(pod.name)
            if ready != pod.ready:
                pod.ready = ready
                kind = "ready" if ready else "not-ready"
                self._emit(pod, pod.deployment, kind, f"{pod.name} {kind}")
                self._write_pod(pod)

    # ------------------------------------------------------------ Deployments

    def _reconcile(self, dep: dict[str, Any]) -> None:
        meta, spec = dep["metadata"], dep.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        generation = int(meta.get("generation") or 1)
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        template = spec.get("template") or {}
        thash = template_hash(template)
        rollout = self._rollouts.setdefault((ns, name), _Rollout())
        if rollout.template_hash != thash:
            if rollout.template_hash:
                self._emit(
                    None, name, "rollout", f"{name}: new pod template (generation {generation})"
                )
            rollout.template_hash = thash
            rollout.complete_stamp = ""
            rollout.progress_stamp = now_rfc3339()
            rollout.announced = False
        rollout.generation = generation

        mine = [p for p in self._pods.values() if (p.namespace, p.deployment) == (ns, name)]
        new = [p for p in mine if p.template_hash == thash]
        old = [p for p in mine if p.template_hash != thash]
        strategy = spec.get("strategy") or {}
        min_available = replicas
        if strategy.get("type") == "Recreate":
            min_available = 0
            for pod in old:  # stopped synchronously, so the new pods may start at once
                self._delete(pod, "Recreate: old template")
            self._scale(dep, thash, new, replicas)
        else:
            rolling = strategy.get("rollingUpdate") or {}
            surge = _int_or_percent(rolling.get("maxSurge"), replicas, round_up=True, default="25%")
            unavailable = _int_or_percent(
                rolling.get("maxUnavailable"), replicas, round_up=False, default="25%"
            )
            if surge == 0 and unavailable == 0:
                unavailable = 1
            min_available = max(replicas - unavailable, 0)
            self._scale(dep, thash, new, replicas, limit=replicas + surge - len(old))
            new = [
                p
                for p in self._pods.values()
                if (p.namespace, p.deployment) == (ns, name) and p.template_hash == thash
            ]
            ready_total = sum(
                p.ready for p in self._pods.values() if (p.namespace, p.deployment) == (ns, name)
            )
            for pod in sorted(old, key=lambda p: p.ready):  # not-ready old pods go first
                if not pod.ready:
                    self._delete(pod, "rolling update: old template")
                elif ready_total - 1 >= replicas - unavailable:
                    self._delete(pod, "rolling update: old template")
                    ready_total -= 1
        self._status(dep, thash, replicas, rollout, min_available)

    def _scale(
        self,
        dep: dict[str, Any],
        thash: str,
        new: list[OwnedPod],
        replicas: int,
        *,
        limit: int | None = None,
    ) -> None:
        if len(new) > replicas:
            for pod in sorted(new, key=lambda p: p.ready)[: len(new) - replicas]:
                self._delete(pod, "scaled down")
            return
        room = replicas - len(new) if limit is None else min(replicas - len(new), limit)
        for _ in range(max(room, 0)):
            self._create(dep, thash)

    def _create(self, dep: dict[str, Any], thash: str) -> None:
        meta = dep["metadata"]
        ns, name = meta["namespace"], meta["name"]
        template = (dep.get("spec") or {}).get("template") or {}
        container = _container_of(dep)
        suffix = "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))
        pod_name = f"{name}-{thash[:9]}-{suffix}"
        labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: thash}
        launch = PodLaunch(
            name=pod_name,
            namespace=ns,
            deployment=name,
            labels=labels,
            container=str(container.get("name", "vllm")),
            image=str(container.get("image", "")),
            args=tuple(str(a) for a in (container.get("args") or [])),
            template_hash=thash,
        )
        pod = OwnedPod(pod_name, ns, name, thash, launch)
        self._pods[(ns, pod_name)] = pod
        self._write_pod(pod, owner=dep)
        self._run_container(pod)

    def _delete(self, pod: OwnedPod, why: str) -> None:
        self._pods.pop((pod.namespace, pod.name), None)
        with contextlib.suppress(Exception):
            self.runtime.stop(pod.name)
        with contextlib.suppress(ApiError):
            self.api.delete("pods", pod.namespace, pod.name)
        kind = "replaced" if "template" in why else "deleted"
        self._emit(pod, pod.deployment, kind, f"{pod.name} stopped ({why})")

    # ------------------------------------------------------------ API objects

    def _write_pod(self, pod: OwnedPod, *, owner: dict[str, Any] | None = None) -> None:
        """Create or update the Pod object (spec and status) in the store."""
        try:
            existing = self.api.get("pods", pod.namespace, pod.name)
        except ApiError:
            existing = None
        if existing is None and owner is None:
            return  # deleted meanwhile: _reap handles it next pass
        obj = (
            copy.deepcopy(existing)
            if existing is not None
            else pod_object(pod, owner, self.node_name)
        )
        ann = obj["metadata"].setdefault("annotations", {})
        container = obj["spec"]["containers"][0]
        if pod.port is not None:
            ann[PORT_ANNOTATION] = str(pod.port)
            ann["prometheus.io/scrape"] = "true"
            container["ports"] = [{"name": "http", "containerPort": pod.port, "protocol": "TCP"}]
        obj["status"] = pod_status(pod, obj.get("status") or {})
        stored = self.api.put(obj)
        pod.uid = stored["metadata"]["uid"]

    def _status(
        self,
        dep: dict[str, Any],
        thash: str,
        replicas: int,
        rollout: _Rollout,
        min_available: int,
    ) -> None:
        meta = dep["metadata"]
        ns, name = meta["namespace"], meta["name"]
        mine = [p for p in self._pods.values() if (p.namespace, p.deployment) == (ns, name)]
        new = [p for p in mine if p.template_hash == thash]
        ready = sum(p.ready for p in mine)
        done = len(new) == replicas == len(mine) and all(p.ready for p in new)
        if done and not rollout.complete_stamp:
            rollout.complete_stamp = now_rfc3339()
        if not done:
            rollout.complete_stamp = ""
        if done and not rollout.announced:
            rollout.announced = True
            self._emit(
                None,
                name,
                "rollout",
                f"{name}: rollout of generation {rollout.generation} complete "
                f"({replicas}/{replicas} ready)",
            )
        status = deployment_status(
            name=name,
            generation=rollout.generation,
            replicas=len(mine),
            updated=len(new),
            ready=ready,
            complete=done,
            stamp=rollout.complete_stamp or rollout.progress_stamp or now_rfc3339(),
            progress_stamp=rollout.progress_stamp or None,
            replica_set=f"{name}-{thash[:9]}",
            min_available=min_available,
            desired=replicas,
        )
        current = dep.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        self.api.set_deployment_status(ns, name, status)


__all__ = [
    "HASH_LABEL",
    "KubeletEvent",
    "KubeletRunner",
    "template_hash",
]
