"""The tools a platform team would use today, each rendered from its documented semantics.

All read the same pods through the same pod-scrape source as alphagate (so the same counters,
resets and histogram buckets). Argo and Flagger query what the task gives them, the raw
alpha = sum(increase(accepted)) / sum(increase(drafted)) over the canary pods in the window,
and nothing else; Kayenta adds latency from the per-token histogram.

None of them turns speculation back on by itself: a rollback ends the release attempt
(Argo: Degraded until a new rollout; Flagger: Failed until a new revision; Kayenta: a failed
execution), and the in-engine gate disables speculation for the process's life. The exact
rendering of each is in ``RENDERING`` and in docs/benchmarks.md beside the table.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

import numpy as np

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Buckets, Observation, Role
from alphagate_lab.backtest.recorded import RecordingSource
from alphagate_lab.bench.decisions import kayenta, suite
from alphagate_lab.bench.decisions.policies import Ctx, Want, canary_alpha
from alphagate_lab.sim.acceptance import draw_request_alpha

RENDERING: Final = {
    "argo-rollouts": (
        "Background AnalysisRun, one metric measured every 1 m over [5m]: raw alpha with "
        "successCondition result >= 0.55 (no failureCondition, so NaN = Failed); failureLimit 3 "
        "(cumulative: the 4th failure fails the run), consecutiveErrorLimit 4 (an empty result, "
        "no ready canary pod, is an Error; the 5th in a row fails the run); a failed run aborts "
        "the rollout: speculation off until a new rollout (never, within a run)."
    ),
    "flagger": (
        "Analysis every 1 m (interval 1m, so the metric window is [1m]): raw alpha with "
        "thresholdRange min 0.55; a value below it or no value (NaN, no traffic) is a failed "
        "check; failedChecks is cumulative and rollback comes at threshold 5; the analysis never "
        "completes (the canary is held at its weight), and a rollback stays until a new "
        "revision (never, within a run)."
    ),
    "in-engine": (
        "TensorRT-LLM's SpeculationGate in each canary pod: after every completed request, the "
        "mean accepted tokens per draft over the last 100 completed requests; below K x 0.55 "
        "speculation is disabled for the process's life, with no restart. The benchmark draws "
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


def _empty(obs: Observation) -> bool:
    """The query returns no series at all (Argo: an Error, not a NaN)."""
    canary = obs.pool("chat", Role.CANARY)
    return canary is None or canary.error is not None or canary.pods == 0


class Argo:
    name = "argo-rollouts"
    interval = 60.0
    window = 300.0
    failure_limit = 3
    consecutive_error_limit = 4

    def __init__(self, spec: SpeculativeCanarySpec) -> None:
        self.spec = spec
        self.source = RecordingSource()
        self.failed = 0
        self.errors = 0
        self.aborted = False

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
        if not canary_alpha(obs) >= suite.GATE:  # NaN compares false: Failed
            self.failed += 1
            if self.failed > self.failure_limit:
                self.aborted = True
        return Want(not self.aborted)


class Flagger:
    name = "flagger"
    interval = 60.0
    window = 60.0
    threshold = 5

    def __init__(self, spec: SpeculativeCanarySpec) -> None:
        self.spec = spec
        self.source = RecordingSource()
        self.failed_checks = 0
        self.rolled_back = False

    def decide(self, ctx: Ctx) -> Want:
        if self.rolled_back:
            return Want(False)
        self.source.feed(ctx.snap.pods, ctx.now)
        obs = self.source.observe(
            self.spec, start=ctx.now - self.window, end=ctx.now, interval_seconds=self.interval
        )
        alpha = canary_alpha(obs)
        if math.isnan(alpha) or alpha < suite.GATE:
            self.failed_checks += 1
            if self.failed_checks >= self.threshold:
                self.rolled_back = True
        return Want(not self.rolled_back)


class InEngine:
    name = "in-engine"
    interval = 30.0
    window = 100  # completed requests
    default_spread = 6.0

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 0x1E6])
        self.threshold = suite.K * suite.GATE
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


class Kayenta:
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
