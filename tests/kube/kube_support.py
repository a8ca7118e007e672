"""Shared pieces for the reconciler tests (imported by name: pyproject.toml's pytest
`pythonpath` puts this folder on sys.path): a policy with fast timings, a fake Source that
reads what the canary Deployment runs from the API double, and time that runs ahead."""

from __future__ import annotations

import bisect
import copy
import math
import time
from collections.abc import Callable
from typing import Any

from alphagate.config import GROUP, VERSION, SpeculativeCanarySpec
from alphagate.core import resolution
from alphagate.core.model import AcceptanceSample, Buckets, Observation, PoolObservation, Role
from alphagate.kube import args as argsmod
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

NS = "llm"
K = 4
CFG = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4}
BASE_ARGS = ["--model", "/models/tiny", "--port", "8000"]
INTERVAL = 10.0
# Wall-clock controller runs: each test has seconds, not hours, so every timer is compressed.
FAST_TIMING = {
    "intervalSeconds": 0.4,  # sub-second: a test sees several evaluations a second
    "windowSeconds": 0.4,  # one interval: every evaluation is a whole, disjoint window
    "warmupSeconds": 0,  # the sandbox pods have nothing to warm up
    "minDwellSeconds": 0,  # flips follow the verdicts at once
    "probeSeconds": 30,  # longer than any test, so a probe never stalls inside one
    "maxFlipsPerHour": 60,  # the budget never binds (tests/kube/test_kube_* test it on purpose)
    "rolloutTimeoutSeconds": 30,  # a sandbox rollout takes well under a second
    "cooldown": {"initialSeconds": 60, "factor": 2, "maxSeconds": 120},  # no re-probe mid-test
}
"""Sub-second timing for a controller run in-process or as `alphagate run` (no warm-up, no
dwell, a flip budget that never binds)."""


def _slice(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "canary": {"matchLabels": {"slice": name, "track": "canary"}},
        "baseline": {"matchLabels": {"slice": name, "track": "baseline"}},
        **extra,
    }


def spec_dict(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "target": {"name": "chat-canary", "container": "vllm"},
        "baseline": {"name": "chat-baseline", "container": "vllm"},
        "speculativeConfig": CFG,
        "slices": [_slice("chat")],
        "source": {"kind": "podScrape"},
        # batchSeconds: automatic; FakeSource exports no decode times, so its two canary pods
        # are the batches.
        # Below the defaults (200, 100) for FakeSource's small windows; the stories the kube
        # tests tell rest on these (with the defaults test_kube_live_vs_backtest never sees a
        # re-probe: measured), and tests edit these keys in place.
        "acceptance": {"minDrafts": 100, "consecutiveWindows": 2},  # 2: = default
        "latency": {"minCount": 50, "consecutiveWindows": 2},  # 2: = default
        # Simulated clocks stepped by the tests: one window per interval keeps the arithmetic
        # of "n judged windows" in whole steps, and no timer but the cooldown gets in the way.
        "timing": {
            "intervalSeconds": INTERVAL,  # 10 s steps of a simulated clock
            "windowSeconds": INTERVAL,  # one interval: each evaluation is a judged window
            "warmupSeconds": 0,  # tests that need a warm-up set one
            "minDwellSeconds": 0,  # tests that need a dwell set one
            "probeSeconds": 120,  # a dozen steps before a probe without a verdict stalls
            "maxFlipsPerHour": 60,  # the budget never binds unless a test sets it
            "rolloutTimeoutSeconds": 60,  # six steps
            "cooldown": {"initialSeconds": 30, "factor": 2, "maxSeconds": 120},  # re-probe soon
        },
        "errors": {"alertAfter": 2},  # 3 shipped: the alert tests need one error fewer
    }
    spec.update(copy.deepcopy(over))
    SpeculativeCanarySpec.model_validate(spec)  # fail early on a bad test policy
    return spec


def canary_cr(name: str = "chat", **over: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeCanary",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec_dict(**over),
    }


