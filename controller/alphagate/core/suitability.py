"""When not to speculate at all: outputs too short, batch-1 offline work, a domain without a head.

The lesson's three cases, judged from live data where vLLM measures them (here) and from a
described workload where it cannot (the lab's `alphagate_lab.planning.workload`, for `plan`):

* short outputs: `vllm:request_generation_tokens` (one observation per finished request, exact
  `_sum/_count`). Below about 50 tokens a request spends most of its life in prefill; the draft's
  load, KV and warm-up cost are paid for a handful of decode steps. The live controller does not
  probe a canary whose outputs are that short (a condition says why, with the numbers).
* batch-1 offline: latency does not matter and the target alone is cheapest per token. The
  running gauge can show batch 1, not that nobody waits, so this comes from a description.
* a specialised domain without a domain-trained head: alpha will be low. Live, the acceptance
  gate sees it; before deploying, a description says it.

Typed findings; reasons are for people. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from alphagate.core import histogram
from alphagate.core.model import Buckets

MIN_OUTPUT_TOKENS: Final = 50.0
"""Mean output length below which speculation does not pay (the lesson's ~50 tokens)."""
MIN_REQUESTS: Final = 20.0
"""Finished requests needed before the output-length histogram is read as evidence."""


class Condition(StrEnum):
    """A reason not to speculate (stable strings; condition types and metric labels)."""

    SHORT_OUTPUTS = "ShortOutputs"
    BATCH1_OFFLINE = "Batch1Offline"
    DOMAIN_WITHOUT_HEAD = "DomainWithoutHead"


class Finding(StrEnum):
    HOLDS = "holds"  # do not speculate for this reason
    CLEAR = "clear"  # measured or described, and not a reason
    UNKNOWN = "unknown"  # not enough data to say


@dataclass(frozen=True, slots=True)
class Suitability:
    condition: Condition
    finding: Finding
    reason: str
    evidence: dict[str, float | str] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        return self.finding is Finding.HOLDS


def output_length(
    lengths: Buckets | None,
    *,
    min_mean_tokens: float = MIN_OUTPUT_TOKENS,
    min_requests: float = MIN_REQUESTS,
) -> Suitability:
    """Short outputs from the live `vllm:request_generation_tokens` histogram of the window."""
    cond = Condition.SHORT_OUTPUTS
    if lengths is None:
        return Suitability(cond, Finding.UNKNOWN, "output lengths not measured in the window")
    bad = histogram.problem(lengths)
    if bad is not None:
        return Suitability(cond, Finding.UNKNOWN, f"output-length histogram unusable: {bad}")
    n = lengths.total
    if n < min_requests:
        return Suitability(
            cond,
            Finding.UNKNOWN,
            f"{n:.0f} finished requests, fewer than the {min_requests:.0f} needed to judge "
            f"output lengths",
            {"requests": n},
        )
    mean = lengths.sum / n if math.isfinite(lengths.sum) else math.nan
    median = histogram.quantile(0.5, lengths)
    lo, hi = histogram.bracket(0.5, lengths)
    ev: dict[str, float | str] = {
        "requests": n,
        "mean_output_tokens": mean,
        "median_output_tokens": median,
        "median_bucket_lo": lo,
        "median_bucket_hi": hi,
        "min_mean_tokens": min_mean_tokens,
    }
    if not math.isfinite(mean):
        return Suitability(cond, Finding.UNKNOWN, "output-length histogram has no sum", ev)
    text = (
        f"requests generate {mean:.0f} tokens on average (median in ({lo:g}, {hi:g}], "
        f"{n:.0f} requests)"
    )
    if mean < min_mean_tokens:
        return Suitability(
            cond,
            Finding.HOLDS,
            f"outputs too short to pay: {text}, under {min_mean_tokens:.0f}; the draft's cost "
            f"is paid for a handful of decode steps",
            ev,
        )
    return Suitability(cond, Finding.CLEAR, f"outputs long enough: {text}", ev)
