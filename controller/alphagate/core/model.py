"""The core's vocabulary: what goes into a decision and what comes out.

Inputs are frozen dataclasses the shell fills from a source (Prometheus or pod scrapes);
outputs carry their evidence so every decision can be explained. Nothing here does I/O.
Times are Unix seconds (float) supplied by the caller: the core never reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel, ConfigDict, Field

from alphagate.config import LatencyMetric

if TYPE_CHECKING:
    from alphagate.core.suitability import Suitability
from alphagate.errors import SourceErrorKind

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


class CheckKind(StrEnum):
    """What a check judged. Metric labels, status and Events derive from it, never from text."""

    ACCEPTANCE = "acceptance"  # alpha against the gate (combined, or one slice in perSlice)
    FLOOR = "floor"  # a slice's minAlpha veto in combined mode
    LATENCY = "latency"  # the P-quantile guard of one slice
    SOURCE = "source"  # the metrics read failed
    WINDOW = "window"  # the window may not be judged (rollout or warm-up)


class Alert(StrEnum):
    """A condition a person should hear about; the values are stable metric labels."""

    SOURCE_ERRORS = "source-errors"
    FLIP_BUDGET = "flip-budget"
    PROBE_STALLED = "probe-stalled"
    ROLLOUT_TIMEOUT = "rollout-timeout"
    # Probing or On with no conclusive verdict for staleness.afterSeconds: speculation runs
    # unchecked (endless Inconclusive or Error windows)
    VERDICT_STALE = "verdict-stale"


class Cause(StrEnum):
    """Why a transition happened: what Events, metrics and reports branch on (not the reason).

    UNKNOWN only appears on transitions recorded by a controller that did not store causes."""

    PROBE = "probe"  # Off/RolledBack -> Probing: a new canary, or the cooldown is over
    EARLY_REPROBE = "early-reprobe"  # the traffic mix shifted towards slices that did well
    POLICY_PASS = "policy-pass"  # a probe confirmed by consecutive passing windows
    POLICY_FAIL = "policy-fail"  # consecutive failing windows rolled speculation back
    FAIL_SAFE = "fail-safe"  # consecutive source errors with failSafe: disable
    STALE_FAIL_SAFE = "stale-fail-safe"  # no conclusive verdict for staleness.afterSeconds
    BAKED = "baked"  # on for bakeSeconds with a passing window: promoted
    SPEC_PAUSE = "spec-pause"  # spec.paused became true
    SPEC_RESUME = "spec-resume"  # spec.paused became false
    MANUAL = "manual"  # a person's command, carried out (or a no-op, still recorded)
    REFUSED = "refused"  # a person's command the machine refused (recorded, nothing changes)
    UNKNOWN = "unknown"


class Guard(StrEnum):
    """What stands between a person's command and the change: the guards that refused it
    (cause REFUSED) or that `--force` overrode (cause MANUAL, forced)."""

    FLIP_BUDGET = "flip-budget"  # timing.maxFlipsPerHour leaves no room for it and a rollback
    MIN_DWELL = "min-dwell"  # timing.minDwellSeconds since the last flip has not passed
    COOLDOWN = "cooldown"  # the rollback cooldown has not passed
    PROMOTION_DISABLED = "promotion-disabled"  # promote without promotion.enabled
    SPECULATION_OFF = "speculation-off"  # promote while the canary does not speculate
    SPEC_PAUSED = "spec-paused"  # resume while spec.paused is true


class NoData(StrEnum):
    """Why a canary that should speculate shows no drafts in a window: typed evidence of an
    Inconclusive acceptance check. Never read as "speculation off"."""

    # spec-decode series exist, every increment is zero: speculating, but no traffic
    NO_TRAFFIC = "no-traffic"
    # the series exist but the range holds fewer than two scrapes: increase() is empty
    SPARSE_SCRAPES = "sparse-scrapes"
    # no spec-decode series at all although speculation should run (rollout, wrong pods)
    NO_SPEC_SERIES = "no-spec-series"
    UNKNOWN = "unknown"  # no drafts; the source did not say why


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
    # vllm:request_generation_tokens over the window: output length per finished request
    output_lengths: Buckets | None = None
    # vllm:num_requests_running, mean per pod over the window (None: not read)
    running: float | None = None
    # do the pods export spec-decode series (speculation runs, even when idle)? None: unknown
    spec_series: bool | None = None
    # why `acceptance` is empty when the source can tell (None: there are drafts, or unknown)
    no_data: NoData | None = None

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


def ev(value: float) -> float | str:
    """Evidence value that survives JSON: NaN and infinities become strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def _estimate_flat(e: Estimate | None) -> dict[str, float | str]:
    if e is None:
        return {}
    return {
        "alpha": ev(e.value),
        "lower": ev(e.lower),
        "upper": ev(e.upper),
        "confidence": e.confidence,
        "drafts": ev(e.drafts),
        "draft_tokens": ev(e.draft_tokens),
        "accepted_tokens": ev(e.accepted_tokens),
        "batches": float(e.batches),
        "method": str(e.method),
        "mean_acceptance_length": ev(e.mean_acceptance_length),
    }


