"""The tools a platform team would use today, each rendered from its documented semantics.

All read the same pods as alphagate (the same counters, resets and histogram buckets). Each
gets the latency metric the tool would use: Argo a canary/baseline ratio of the policy's P99
per token, Flagger its built-in request-duration check (the canary's P99 request duration
against a fixed limit), Kayenta its Mann-Whitney judge on the per-minute mean per token; the
in-engine gate sees acceptance only, as TensorRT-LLM's does. Thresholds come from the shipped
policy (its gate, quantile and margin), never from the case.

None of them turns speculation back on by itself: a rollback ends the release attempt
(Argo: Degraded until a new rollout; Flagger: Failed until a new revision; Kayenta: a failed
execution), and the in-engine gate disables speculation for the process's life. Flagger
promotes as it does: after its analysis reaches maxWeight it copies the canary to the primary
and stops analysing. The exact rendering of each is in ``RENDERING`` and in
docs/benchmarks.md beside the table.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Final

import numpy as np

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core import histogram
from alphagate.core.model import Buckets, Observation, Role
from alphagate_lab.backtest.recorded import RecordingSource
from alphagate_lab.bench.decisions import kayenta, suite
from alphagate_lab.bench.decisions.policies import Ctx, Want, canary_alpha
from alphagate_lab.sim.acceptance import draw_request_alpha
from alphagate_lab.sim.pod import PodSnapshot

IN_ENGINE_ALPHA: Final = suite.GATE - 0.05
"""Where a team sets TensorRT-LLM's gate: one band (the shipped policy's 0.55-0.60 band is 0.05
wide) below the break-even, because its decision is permanent and its 100-request mean is
noisy; set at the gate it would turn off canaries that sit at the gate by noise alone."""
FLAGGER_STEPS: Final = 5
"""stepWeight 10, maxWeight 50: five successful iterations to reach maxWeight, a sixth
promotes."""

RENDERING: Final = {
    "argo-rollouts": (
        "Background AnalysisRun with two metrics, each measured every 1 m over [5m]: raw alpha "
        "with successCondition result >= 0.55, and the canary/baseline ratio of "
        "histogram_quantile(0.99) of vllm:request_time_per_output_token_seconds with "
        "successCondition result <= 1.1 (the shipped policy's quantile and margin); no "
        "failureCondition, so NaN = Failed. failureLimit 3 per metric (cumulative: the 4th "
        "failure fails the run), consecutiveErrorLimit 4 (an empty result, no ready canary pod, "
        "is an Error; the 5th in a row fails the run); a failed run aborts the rollout: "
        "speculation off until a new rollout (never, within a run)."
    ),
    "flagger": (
        "Analysis every 1 m (interval 1m, so the metric window is [1m]), stepWeight 10, "
        "maxWeight 50, threshold 5: raw alpha with thresholdRange min 0.55, and the built-in "
        "request-duration check (histogram_quantile(0.99) of the canary's request duration, "
        "vllm:e2e_request_latency_seconds) with a fixed thresholdRange max, set as a team sets "
        "it from its dashboard: 1.1 x what one healthy baseline pod's 1-minute P99 stays "
        "under in 95% of minutes (measured on a healthy hour of the same fleet). A "
        "value out of range or none (NaN, no traffic) is a failed check and halts advancement; "
        "failedChecks is cumulative and rollback comes at 5 (for good). Five passing "
        "iterations reach maxWeight and the sixth promotes: the canary's config goes to the "
        "primary and the analysis ends (Succeeded), so speculation stays on."
    ),
    "in-engine": (
        "TensorRT-LLM's SpeculationGate in each canary pod: after every completed request, the "
        "mean accepted tokens per draft over the last 100 completed requests; below K x 0.50 "
        "(acceptance_length_threshold one band below the 0.55 gate: the decision is "
        "permanent) speculation is disabled for the process's life, with no restart. It has "
        "no latency metric, as the engine's gate has none. The benchmark draws "
        "each request completed in a 30 s step from the simulator's own per-request model "
        "(sim.acceptance.draw_request_alpha around the pod's measured ratio in that step, "
        "request_spread of the slice), as the engine would see them complete."
    ),
    "kayenta": (
        "Standalone canary analysis for the whole run: beginAfterMins 5, analysisIntervalMins 10, "
        "lookback 10 m (per-window), step 60 s. Metrics: per-minute mean time per output token "
        "(the per-token histogram's sum/count), canary vs baseline, direction increase, "
        "allowedIncrease 1.1 (a per-minute P99 would fail every healthy canary at this load: "
        "requests whose drafts are mostly rejected fill the tail); per-minute alpha vs a control "
        "series at the 0.55 gate (the baseline has no alpha), direction decrease. Mann-Whitney "
        "with 98% interval and tolerance 0.25 (NetflixACAJudge), nanStrategy remove, groups "
        "latency and acceptance weighted 50/50. An interval scoring <= marginal 75 fails the "
        "analysis (rollback, for good); the run's end is its lifetime, so the pass 95 bar on the "
        "last judgement never acts."
    ),
}


def _mean_per_token(buckets: Buckets | None) -> float:
    """The histogram's sum / count: mean time per output token (NaN without requests)."""
    if buckets is None or not buckets.total > 0 or not math.isfinite(buckets.sum):
        return math.nan
    return buckets.sum / buckets.total


