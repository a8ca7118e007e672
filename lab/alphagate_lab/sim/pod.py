"""One simulated vLLM pod: its identity, container args, lifecycle and counters.

A pod behaves like a vLLM process under a kubelet: it is created from container args, takes
``load_time`` seconds to load the model (not ready, no ``/metrics``), then serves. Its
speculative config comes only from its args (``--speculative-config JSON``,
``--speculative-config=JSON``, ``--speculative_config``, ``-sc JSON``), as in vLLM. New args
restart it: every counter and histogram starts again from zero, the ``vllm:spec_decode_*``
series exist only if the new args enable speculation, and the ``_created`` timestamps move to
the new start. A pod serves exactly one traffic slice, carried by its labels
(``pod``, ``namespace``, ``deployment``, ``role``, ``slice``), never by vLLM labels.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from alphagate import vllm
from alphagate.errors import ScenarioError
from alphagate_lab.sim.counters import EngineCounters
from alphagate_lab.sim.decode import DecodeParams, Load, Stalls, TickTruth
from alphagate_lab.sim.model import Engine

Phase = Literal["loading", "ready", "stopped"]
Role = Literal["canary", "baseline"]

_SPEC_FLAGS = ("--speculative-config", "--speculative_config", "-sc")


@dataclass(frozen=True)
class SpecConfig:
    """The parts of ``--speculative-config`` the simulator needs; ``raw`` keeps the rest."""

    k: int
    method: str | None
    raw: dict[str, Any]

    def to_json(self) -> str:
        """Canonical JSON, as it would be passed on the command line."""
        return json.dumps(self.raw, sort_keys=True, separators=(",", ":"))


def spec_config_from_dict(raw: object, where: str = "speculative config") -> SpecConfig:
    """Validate a speculative config object the way vLLM would refuse a bad one.

    Raises ScenarioError whose message starts with ``where`` (if not empty).
    """

    def fail(reason: str) -> ScenarioError:
        return ScenarioError(f"{where}: {reason}" if where else reason)

    if not isinstance(raw, dict):
        raise fail(f"must be a JSON object, got {type(raw).__name__}")
    k = raw.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise fail(f"num_speculative_tokens must be an integer > 0, got {k!r}")
    method = raw.get("method")
    if method is not None and not isinstance(method, str):
        raise fail(f"method must be a string, got {method!r}")
    return SpecConfig(k=k, method=method, raw=dict(raw))


def parse_speculative_args(args: list[str]) -> SpecConfig | None:
    """The speculative config a vLLM command line sets, or None when speculation is off.

    The last occurrence wins, as with argparse. Raises ScenarioError on bad JSON.
    """
    found: str | None = None
    flag_seen = ""
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _SPEC_FLAGS:
            if eq:
                found, flag_seen = value, name
            else:
                if i + 1 >= len(args):
                    raise ScenarioError(f"container args: {name} needs a JSON value")
                found, flag_seen = args[i + 1], name
                i += 1
        i += 1
    if found is None:
        return None
    if found.strip() in ("", "null", "None"):
        return None
    try:
        raw = json.loads(found)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"container args: {flag_seen}: invalid JSON ({exc.msg})") from exc
    if raw is None:
        return None
    return spec_config_from_dict(raw, f"container args: {flag_seen}")


def spec_args(config: SpecConfig | dict[str, Any] | None) -> list[str]:
    """Container args that set ``config`` (empty when speculation is off)."""
    if config is None:
        return []
    if isinstance(config, dict):
        config = spec_config_from_dict(config)
    return ["--speculative-config", config.to_json()]


@dataclass(frozen=True)
class PodSpec:
    """Who a pod is and how it is started: what a kubelet knows from the pod template."""

    name: str
    deployment: str
    role: Role
    slice: str
    namespace: str = "default"
    args: tuple[str, ...] = ()
    model_name: str = "llama-3.1-8b-instruct"
    load_time: float = 30.0
    latency_scale: float = 1.0
    alpha_offset: float = 0.0
    params: DecodeParams = field(default_factory=DecodeParams)
    stalls: Stalls = field(default_factory=Stalls)

    def labels(self) -> dict[str, str]:
        """Target labels identifying the pod (file-SD labels, Kubernetes pod labels)."""
        return {
            "pod": self.name,
            "namespace": self.namespace,
            "deployment": self.deployment,
            "role": self.role,
            "slice": self.slice,
        }


@dataclass(frozen=True)
class HistSnapshot:
    """One histogram child as exposed: cumulative bucket counts (last is ``+Inf``)."""

    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    sum: float
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "sum": self.sum, "count": self.count}

    @classmethod
    def from_json(cls, bounds: tuple[float, ...], data: dict[str, Any]) -> HistSnapshot:
        return cls(bounds, tuple(int(x) for x in data["buckets"]), float(data["sum"]),
                   int(data["count"]))  # fmt: skip


@dataclass(frozen=True)
class PodSnapshot:
    """Cumulative counters of one pod at a simulated time: what a scrape would return.

    ``counters`` is keyed by exact vLLM sample names (``vllm.GENERATION_TOKENS`` ...); the
    spec-decode keys are present only while speculation is on. ``started`` is the unix time
    the process (re)started, i.e. the value of every ``_created`` series.
    """

    labels: dict[str, str]
    model_name: str
    t: float
    time: float
    phase: Phase
    started: float
    spec_k: int | None
    counters: dict[str, int]
    per_pos: tuple[int, ...]
    success: dict[str, int]
    gauges: dict[str, int]
    histograms: dict[str, HistSnapshot]
    restarts: int = 0

    @property
    def name(self) -> str:
        return self.labels["pod"]

    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "model_name": self.model_name,
            "phase": self.phase,
            "started": self.started,
            "restarts": self.restarts,
            "spec_k": self.spec_k,
            "counters": self.counters,
            "per_pos": list(self.per_pos),
            "success": self.success,
            "gauges": self.gauges,
            "histograms": {k: v.to_json() for k, v in self.histograms.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, t: float, time: float) -> PodSnapshot:
        return cls(
            labels=dict(data["labels"]),
            model_name=str(data["model_name"]),
            t=t,
            time=time,
            phase=data["phase"],
            started=float(data["started"]),
            restarts=int(data.get("restarts", 0)),
            spec_k=data["spec_k"],
            counters={k: int(v) for k, v in data["counters"].items()},
            per_pos=tuple(int(x) for x in data["per_pos"]),
            success={k: int(v) for k, v in data["success"].items()},
            gauges={k: int(v) for k, v in data["gauges"].items()},
            histograms={
                k: HistSnapshot.from_json(vllm.HISTOGRAM_BUCKETS[k], v)
                for k, v in data["histograms"].items()
            },
        )


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


class SimPod:
    """A simulated vLLM pod. Not thread-safe: the fleet (or server) serialises access."""

    def __init__(
        self, spec: PodSpec, *, seed: int, now: float, epoch0: float, ready: bool = False
    ) -> None:
        self.spec = spec
        self.seed = seed
        self.epoch0 = epoch0
        self.config = parse_speculative_args(list(spec.args))
        self.restarts = 0
        self.phase: Phase = "loading"
        self.ready_at = now if ready else now + spec.load_time
        self.started = epoch0 + self.ready_at
        self.truth: TickTruth | None = None
        self.generated_total = 0  # tokens generated over every life of the pod
        self._start_engine()
        if ready:
            self.phase = "ready"

    # --- identity ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def args(self) -> list[str]:
        return list(self.spec.args)

    @property
    def k(self) -> int:
        """Speculative tokens per draft; 0 when speculation is off."""
        return self.config.k if self.config else 0

    @property
    def speculating(self) -> bool:
        return self.config is not None

    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def labels(self) -> dict[str, str]:
        return self.spec.labels()

    # --- lifecycle --------------------------------------------------------------------------
    def _start_engine(self) -> None:
        rng = np.random.default_rng([self.seed, _stable_hash(self.spec.name), self.restarts])
        self.engine = Engine(
            self.spec.params,
            rng,
            k=self.k,
            alpha_offset=self.spec.alpha_offset,
            stalls=self.spec.stalls,
        )
        self.counters = EngineCounters(k=self.k)

    def apply_args(self, args: list[str], *, now: float) -> bool:
        """Run with new container args; restarts (and returns True) only if they differ.

        Raises ScenarioError, leaving the pod untouched, if the speculative config is invalid.
        """
        if list(args) == list(self.spec.args) and self.phase != "stopped":
            return False
        config = parse_speculative_args(list(args))
        self.spec = replace(self.spec, args=tuple(args))
        self.config = config
        self.restart(now=now)
        return True

    def set_speculative_config(self, config: dict[str, Any] | None, *, now: float) -> bool:
        """Turn speculation off (None) or on with ``config``, keeping the other args."""
        kept: list[str] = []
        args = list(self.spec.args)
        i = 0
        while i < len(args):
            name, eq, _ = args[i].partition("=")
            if name in _SPEC_FLAGS:
                i += 1 if eq else 2
                continue
            kept.append(args[i])
            i += 1
        return self.apply_args(kept + spec_args(config), now=now)

    def restart(self, *, now: float) -> None:
        """Kill and start the process: counters reset, model load makes it not ready."""
        self.restarts += 1
        self.phase = "loading"
        self.ready_at = now + self.spec.load_time
        self.started = self.epoch0 + self.ready_at
        self.truth = None
        self._start_engine()

    def stop(self) -> None:
        self.phase = "stopped"
        self.truth = None

    def update_phase(self, now: float) -> None:
        """Finish loading once the load time has passed."""
        if self.phase == "loading" and now >= self.ready_at:
            self.phase = "ready"

    def tick(self, dt: float, load: Load) -> None:
        """Serve ``load`` for ``dt`` seconds (only when ready)."""
        if self.phase != "ready":
            return
        self.truth = self.engine.tick(dt, load, self.counters, scale=self.spec.latency_scale)
        self.generated_total += self.truth.generated

    # --- observation ------------------------------------------------------------------------
    def snapshot(self, now: float) -> PodSnapshot:
        c = self.counters
        counters = {
            vllm.PROMPT_TOKENS: c.prompt_tokens,
            vllm.GENERATION_TOKENS: c.generation_tokens,
        }
        per_pos: tuple[int, ...] = ()
        if self.config is not None:
            counters[vllm.SPEC_DRAFTS] = c.drafts
            counters[vllm.SPEC_DRAFT_TOKENS] = c.draft_tokens
            counters[vllm.SPEC_ACCEPTED] = c.accepted
            per_pos = tuple(c.per_pos())
        return PodSnapshot(
            labels=self.labels(),
            model_name=self.spec.model_name,
            t=now,
            time=self.epoch0 + now,
            phase=self.phase,
            started=self.started,
            restarts=self.restarts,
            spec_k=self.config.k if self.config else None,
            counters=counters,
            per_pos=per_pos,
            success=dict(c.success),
            gauges={vllm.RUNNING: c.running, vllm.WAITING: c.waiting},
            histograms={
                name: HistSnapshot(vllm.HISTOGRAM_BUCKETS[name], tuple(b), total, b[-1])
                for name, (b, total) in c.histograms.read().items()
            },
        )