class Undecided(StrEnum):
    """Why an acceptance check could not decide (its verdict is Inconclusive)."""

    # No drafts in the window: alpha unknown (`AcceptanceEvidence.no_data` says why).
    NO_DRAFTS = "no-drafts"
    # The estimate is not a number.
    NOT_A_NUMBER = "not-a-number"
    # Fewer than two independent batches (one pod, or one snapshot of one pod): nothing
    # measures how much requests differ, so no honest interval exists.
    FEW_BATCHES = "few-batches"
    # Fewer drafts than acceptance.minDrafts.
    FEW_DRAFTS = "few-drafts"
    # An honest interval that overlaps the hysteresis band.
    IN_BAND = "in-band"


@dataclass(frozen=True, slots=True)
class AcceptanceEvidence:
    """The gate an acceptance check applied and the estimate it judged (None: no drafts)."""

    disable_below: float
    enable_above: float
    min_drafts: int
    estimate: Estimate | None = None
    no_data: NoData | None = None  # why there is no estimate (None: there is one, or an error)
    # why the check could not decide (None when it passed, failed or errored)
    undecided: Undecided | None = None

    def flat(self) -> dict[str, float | str]:
        """Flat JSON-safe view for people (status details, CLI JSON); code reads the fields."""
        out: dict[str, float | str] = {
            "disable_below": self.disable_below,
            "enable_above": self.enable_above,
            "min_drafts": float(self.min_drafts),
            **_estimate_flat(self.estimate),
        }
        if self.no_data is not None:
            out["no_data"] = self.no_data.value
        if self.undecided is not None:
            out["undecided"] = self.undecided.value
        return out


@dataclass(frozen=True, slots=True)
class FloorEvidence:
    """A slice's floor (minAlpha) and the slice's estimate (None: no drafts)."""

    min_alpha: float
    min_drafts: int
    estimate: Estimate | None = None

    def flat(self) -> dict[str, float | str]:
        return {
            "min_alpha": self.min_alpha,
            "min_drafts": float(self.min_drafts),
            **_estimate_flat(self.estimate),
        }


@dataclass(frozen=True, slots=True)
class PoolLatency:
    """One pool's latency quantile as the guard read it: the interpolated value and the
    bucket (lo, hi] it falls in."""

    count: float
    quantile_seconds: float
    bucket_lo: float
    bucket_hi: float


class LatencyUndecided(StrEnum):
    """What a latency check could not show (its verdict is Inconclusive). A Pass needs evidence
    that the canary is within the margin, not only the absence of a significant regression."""

    # Fewer observations than latency.minCount on a side.
    FEW_OBSERVATIONS = "few-observations"
    # Fewer than two independent batches in a pool: no honest spread.
    FEW_BATCHES = "few-batches"
    # A histogram or the measured tokens per step is missing from the window.
    NO_DATA = "no-data"
    # The baseline's quantile is not a number, or no finite bucket bound reaches the limit.
    UNTESTABLE = "untestable"
    # The measured speed-up's lower bound is below 1 / (1 + maxRegressionRatio).
    MEAN_NOT_SHOWN = "mean-not-shown"
    # The canary's share above the bucket bound at or above the limit is not shown to be at
    # most 1 - quantile (too few requests, or too many of them above it).
    TAIL_NOT_SHOWN = "tail-not-shown"
    # The canary's quantile, read like histogram_quantile, is above the limit.
    QUANTILE_ABOVE_LIMIT = "quantile-above-limit"
    # A bucket bound's canary share is above its allowed share, not significantly.
    POSSIBLE_REGRESSION = "possible-regression"


