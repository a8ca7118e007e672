"""The core's vocabulary: what goes into a decision and what comes out.

Inputs are frozen dataclasses the shell fills from a source (Prometheus or pod scrapes);
outputs carry their evidence so every decision can be explained. Nothing here does I/O.
Times are Unix seconds (float) supplied by the caller: the core never reads a clock. The enums
live in `core.vocab` and the evidence in `core.evidence`; both are re-exported here, so one
import names the whole vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel, ConfigDict, Field

from alphagate.core.evidence import (
    AcceptanceEvidence,
    CheckResult,
    Estimate,
    EstimateMethod,
    FloorEvidence,
    Judgeability,
    SourceEvidence,
    Undecided,
    Unjudgeable,
    WindowEvidence,
)
from alphagate.core.fmt import ev
from alphagate.core.latency_evidence import (
    BoundTest,
    ExceedanceTest,
    LatencyEvidence,
    LatencyUndecided,
    PoolLatency,
    SpeedUp,
    TailGuard,
)
from alphagate.core.latency_run import LatencyRun
from alphagate.core.spread import Spread
from alphagate.core.vocab import (
    Action,
    Alert,
    Cause,
    CheckKind,
    Command,
    Guard,
    NoData,
    Role,
    State,
    Verdict,
)

if TYPE_CHECKING:
    from alphagate.core.suitability import Suitability
from alphagate.errors import BudgetKind, SourceErrorKind

# Re-exported: one import names the whole vocabulary.
__all__ = [
    "AcceptanceEvidence",
    "Action",
    "Alert",
    "BoundTest",
    "Cause",
    "CheckKind",
    "CheckResult",
    "Command",
    "Estimate",
    "EstimateMethod",
    "ExceedanceTest",
    "FloorEvidence",
    "Guard",
    "Judgeability",
    "LatencyEvidence",
    "LatencyUndecided",
    "NoData",
    "PoolLatency",
    "Role",
    "SourceEvidence",
    "SpeedUp",
    "State",
    "TailGuard",
    "Undecided",
    "Unjudgeable",
    "Verdict",
    "WindowEvidence",
    "ev",
]

INF: Final = math.inf


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
class LatencySample:
    """Increments of one latency histogram on one pod over one interval: exact `_sum` and
    `_count` (and the buckets when read), one batch for the latency guard's statistics."""

    count: float
    sum: float
    buckets: Buckets | None = None
    pod: str = ""
    start: float = 0.0
    end: float = 0.0


@dataclass(frozen=True, slots=True)
class RequestLives:
    """How long the pool's requests decoded, over the window: what sizes alpha's time blocks
    (core/blocksize.py). A request keeps its acceptance for its whole life, so blocks of one
    pod are near independent only when they are long against the lives of the requests that
    carry most drafts.

    `histogram` is `vllm:request_decode_time_seconds` summed over the pool's pods (the requests
    that finished in the window; exact `_sum`). One histogram per pool is enough: the pods of a
    pool serve one slice's traffic."""

    histogram: Buckets

    @property
    def count(self) -> float:
        """Requests that finished in the window."""
        return self.histogram.total


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
    # the same histogram per pod per interval (exact sums): the guard's batches; () if unread
    tpot_samples: tuple[LatencySample, ...] = ()
    pods: int = 0
    error: str | None = None
    error_kind: SourceErrorKind | None = None  # how it failed (a bounded label); None: unknown
    budget: BudgetKind | None = None  # error_kind BUDGET: which of the canary's budgets
    # vllm:request_generation_tokens over the window: output length per finished request
    output_lengths: Buckets | None = None
    # vllm:num_requests_running, mean per pod over the window (None: not read)
    running: float | None = None
    # do the pods export spec-decode series (speculation runs, even when idle)? None: unknown
    spec_series: bool | None = None
    # why `acceptance` is empty when the source can tell (None: there are drafts, or unknown)
    no_data: NoData | None = None
    # decode times of the requests that finished in the window (None: not read or none)
    lives: RequestLives | None = None

    @property
    def speculating(self) -> bool:
        """Speculation runs on these pods: drafts, or spec-decode series (idle or sparse)."""
        return bool(self.acceptance) or self.spec_series is True


