"""What really happened in a recording, and how a policy's decisions compare with it.

A simulator recording carries, per snapshot, what each pod was set to do. For one decision
unit (all slices for combined aggregation, one slice for perSlice) the *true alpha* is the
traffic-weighted mean over its slices of the alpha the slice's canary pods were set to
converge to (``expected_alpha``: the scenario's slice alpha plus the pod's offset); a slice's
weight is the generation-token rate its canary and baseline pods really produced in their
last tick (running requests x tokens per step / step time), the same quantity the core's
weights measure from counters.

A *true latency regression* on a slice means a canary pod really ran slower than its
baseline: its verify passes split while the baseline's did not (the simulator's P99
mechanism: past the token budget the passes serialise), or its mean time per output token
exceeded the baseline's by more than ``maxRegressionRatio``. It is a heuristic on the
simulator's ground truth, stated as such in reports.

Scoring:

* an *episode* starts when the true alpha crosses below ``disableBelow`` and ends when it is
  back at or above it. If speculation was on when it started, the *detection delay* is the
  time to the first disable decided in the episode or within one window after it (data lags
  the truth by up to a window); no such disable is a *miss*.
* a *false disable* is a disable while the true alpha stayed at or above ``disableBelow`` over
  the whole window the decision was judged on, with no true latency regression in it.
* a *false enable* is an enable (a probe included) while the true alpha was below
  ``disableBelow``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alphagate.core.model import Action
from alphagate_lab.report import Point
from alphagate_lab.sim.truth import PodTruth, Truth

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class TruthSample:
    """A unit's truth at one snapshot. `alpha` is NaN when no selected canary pod existed."""

    t: float
    alpha: float
    latency_regressed: bool
    slices: Mapping[str, float]


def _rate(p: PodTruth) -> float:
    if not p.ready or p.mean_step <= 0:
        return 0.0
    return p.batch * max(p.tokens_per_step, 1.0) / p.mean_step


def unit_truth(
    t: float,
    truth: Truth,
    slices: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    *,
    max_regression_ratio: float,
) -> TruthSample:
    """The truth of one unit; `slices` maps each policy slice to its (canary, baseline) pods."""
    alphas: dict[str, float] = {}
    weights: dict[str, float] = {}
    regressed = False
    for name, (canary, baseline) in slices.items():
        c = [truth.pods[p] for p in canary if p in truth.pods]
        b = [truth.pods[p] for p in baseline if p in truth.pods]
        ready_c = [p for p in c if p.ready] or c
        if ready_c:
            alphas[name] = math.fsum(p.expected_alpha for p in ready_c) / len(ready_c)
            weights[name] = math.fsum(_rate(p) for p in (*c, *b))
        serving_b = [p for p in b if p.ready and p.time_per_token > 0]
        serving_c = [p for p in c if p.ready and p.time_per_token > 0]
        if serving_b and serving_c:
            base_passes = max(p.passes for p in serving_b)
            base_tpt = math.fsum(p.time_per_token for p in serving_b) / len(serving_b)
            for p in serving_c:
                if p.passes > base_passes or p.time_per_token > base_tpt * (
                    1.0 + max_regression_ratio
                ):
                    regressed = True
    if not alphas:
        return TruthSample(t, math.nan, regressed, {})
    total = math.fsum(weights.values())
    if len(alphas) == 1:
        alpha = next(iter(alphas.values()))
    elif total > 0:
        alpha = math.fsum(alphas[n] * weights[n] for n in alphas) / total
    else:
        alpha = math.nan  # no traffic yet: the mix, hence the combined alpha, is undefined
    return TruthSample(t, alpha, regressed, alphas)


# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True, slots=True)
class Episode:
    """A stretch where the true alpha was below the gate, and whether the policy caught it."""

    start: float
    end: float | None  # None: still below at the end of the run
    speculating_at_start: bool
    disabled_at: float | None
    min_alpha: float

    @property
    def delay(self) -> float | None:
        if self.disabled_at is None or not self.speculating_at_start:
            return None
        return self.disabled_at - self.start

    @property
    def missed(self) -> bool:
        return self.speculating_at_start and self.disabled_at is None

    def to_json(self) -> dict[str, object]:
        return {
            "start_t": self.start,
            "end_t": self.end,
            "min_true_alpha": round(self.min_alpha, 4),
            "speculating_at_start": self.speculating_at_start,
            "disabled_t": self.disabled_at,
            "detection_delay_seconds": self.delay,
            "missed": self.missed,
        }


