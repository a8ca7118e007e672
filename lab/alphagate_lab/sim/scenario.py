"""Scenario files: a simulated fleet, its traffic slices and a timeline of changes.

A scenario is YAML validated by the pydantic models below. Durations are seconds or strings
such as ``90s``, ``5m``, ``1h30m``. Example::

    name: steady-chat
    seed: 7
    duration: 1h
    traffic: {rate: 40}            # requests/s over all slices, split by share
    slices:
      chat: {share: 1.0, alpha: 0.7, output_tokens: 256}
    pools:                          # one Deployment each; a pod serves its pool's slice
      - {name: chat-baseline, role: baseline, slice: chat, replicas: 3}
      - name: chat-canary
        role: canary
        slice: chat
        replicas: 1
        speculative_config: {method: eagle3, num_speculative_tokens: 5}
    timeline:
      - {at: 10m, slices: {chat: {alpha: 0.45}}, note: drafts stop matching}
      - {at: 20m, pools: {chat-canary: {speculative_config: null}}}   # restart, spec off
      - {at: 30m, ramp: 2h, slices: {chat: {alpha: 0.7}}}           # a drift, not a step
    stalls: {rate: 1, duration: 30s, slowdown: 4}  # per pod (a pool may override)
    prometheus: {scrape_interval: 15s, lag: 0s}    # the path a Prometheus consumer sees

Within a slice, each ready pod gets an equal part of the slice's arrivals, so a pool's share
of its slice's traffic is its share of the slice's ready replicas. A slice with
``concurrency`` is closed loop instead: that many clients per pod. Output lengths are
log-normal (``output_tokens`` is the median, ``output_sigma`` the spread) and each request
keeps its own acceptance (``request_spread``); ``scenarios/README.md`` documents the defaults.
``load_scenario`` turns every problem into a ScenarioError naming the file, the line, the
field path and the reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from alphagate import yamlpos
from alphagate.errors import ScenarioError
from alphagate_lab.sim.decode import DecodeParams, Stalls
from alphagate_lab.sim.pod import spec_config_from_dict

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$"
)


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like ``90s``, ``5m``, ``1h30m``, ``2.5h``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m or 1h, got a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            m = _DURATION.match(text)
            if not text or m is None or not any(m.groups()):
                raise ValueError(
                    f"expected a duration such as 30s, 5m or 1h30m, got {value!r}"
                ) from None
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            return h * 3600 + mi * 60 + s
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
        return seconds
    raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {type(value).__name__}")


Duration = Annotated[float, BeforeValidator(parse_duration)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DecodeSpec(_Strict):
    """Overrides of the engine cost model (see alphagate_lab.sim.model)."""

    t_base: float = Field(default=DecodeParams.t_base, gt=0)
    t_token: float = Field(default=DecodeParams.t_token, ge=0)
    t_draft: float = Field(default=DecodeParams.t_draft, ge=0)
    t_draft_token: float = Field(default=DecodeParams.t_draft_token, ge=0)
    token_budget: int = Field(default=DecodeParams.token_budget, ge=1)
    max_num_seqs: int = Field(default=DecodeParams.max_num_seqs, ge=1)
    jitter: float = Field(default=DecodeParams.jitter, ge=0, le=2)
    prefill_per_token: float = Field(default=DecodeParams.prefill_per_token, ge=0)

    def params(self) -> DecodeParams:
        return DecodeParams(**self.model_dump())


class SliceSpec(_Strict):
    """A traffic slice: a routable pool of requests with its own acceptance."""

    share: float = Field(default=1.0, ge=0)
    alpha: Fraction
    alpha_noise: float = Field(default=0.01, ge=0, le=0.5)
    decay: float = Field(default=0.15, ge=0, le=5)
    draft_fill: float = Field(default=1.0, gt=0, le=1)
    request_spread: float = Field(default=6.0, gt=0)
    prompt_tokens: int = Field(default=512, ge=1)
    output_tokens: int = Field(default=256, ge=2)
    output_sigma: float = Field(default=1.0, ge=0, le=3)
    max_output_tokens: int = Field(default=8192, ge=2)
    concurrency: int | None = Field(default=None, ge=0)
    arrival_rate: float | None = Field(default=None, ge=0)


class SlicePatch(_Strict):
    """Fields a timeline event may change on a slice (unset fields keep their value)."""

    share: float | None = Field(default=None, ge=0)
    alpha: Fraction | None = None
    alpha_noise: float | None = Field(default=None, ge=0, le=0.5)
    decay: float | None = Field(default=None, ge=0, le=5)
    draft_fill: float | None = Field(default=None, gt=0, le=1)
    request_spread: float | None = Field(default=None, gt=0)
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=2)
    output_sigma: float | None = Field(default=None, ge=0, le=3)
    max_output_tokens: int | None = Field(default=None, ge=2)
    concurrency: int | None = Field(default=None, ge=0)
    arrival_rate: float | None = Field(default=None, ge=0)


class StallSpec(_Strict):
    """Stall episodes (GC, preemption, a noisy neighbour), drawn for each pod on its own:
    ``rate`` per hour, each about ``duration`` long (log-normal), steps ``slowdown`` x slower."""

    rate: float = Field(default=1.0, ge=0, le=3600, description="episodes per hour per pod")
    duration: Duration = 30.0
    slowdown: float = Field(default=4.0, ge=1, le=100)

    def params(self) -> Stalls:
        return Stalls(rate_per_hour=self.rate, duration=self.duration, slowdown=self.slowdown)


class PrometheusSpec(_Strict):
    """How Prometheus sees the pods: one scrape every ``scrape_interval``, and a sample is
    visible to queries ``lag`` after it was scraped (rule evaluation, remote storage)."""

    scrape_interval: Duration = 15.0
    lag: Duration = 0.0

    @field_validator("scrape_interval")
    @classmethod
    def _interval_range(cls, v: float) -> float:
        if not 1.0 <= v <= 600.0:
            raise ValueError("scrape_interval must be between 1s and 10m")
        return v


class Traffic(_Strict):
    rate: float = Field(default=20.0, ge=0, description="requests per second over all slices")


def _check_spec_config(value: object) -> object:
    if value is not None:
        try:
            spec_config_from_dict(value, "")
        except ScenarioError as exc:
            raise ValueError(str(exc)) from None
    return value


SpecConfigField = Annotated[dict[str, Any] | None, BeforeValidator(_check_spec_config)]


class PoolSpec(_Strict):
    """A Deployment: ``replicas`` pods serving one slice, speculating iff a config is given."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = Field(default="default", min_length=1)
    role: Literal["canary", "baseline"]
    slice: str
    replicas: int = Field(default=1, ge=0, le=1000)
    speculative_config: SpecConfigField = None
    extra_args: list[str] = Field(default_factory=list)
    load_time: Duration = 30.0
    latency_scale: float = Field(default=1.0, gt=0)
    alpha_offset: float = Field(default=0.0, ge=-1, le=1)
    alpha_offset_spread: float = Field(default=0.0, ge=0, le=0.5)
    decode: DecodeSpec | None = None
    stalls: StallSpec | None = None