class _Scraped:
    """A tool that queries Prometheus sees every scrape, not only those at its own checks:
    ``watch`` reads the pods at every step between them (the loop calls it), so the first
    check already has the minute before it, as a Prometheus query would."""

    spec: SpeculativeCanarySpec
    source: RecordingSource
    interval: float

    def watch(self, ctx: Ctx) -> None:
        self.source.feed(ctx.snap.pods, ctx.now)
        self.source.observe(
            self.spec, start=ctx.now - self.interval, end=ctx.now, interval_seconds=self.interval
        )


def _empty(obs: Observation) -> bool:
    """The query returns no series at all (Argo: an Error, not a NaN)."""
    canary = obs.pool("chat", Role.CANARY)
    return canary is None or canary.error is not None or canary.pods == 0


def _ratio_of_quantiles(obs: Observation, q: float) -> float:
    """histogram_quantile(q) of the canary's per-token histogram over the baseline's (NaN when
    either side has no observation in the window)."""
    canary = obs.pool("chat", Role.CANARY)
    base = obs.pool("chat", Role.BASELINE)
    c = histogram.quantile(q, canary.tpot) if canary is not None else math.nan
    b = histogram.quantile(q, base.tpot) if base is not None else math.nan
    return c / b if b > 0 else math.nan


def window_buckets(
    before: dict[str, PodSnapshot], now: Sequence[PodSnapshot], name: str, role: str
) -> Buckets | None:
    """``sum by (le)(increase(name_bucket{role}[window]))`` over the pods, from each pod's
    snapshot at the window's start (``before``) to now; a restart counts from zero, as
    Prometheus' reset handling does. None when no pod of the role has the histogram."""
    bounds: tuple[float, ...] | None = None
    total: list[float] = []
    sum_ = 0.0
    for snap in now:
        if snap.labels.get("role") != role or not snap.ready:
            continue
        h = snap.histograms.get(name)
        if h is None:
            continue
        prev = before.get(snap.name)
        p = prev.histograms.get(name) if prev is not None else None
        if p is None or prev is None or prev.restarts != snap.restarts or p.count > h.count:
            inc, s = [float(x) for x in h.buckets], h.sum
        else:
            inc = [float(x - y) for x, y in zip(h.buckets, p.buckets, strict=True)]
            s = h.sum - p.sum
        if bounds is None:
            bounds, total = h.bounds, [0.0] * len(inc)
        if h.bounds != bounds:
            continue  # mixed layouts: Prometheus would not sum them either
        total = [x + y for x, y in zip(total, inc, strict=True)]
        sum_ += s
    if bounds is None:
        return None
    return Buckets((*bounds, math.inf), tuple(total), sum_)


class Argo(_Scraped):
    name = "argo-rollouts"
    interval = 60.0
    window = 300.0
    failure_limit = 3
    consecutive_error_limit = 4

    def __init__(self, spec: SpeculativeCanarySpec) -> None:
        self.spec = spec
        self.source = RecordingSource()
        self.failed = {"alpha": 0, "latency": 0}
        self.errors = 0
        self.aborted = False
        self.quantile = spec.latency.quantile
        self.max_ratio = 1.0 + spec.latency.max_regression_ratio

    def decide(self, ctx: Ctx) -> Want:
        if self.aborted:
            return Want(False)
        self.source.feed(ctx.snap.pods, ctx.now)
        obs = self.source.observe(
            self.spec, start=ctx.now - self.window, end=ctx.now, interval_seconds=self.interval
        )
        if _empty(obs):
            self.errors += 1
            if self.errors > self.consecutive_error_limit:
                self.aborted = True
            return Want(not self.aborted)
        self.errors = 0
        results = {
            "alpha": canary_alpha(obs) >= suite.GATE,  # NaN compares false: Failed
            "latency": _ratio_of_quantiles(obs, self.quantile) <= self.max_ratio,
        }
        for metric, ok in results.items():
            if not ok:
                self.failed[metric] += 1
                if self.failed[metric] > self.failure_limit:
                    self.aborted = True
        return Want(not self.aborted)