@dataclass(frozen=True, slots=True)
class Observation:
    """One evaluation's input: every pool of every slice, read at `at` over `window_seconds`."""

    at: float
    window_seconds: float
    pools: tuple[PoolObservation, ...]
    source_error: str | None = None  # the whole read failed (e.g. Prometheus unreachable)
    source_error_kind: SourceErrorKind | None = None  # how it failed; None: unknown or no error
    source_budget: BudgetKind | None = None  # source_error_kind BUDGET: which budget
    # seconds between the source's scrapes of the pods, when known (podScrape: the controller's
    # own; Prometheus: measured or configured); core/coverage.py judges the window against it
    scrape_interval_seconds: float | None = None

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


# ---------------------------------------------------------------- memory and decisions


class Transition(BaseModel):
    """A state change with its reason and evidence (kept in status history)."""

    model_config = ConfigDict(frozen=True)

    from_state: State
    to_state: State
    reason: str  # for people
    at: float
    evidence: dict[str, float | str] = Field(default_factory=dict)  # a record for people
    cause: Cause = Cause.UNKNOWN  # what code branches on
    command: Command | None = None  # the person's command, for MANUAL and REFUSED
    forced: bool = False  # a MANUAL command carried out with --force past `guards`
    guards: tuple[Guard, ...] = ()  # what refused the command (REFUSED) or was forced past


class DraftCause(StrEnum):
    """Why the draft length K changed (or was confirmed): what Events and metrics branch on."""

    SHORTEN = "shorten"  # the tail positions confidently cost more than they return
    LENGTHEN = "lengthen"  # the last position clearly pays: one more position is tried
    REVERT = "revert"  # the new K regressed (or speculation rolled back on it): last good K
    CONFIRMED = "confirmed"  # the new K held for consecutiveWindows: it is the good K now
    SPEC_CHANGED = "spec-changed"  # speculativeConfig's K changed: tuning starts from it


class DraftChange(BaseModel):
    """One K decision of the tuner, kept in DraftMemory.history (reason for people)."""

    model_config = ConfigDict(frozen=True)

    at: float
    from_k: int
    to_k: int
    cause: DraftCause
    reason: str
    evidence: dict[str, float | str] = Field(default_factory=dict)


class DraftMemory(BaseModel):
    """What the draft-length tuner remembers between evaluations (core/tuning.py)."""

    model_config = ConfigDict(frozen=True)

    k: int | None = None  # the K the canary runs when speculating; None: the spec's
    spec_k: int | None = None  # the spec's K when this memory began (an edit restarts tuning)
    good_k: int | None = None  # the last K confirmed good (None: the spec's)
    good_speedup: float | None = None  # measured speed-up (point) at good_k, when known
    trial: bool = False  # K changed and is not yet confirmed: a regression reverts it
    changed_at: float | None = None
    target: int | None = None  # the K the current agreeing streak asks for
    streak: int = 0  # disjoint judged windows asking for `target`
    confirm_streak: int = 0  # disjoint passing windows at a trial K
    streak_end: float = 0.0  # end of the last window counted in either streak
    cooldown_until: float = 0.0  # no change (other than a revert) before this
    cooldown_index: int = 0  # reverts in a row: the cooldown doubles with each
    history: tuple[DraftChange, ...] = ()


class TrafficShape(BaseModel):
    """What the traffic looked like in one window, as vLLM measures it: finished requests per
    output-length bucket (`vllm:request_generation_tokens`, every pool of the unit's slices),
    and the alpha the canary showed on it (None: not measured). `core.shape` compares them."""

    model_config = ConfigDict(frozen=True)

    bounds: tuple[float, ...]  # the finite upper bounds (le), ascending
    counts: tuple[float, ...]  # requests per bucket: one per bound, the last above them all
    alpha: float | None = None

    @property
    def total(self) -> float:
        return math.fsum(self.counts)


class ShapeWindow(BaseModel):
    """One disjoint whole window's shape as the re-probe remembers it: the share of finished
    requests per output-length bucket, the alpha measured on it (None: not speculating or not
    judged) and whether its acceptance check passed or failed."""

    model_config = ConfigDict(frozen=True)

    at: float  # the window's end
    shares: tuple[float, ...]
    alpha: float | None = None
    paid: bool = False  # every acceptance check passed
    failed: bool = False  # an acceptance or floor check failed


