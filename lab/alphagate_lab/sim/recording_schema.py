"""What a recording line may hold, checked before anything is built from it.

A recording is a file someone hands `alphagate backtest`: a NaN where a count belongs, an
`Infinity` restart count, a histogram with a bucket missing, a list where a number belongs, a
`spec_k` of a billion, a line nested ten thousand deep or a scenario pool of a billion replicas
each became a traceback (or a hang) somewhere in the backtest. Here every field has its type and
bounds (finite numbers, non-negative counts, bucket lists that fit the histogram's bounds), so a
bad line is one `ScenarioError` naming the file, the line and the field.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from alphagate import vllm

MAX_COUNT = 2**63
MAX_PODS = 100_000
MAX_POSITIONS = 256
MAX_REPLICAS = 10_000

Finite = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Gauge = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
Text = Annotated[str, Field(max_length=4096)]


class _Line(BaseModel):
    """Strict: a string is not a number, a bool is not a count; unknown keys are ignored (a
    newer writer may add some)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Hist(_Line):
    buckets: list[Count]
    sum: Finite
    count: Count
    # Written only for a layout other than vLLM's default (--custom-histogram-buckets).
    bounds: list[Finite] | None = None

    @model_validator(mode="after")
    def _increasing(self) -> Hist:
        if self.bounds is not None and any(a >= b for a, b in pairwise(self.bounds)):
            raise ValueError("histogram bounds must increase")
        return self


class Pod(_Line):
    labels: dict[Text, Text]
    model_name: Text
    phase: Literal["loading", "ready", "stopped"]
    started: Finite
    restarts: Count = 0
    spec_k: Annotated[int, Field(ge=1, lt=MAX_POSITIONS)] | None
    counters: dict[Text, Count]
    per_pos: Annotated[list[Count], Field(max_length=MAX_POSITIONS)]
    success: dict[Text, Count]
    gauges: dict[Text, Gauge]
    histograms: dict[Text, Hist]

    @model_validator(mode="after")
    def _fits(self) -> Pod:
        if "pod" not in self.labels:
            raise ValueError("a pod needs a `pod` label (its name)")
        for name, hist in self.histograms.items():
            default = vllm.HISTOGRAM_BUCKETS.get(name)
            if default is None:
                raise ValueError(f"unknown histogram {name!r}")
            bounds = hist.bounds if hist.bounds is not None else default
            if len(hist.buckets) != len(bounds) + 1:
                raise ValueError(
                    f"histogram {name} has {len(hist.buckets)} buckets, its bounds need "
                    f"{len(bounds) + 1} (the last is +Inf)"
                )
        return self


class PodTruthLine(_Line):
    slice: Text
    role: Text
    ready: bool
    k: Count
    expected_alpha: Finite
    alpha: Finite
    batch: Finite
    passes: Count
    mean_step: Finite
    tokens_per_step: Finite
    time_per_token: Finite
    speculating: bool = False
    batch_alpha: Finite = 0.0
    tpot_p99: Finite = 0.0
    stalled: Finite = 0.0
    running: Count = 0
    generated_tokens: Count = 0


class SliceTruthLine(_Line):
    alpha: Finite
    share: Finite
    arrival_rate: Finite
    concurrency: Count | None
    ready_pods: Count
    pods_alpha: Finite | None = None
    generated_tokens: Count = 0
    speculating_pods: Count = 0


class Truth(_Line):
    slices: dict[Text, SliceTruthLine]
    pods: dict[Text, PodTruthLine]


class Snapshot(_Line):
    type: Literal["snapshot"]
    t: Finite
    time: Finite
    pods: Annotated[list[Pod], Field(max_length=MAX_PODS)]
    truth: Truth


class Event(_Line):
    type: Literal["event"]
    t: Finite
    kind: Text
    message: Annotated[str, Field(max_length=65536)]
    pod: Text


class PoolLine(BaseModel):
    """The parts of a scenario pool the backtest reads (to know pods that appear later)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    name: Text
    namespace: Text = "default"
    role: Text = ""
    slice: Text = ""
    replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] | None = 1


class ScenarioLine(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    pools: Annotated[list[PoolLine], Field(max_length=10_000)] = []


class Header(_Line):
    type: Literal["header"]
    format: str
    version: int
    scenario: Text = ""
    scenario_spec: ScenarioLine | None = None
    seed: int | None = None
    tick: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    interval: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    scrape_interval: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    prometheus_lag: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    start_epoch: Finite = 0.0


def problem(exc: ValidationError) -> str:
    """The first problem of a validation error, on one line: `field.path: what (got X)`."""
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    got = first.get("input")
    shown = repr(got)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = str(first.get("msg", "")).removeprefix("Value error, ")
    if first.get("type") in ("missing", "model_type") or isinstance(got, dict | list):
        return f"{where or '<line>'}: {message}{more}"
    return f"{where or '<line>'}: {message} (got {shown}){more}"


def checked(model: type[_Line], obj: Any) -> dict[str, Any]:
    """`obj` validated by `model`, as plain data (raises ValidationError)."""
    return model.model_validate(obj).model_dump()


__all__ = ["Event", "Header", "Snapshot", "checked", "problem"]
