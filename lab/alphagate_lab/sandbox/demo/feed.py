"""What the demo tells besides the controller's decisions: the scenario's changes to pools, as a
person would make them through the API, and what the cluster says (kubelet lines, the Events
the controller wrote)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from alphagate_lab.sandbox.apiserver import ApiError, ApiServer
from alphagate_lab.sandbox.kubelet import KubeletEvent
from alphagate_lab.sim.scenario import Scenario

Say = Callable[..., None]


class ClusterFeed:
    """Applies the scenario's pool events and turns cluster news into log lines (`say`); `api`
    is set once the API server double is up (before that, pool events pass unapplied)."""

    def __init__(self, scenario: Scenario, namespace: str, say: Say, notes: list[str]) -> None:
        self.api: ApiServer | None = None
        self.scenario = scenario
        self.namespace = namespace
        self._say = say
        self._notes = notes
        self._next = 0
        self._checked = 0.0
        self._seen: set[str] = set()

    def pool_events(self, t: float) -> None:
        """Scenario changes to pools, as a person would make them: `replicas` scales the
        Deployment, `restart` deletes its pods; other pool fields are not applied here."""
        while self._next < len(self.scenario.timeline):
            ev = self.scenario.timeline[self._next]
            if ev.at > t:
                return
            self._next += 1
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
                        with contextlib.suppress(ApiError):  # already gone
                            self.api.delete("pods", self.namespace, pod["metadata"]["name"])
                self._say("scenario", f"{name}: pods restarted", t=ev.at)

    def kubelet_line(self, ev: KubeletEvent, t: float) -> None:
        """Rollouts, and pods that went away or failed (not every start and ready)."""
        if ev.kind in ("deleted", "restarted", "failed", "rollout"):
            style = "red" if ev.kind in ("failed", "restarted", "deleted") else "dim"
            self._say("kubelet", ev.message, style, t=t)

    def k8s_events(self, *, force: bool = False) -> None:
        """Events the controller wrote to Kubernetes (what `kubectl get events` shows)."""
        if self.api is None:
            return
        now = time.monotonic()
        if now - self._checked < 0.5 and not force:
            return
        self._checked = now
        try:
            events = self.api.objects("events", self.namespace)
        except ApiError:
            return
        for ev in events:
            uid = ev.get("metadata", {}).get("uid", "")
            count = ev.get("count", 1)
            key = f"{uid}/{count}"
            if key in self._seen:
                continue
            self._seen.add(key)
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