class Flagger(_Scraped):
    name = "flagger"
    interval = 60.0
    window = 60.0
    threshold = 5

    def __init__(self, spec: SpeculativeCanarySpec, duration_limit: float) -> None:
        self.spec = spec
        self.source = RecordingSource()
        self.failed_checks = 0
        self.rolled_back = False
        self.promoted = False
        self.advances = 0
        self.quantile = spec.latency.quantile
        self.duration_limit = duration_limit  # seconds (thresholdRange max, fixed)
        self.before: dict[str, PodSnapshot] = {}

    def decide(self, ctx: Ctx) -> Want:
        if self.rolled_back:
            return Want(False)
        if self.promoted:
            return Want(True)
        self.source.feed(ctx.snap.pods, ctx.now)
        obs = self.source.observe(
            self.spec, start=ctx.now - self.window, end=ctx.now, interval_seconds=self.interval
        )
        alpha = canary_alpha(obs)
        e2e = window_buckets(self.before, ctx.snap.pods, vllm.E2E, "canary")
        self.before = {p.name: p for p in ctx.snap.pods}
        duration = histogram.quantile(self.quantile, e2e) if e2e is not None else math.nan
        ok = alpha >= suite.GATE and duration <= self.duration_limit  # NaN: failed
        if not ok:
            self.failed_checks += 1  # halt advancement
            if self.failed_checks >= self.threshold:
                self.rolled_back = True
        elif self.advances < FLAGGER_STEPS:
            self.advances += 1
        else:
            self.promoted = True
        return Want(not self.rolled_back)


class InEngine:
    name = "in-engine"
    interval = 30.0
    window = 100  # completed requests
    default_spread = 6.0

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 0x1E6])
        self.threshold = suite.K * IN_ENGINE_ALPHA
        self.last: dict[str, tuple[int, float, float, float]] = {}
        self.recent: dict[str, deque[float]] = {}
        self.off: set[str] = set()

    def decide(self, ctx: Ctx) -> Want:
        spread = float(getattr(ctx.fleet.slices["chat"], "request_spread", self.default_spread))
        for name, pod in ctx.fleet.pods.items():
            if pod.spec.role != "canary" or not pod.ready or name in self.off or not pod.k:
                continue
            c = pod.counters
            now = (
                pod.restarts,
                float(c.accepted),
                float(c.draft_tokens),
                float(sum(c.success.values())),
            )
            prev = self.last.get(name)
            self.last[name] = now
            if prev is None or prev[0] != now[0]:
                continue
            accepted, drafted, finished = (now[i] - prev[i] for i in (1, 2, 3))
            n = int(finished)
            if drafted <= 0 or n <= 0:
                continue
            m = min(max(accepted / drafted, 1e-3), 1 - 1e-3)
            draws = suite.K * draw_request_alpha(self.rng, n, m, spread, float(suite.K))
            recent = self.recent.setdefault(name, deque(maxlen=self.window))
            values = np.concatenate([np.asarray(recent, dtype=np.float64), draws])
            if values.size >= self.window:
                sums = np.cumsum(np.concatenate(([0.0], values)))
                means = (sums[self.window :] - sums[: -self.window]) / self.window
                # Only windows ending at a request completed now are new checks.
                new = means[max(0, len(means) - n) :]
                if new.size and float(new.min()) < self.threshold:
                    self.off.add(name)  # the loop turns the engine's speculation off
            recent.extend(draws[-self.window :].tolist())
        return Want(True, frozenset(self.off))


class Kayenta(_Scraped):
    name = "kayenta"
    interval = 60.0
    begin_after = 300.0
    analysis_interval = 600.0
    marginal = 75.0
    weights: Final = {"latency": 50.0, "acceptance": 50.0}

    def __init__(self, spec: SpeculativeCanarySpec) -> None:
        self.spec = spec
        self.source = RecordingSource()
        self.series: list[tuple[float, float, float, float]] = []
        self.judged = 0
        self.failed = False
        self.scores: list[float] = []

    def decide(self, ctx: Ctx) -> Want:
        if self.failed:
            return Want(False)
        self.source.feed(ctx.snap.pods, ctx.now)
        obs = self.source.observe(
            self.spec, start=ctx.now - self.interval, end=ctx.now, interval_seconds=self.interval
        )
        canary = obs.pool("chat", Role.CANARY)
        base = obs.pool("chat", Role.BASELINE)
        c = _mean_per_token(canary.tpot) if canary is not None else math.nan
        b = _mean_per_token(base.tpot) if base is not None else math.nan
        if ctx.t > self.begin_after:
            self.series.append((ctx.t, c, b, canary_alpha(obs)))
        due = self.begin_after + (self.judged + 1) * self.analysis_interval
        if ctx.t + 1e-6 >= due:
            self.judged += 1
            lo = ctx.t - self.analysis_interval
            rows = [r for r in self.series if r[0] > lo]
            latency = kayenta.classify(
                [r[1] for r in rows],
                [r[2] for r in rows],
                direction=kayenta.Direction.INCREASE,
                allowed_increase=1.1,
            )
            alphas = [r[3] for r in rows]
            acceptance = kayenta.classify(
                alphas,
                [suite.GATE] * len(alphas),
                direction=kayenta.Direction.DECREASE,
            )
            result = kayenta.score([("latency", latency), ("acceptance", acceptance)], self.weights)
            self.scores.append(result)
            if result <= self.marginal:
                self.failed = True
        return Want(not self.failed)
