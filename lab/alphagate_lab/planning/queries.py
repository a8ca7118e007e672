"""The PromQL a person runs at each stage of the rollout, with vLLM's exact metric names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from alphagate import vllm

WINDOW: Final = "5m"


def selector(labels: dict[str, str], extra: dict[str, str]) -> str:
    """`{a="b",...}` from a pool's labels over shared ones (e.g. the namespace)."""
    merged = {**extra, **labels}
    return "{" + ",".join(f'{k}="{v}"' for k, v in merged.items()) + "}"


@dataclass(frozen=True, slots=True)
class Queries:
    """The PromQL a person runs at each stage, for one set of series labels."""

    alpha: str
    acceptance_length: str
    per_position: str
    p99_per_token: str
    p99_per_step: str
    p99_ttft: str
    tokens_per_second: str
    running: str
    mean_output_tokens: str


def queries(selector: str, window: str = WINDOW) -> Queries:
    """PromQL with vLLM's exact names (alphagate.vllm); `selector` is `{a="b",...}`."""
    sel, w = selector, window

    def inc(name: str) -> str:
        return f"sum(increase({name}{sel}[{w}]))"

    def q99(family: str) -> str:
        return f"histogram_quantile(0.99, sum by (le) (rate({family}{vllm.BUCKET}{sel}[{w}])))"

    return Queries(
        alpha=f"{inc(vllm.SPEC_ACCEPTED)} / ({inc(vllm.SPEC_DRAFT_TOKENS)} > 0)",
        acceptance_length=f"1 + {inc(vllm.SPEC_ACCEPTED)} / ({inc(vllm.SPEC_DRAFTS)} > 0)",
        per_position=(
            f"sum by ({vllm.POSITION}) (increase({vllm.SPEC_PER_POS}{sel}[{w}])) "
            f"/ on () group_left () ({inc(vllm.SPEC_DRAFTS)} > 0)"
        ),
        p99_per_token=q99(vllm.TPOT),
        p99_per_step=q99(vllm.ITL),
        p99_ttft=q99(vllm.TTFT),
        tokens_per_second=f"sum(rate({vllm.GENERATION_TOKENS}{sel}[{w}]))",
        running=f"sum({vllm.RUNNING}{sel})",
        mean_output_tokens=(
            f"sum(increase({vllm.GENERATION_TOKENS}{sel}[1h])) "
            f"/ (sum(increase({vllm.REQUEST_SUCCESS}{sel}[1h])) > 0)"
        ),
    )
