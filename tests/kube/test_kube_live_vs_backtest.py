"""The live reconciler and the backtest make the same decisions on the same data.

Both ask the core's window rule which range to read and call the same `evaluate`; this runs
the real Reconciler (over HTTP against the API server double) and `backtest.run_range` over
one deterministic metrics history whose alpha falls and recovers, with a warm-up long enough
that the first judged window after each flip is the rule's boundary."""

from __future__ import annotations

import math
from collections.abc import Callable

from kube_support import INTERVAL, NS, TPOT, Clock, K, canary_cr, seed, speculating

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import AcceptanceSample, Observation, PoolObservation, Role
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.backtest.engine import run_range
from alphagate_lab.backtest.replay import Options
from alphagate_lab.sandbox.apiserver import ApiServer

TIMING = {
    "intervalSeconds": INTERVAL,  # compressed: the test runs minutes at most
    "windowSeconds": 6 * INTERVAL,  # compressed with the interval
    "warmupSeconds": 2 * INTERVAL,  # compressed with the interval
    "minDwellSeconds": 0,  # flips follow the verdicts at once
    "probeSeconds": 600,  # compressed (900 shipped)
    "maxFlipsPerHour": 60,  # the flip budget is not under test here
    "rolloutTimeoutSeconds": 60,  # compressed: a sandbox rollout takes seconds
    # compressed (12-24 h in the policies)
    "cooldown": {"initialSeconds": 60, "factor": 2, "maxSeconds": 120},
}
EVALUATIONS = 60  # two whole judged windows confirm, two fail inside the dip, and a re-probe


class History:
    """Counters as two canary pods would have exported them: one batch per pod and 10 s, its
    alpha set by the time it covers (0.75, then 0.3 for three windows: two whole disjoint
    windows fail inside the dip, then 0.75 again)."""

    def __init__(self, t0: float, speculating: Callable[[], bool]) -> None:
        self.t0 = t0
        self.speculating = speculating

    def alpha(self, t: float) -> float:
        return 0.3 if 18 * INTERVAL <= t - self.t0 < 36 * INTERVAL else 0.75

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        acc: list[AcceptanceSample] = []
        if self.speculating():
            first = math.ceil((start - self.t0) / INTERVAL - 1e-9)
            last = math.floor((end - self.t0) / INTERVAL + 1e-9)
            for i in range(first, last):
                a, b = self.t0 + i * INTERVAL, self.t0 + (i + 1) * INTERVAL
                for pod in range(2):
                    wobble = (pod - 0.5) * 2.0
                    acc.append(
                        AcceptanceSample(
                            drafts=100,
                            draft_tokens=100 * K,
                            accepted_tokens=self.alpha(a) * 100 * K + wobble,
                            pod=f"chat-canary-{pod}",
                            start=a,
                            end=b,
                        )
                    )
        pools = (
            PoolObservation(
                "chat",
                Role.CANARY,
                acceptance=tuple(acc),
                generation_tokens=1000.0,
                tpot=TPOT,
                itl=TPOT,
                pods=2,
            ),
            PoolObservation(
                "chat", Role.BASELINE, generation_tokens=4000.0, tpot=TPOT, itl=TPOT, pods=2
            ),
        )
        return Observation(at=end, window_seconds=end - start, pools=pools)


def test_live_and_backtest_decide_alike(apiserver: ApiServer, kube: Kube) -> None:
    cr = canary_cr(timing=TIMING)
    seed(apiserver, cr=cr)
    clock = Clock()
    t0 = clock.now
    live_source = History(t0, lambda: speculating(apiserver, "chat-canary"))
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: live_source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    live = []
    for _ in range(EVALUATIONS):
        clock.tick()
        out = rec.reconcile(NS, "chat")
        ev = out.evaluation
        assert ev is not None, out.spec_error
        live.append((ev.action.value, ev.memory.state.value, ev.verdict.value))

    spec = SpeculativeCanarySpec.model_validate(cr["spec"])
    # The backtest hides acceptance itself while its own decisions have speculation off.
    result = run_range(
        spec,
        History(t0, lambda: True),
        start=t0 + INTERVAL,
        end=t0 + EVALUATIONS * INTERVAL,
        options=Options(rollout_seconds=0.0),
    )
    (unit,) = result.units
    replayed = [(p.action, p.state, p.verdict) for p in unit.points]

    assert replayed == live
    # the run covers the interesting part: a probe, a confirmation, a rollback, a re-probe
    actions = [a for a, _, _ in live]
    states = [s for _, s, _ in live]
    assert actions.count("enable") >= 2 and actions.count("disable") >= 1
    assert "On" in states and "RolledBack" in states
