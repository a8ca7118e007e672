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

import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from alphagate.errors import ScenarioError
from alphagate_lab.sim.decode import Load
from alphagate_lab.sim.pod import (
    PodSnapshot,
    PodSpec,
    Role,
    SimPod,
    parse_speculative_args,
    spec_args,
)
from alphagate_lab.sim.scenario import PoolSpec, Scenario, SliceSpec, patch_fields
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
        #: Drifts under way: (slice or "" for traffic, field) -> (start, length, from, to).
        self._ramps: dict[tuple[str, str], tuple[float, float, float, float]] = {}
        self.traffic_rate = scenario.traffic.rate
        self.pools: dict[str, PoolSpec] = {p.name: p for p in scenario.pools}
        self._pool_next: dict[str, int] = {p.name: 0 for p in scenario.pools}
        self.create_pools = create_pools
        self.scrape_interval = scenario.prometheus.scrape_interval
        self.prometheus_lag = scenario.prometheus.lag
        self._scrape_every = max(1, round(self.scrape_interval / self.tick))
        self._scrape_keep = max(2, round(scrape_retention / self.scrape_interval) + 1)
        self._scrapes: dict[str, deque[PodSnapshot]] | None = {} if scrapes else None
        self._ticks = 0
        self._next_event = 0
        self._events: list[FleetEvent] = []
        if create_pools:
            for pool in scenario.pools:
                for _ in range(pool.replicas):
                    self._add_pool_pod(pool, ready=True)
        self._apply_due_events()

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
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode()), 0xA1FA])
        offset = pool.alpha_offset
        if pool.alpha_offset_spread > 0:
            offset += float(rng.normal(0.0, pool.alpha_offset_spread))
        decode = pool.decode or self.scenario.decode
        return PodSpec(
            name=name,
            deployment=pool.name,
            role=pool.role,
            slice=pool.slice,
            namespace=pool.namespace,
            args=tuple(pool.extra_args) + tuple(spec_args(pool.speculative_config)),
            model_name=self.scenario.model_name,
            load_time=pool.load_time,
            latency_scale=pool.latency_scale,
            alpha_offset=offset,
            params=decode.params(),
            stalls=(pool.stalls or self.scenario.stalls).params(),
        )

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
        pool = self.pools.get(deployment)
        if pool is not None:
            base = self._pool_pod_spec(pool, name)
        else:
            if role is None or slice is None:
                raise ScenarioError(
                    f"pod {name!r}: deployment {deployment!r} is not a scenario pool; "
                    "give its role and slice"
                )
            base = PodSpec(
                name=name,
                deployment=deployment,
                role=role,
                slice=slice,
                model_name=self.scenario.model_name,
                params=self.scenario.decode.params(),
                stalls=self.scenario.stalls.params(),
            )
        parse_speculative_args(list(args))  # refuse bad args before anything is created
        spec = replace(
            base,
            args=tuple(args),
            role=role or base.role,
            slice=slice or base.slice,
            namespace=namespace or base.namespace,
            load_time=base.load_time if load_time is None else load_time,
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
            self._ramps.pop(("", "rate"), None)
            if ev.ramp > 0 and ev.traffic.rate != self.traffic_rate:
                self._ramps[("", "rate")] = (ev.at, ev.ramp, self.traffic_rate, ev.traffic.rate)
            else:
                self.traffic_rate = ev.traffic.rate
        for name, patch in ev.slices.items():
            fields = patch_fields(patch)
            current = self.slices[name]
            for key in fields:
                self._ramps.pop((name, key), None)
            if ev.ramp > 0:
                for key, value in list(fields.items()):
                    old = getattr(current, key)
                    if isinstance(value, float) and isinstance(old, float) and value != old:
                        self._ramps[(name, key)] = (ev.at, ev.ramp, old, value)
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
    def _slice_rate(self, sl: SliceSpec) -> float:
        if sl.arrival_rate is not None:
            return sl.arrival_rate
        total = sum(s.share for s in self.slices.values() if s.arrival_rate is None)
        return self.traffic_rate * sl.share / total if total > 0 else 0.0

    def _compute_loads(self) -> dict[str, Load]:
        ready: dict[str, int] = dict.fromkeys(self.slices, 0)
        for pod in self.pods.values():
            if pod.ready:
                ready[pod.spec.slice] += 1
        loads = {}
        for name, sl in self.slices.items():
            n = max(ready[name], 1)
            loads[name] = Load(
                alpha=sl.alpha,
                arrival_rate=self._slice_rate(sl) / n,
                concurrency=sl.concurrency,
                alpha_noise=sl.alpha_noise,
                decay=sl.decay,
                draft_fill=sl.draft_fill,
                request_spread=sl.request_spread,
                prompt_tokens=sl.prompt_tokens,
                output_tokens=sl.output_tokens,
                output_sigma=sl.output_sigma,
                max_output_tokens=sl.max_output_tokens,
            )
        return loads

    def _apply_ramps(self) -> None:
        """Move drifting numbers to their value at the middle of the coming tick."""
        t = self.now + self.tick / 2
        updates: dict[str, dict[str, float]] = {}
        for (name, key), (start, length, v0, v1) in list(self._ramps.items()):
            frac = min(max((t - start) / length, 0.0), 1.0)
            value = v0 + (v1 - v0) * frac
            if name:
                updates.setdefault(name, {})[key] = value
            else:
                self.traffic_rate = value
            if self.now >= start + length:
                del self._ramps[(name, key)]
                value = v1
                if name:
                    updates[name][key] = v1
                else:
                    self.traffic_rate = v1
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
        loads = self._compute_loads()
        dt = self.tick
        for pod in self.pods.values():
            if pod.phase == "ready":
                pod.tick(dt, loads[pod.spec.slice])
                if pod.truth is not None:
                    self.generated[pod.spec.slice] += pod.truth.generated
        self.now = round(self.now + dt, 9)
        self._ticks += 1
        self._apply_due_events()
        if self._scrapes is not None:
            self._scrape()

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
                arrival_rate=self._slice_rate(sl),
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
    def _scrape_slot(self, name: str) -> int:
        """Which tick of each scrape interval scrapes this pod (Prometheus spreads targets)."""
        return zlib.crc32(name.encode()) % self._scrape_every

    def _scrape(self) -> None:
        """Scrape the pods whose turn it is; a pod that is loading fails its scrape."""
        assert self._scrapes is not None
        phase = self._ticks % self._scrape_every
        for name in [n for n in self._scrapes if n not in self.pods]:
            del self._scrapes[name]
        for pod in self.pods.values():
            if pod.ready and self._scrape_slot(pod.name) == phase:
                samples = self._scrapes.get(pod.name)
                if samples is None:
                    samples = self._scrapes[pod.name] = deque(maxlen=self._scrape_keep)
                samples.append(pod.snapshot(self.now))

    def scraped(self, name: str) -> list[PodSnapshot]:
        """Samples of a pod that a Prometheus query could see now, oldest first: one per
        ``scrape_interval`` (at the pod's own phase), each visible ``prometheus_lag`` after
        its scrape. Needs ``Fleet(..., scrapes=True)``; a loading pod leaves a gap."""
        if self._scrapes is None:
            raise ScenarioError("this fleet keeps no scrapes: create it with scrapes=True")
        horizon = self.now - self.prometheus_lag + 1e-9
        return [s for s in self._scrapes.get(name, ()) if s.t <= horizon]

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
