"""What the simulator knows and a controller can only estimate: each slice's alpha and share as
the scenario sets them, and each pod's effective alpha and step times, at one moment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SliceTruth:
    """A slice as the scenario sets it right now.

    ``alpha`` is the scenario's value; ``pods_alpha`` is the mean, over the slice's ready
    speculating pods, of what each is set to converge to (alpha plus its pod offset), which
    is what an estimator over those pods should find (None when no pod speculates).
    """

    name: str
    alpha: float
    share: float
    arrival_rate: float
    concurrency: int | None
    ready_pods: int
    pods_alpha: float | None = None
    generated_tokens: int = 0
    speculating_pods: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "pods_alpha": self.pods_alpha,
            "share": self.share,
            "arrival_rate": self.arrival_rate,
            "concurrency": self.concurrency,
            "ready_pods": self.ready_pods,
            "generated_tokens": self.generated_tokens,
            "speculating_pods": self.speculating_pods,
        }


@dataclass(frozen=True)
class PodTruth:
    """A pod's set alpha (slice alpha + pod offset) and what it really did in its last tick
    (``alpha`` includes the wander; zeros when it is not serving).

    ``batch_alpha`` is the drafts-weighted acceptance of the requests it had in flight (what
    its counters showed in the tick); ``time_per_token`` and ``tpot_p99`` are the mean and
    P99 per-token latency it served; ``stalled`` the fraction of the tick in a stall episode.
    ``generated_tokens`` counts every token the pod generated since the fleet started,
    across restarts (its vLLM counter resets; this does not), for scoring decisions.
    """

    pod: str
    slice: str
    role: str
    ready: bool
    k: int
    expected_alpha: float
    alpha: float
    batch: float
    passes: int
    mean_step: float
    tokens_per_step: float
    time_per_token: float
    speculating: bool = False
    batch_alpha: float = 0.0
    tpot_p99: float = 0.0
    stalled: float = 0.0
    running: int = 0
    generated_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "speculating": self.speculating,
            "batch_alpha": self.batch_alpha,
            "tpot_p99": self.tpot_p99,
            "stalled": self.stalled,
            "running": self.running,
            "generated_tokens": self.generated_tokens,
            "slice": self.slice,
            "role": self.role,
            "ready": self.ready,
            "k": self.k,
            "expected_alpha": self.expected_alpha,
            "alpha": self.alpha,
            "batch": self.batch,
            "passes": self.passes,
            "mean_step": self.mean_step,
            "tokens_per_step": self.tokens_per_step,
            "time_per_token": self.time_per_token,
        }


@dataclass(frozen=True)
class Truth:
    t: float
    slices: dict[str, SliceTruth]
    pods: dict[str, PodTruth]

    def to_json(self) -> dict[str, Any]:
        return {
            "slices": {k: v.to_json() for k, v in self.slices.items()},
            "pods": {k: v.to_json() for k, v in self.pods.items()},
        }
