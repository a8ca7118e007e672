"""The controller end to end with one canary pod: a window that holds fewer than two
independent batches of alpha sets CanaryJudgeable=False with the cause, sends one Warning
Event naming the window or pod count that would do, and turns True once the pod's decode
times size blocks that fit."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kube_support import NS, Clock, FakeSource, canary_cr, seed

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Buckets, Observation, RequestLives, Role
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer

BOUNDS = (*vllm.DECODE_TIME_BUCKETS, math.inf)
# requests decoding for about 2 s: blocks of one 10 s sample are near independent
SHORT = RequestLives(Buckets(BOUNDS, tuple(0.0 if b < 2.0 else 40.0 for b in BOUNDS), 76.0))


class OnePod(FakeSource):
    """FakeSource's batches, all from one canary pod; decode times when `lives` is set."""

    def __init__(self, apiserver: ApiServer) -> None:
        super().__init__(apiserver, lambda s: 0.7)
        self.lives: RequestLives | None = None

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        obs = super().observe(spec, start=start, end=end, interval_seconds=interval_seconds)
        pools = tuple(
            dataclasses.replace(
                p,
                acceptance=tuple(dataclasses.replace(s, pod="chat-canary-0") for s in p.acceptance),
                lives=self.lives if p.acceptance else None,
                pods=1,
            )
            if p.role is Role.CANARY
            else p
            for p in obs.pools
        )
        return dataclasses.replace(obs, pools=pools, scrape_interval_seconds=1.0)


def _events(apiserver: ApiServer, reason: str) -> list[tuple[str, str, int]]:
    return [
        (e["type"], e["message"], int(e.get("count") or 1))
        for e in apiserver.objects("events", NS, group="")
        if e["reason"] == reason
    ]


def _judgeable(apiserver: ApiServer) -> Any:
    return parse_status(apiserver.get("speculativecanaries", NS, "chat")).condition(
        "CanaryJudgeable"
    )


def test_one_canary_pod_without_decode_times_is_unjudgeable_and_says_why(
    apiserver: ApiServer, kube: Kube
) -> None:
    # a Prometheus policy (scrapes every second) over 60 s windows, one canary pod
    cr = canary_cr(
        source={"kind": "prometheus", "prometheus": {}},
        timing={
            "intervalSeconds": 10,  # compressed: the test runs minutes at most
            "windowSeconds": 60,  # compressed with the interval
            "warmupSeconds": 0,  # sandbox pods need no warm-up
            "minDwellSeconds": 0,  # flips follow the verdicts at once
            "maxFlipsPerHour": 60,  # the flip budget is not under test here
        },
    )
    seed(apiserver, cr=cr)
    clock = Clock()
    source = OnePod(apiserver)
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    for _ in range(4):
        clock.tick()
        out = rec.reconcile(NS, "chat")
    cond = _judgeable(apiserver)
    assert cond is not None and cond.status == "False" and cond.reason == "DecodeTimesUnknown"
    assert "1800 or 2 canary pods" in cond.message
    warned = _events(apiserver, "CanaryUnjudgeable")
    # one Warning Event over several evaluations, naming what would make it judgeable
    assert len(warned) == 1 and warned[0][0] == "Warning" and warned[0][2] == 1
    assert "timing.windowSeconds 1800 or 2 canary pods" in warned[0][1]
    (unit,) = out.units
    assert unit.evaluation is not None and unit.evaluation.verdict.value == "Inconclusive"

    source.lives = SHORT  # the pod exports its decode times: short blocks, several a window
    clock.tick()
    out = rec.reconcile(NS, "chat")
    cond = _judgeable(apiserver)
    assert cond.status == "True" and cond.reason == "Judgeable"
    (unit,) = out.units
    assert unit.evaluation is not None and unit.evaluation.combined is not None
    assert unit.evaluation.combined.batches >= 3
    assert len(_events(apiserver, "CanaryUnjudgeable")) == 1