class PoolPatch(_Strict):
    """Fields a timeline event may change on a pool. ``speculative_config: null`` turns it off."""

    replicas: int | None = Field(default=None, ge=0, le=1000)
    speculative_config: SpecConfigField = None
    latency_scale: float | None = Field(default=None, gt=0)
    alpha_offset: float | None = Field(default=None, ge=-1, le=1)


class Event(_Strict):
    """Changes applied at simulated time ``at``."""

    at: Duration
    note: str = ""
    ramp: Duration = Field(
        default=0.0, description="move the numbers it sets linearly over this long (a drift)"
    )
    traffic: Traffic | None = None
    slices: dict[str, SlicePatch] = Field(default_factory=dict)
    pools: dict[str, PoolPatch] = Field(default_factory=dict)
    restart: list[str] = Field(default_factory=list, description="pools whose pods restart")


class Scenario(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = 0
    duration: Duration = 3600.0
    tick: Duration = 1.0
    start_epoch: float = Field(default=1_800_000_000.0, ge=0)
    model_name: str = Field(default="llama-3.1-8b-instruct", min_length=1)
    traffic: Traffic = Traffic()
    decode: DecodeSpec = DecodeSpec()
    stalls: StallSpec = StallSpec()
    prometheus: PrometheusSpec = PrometheusSpec()
    slices: dict[str, SliceSpec] = Field(min_length=1)
    pools: list[PoolSpec] = Field(default_factory=list)
    timeline: list[Event] = Field(default_factory=list)

    @field_validator("tick")
    @classmethod
    def _tick_positive(cls, v: float) -> float:
        if not 0.05 <= v <= 300:
            raise ValueError("tick must be between 0.05s and 300s")
        return v


# --- loading with precise errors ------------------------------------------------------------


def _path_str(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _where(source: str, root: yaml.Node | None, loc: tuple[int | str, ...]) -> str:
    line = yamlpos.line_of(root, loc)
    return f"{source}:{line}" if line else source


def _cross_check(s: Scenario, source: str, root: yaml.Node | None) -> None:
    def fail(loc: tuple[int | str, ...], reason: str) -> None:
        raise ScenarioError(f"{_where(source, root, loc)}: {_path_str(loc)}: {reason}")

    names: set[str] = set()
    for i, pool in enumerate(s.pools):
        if pool.slice not in s.slices:
            fail(("pools", i, "slice"), f"unknown slice {pool.slice!r} (known: {sorted(s.slices)})")
        if pool.name in names:
            fail(("pools", i, "name"), f"duplicate pool name {pool.name!r}")
        names.add(pool.name)
    for name, sl in s.slices.items():
        if sl.concurrency is not None and sl.arrival_rate is not None:
            fail(
                ("slices", name), "give either concurrency (closed loop) or arrival_rate, not both"
            )
    last = 0.0
    current = {name: sl.model_dump() for name, sl in s.slices.items()}
    for i, ev in enumerate(s.timeline):
        if ev.at < last:
            fail(("timeline", i, "at"), f"events must be in time order ({ev.at:g}s < {last:g}s)")
        last = ev.at
        for name, patch in ev.slices.items():
            if name not in s.slices:
                fail(("timeline", i, "slices", name), f"unknown slice {name!r}")
            merged = {**current[name], **patch_fields(patch)}
            try:
                SliceSpec.model_validate(merged)
            except ValidationError as exc:
                err = exc.errors()[0]
                fail(("timeline", i, "slices", name, *err["loc"]), err["msg"])
            if merged["concurrency"] is not None and merged["arrival_rate"] is not None:
                fail(
                    ("timeline", i, "slices", name),
                    "after this event the slice has both concurrency and arrival_rate",
                )
            current[name] = merged
        for name in [*ev.pools, *ev.restart]:
            if name not in names:
                key = "pools" if name in ev.pools else "restart"
                loc: tuple[int | str, ...] = ("timeline", i, key)
                fail((*loc, name) if key == "pools" else loc, f"unknown pool {name!r}")


def patch_fields(patch: BaseModel) -> dict[str, Any]:
    """The fields a patch sets explicitly (an explicit null counts: it clears the field)."""
    return {name: getattr(patch, name) for name in patch.model_fields_set}


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Validate scenario YAML text; ``source`` names it in errors."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{source}{line}: invalid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: (top level): expected a mapping of scenario fields")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            lines.append(f"{_where(source, root, loc)}: {_path_str(loc)}: {msg}")
        raise ScenarioError("\n".join(lines)) from exc
    _cross_check(scenario, source, root)
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc.strerror or exc}") from exc
    return parse_scenario(text, str(p))
