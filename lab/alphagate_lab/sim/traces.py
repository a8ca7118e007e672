"""Real request traces replayed as a slice's traffic: arrivals and token counts from the file.

A trace is a list of requests (arrival time, prompt tokens, output tokens), such as the two
Azure LLM inference traces vendored under ``traces/azure-llm-2023`` (one hour each; see their
README). A slice with ``trace`` replays one: the trace's clock starts ``offset`` seconds in
(drawn from the fleet's seed unless the scenario gives it), loops at its end for longer runs,
and ``scale`` thins it (keep each request with that probability, seeded) or superposes copies
shifted by a fraction of the span (``scale`` > 1), so its bursts and idle gaps stay real.

What a trace does not carry (each request's acceptance, step times, the output's per-token
timing) comes from the simulator's model; the fleet's router deals each request to one ready
pod of the slice (``alphagate_lab.sim.router``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from alphagate.errors import ScenarioError

FloatArray = npt.NDArray[np.float64]

TRACES: dict[str, str] = {
    "azure-conv-2023": "azure-llm-2023/conv.csv",
    "azure-code-2023": "azure-llm-2023/code.csv",
}
"""Traces shipped with the simulator, by name (CC-BY 4.0, see traces/README.md)."""

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Trace:
    """Requests of one trace, sorted by arrival: seconds since the first, and token counts.

    ``span`` is the loop length: the last arrival plus one mean gap, so a looped trace keeps
    its rate."""

    name: str
    arrival: FloatArray
    prompt: FloatArray
    output: FloatArray
    span: float

    @property
    def rate(self) -> float:
        return self.arrival.size / self.span


def _parse(text: str, source: str) -> Trace:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip().split(",")[:3] != [
        "TIMESTAMP",
        "ContextTokens",
        "GeneratedTokens",
    ]:
        raise ScenarioError(
            f"{source}: not a request trace: the first line must be "
            "TIMESTAMP,ContextTokens,GeneratedTokens"
        )
    stamps: list[str] = []
    prompt: list[float] = []
    output: list[float] = []
    for i, line in enumerate(lines[1:], start=2):
        parts = line.split(",")
        try:
            stamps.append(parts[0].strip())
            prompt.append(float(parts[1]))
            output.append(float(parts[2]))
        except (IndexError, ValueError):
            raise ScenarioError(f"{source}:{i}: expected TIMESTAMP,int,int, got {line!r}") from None
    if len(stamps) < 2:
        raise ScenarioError(f"{source}: a trace needs at least two requests")
    try:
        ns = np.array(stamps, dtype="datetime64[ns]").astype(np.int64)
    except ValueError as exc:
        raise ScenarioError(f"{source}: bad TIMESTAMP: {exc}") from None
    order = np.argsort(ns, kind="stable")
    t = (ns[order] - ns[order][0]).astype(np.float64) / 1e9
    p = np.asarray(prompt, dtype=np.float64)[order]
    o = np.asarray(output, dtype=np.float64)[order]
    if (p < 0).any() or (o < 0).any():
        raise ScenarioError(f"{source}: token counts cannot be negative")
    span = float(t[-1] + t[-1] / (t.size - 1))
    return Trace(source, t, np.maximum(p, 1.0), np.maximum(o, 1.0), span)


@functools.lru_cache(maxsize=8)
def load_trace(name: str) -> Trace:
    """A shipped trace by name (``TRACES``), or a CSV file by path, parsed once per process."""
    rel = TRACES.get(name)
    if rel is not None:
        text = (
            resources.files("alphagate_lab.sim")
            .joinpath("traces", *rel.split("/"))
            .read_text(encoding="utf-8")
        )
        trace = _parse(text, name)
        return Trace(name, trace.arrival, trace.prompt, trace.output, trace.span)
    path = Path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        known = ", ".join(TRACES)
        raise ScenarioError(
            f"trace {name!r}: neither a shipped trace ({known}) nor a readable file: "
            f"{exc.strerror or exc}"
        ) from None
    return _parse(text, str(path))


def seed_offset(trace: Trace, seed: int) -> float:
    """Where a seed starts in the trace: spread evenly over the span (golden-ratio steps)."""
    return float(((seed + 1) * _GOLDEN) % 1.0) * trace.span


class Replay:
    """One slice's replay of a trace: the requests arriving in a span of simulated time.

    ``scale`` < 1 keeps each request with that probability (drawn once per request of the
    loop, from ``seed``), > 1 adds shifted copies; the result is deterministic in the inputs.
    """

    def __init__(self, trace: Trace, *, offset: float, scale: float, seed: int) -> None:
        if scale <= 0:
            raise ScenarioError(f"trace {trace.name}: scale must be > 0, got {scale}")
        self.trace = trace
        self.offset = offset % trace.span
        copies = max(1, math.ceil(scale))
        rng = np.random.default_rng([seed, 0x7ACE])
        parts_t, parts_p, parts_o = [], [], []
        for c in range(copies):
            keep = min(1.0, scale - c)
            mask = rng.random(trace.arrival.size) < keep
            shift = (c * _GOLDEN * trace.span) % trace.span
            parts_t.append((trace.arrival[mask] + shift) % trace.span)
            parts_p.append(trace.prompt[mask])
            parts_o.append(trace.output[mask])
        t = np.concatenate(parts_t)
        order = np.argsort(t, kind="stable")
        self.arrival: FloatArray = t[order]
        self.prompt: FloatArray = np.concatenate(parts_p)[order]
        self.output: FloatArray = np.concatenate(parts_o)[order]

    @property
    def rate(self) -> float:
        """Requests per second, on average over a loop."""
        return self.arrival.size / self.trace.span

    def between(self, start: float, end: float) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Requests arriving in simulated [start, end): times (simulated seconds), prompt and
        output tokens, in arrival order (the trace loops)."""
        span = self.trace.span
        if end <= start:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        times: list[FloatArray] = []
        prompts: list[FloatArray] = []
        outputs: list[FloatArray] = []
        a = start + self.offset
        b = end + self.offset
        loop = math.floor(a / span)
        while loop * span < b:
            lo = max(a - loop * span, 0.0)
            hi = min(b - loop * span, span)
            i, j = np.searchsorted(self.arrival, [lo, hi], side="left")
            if j > i:
                times.append(self.arrival[i:j] + loop * span - self.offset)
                prompts.append(self.prompt[i:j])
                outputs.append(self.output[i:j])
            loop += 1
        if not times:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        return np.concatenate(times), np.concatenate(prompts), np.concatenate(outputs)
