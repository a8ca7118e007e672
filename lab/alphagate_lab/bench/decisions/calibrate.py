"""What a case looks like when healthy, measured on its own fleet: the numbers a regression, a
bucket layout and Flagger's fixed limit are set from.

One healthy hour of the case (no injected regression, vLLM's default buckets, seed 0) gives the
canary's and the baseline's exact time per output token of every finished request (the
engine's, not the histogram's sample) and the P99 request duration a team's dashboard would
show for the baseline (``histogram_quantile`` over the hour). From them:

* a **uniform** regression of factor f slows every canary step by the one factor that puts the
  canary's exact mean time per token at f x the baseline's (about
  ``f x mean(baseline) / mean(canary)``): the canary's tokens cost f x a baseline token's, on
  average and step by step, so speculation no longer pays and the regression is real on the
  mean the latency guard confirms on. Its P99 per token moves by the same step factor; over the
  baseline's P99 it lands at or above f (a speculating canary's per-token spread is wider than
  a plain pod's), reported beside the mean ratio. (Defining f on the P99 instead, as before,
  left a healthy speculating canary's mean about equal to the baseline's at "1.5x".)
* a **tail-only** one slows ``suite.TAIL_SHARE`` of the canary's requests by the factor that
  puts the mixture's P99 at f x the baseline's, solved on the measured distribution (the mean
  moves by about TAIL_SHARE x (factor - 1));
* both are then corrected twice on a slowed healthy hour (a slower pod holds more requests
  and steps slower still), so the ratio the run injects (uniform: the mean per token; tail:
  the P99) is f to within a few percent;
* the **geometric layout**: ~10% steps from half the lower median to five times the higher P99,
  then vLLM's coarser default bounds above, set on canary and baseline alike (what `plan`
  proposes for `--custom-histogram-buckets`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from alphagate import vllm
from alphagate.core import histogram
from alphagate.core.model import Buckets
from alphagate_lab.bench.decisions import suite
from alphagate_lab.sim.fleet import Fleet

SECONDS: Final = 3600.0
TICK: Final = 30.0
GEOMETRIC_STEP: Final = 0.10
CORRECTIONS: Final = 2


@dataclass(frozen=True)
class Healthy:
    """A case's healthy latency (seconds): per-token P99 and mean of each role, the canary's
    per-token sample, and the baseline's P99 request duration as its dashboard reads it."""

    p99_canary: float
    p99_baseline: float
    mean_canary: float
    mean_baseline: float
    median_canary: float
    median_baseline: float
    canary_tpot: tuple[float, ...]
    baseline_duration_p99: float  # over the hour, as a dashboard shows it
    minute_duration_p95: float  # P95 over a baseline pod's minutes of its 1-minute P99


def _key(case: suite.Case) -> suite.Case:
    """The healthy twin: the same fleet and traffic, no regression."""
    return replace(case, regression=None, policies=None, name=case.name + "~healthy")


@functools.lru_cache(maxsize=64)
def _measure(twin: suite.Case) -> Healthy:
    fleet = Fleet(twin.scenario(SECONDS / 3600.0), seed=0, tick=TICK)
    tpot: dict[str, list[float]] = {"canary": [], "baseline": []}
    minutes: list[float] = []
    last: dict[str, Buckets] = {}
    while fleet.now + TICK <= SECONDS + 1e-9:
        fleet.step()
        if fleet.now <= SECONDS / 6:  # let queues and batches settle
            continue
        for pod in fleet.pods.values():
            tpot[pod.spec.role].extend(pod.engine.finished_tpot.tolist())
        if round(fleet.now) % 60 == 0:
            minutes += _minute_p99s(fleet, last)
    c = np.asarray(tpot["canary"] or [math.nan])
    b = np.asarray(tpot["baseline"] or [math.nan])
    e2e: Buckets | None = None
    for snap in fleet.snapshot().pods:
        h = snap.histograms.get(vllm.E2E)
        if snap.labels["role"] != "baseline" or h is None:
            continue
        mine = Buckets((*h.bounds, math.inf), tuple(float(x) for x in h.buckets), h.sum)
        e2e = mine if e2e is None else histogram.merge(e2e, mine)
    return Healthy(
        p99_canary=float(np.quantile(c, 0.99)),
        p99_baseline=float(np.quantile(b, 0.99)),
        mean_canary=float(c.mean()),
        mean_baseline=float(b.mean()),
        median_canary=float(np.median(c)),
        median_baseline=float(np.median(b)),
        canary_tpot=tuple(float(x) for x in np.sort(c)),
        baseline_duration_p99=histogram.quantile(0.99, e2e) if e2e is not None else math.nan,
        minute_duration_p95=float(np.quantile(minutes, 0.95)) if minutes else math.nan,
    )


def _minute_p99s(fleet: Fleet, last: dict[str, Buckets]) -> list[float]:
    """Each baseline pod's P99 request duration over the last minute (histogram_quantile on
    the increase of its buckets), skipping minutes with no finished request."""
    out = []
    for snap in fleet.snapshot().pods:
        h = snap.histograms.get(vllm.E2E)
        if snap.labels["role"] != "baseline" or h is None:
            continue
        now = Buckets((*h.bounds, math.inf), tuple(float(x) for x in h.buckets), h.sum)
        before = last.get(snap.name)
        last[snap.name] = now
        inc = histogram.delta(before, now) if before is not None else None
        if inc is not None and inc.total > 0:
            q = histogram.quantile(0.99, inc)
            if math.isfinite(q):
                out.append(q)
    return out


