"""The in-process fleet: every simulated pod of a scenario, advanced in simulated time.

The fleet owns the pods, splits each slice's traffic over its ready pods, applies the
scenario's timeline and yields snapshots (what a scrape of every pod would return) together
with the truth (the scenario's alpha per slice, each pod's effective alpha, step times ...).
Time is simulated seconds from the start of the scenario; ``start_epoch + t`` is the unix
time the pages show. Nothing reads a clock, so a run is a pure function of the scenario, the
seed and the calls made: the same seed gives the same snapshots, byte for byte.

Used three ways: ``Fleet.run()`` for fast backtests and benchmarks (thousands of times
faster than real time), ``alphagate_lab.sim.server`` for the real-time face, and a local kubelet
that creates and deletes pods itself (``add_pod``/``remove_pod``/``apply_args``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from alphagate.errors import ScenarioError
from alphagate_lab.sim.decode import Load
from alphagate_lab.sim.pod import PodSnapshot, PodSpec, Role, SimPod
from alphagate_lab.sim.pod_specs import deployment_pod_spec, pool_pod_spec
from alphagate_lab.sim.ramps import Ramps
from alphagate_lab.sim.scenario import PoolSpec, Scenario, SliceSpec, patch_fields
from alphagate_lab.sim.scrapes import ScrapeHistory
from alphagate_lab.sim.traffic import TraceDealer, slice_load
from alphagate_lab.sim.truth import PodTruth, SliceTruth, Truth


@dataclass(frozen=True)
class FleetSnapshot:
    t: float
    time: float
    pods: list[PodSnapshot]
    truth: Truth

    def pod(self, name: str) -> PodSnapshot:
        for p in self.pods:
            if p.name == name:
                return p
        raise KeyError(name)


@dataclass(frozen=True)
class FleetEvent:
    """Something that happened: a timeline entry, a restart, a pod becoming ready ..."""

    t: float
    kind: str
    message: str
    pod: str = ""


class Fleet:
    """All simulated pods of a scenario. Not thread-safe: callers serialise access.

    ``tick`` defaults to the scenario's (1 s, right for real time); backtests and benchmarks
    should pass ``tick=15`` (a scrape interval), which is ~15x cheaper and statistically the
    same. ``create_pools=False`` starts with no pods, for a kubelet that adds its own: the
    timeline's pool changes then apply to the pods whose ``deployment`` is the pool's name,
    except ``replicas``, which stays the kubelet's business.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        tick: float | None = None,
        start_epoch: float | None = None,
        create_pools: bool = True,
        scrapes: bool = False,
        scrape_retention: float = 3600.0,
    ) -> None:
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.tick = scenario.tick if tick is None else float(tick)
        if self.tick <= 0:
            raise ScenarioError(f"tick must be > 0, got {self.tick}")
        self.epoch0 = scenario.start_epoch if start_epoch is None else float(start_epoch)
        self.now = 0.0
        self.pods: dict[str, SimPod] = {}
        self.slices: dict[str, SliceSpec] = dict(scenario.slices)
        self.generated: dict[str, int] = dict.fromkeys(scenario.slices, 0)
        self._ramps = Ramps()
        self._loads: dict[str, tuple[SliceSpec, float, float, dict[float | None, Load]]] = {}
        self.traffic_rate = scenario.traffic.rate
        self._traces = TraceDealer(self.seed, scenario.slices)
        self.pools: dict[str, PoolSpec] = {p.name: p for p in scenario.pools}
        self._pool_next: dict[str, int] = {p.name: 0 for p in scenario.pools}
        self.create_pools = create_pools
        self.scrape_interval = scenario.prometheus.scrape_interval
        self.prometheus_lag = scenario.prometheus.lag
        self._scrapes = (
            ScrapeHistory(
                tick=self.tick,
                scrape_interval=self.scrape_interval,
                lag=self.prometheus_lag,
                retention=scrape_retention,
            )
            if scrapes
            else None
        )
        self._ticks = 0
        self._next_event = 0
        self._events: list[FleetEvent] = []
        if create_pools:
            for pool in scenario.pools:
                for _ in range(pool.replicas):
                    self._add_pool_pod(pool, ready=True)
        self._apply_due_events()

    @property
    def dropped(self) -> dict[str, int]:
        """Replayed requests that found no ready pod of their slice (lost, as a router 503s)."""
        return self._traces.dropped

    # --- pods -------------------------------------------------------------------------------
    def add_pod(self, spec: PodSpec, *, ready: bool = False) -> SimPod:
        """Create a pod (as a kubelet would); it loads for ``spec.load_time`` unless ``ready``."""
        if spec.name in self.pods:
            raise ScenarioError(f"pod {spec.name!r} already exists")
        if spec.slice not in self.slices:
            raise ScenarioError(
                f"pod {spec.name!r}: unknown slice {spec.slice!r} (known: {sorted(self.slices)})"
            )
        pod = SimPod(spec, seed=self.seed, now=self.now, epoch0=self.epoch0, ready=ready)
        self.pods[spec.name] = pod
        self._log(
            "pod_added", f"{spec.name} ({spec.role}, slice {spec.slice}, k={pod.k})", spec.name
        )
        return pod

    def remove_pod(self, name: str) -> None:
        """Delete a pod; its series vanish with it."""
        pod = self.pods.pop(name)
        pod.stop()
        self._log("pod_removed", name, name)

    def pod(self, name: str) -> SimPod:
        try:
            return self.pods[name]
        except KeyError:
            raise ScenarioError(f"no such pod {name!r}") from None

    def apply_args(self, name: str, args: list[str]) -> bool:
        """New container args for a pod; a change restarts it (counters reset, model reload)."""
        pod = self.pod(name)
        changed = pod.apply_args(args, now=self.now)
        if changed:
            self._log("restart", f"{name} restarted with k={pod.k}", name)
        return changed

    def set_speculative_config(self, name: str, config: dict[str, Any] | None) -> bool:
        """Turn speculation on a pod off (None) or on with ``config``; restarts on change."""
        pod = self.pod(name)
        changed = pod.set_speculative_config(config, now=self.now)
        if changed:
            self._log("restart", f"{name} restarted with k={pod.k}", name)
        return changed

    def restart(self, name: str) -> None:
        self.pod(name).restart(now=self.now)
        self._log("restart", f"{name} restarted", name)

    def _pool_pod_spec(self, pool: PoolSpec, name: str) -> PodSpec:
        return pool_pod_spec(self.scenario, pool, name, seed=self.seed)

    def spec_for(
        self,
        name: str,
        *,
        deployment: str,
        args: list[str],
        role: Role | None = None,
        slice: str | None = None,
        namespace: str | None = None,
        load_time: float | None = None,
    ) -> PodSpec:
        """A PodSpec for a pod a kubelet creates from a Deployment's container ``args``.

        If the scenario has a pool named ``deployment``, its role, slice, namespace, load
        time, latency scale, alpha offset and decode costs are the defaults; otherwise
        ``role`` and ``slice`` are required. Raises ScenarioError on bad args or slice.
        """
        spec = deployment_pod_spec(
            self.scenario,
            self.pools.get(deployment),
            name,
            seed=self.seed,
            deployment=deployment,
            args=args,
            role=role,
            slice=slice,
            namespace=namespace,
            load_time=load_time,
        )
        if spec.slice not in self.slices:
            raise ScenarioError(
                f"pod {name!r}: unknown slice {spec.slice!r} (known: {sorted(self.slices)})"
            )
        return spec

    def _add_pool_pod(self, pool: PoolSpec, *, ready: bool) -> SimPod:
        i = self._pool_next[pool.name]
        self._pool_next[pool.name] = i + 1
        name = f"{pool.name}-{i}"
        pod = self.add_pod(self._pool_pod_spec(pool, name), ready=ready)
        return pod

    def pool_pods(self, pool: str) -> list[SimPod]:
        """Pods of a Deployment (a pool), oldest first."""
        return [p for p in self.pods.values() if p.spec.deployment == pool]

    # --- events -----------------------------------------------------------------------------
    def _log(self, kind: str, message: str, pod: str = "") -> None:
        self._events.append(FleetEvent(self.now, kind, message, pod))

    def drain_events(self) -> list[FleetEvent]:
        """Events since the last call (timeline entries, restarts, pods ready/added/removed)."""
        out, self._events = self._events, []
        return out

    def _apply_due_events(self) -> None:
        timeline = self.scenario.timeline
        while self._next_event < len(timeline) and timeline[self._next_event].at <= self.now:
            self._apply_event(timeline[self._next_event])
            self._next_event += 1

    def _apply_event(self, ev: Any) -> None:
        self._log("timeline", ev.note or f"timeline event at {ev.at:g}s")
        if ev.traffic is not None:
            self._ramps.cancel(("", "rate"))
            if ev.ramp > 0 and ev.traffic.rate != self.traffic_rate:
                self._ramps.start(("", "rate"), ev.at, ev.ramp, self.traffic_rate, ev.traffic.rate)
            else:
                self.traffic_rate = ev.traffic.rate
        for name, patch in ev.slices.items():
            fields = patch_fields(patch)
            current = self.slices[name]
            for key in fields:
                self._ramps.cancel((name, key))
            if ev.ramp > 0:
                for key, value in list(fields.items()):
                    old = getattr(current, key)
                    if isinstance(value, float) and isinstance(old, float) and value != old:
                        self._ramps.start((name, key), ev.at, ev.ramp, old, value)
                        del fields[key]
            merged = {**current.model_dump(), **fields}
            self.slices[name] = SliceSpec.model_validate(merged)
        for name, patch in ev.pools.items():
            fields = patch_fields(patch)
            pool = self.pools[name]
            pool = pool.model_copy(update=fields)
            self.pools[name] = pool
            pods = self.pool_pods(name)
            if "speculative_config" in fields and self.create_pools:
                for pod in pods:
                    self.set_speculative_config(pod.name, pool.speculative_config)
            if "latency_scale" in fields or "alpha_offset" in fields:
                for pod in pods:
                    pod.spec = replace(
                        pod.spec,
                        latency_scale=pool.latency_scale,
                        alpha_offset=self._pool_pod_spec(pool, pod.name).alpha_offset,
                    )
                    pod.engine.alpha_offset = pod.spec.alpha_offset
            if "replicas" in fields and pool.replicas is not None and self.create_pools:
                while len(self.pool_pods(name)) < pool.replicas:
                    self._add_pool_pod(pool, ready=False)
                while len(self.pool_pods(name)) > pool.replicas:
                    self.remove_pod(self.pool_pods(name)[-1].name)
        for name in ev.restart:
            for pod in self.pool_pods(name):
                self.restart(pod.name)

    # --- time -------------------------------------------------------------------------------
    def _slice_rate(self, sl: SliceSpec, name: str = "") -> float:
        if sl.trace is not None and name:
            return self._traces.replay(name, sl).rate
        if sl.arrival_rate is not None:
            return sl.arrival_rate
        total = sum(s.share for s in self.slices.values() if s.arrival_rate is None)
        return self.traffic_rate * sl.share / total if total > 0 else 0.0

    def _pod_loads(self) -> dict[str, Load]:
        """What each ready pod serves in the coming tick: its slice's traffic, split by the
        pods' router weights (Poisson), dealt request by request (a trace), or its own
        clients (closed loop)."""
        ready: dict[str, list[SimPod]] = {name: [] for name in self.slices}
        for pod in self.pods.values():
            if pod.ready:
                ready[pod.spec.slice].append(pod)
        loads: dict[str, Load] = {}
        for name, sl in self.slices.items():
            pods = ready[name]
            if sl.trace is not None:
                base = slice_load(sl)
                loads.update(self._traces.deal(name, sl, pods, base, now=self.now, tick=self.tick))
                continue
            total_w = sum(p.spec.traffic_weight for p in pods) or 1.0
            by_weight = self._open_loads(name, sl, self._slice_rate(sl), total_w)
            base = by_weight[None]
            for pod in pods:
                w = pod.spec.traffic_weight
                load = by_weight.get(w)
                if load is None:
                    load = replace(base, arrival_rate=base.arrival_rate * (w / total_w))
                    by_weight[w] = load
                loads[pod.name] = load
        return loads

    def _open_loads(
        self, name: str, sl: SliceSpec, rate: float, total_w: float
    ) -> dict[float | None, Load]:
        """The loads of a slice's pods by router weight (None: the slice's, at ``rate``),
        kept while the slice, its rate and its pods' total weight stay (a `Load` is frozen):
        not one `dataclasses.replace` per pod and tick."""
        kept = self._loads.get(name)
        if kept is not None and kept[0] is sl and kept[1] == rate and kept[2] == total_w:
            return kept[3]
        by_weight: dict[float | None, Load] = {None: replace(slice_load(sl), arrival_rate=rate)}
        self._loads[name] = (sl, rate, total_w, by_weight)  # a SliceSpec is frozen
        return by_weight

    def _apply_ramps(self) -> None:
        """Move drifting numbers to their value at the middle of the coming tick."""
        rate, updates = self._ramps.at(self.now, self.tick)
        if rate is not None:
            self.traffic_rate = rate
        for name, fields in updates.items():
            self.slices[name] = self.slices[name].model_copy(update=fields)

    def step(self) -> None:
        """Advance one tick."""
        if self._ramps:
            self._apply_ramps()
        for pod in self.pods.values():
            if pod.phase == "loading" and self.now >= pod.ready_at:
                pod.update_phase(self.now)
                self._log("ready", f"{pod.name} ready (k={pod.k})", pod.name)
        loads = self._pod_loads()
        dt = self.tick
        for pod in self.pods.values():
            if pod.phase == "ready":
                pod.tick(dt, loads[pod.name])
                if pod.truth is not None:
                    self.generated[pod.spec.slice] += pod.truth.generated
        self.now = round(self.now + dt, 9)
        self._ticks += 1
        self._apply_due_events()
        if self._scrapes is not None:
            self._scrapes.scrape(self._ticks, self.now, self.pods)

    def advance_to(self, t: float) -> None:
        """Advance by whole ticks while the next tick ends at or before ``t``."""
        eps = 1e-9
        while self.now + self.tick <= t + eps:
            self.step()

    # --- observation ------------------------------------------------------------------------
    def truth(self) -> Truth:
        ready: dict[str, int] = dict.fromkeys(self.slices, 0)
        speculating: dict[str, int] = dict.fromkeys(self.slices, 0)
        expected: dict[str, list[float]] = {name: [] for name in self.slices}
        pods: dict[str, PodTruth] = {}
        for pod in self.pods.values():
            sl = pod.spec.slice
            exp_alpha = min(max(self.slices[sl].alpha + pod.spec.alpha_offset, 0.0), 1.0)
            if pod.ready:
                ready[sl] += 1
                if pod.k:
                    expected[sl].append(exp_alpha)
            tt = pod.truth
            pods[pod.name] = PodTruth(
                pod=pod.name,
                slice=sl,
                role=pod.spec.role,
                ready=pod.ready,
                k=pod.k,
                expected_alpha=exp_alpha,
                alpha=tt.alpha if tt else 0.0,
                batch=tt.batch if tt else 0.0,
                passes=tt.passes if tt else 0,
                mean_step=tt.mean_step if tt else 0.0,
                tokens_per_step=tt.tokens_per_step if tt else 0.0,
                time_per_token=tt.time_per_token if tt else 0.0,
                speculating=pod.speculating,
                batch_alpha=tt.batch_alpha if tt else 0.0,
                tpot_p99=tt.tpot_p99 if tt else 0.0,
                stalled=tt.stalled if tt else 0.0,
                running=pod.engine.running if pod.ready else 0,
                generated_tokens=pod.generated_total,
            )
            if pod.ready and pod.k:
                speculating[sl] += 1
        slices = {
            name: SliceTruth(
                name=name,
                alpha=sl.alpha,
                share=sl.share,
                arrival_rate=self._slice_rate(sl, name),
                concurrency=sl.concurrency,
                ready_pods=ready[name],
                pods_alpha=sum(expected[name]) / len(expected[name]) if expected[name] else None,
                generated_tokens=self.generated[name],
                speculating_pods=speculating[name],
            )
            for name, sl in self.slices.items()
        }
        return Truth(self.now, slices, pods)

    # --- the Prometheus path ----------------------------------------------------------------
    def scraped(self, name: str) -> list[PodSnapshot]:
        """Samples of a pod that a Prometheus query could see now, oldest first: one per
        ``scrape_interval`` (at the pod's own phase), each visible ``prometheus_lag`` after
        its scrape. Needs ``Fleet(..., scrapes=True)``; a loading pod leaves a gap."""
        if self._scrapes is None:
            raise ScenarioError("this fleet keeps no scrapes: create it with scrapes=True")
        return self._scrapes.visible(name, self.now)

    def prometheus_snapshot(self) -> FleetSnapshot:
        """The latest visible scrape of every pod that has one (its ``t`` is the scrape's
        time, not now), with the truth as it is now."""
        pods = []
        for name in self.pods:
            samples = self.scraped(name)
            if samples:
                pods.append(samples[-1])
        return FleetSnapshot(self.now, self.epoch0 + self.now, pods, self.truth())

    def snapshot(self) -> FleetSnapshot:
        """What scraping every pod now would return, plus the truth."""
        return FleetSnapshot(
            t=self.now,
            time=self.epoch0 + self.now,
            pods=[pod.snapshot(self.now) for pod in self.pods.values()],
            truth=self.truth(),
        )

    def run(self, duration: float | None = None, *, every: float = 15.0) -> Iterator[FleetSnapshot]:
        """Snapshots at t = now, now + every, ... up to ``duration`` (the scenario's by default).

        ``every`` is rounded to whole ticks.
        """
        end = self.scenario.duration if duration is None else duration
        ticks = max(1, round(every / self.tick))
        yield self.snapshot()
        while self.now + ticks * self.tick <= end + 1e-9:
            for _ in range(ticks):
                self.step()
            yield self.snapshot()