@dataclass(frozen=True, slots=True)
class ExceedanceTest:
    """The bucket question: the share of canary observations above `edge` (the bucket bound
    at or above the limit) against the share a canary within the limit may have.

    Both directions: `p_value` asks "significantly above?" (a regression), `p_within` asks
    "shown at or below?" (the evidence a Pass needs), each an exact binomial test on the
    effective number of observations (`total` over the design effect of clustered batches)."""

    edge: float
    above: float
    fraction: float
    expected_fraction: float
    p_value: float
    total: float = math.nan
    effective: float = math.nan  # independent observations the batches are worth
    upper: float = math.nan  # one-sided upper confidence bound of `fraction`, at significance
    p_within: float = math.nan  # p of "fraction >= expected_fraction"; small: shown within
    needed: float = math.nan  # observations that would show it at this fraction (inf: never)


@dataclass(frozen=True, slots=True)
class SpeedUp:
    """Baseline mean time per token over the canary's, with a two-sided interval."""

    value: float
    lower: float
    upper: float
    confidence: float
    canary_mean: float
    baseline_mean: float
    canary_count: float
    baseline_count: float
    dof: float
    # one-sided p-value of "canary mean > baseline mean x (1 + margin)"
    p_regressed: float
    # one-sided p-value of "canary mean >= baseline mean x (1 + margin)": small when the
    # canary is shown within the margin (the speed-up's lower bound above 1 / (1 + margin))
    p_within: float = math.nan


@dataclass(frozen=True, slots=True)
class BoundTest:
    """Canary against baseline share of requests above one bucket bound."""

    bound: float
    canary_fraction: float  # canary share above `bound`
    baseline_bound: float  # largest bound <= bound / (1 + margin)
    baseline_fraction: float  # baseline share above `baseline_bound`
    allowed_fraction: float  # baseline_fraction + slack
    p_value: float
    rejected: bool = False  # significant after Holm's correction


@dataclass(frozen=True, slots=True)
class LatencyEvidence:
    """What the latency guard compared; parts stay None when the check stopped before them."""

    metric: LatencyMetric
    quantile: float
    max_regression_ratio: float
    significance: float
    min_count: int
    tokens_per_step: float | None = None
    canary: PoolLatency | None = None
    baseline: PoolLatency | None = None
    limit_seconds: float | None = None
    test: ExceedanceTest | None = None
    # perToken on exact sums (core/latency.py): the measured speed-up with the mean test, and
    # one exceedance test per bucket bound (Holm-corrected together)
    speedup: SpeedUp | None = None
    bounds: tuple[BoundTest, ...] = ()
    # what an Inconclusive check could not show (empty when it passed, failed or errored)
    undecided: tuple[LatencyUndecided, ...] = ()

    @property
    def worst_bound(self) -> BoundTest | None:
        """The bound test with the smallest p-value (the strongest tail evidence)."""
        tested = [b for b in self.bounds if math.isfinite(b.p_value)]
        return min(tested, key=lambda b: b.p_value) if tested else None

    @property
    def ratio(self) -> float | None:
        """Canary quantile over baseline quantile, when both are finite and the baseline > 0."""
        if self.canary is None or self.baseline is None:
            return None
        c, b = self.canary.quantile_seconds, self.baseline.quantile_seconds
        if b > 0 and math.isfinite(c) and math.isfinite(b):
            return c / b
        return None

    def flat(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "metric": self.metric.value,
            "quantile": self.quantile,
            "max_regression_ratio": self.max_regression_ratio,
            "significance": self.significance,
            "min_count": float(self.min_count),
        }
        if self.tokens_per_step is not None:
            out["tokens_per_step"] = self.tokens_per_step
        for role, pool in (("canary", self.canary), ("baseline", self.baseline)):
            if pool is not None:
                out |= {
                    f"{role}_count": ev(pool.count),
                    f"{role}_quantile_seconds": ev(pool.quantile_seconds),
                    f"{role}_bucket_lo": ev(pool.bucket_lo),
                    f"{role}_bucket_hi": ev(pool.bucket_hi),
                }
        ratio = self.ratio
        if ratio is not None:
            out["ratio"] = ev(ratio)
        if self.limit_seconds is not None:
            out["limit"] = ev(self.limit_seconds)
        if self.test is not None:
            t = self.test
            out |= {
                "edge": ev(t.edge),
                "above": ev(t.above),
                "fraction_above": ev(t.fraction),
                "expected_fraction": t.expected_fraction,
                "p_value": ev(t.p_value),
                "tail_edge": ev(t.edge),
                "tail_fraction_above": ev(t.fraction),
                "tail_upper": ev(t.upper),
                "tail_p_within": ev(t.p_within),
                "tail_needed": ev(t.needed),
            }
        if self.undecided:
            out["undecided"] = ",".join(u.value for u in self.undecided)
        if self.speedup is not None:
            sp = self.speedup
            out |= {
                "speedup": ev(sp.value),
                "speedup_lower": ev(sp.lower),
                "speedup_upper": ev(sp.upper),
                "canary_mean_seconds": ev(sp.canary_mean),
                "baseline_mean_seconds": ev(sp.baseline_mean),
                "p_value_mean": ev(sp.p_regressed),
                "p_within_mean": ev(sp.p_within),
            }
        worst = self.worst_bound
        if worst is not None:
            out |= {
                "edge": ev(worst.bound),
                "fraction_above": ev(worst.canary_fraction),
                "baseline_edge": ev(worst.baseline_bound),
                "baseline_fraction_above": ev(worst.baseline_fraction),
                "p_value": ev(worst.p_value),
            }
        return out