def healthy(case: suite.Case) -> Healthy:
    """The case's healthy latency (cached per process)."""
    twin = _key(case)
    h = _measure(twin)
    _TWINS.setdefault(h, twin)
    return h


def uniform_scale(h: Healthy, factor: float) -> float:
    """The step slowdown that puts the canary's mean time per token at ``factor`` x the
    baseline's: first from the healthy means, then corrected on the slowed fleet itself (a
    slower pod holds more requests, and a larger batch steps slower still)."""
    return _corrected(h, "uniform", factor)


def _first_uniform(h: Healthy, factor: float) -> float:
    return factor * h.mean_baseline / h.mean_canary


def tail_factor(h: Healthy, factor: float, share: float = suite.TAIL_SHARE) -> float:
    """How much slower ``share`` of the canary's requests must run so that the mixture's P99
    per token is ``factor`` x the baseline's: solved on the measured distribution, then
    corrected on the slowed fleet itself."""
    return _corrected(h, "tail", factor)


def _first_tail(h: Healthy, factor: float, share: float = suite.TAIL_SHARE) -> float:
    x = np.asarray(h.canary_tpot)
    target = factor * h.p99_baseline

    def above(m: float) -> float:  # the share of the mixture above the target
        return float((1 - share) * np.mean(x > target) + share * np.mean(x * m > target))

    if above(1.0) >= 0.01:
        return 1.0
    lo, hi = 1.0, 2.0
    while above(hi) < 0.01 and hi < 1e4:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if above(mid) < 0.01 else (lo, mid)
    return hi


_TWINS: dict[Healthy, suite.Case] = {}


@functools.lru_cache(maxsize=64)
def _corrected(h: Healthy, kind: str, factor: float) -> float:
    first = _first_uniform(h, factor) if kind == "uniform" else _first_tail(h, factor)
    twin = _TWINS.get(h)
    if twin is None or first == 1.0:
        return first
    value = first
    for _ in range(CORRECTIONS):
        achieved = achieved_ratio(twin, kind, value)
        if not math.isfinite(achieved) or achieved <= 0:
            break
        value = max(1.0, value * factor / achieved)
    return value


def achieved_ratio(twin: suite.Case, kind: str, value: float) -> float:
    """The canary's time per token over the baseline's on a healthy hour of ``twin`` whose
    canary is slowed from the start: ``uniform`` (every step x value) the ratio of the means,
    ``tail`` (TAIL_SHARE of its requests x value) the ratio of the P99s."""
    return achieved_ratios(twin, kind, value)[0 if kind == "uniform" else 1]


@functools.lru_cache(maxsize=64)
def achieved_ratios(twin: suite.Case, kind: str, value: float) -> tuple[float, float]:
    """(mean, P99) per token of the canary over the baseline's on a slowed healthy hour (see
    ``achieved_ratio``)."""
    fleet = Fleet(twin.scenario(SECONDS / 3600.0), seed=0, tick=TICK)
    for pod in fleet.pods.values():
        if pod.spec.role == "canary":
            pod.spec = (
                replace(pod.spec, latency_scale=value)
                if kind == "uniform"
                else replace(pod.spec, tail_share=suite.TAIL_SHARE, tail_factor=value)
            )
    tpot: dict[str, list[float]] = {"canary": [], "baseline": []}
    while fleet.now + TICK <= SECONDS + 1e-9:
        fleet.step()
        if fleet.now > SECONDS / 6:
            for pod in fleet.pods.values():
                tpot[pod.spec.role].extend(pod.engine.finished_tpot.tolist())
    if not tpot["canary"] or not tpot["baseline"]:
        return math.nan, math.nan
    c, b = np.asarray(tpot["canary"]), np.asarray(tpot["baseline"])
    return float(c.mean() / b.mean()), float(np.quantile(c, 0.99) / np.quantile(b, 0.99))


def injected_ratios(case: suite.Case) -> tuple[float, float]:
    """(mean, P99) per token of the canary over the baseline's as the case injects them,
    measured on its slowed healthy hour (NaN, NaN for a case with no regression)."""
    reg = case.regression
    if reg is None:
        return math.nan, math.nan
    h = healthy(case)
    value = uniform_scale(h, reg.factor) if reg.kind == "uniform" else tail_factor(h, reg.factor)
    return achieved_ratios(_key(case), reg.kind, value)


def geometric_bounds(h: Healthy, step: float = GEOMETRIC_STEP) -> tuple[float, ...]:
    """~``step`` geometric bounds from half the lower median to five times the higher P99
    (4 significant digits), then vLLM's default per-token bounds above that."""
    lo = 0.5 * min(h.median_canary, h.median_baseline)
    hi = 5.0 * max(h.p99_canary, h.p99_baseline)
    n = math.ceil(math.log(hi / lo) / math.log(1.0 + step))
    fine = [float(f"{lo * (1.0 + step) ** i:.4g}") for i in range(n + 1)]
    coarse = [b for b in vllm.TPOT_BUCKETS if b > fine[-1] * (1.0 + step)]
    return tuple(dict.fromkeys(fine + coarse))


def layout_args(case: suite.Case) -> tuple[str, ...]:
    """The pods' extra args for the case's bucket layout (none on vLLM's default)."""
    if case.regression is None or case.regression.layout == "default":
        return ()
    bounds = geometric_bounds(healthy(case))
    return ("--custom-histogram-buckets", json.dumps({"inter_token_latency": list(bounds)}))