def seed(
    apiserver: ApiServer, *deployments: str, cr: dict[str, Any] | None = None
) -> dict[str, Any]:
    for name in deployments or ("chat-canary", "chat-baseline"):
        apiserver.put(DeploymentTemplate(name, NS, args=list(BASE_ARGS), replicas=2).build())
    return apiserver.put(cr or canary_cr())


# ~10% steps, as `alphagate plan` writes them (--custom-histogram-buckets): these sources give
# pooled histograms only (no per-pod sums, so no mean test), and on vLLM's default buckets a
# pooled quantile can never be shown within +10% (tests/core/test_core_checks.py).
BOUNDS = (*resolution.geometric(0.004, 0.3), math.inf)


def hist(n: int, lo: float, hi: float) -> Buckets:
    counts = [0.0] * len(BOUNDS)
    for i in range(n):
        counts[bisect.bisect_left(BOUNDS, lo + (hi - lo) * (i + 0.5) / n)] += 1
    cum, run = [], 0.0
    for c in counts:
        run += c
        cum.append(run)
    return Buckets(bounds=BOUNDS, counts=tuple(cum))


TPOT = hist(400, 0.02, 0.045)


def speculating(apiserver: ApiServer, deployment: str) -> bool:
    dep = apiserver.get("deployments", NS, deployment, group="apps")
    for c in dep["spec"]["template"]["spec"]["containers"]:
        if c["name"] == "vllm":
            return argsmod.read(c.get("args") or []) is not None
    return False


def args_of(apiserver: ApiServer, deployment: str = "chat-canary") -> list[str]:
    dep = apiserver.get("deployments", NS, deployment, group="apps")
    return list(dep["spec"]["template"]["spec"]["containers"][0].get("args") or [])


class FakeSource:
    """Observations as a pod scrape would give them: acceptance batches only while the slice's
    canary Deployment really runs --speculative-config (vLLM exports no spec series when off)."""

    def __init__(
        self,
        apiserver: ApiServer,
        alpha: Callable[[str], float],
        *,
        deployment_of: Callable[[str], str] = lambda s: "chat-canary",
        on: Callable[[str], bool] | None = None,
    ) -> None:
        self.apiserver = apiserver
        self.alpha = alpha
        self.deployment_of = deployment_of
        # whether a slice's canary speculates (default: its Deployment's args say so)
        self.on = on or (lambda s: speculating(apiserver, deployment_of(s)))
        self.error: str | None = None
        self.calls = 0

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        self.calls += 1
        if self.error is not None:
            return Observation(
                at=end, window_seconds=end - start, pools=(), source_error=self.error
            )
        pools = []
        for s in spec.slices:
            on = self.on(s.name)
            acc: tuple[AcceptanceSample, ...] = ()
            if on:
                a = self.alpha(s.name)
                acc = tuple(
                    AcceptanceSample(
                        drafts=100,
                        draft_tokens=100 * K,
                        accepted_tokens=a * 100 * K + (i - 2.5) * 0.5,
                        pod=f"{s.name}-canary-{i % 2}",
                        start=start + (end - start) * i / 6,
                        end=start + (end - start) * (i + 1) / 6,
                    )
                    for i in range(6)
                )
            pools.append(
                PoolObservation(
                    s.name,
                    Role.CANARY,
                    acceptance=acc,
                    generation_tokens=1000.0,
                    tpot=TPOT,
                    itl=TPOT,
                    pods=2,
                )
            )
            pools.append(
                PoolObservation(
                    s.name, Role.BASELINE, generation_tokens=4000.0, tpot=TPOT, itl=TPOT, pods=2
                )
            )
        return Observation(at=end, window_seconds=end - start, pools=tuple(pools))


class Clock:
    """Synthetic time, far enough ahead of the wall clock that rollouts completed by the API
    double (stamped with real time) are always in the past."""

    def __init__(self) -> None:
        self.now = time.time() + 3600.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = INTERVAL) -> float:
        self.now += seconds
        return self.now
