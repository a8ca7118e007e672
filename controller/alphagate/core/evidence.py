"""What a check found: estimates with their intervals, and the typed evidence each kind of
check carries (acceptance, floor, window, source; latency's is in `core/latency_evidence.py`)
inside its `CheckResult`. Status, Events, metrics and reports read these fields; nothing
parses the reason. `core.model` re-exports them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from alphagate.core.fmt import ev
from alphagate.core.latency_evidence import LatencyEvidence
from alphagate.core.vocab import CheckKind, NoData, Verdict
from alphagate.errors import BudgetKind, SourceErrorKind


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
    # Batch means only: the per-pod block length (s), the variance inflation applied for what
    # adjacent blocks share (core/blocksize.py), the standard error before the learned prior
    # (core/spread.py: what the next windows learn from) and the prior's degrees of freedom
    # inside `dof` (0: no prior).
    block_seconds: float = math.nan
    inflation: float = 1.0
    own_std_error: float = math.nan
    prior_dof: float = 0.0
    # The (se, dof) the upper bound was computed on, when it differs from (std_error, dof):
    # one pod's time blocks (`acceptance._blocks_of_one_pod`). NaN: the same as std_error.
    # What a streak pools to test a Fail across windows (`core.streak`).
    fail_std_error: float = math.nan
    fail_dof: float = math.nan

    @property
    def fail_side(self) -> tuple[float, float]:
        """(se, dof) behind the upper bound: the fail side's when set, else the estimate's."""
        if math.isfinite(self.fail_std_error):
            return self.fail_std_error, self.fail_dof
        return self.std_error, self.dof

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else math.nan

    @property
    def conclusive(self) -> bool:
        """False when the data could not support an honest interval (too few batches)."""
        return self.method != EstimateMethod.INSUFFICIENT


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
        "block_seconds": ev(e.block_seconds),
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


class Unjudgeable(StrEnum):
    """Why a canary's window holds fewer than two independent batches, so alpha has no honest
    interval (`Judgeability.cause`); the values are stable labels (conditions, Events)."""

    # Requests decode so long that a batch must span more than half the window on one pod.
    REQUESTS_OUTLIVE_WINDOW = "requests-outlive-window"
    # batchSeconds is automatic but the pods export no decode times: 900 s blocks.
    DECODE_TIMES_UNKNOWN = "decode-times-unknown"
    # acceptance.batchSeconds, set by hand, is longer than half the window.
    BLOCKS_TOO_LONG = "blocks-too-long"
    # Blocks would fit, but every draft of the window came within one block (bursty traffic).
    DRAFTS_IN_ONE_BLOCK = "drafts-in-one-block"
    # The window holds fewer than two samples of a pod (range steps, or pod scrapes).
    WINDOW_TOO_SHORT = "window-too-short"


@dataclass(frozen=True, slots=True)
class Judgeability:
    """What would make an undecidable window judgeable: the cause, the block length one batch
    needs, the window that holds two such blocks of one pod, and the canary pods that make
    every window judgeable (pods never share a request: each is a batch)."""

    cause: Unjudgeable
    block_seconds: float
    window_seconds: float
    current_window_seconds: float
    pods: int = 2

    def flat(self) -> dict[str, float | str]:
        return {
            "unjudgeable": self.cause.value,
            "needed_block_seconds": ev(self.block_seconds),
            "needed_window_seconds": ev(self.window_seconds),
            "needed_pods": float(self.pods),
        }


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
    # few-batches only: what would make the window judgeable (None: not known or not that)
    judgeable: Judgeability | None = None

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
        if self.judgeable is not None:
            out |= self.judgeable.flat()
        return out


@dataclass(frozen=True, slots=True)
class FloorEvidence:
    """A slice's floor (minAlpha) and the slice's estimate (None: no drafts)."""

    min_alpha: float
    min_drafts: int
    estimate: Estimate | None = None
    # why the floor could not judge (None when it passed, failed or errored)
    undecided: Undecided | None = None

    def flat(self) -> dict[str, float | str]:
        return {
            "min_alpha": self.min_alpha,
            "min_drafts": float(self.min_drafts),
            **_estimate_flat(self.estimate),
        } | ({"undecided": self.undecided.value} if self.undecided is not None else {})


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
    """The failed reads (whole read first), each with its kind (None: unknown), and for those
    of kind BUDGET which of the canary's budgets it spent (`budgets`, one per failure)."""

    failures: tuple[tuple[SourceErrorKind | None, str], ...] = ()
    budgets: tuple[BudgetKind | None, ...] = ()

    def flat(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            f"error_{i}": text for i, (_, text) in enumerate(self.failures)
        }
        out |= {f"budget_{i}": b.value for i, b in enumerate(self.budgets) if b is not None}
        return out


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