@dataclass(frozen=True, slots=True)
class WindowEvidence:
    """Why a window was not judged: where it starts and where the warm-up ends (None: no
    warm-up, a rollout is in progress)."""

    window_start: float
    warmup_end: float | None

    def flat(self) -> dict[str, float | str]:
        end = self.warmup_end if self.warmup_end is not None else math.nan
        return {"window_start": self.window_start, "warmup_end": ev(end)}


@dataclass(frozen=True, slots=True)
class SourceEvidence:
    """The failed reads (whole read first), each with its kind (None: unknown)."""

    failures: tuple[tuple[SourceErrorKind | None, str], ...] = ()

    def flat(self) -> dict[str, float | str]:
        return {f"error_{i}": text for i, (_, text) in enumerate(self.failures)}


Evidence = AcceptanceEvidence | FloorEvidence | LatencyEvidence | WindowEvidence | SourceEvidence


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict with the typed evidence behind it and a sentence a person can read.

    `slice` is the slice the check is about; None when it covers the whole policy (combined
    acceptance, source, window) or the policy's only slice. Code reads `kind`, `slice` and
    `evidence`; `reason` is for people and nothing parses it.
    """

    kind: CheckKind
    verdict: Verdict
    reason: str
    evidence: Evidence | None = None
    slice: str | None = None

    @property
    def name(self) -> str:
        """`kind` or `kind:slice`: a display name and metric label (derived, never parsed)."""
        return f"{self.kind.value}:{self.slice}" if self.slice else self.kind.value

    def flat_evidence(self) -> dict[str, float | str]:
        """The evidence as a flat JSON-safe dict, for people (status details, CLI JSON)."""
        return self.evidence.flat() if self.evidence is not None else {}


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
    # end of the last window counted into the pass or fail streak: a window that overlaps it is
    # not new evidence (0: the next decisive window counts)
    streak_end: float = 0.0
    cooldown_index: int = 0  # how many rollbacks in a row (exponential backoff exponent)
    cooldown_until: float = 0.0
    probe_deadline: float = 0.0  # past it a probe without a verdict keeps probing, and says so
    flip_times: tuple[float, ...] = ()  # recent flips, for the flips-per-hour cap
    last_alpha: dict[str, float] = Field(default_factory=dict)  # per slice, last estimate
    good_share_at_rollback: float = 0.0  # share of traffic on good slices when rolled back
    # the traffic's shape in the last window whose alpha cleared the gate while speculating,
    # and in the window that rolled back: a return of the first, away from the second,
    # re-probes early (core.reprobe)
    shape_paid: TrafficShape | None = None
    shape_failed: TrafficShape | None = None
    history: tuple[Transition, ...] = ()
    last_flip_at: float | None = None  # last enable/disable: min dwell and warm-up start here
    paused_by: str | None = None  # "spec" or "manual": who must resume
    # end of the last window with a conclusive verdict (PASS or FAIL, judged): the staleness
    # guard counts from the later of it and entering the state (0: none yet)
    last_conclusive_at: float = 0.0
    draft: DraftMemory = Field(default_factory=DraftMemory)  # draft-length tuning (opt-in)
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
    # None while nothing is judged (machine.verdict_age)
    verdict_age_seconds: float | None = None
    # A probe the machine decided but the live data withheld (outputs too short to pay:
    # core.suitability), with the numbers; None when nothing was withheld
    withheld: Suitability | None = None
