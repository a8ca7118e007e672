"""The core's vocabulary: what goes into a decision and what comes out.

Inputs are frozen dataclasses the shell fills from a source (Prometheus or pod scrapes);
outputs carry their evidence so every decision can be explained. Nothing here does I/O.
Times are Unix seconds (float) supplied by the caller: the core never reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

INF: Final = math.inf


class Role(StrEnum):
    CANARY = "canary"
    BASELINE = "baseline"


class Verdict(StrEnum):
    """Outcome of one check. Only FAIL flips; INCONCLUSIVE and ERROR hold."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class State(StrEnum):
    """Where a canary stands (design.md §4)."""

    OFF = "Off"
    PROBING = "Probing"
    ON = "On"
    ROLLED_BACK = "RolledBack"
    PAUSED = "Paused"
    PROMOTED = "Promoted"


class Action(StrEnum):
    """What the shell must do after a decision."""

    ENABLE = "enable"
    DISABLE = "disable"
    HOLD = "hold"
    PROMOTE = "promote"


class Command(StrEnum):
    """A person's instruction (CLI or annotation). Overrides the policy; recorded as "manual"."""

    PAUSE = "pause"
    RESUME = "resume"
    ENABLE = "enable"
    DISABLE = "disable"
    PROMOTE = "promote"


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class AcceptanceSample:
    """Counter increments of one pod (or engine) over one interval: one batch for batch means.

    Values are floats because PromQL `increase()` extrapolates.
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    per_position: tuple[float, ...] = ()
    pod: str = ""
    start: float = 0.0
    end: float = 0.0


@dataclass(frozen=True, slots=True)
class Buckets:
    """A cumulative histogram over a window: `bounds` ascending upper bounds (`le`), the last
    +Inf; `counts[i]` observations <= bounds[i]. Like Prometheus `sum by (le)(increase(...))`.
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = math.nan

    @property
    def total(self) -> float:
        return self.counts[-1] if self.counts else 0.0


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """What one pool (canary or baseline pods of one slice) did over the window.

    `error` is set by the shell when the source failed for this pool: the core turns it into an
    ERROR verdict, never into zeros. `acceptance` empty with no error means speculation was off
    or no drafts happened (expected on an off pod).
    """

    slice: str
    role: Role
    acceptance: tuple[AcceptanceSample, ...] = ()
    generation_tokens: float = 0.0  # traffic weight: measured generated tokens in the window
    itl: Buckets | None = None  # vllm:inter_token_latency_seconds (per engine step)
    tpot: Buckets | None = None  # vllm:request_time_per_output_token_seconds (per request)
    pods: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One evaluation's input: every pool of every slice, read at `at` over `window_seconds`."""

    at: float
    window_seconds: float
    pools: tuple[PoolObservation, ...]
    source_error: str | None = None  # the whole read failed (e.g. Prometheus unreachable)

    def pool(self, slice_name: str, role: Role) -> PoolObservation | None:
        for p in self.pools:
            if p.slice == slice_name and p.role is role:
                return p
        return None


@dataclass(frozen=True, slots=True)
class Rollout:
    """What the shell knows about the canary Deployment's rollout, so the core never judges
    data from a rollout in progress or its warm-up."""

    in_progress: bool = False
    completed_at: float | None = None  # when the last rollout finished (pods ready)
    speculation_on: bool = False  # does the running pod template carry --speculative-config?


# ---------------------------------------------------------------- estimates and checks


class EstimateMethod(StrEnum):
    """How an alpha interval was computed (core/acceptance.py)."""

    # Ratio estimator over independent batches (pods, or blocks of one pod at least
    # acceptance.batchSeconds long), leverage-corrected, Student t on the batches' dof.
    BATCH_MEANS = "batch-means"
    # Every batch shows the same ratio (alpha exactly 0 or 1 everywhere): Wilson over drafts.
    WILSON_DRAFTS = "wilson-drafts"
    # Fewer than two independent batches: no honest interval; reported as [0, 1], Inconclusive.
    INSUFFICIENT = "insufficient-batches"
    # Several slices: the pooled ratio (effective alpha), Welch-Satterthwaite dof.
    POOLED = "pooled"


@dataclass(frozen=True, slots=True)
class Estimate:
    """alpha with a two-sided interval at `confidence`. `method` says how it was computed."""

    value: float
    lower: float
    upper: float
    confidence: float
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    batches: int
    method: EstimateMethod
    # Standard error of `value` and its degrees of freedom (inf for large-sample methods); used
    # to combine slices. NaN when unknown.
    std_error: float = math.nan
    dof: float = math.inf

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else math.nan

    @property
    def conclusive(self) -> bool:
        """False when the data could not support an honest interval (too few batches)."""
        return self.method != EstimateMethod.INSUFFICIENT


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict with the numbers behind it and a sentence a person can read."""

    check: str  # "acceptance", "acceptance:<slice>", "latency", "latency:<slice>"
    verdict: Verdict
    reason: str
    evidence: dict[str, float | str] = field(default_factory=dict)


# ---------------------------------------------------------------- memory and decisions


class Transition(BaseModel):
    """A state change with its reason and evidence (kept in status history)."""

    model_config = ConfigDict(frozen=True)

    from_state: State
    to_state: State
    reason: str
    at: float
    evidence: dict[str, float | str] = Field(default_factory=dict)


class Memory(BaseModel):
    """Everything the state machine must remember between evaluations.

    Serialised into the resource status and a Deployment annotation so a restarted controller
    resumes where it was, without a second flip.
    """

    model_config = ConfigDict(frozen=True)

    state: State = State.OFF
    since: float = 0.0  # when `state` was entered
    state_before_pause: State | None = None
    pass_streak: int = 0  # consecutive windows whose acceptance+latency verdict was PASS
    fail_streak: int = 0  # consecutive windows with a FAIL
    error_streak: int = 0  # consecutive windows with an ERROR
    cooldown_index: int = 0  # how many rollbacks in a row (exponential backoff exponent)
    cooldown_until: float = 0.0
    probe_deadline: float = 0.0  # past it a probe without a verdict keeps probing, and says so
    flip_times: tuple[float, ...] = ()  # recent flips, for the flips-per-hour cap
    last_alpha: dict[str, float] = Field(default_factory=dict)  # per slice, last estimate
    good_share_at_rollback: float = 0.0  # share of traffic on good slices when rolled back
    history: tuple[Transition, ...] = ()
    last_flip_at: float | None = None  # last enable/disable: min dwell and warm-up start here
    paused_by: str | None = None  # "spec" or "manual": who must resume


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The full result of one evaluation: estimates, checks, decision and new memory."""

    at: float
    estimates: dict[str, Estimate]  # per slice
    weights: dict[str, float]  # per slice, traffic share, sums to 1 when any traffic
    combined: Estimate | None
    checks: tuple[CheckResult, ...]
    verdict: Verdict  # the verdict the state machine acted on
    action: Action
    reason: str
    memory: Memory
    transition: Transition | None = None
    target_speculation_on: bool = False  # what the canary should run after this decision
    # Conditions a person should hear about: "source-errors", "flip-budget", "probe-stalled",
    # "rollout-timeout" (stable strings; usable as metric labels).
    alerts: tuple[str, ...] = ()
