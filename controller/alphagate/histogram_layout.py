"""The latency bucket layout the plan writes into the pods it proposes.

vLLM's default per-token bounds (… 0.025, 0.05, 0.075, 0.1 …) are 1.33-2.5x wide where chat
models live, so a P99 guard cannot tell a +10% regression from none (core/resolution.py).
vLLM 0.32 takes `--custom-histogram-buckets '{"inter_token_latency": [...]}'`; that family
sets both `vllm:inter_token_latency_seconds` and `vllm:request_time_per_output_token_seconds`.
The plan proposes ~10% geometric steps from half the expected median to five times the
expected P99 per token, in the pod template the baseline and the canary share (the canary is
made from the baseline's template; not in speculativeConfig, which only the canary carries):
both pools must count in the same bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from alphagate import vllm
from alphagate.core import resolution

FLAG: Final = "--custom-histogram-buckets"
FAMILY: Final = "inter_token_latency"
# The family sets two histograms: per-step ITL and per-request time per output token.
HISTOGRAMS: Final = (vllm.ITL, vllm.TPOT)
# Without a measured baseline: medians of 8-35 ms per token, P99s up to 60 ms (4 ms-0.3 s).
DEFAULT_MEDIAN_SECONDS: Final = 0.008
DEFAULT_P99_SECONDS: Final = 0.060


@dataclass(frozen=True, slots=True)
class Layout:
    """A `--custom-histogram-buckets` layout for the per-token histograms."""

    bounds: tuple[float, ...]
    median_seconds: float
    p99_seconds: float
    step: float

    @property
    def value(self) -> str:
        return json.dumps({FAMILY: list(self.bounds)}, separators=(",", ":"))

    @property
    def args(self) -> tuple[str, str]:
        return (FLAG, self.value)

    @property
    def series_per_pod(self) -> int:
        """Series the two histograms cost per pod and label set (model_name, engine): one per
        bound, +Inf, _sum and _count, each."""
        return len(HISTOGRAMS) * (len(self.bounds) + 3)

    @property
    def extra_series_per_pod(self) -> int:
        """Series beyond vLLM's default layout, per pod and label set."""
        return len(HISTOGRAMS) * (len(self.bounds) - len(vllm.ITL_BUCKETS))


def layout(
    median_seconds: float | None = None, p99_seconds: float | None = None, margin: float = 0.10
) -> Layout:
    """The layout for a model at `median_seconds` per token with `p99_seconds` at P99 (the
    defaults cover 8-35 ms medians); steps of `margin`, at most 10%. ValueError on values
    that are not positive and finite."""
    median = DEFAULT_MEDIAN_SECONDS if median_seconds is None else median_seconds
    p99 = DEFAULT_P99_SECONDS if p99_seconds is None else p99_seconds
    step = min(margin, 0.10) if margin > 0 else 0.10
    return Layout(resolution.resolving_layout(median, p99, step), median, max(p99, median), step)