@dataclass(frozen=True, slots=True)
class FalseFlip:
    t: float
    action: str
    true_alpha: float
    why: str

    def to_json(self) -> dict[str, object]:
        return {
            "t": self.t,
            "action": self.action,
            "true_alpha": round(self.true_alpha, 4),
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Score:
    episodes: tuple[Episode, ...]
    false_flips: tuple[FalseFlip, ...]

    @property
    def delays(self) -> list[float]:
        return [e.delay for e in self.episodes if e.delay is not None]

    @property
    def false_disables(self) -> int:
        return sum(1 for f in self.false_flips if f.action == Action.DISABLE.value)

    @property
    def false_enables(self) -> int:
        return sum(1 for f in self.false_flips if f.action == Action.ENABLE.value)

    def to_json(self) -> dict[str, object]:
        delays = self.delays
        return {
            "episodes": [e.to_json() for e in self.episodes],
            "detection_delays_seconds": delays,
            "max_detection_delay_seconds": max(delays) if delays else None,
            "missed": sum(1 for e in self.episodes if e.missed),
            "false_flips": len(self.false_flips),
            "false_disables": self.false_disables,
            "false_enables": self.false_enables,
            "false_flip_details": [f.to_json() for f in self.false_flips],
        }


def _at(samples: Sequence[TruthSample], t: float) -> TruthSample | None:
    """The last sample at or before `t`."""
    best = None
    for s in samples:
        if s.t <= t + _EPS:
            best = s
        else:
            break
    return best


def _speculating(points: Sequence[Point], t: float, initial: bool) -> bool:
    """What the policy ran just before time `t` (the last decision strictly before it)."""
    on = initial
    for p in points:
        if p.t < t - _EPS:
            on = p.speculation_on
        else:
            break
    return on


def episodes(
    samples: Sequence[TruthSample],
    points: Sequence[Point],
    *,
    gate: float,
    window: float,
    initial_on: bool,
) -> list[Episode]:
    """Stretches of true alpha below `gate`, each matched with the disable that caught it."""
    out: list[Episode] = []
    start: float | None = None
    low = math.inf
    spans: list[tuple[float, float | None, float]] = []
    for s in samples:
        if math.isnan(s.alpha):
            continue
        below = s.alpha < gate
        if below and start is None:
            start, low = s.t, s.alpha
        elif below and start is not None:
            low = min(low, s.alpha)
        elif not below and start is not None:
            spans.append((start, s.t, low))
            start, low = None, math.inf
    if start is not None:
        spans.append((start, None, low))
    disables = [p.t for p in points if p.action == Action.DISABLE.value]
    for begin, end, low in spans:
        on = _speculating(points, begin, initial_on)
        limit = math.inf if end is None else end + window
        hit = next((t for t in disables if begin - _EPS <= t <= limit + _EPS), None)
        out.append(Episode(begin, end, on, hit if on else None, low))
    return out


def false_flips(
    samples: Sequence[TruthSample],
    points: Sequence[Point],
    *,
    gate: float,
    window: float,
) -> list[FalseFlip]:
    out: list[FalseFlip] = []
    for p in points:
        if p.action == Action.ENABLE.value:
            s = _at(samples, p.t)
            if s is not None and not math.isnan(s.alpha) and s.alpha < gate:
                out.append(
                    FalseFlip(
                        p.t, p.action, s.alpha, f"enabled while the true alpha was below {gate:g}"
                    )
                )
        elif p.action == Action.DISABLE.value:
            span = [s for s in samples if p.t - window - _EPS <= s.t <= p.t + _EPS]
            known = [s for s in span if not math.isnan(s.alpha)]
            if not known:
                continue
            if all(s.alpha >= gate for s in known) and not any(s.latency_regressed for s in span):
                out.append(
                    FalseFlip(
                        p.t,
                        p.action,
                        min(s.alpha for s in known),
                        f"disabled while the true alpha stayed >= {gate:g} over the window "
                        "and no true latency regression",
                    )
                )
    return out


def score(
    samples: Sequence[TruthSample],
    points: Sequence[Point],
    *,
    gate: float,
    window: float,
    initial_on: bool,
) -> Score:
    return Score(
        tuple(episodes(samples, points, gate=gate, window=window, initial_on=initial_on)),
        tuple(false_flips(samples, points, gate=gate, window=window)),
    )