class ShapeAxis(BaseModel):
    """What a rollback on alpha learned about the shape (`core.shape.learn`): the line from the
    failing windows' mean shape (x = 0) to the paying windows' (x = 1), alpha against x fitted
    over the speculating windows, and the window-to-window noise of x."""

    model_config = ConfigDict(frozen=True)

    paid: tuple[float, ...]
    failed: tuple[float, ...]
    intercept: float  # fitted alpha at x = 0 (the failed shape)
    slope: float  # fitted alpha per unit of x
    slope_t: float  # its t statistic
    noise: float  # window-to-window standard deviation of x (robust, successive differences)
    shift: float  # total variation between the two shapes
    windows: int  # speculating windows the relation was fitted on


class ShapeMemory(BaseModel):
    """The early re-probe's memory of the traffic's shape (`core.reprobe`)."""

    model_config = ConfigDict(frozen=True)

    bounds: tuple[float, ...] = ()  # the layout of `recent` (a new layout starts over)
    recent: tuple[ShapeWindow, ...] = ()  # the last disjoint whole windows, oldest first
    last_end: float = 0.0  # end of the last window recorded
    axis: ShapeAxis | None = None  # learned at the last rollback on alpha (None: none)
    returned: int = 0  # consecutive cooling-down windows back along the axis
    spent: bool = False  # an early re-probe failed since speculation was last confirmed


class AlphaWindow(BaseModel):
    """One judged window's alpha as a fail run pools it (`core.streak`): its value, its draft
    tokens (the weight) and the standard error and degrees of freedom its upper bound used."""

    model_config = ConfigDict(frozen=True)

    end: float  # the window's end
    value: float
    tokens: float
    se: float
    dof: float
    prior_dof: float = 0.0  # the learned prior's dof inside `dof` (core/spread.py)
    blocks: bool = False  # one pod's time blocks (one dispersion), not pods


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
    # the judged windows of the current fail run, pooled to test a Fail across them
    # (core/streak.py; at most consecutiveWindows, oldest first; () in an older annotation)
    run: tuple[AlphaWindow, ...] = ()
    error_streak: int = 0  # consecutive windows with an ERROR
    # end of the last window counted into the pass or fail streak: a window that overlaps it is
    # not new evidence (0: the next decisive window counts)
    streak_end: float = 0.0
    cooldown_index: int = 0  # how many rollbacks in a row (exponential backoff exponent)
    cooldown_until: float = 0.0
    probe_deadline: float = 0.0  # past it a probe without a verdict keeps probing, and says so
    flip_times: tuple[float, ...] = ()  # recent flips, for the flips-per-hour cap
    last_alpha: dict[str, float] = Field(default_factory=dict)  # per slice, last estimate
    # per slice, the between-request variance of alpha learned over the last hour: a prior
    # for each window's interval (core/spread.py)
    spread: dict[str, Spread] = Field(default_factory=dict)
    # share of traffic on good slices in the traffic that failed: read at the rollback, lowered
    # to the lowest read within one window after it (core.reprobe.settle_share)
    good_share_at_rollback: float = 0.0
    # the traffic's recent shapes (with the alpha measured on them) and what the last rollback
    # on alpha learned from them: a return toward the shape that paid re-probes early
    # (core.reprobe)
    shape: ShapeMemory = Field(default_factory=ShapeMemory)
    history: tuple[Transition, ...] = ()
    last_flip_at: float | None = None  # last enable/disable: min dwell and warm-up start here
    paused_by: str | None = None  # "spec" or "manual": who must resume
    # end of the last window with a conclusive verdict (PASS or FAIL, judged): the staleness
    # guard counts from the later of it and entering the state (0: none yet)
    last_conclusive_at: float = 0.0
    draft: DraftMemory = Field(default_factory=DraftMemory)  # draft-length tuning (opt-in)
    # the latency guard's tail counts of the last judged windows, pooled with the next one's
    # (core/latency_run.py; tail4)
    latency_run: LatencyRun = Field(default_factory=LatencyRun)
    # Which write of the canary Deployment's record (`alphagate.io/record`) this memory
    # continues. Set by the shell when it writes the record; the core carries it unchanged.
    record: int = 0


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
    alerts: tuple[Alert, ...] = ()  # conditions a person should hear about
    # Throughput speed-up the policy predicts at the combined alpha (speedup.predicted: K and
    # the gate's break-even from the policy); None without a finite combined alpha.
    predicted_speedup: float | None = None
    # Probing or On: seconds since the last conclusive verdict (or the enable, if later);
    # None while nothing is judged (window.verdict_age)
    verdict_age_seconds: float | None = None
    # A probe the machine decided but the live data withheld (outputs too short to pay:
    # core.suitability), with the numbers; None when nothing was withheld
    withheld: Suitability | None = None
