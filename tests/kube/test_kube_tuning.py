"""The draft-length tuner through the reconciler, over real HTTP against the API double: K moves
on the canary Deployment's args with Events and status, a regressing K goes back, and the
diagnosis Event is emitted once per change of its causes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kube_support import NS, TPOT, Clock, args_of, canary_cr, seed

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import AcceptanceSample, Buckets, Observation, PoolObservation, Role
from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer

GOOD = (0.95, 0.9, 0.85, 0.15)  # alpha 0.66 at K=4; the last position does not pay at d=0.3
BAD = (0.5, 0.3, 0.2, 0.1)  # alpha far below the gate


def k_of(apiserver: ApiServer) -> int | None:
    cfg = argsmod.read(args_of(apiserver))
    return None if cfg is None else int(cfg["num_speculative_tokens"])


class ChainSource:
    """Per-position counters of drafts stopping at their first rejection, at the K the canary
    Deployment really runs (read from its args), with a little spread between batches."""

    def __init__(
        self,
        apiserver: ApiServer,
        cond: Callable[[], tuple[float, ...]],
        lengths: Buckets | None = None,
    ) -> None:
        self.apiserver, self.cond, self.lengths = apiserver, cond, lengths

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        k = k_of(self.apiserver)
        acc: list[AcceptanceSample] = []
        if k is not None:
            cond = self.cond()
            for i in range(6):
                drafts, u, per = 200.0, 1.0, []
                for c in cond[:k]:
                    u *= c
                    per.append(round(drafts * u + (i - 2.5) * 0.8, 1))
                acc.append(
                    AcceptanceSample(
                        drafts=drafts,
                        draft_tokens=drafts * k,
                        accepted_tokens=sum(per),
                        per_position=tuple(per),
                        pod=f"chat-canary-{i % 2}",
                        start=start + (end - start) * i / 6,
                        end=start + (end - start) * (i + 1) / 6,
                    )
                )
        canary = PoolObservation(
            "chat", Role.CANARY, acceptance=tuple(acc), generation_tokens=1e3, tpot=TPOT, pods=2
        )
        base = PoolObservation(
            "chat",
            Role.BASELINE,
            generation_tokens=4e3,
            tpot=TPOT,
            pods=2,
            output_lengths=self.lengths,
        )
        return Observation(at=end, window_seconds=end - start, pools=(canary, base))


def _reconciler(kube: Kube, source: Any, clock: Clock) -> Reconciler:
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )


def _events(apiserver: ApiServer, reason: str) -> list[tuple[str, str]]:
    return [
        (e["type"], e["message"])
        for e in apiserver.objects("events", NS, group="")
        if e["reason"] == reason
    ]


def _run(rec: Reconciler, clock: Clock, n: int) -> None:
    for _ in range(n):
        clock.tick()
        rec.reconcile(NS, "chat")


TUNING = {"costPerPosition": 0.3, "tuning": {"enabled": True, "consecutiveWindows": 2}}


def test_k_shortens_on_the_deployment_then_a_regression_reverts_it(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver, cr=canary_cr(draftLength=TUNING))
    cond = {"now": GOOD}
    clock = Clock()
    rec = _reconciler(kube, ChainSource(apiserver, lambda: cond["now"]), clock)
    _run(rec, clock, 3)  # enable, then two passing windows confirm: On
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "On" and k_of(apiserver) == 4
    assert st.insights is not None and st.insights.draft_length is not None
    assert (
        st.insights.draft_length.advice == "shorten" and st.insights.draft_length.recommended_k == 3
    )
    _run(rec, clock, 2)  # two agreeing windows: K 4 -> 3 on the Deployment
    assert k_of(apiserver) == 3
    changed = _events(apiserver, "DraftLengthChanged")
    assert len(changed) == 1 and changed[0][0] == "Normal" and "4 -> 3" in changed[0][1]
    assert not _events(apiserver, "DriftCorrected")  # the tuner's own patch is no drift
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.insights is not None and st.insights.tuning is not None
    assert st.insights.tuning.k == 3 and st.insights.tuning.trial
    assert st.insights.tuning.last_change == "shorten" and st.insights.tuning.good_k == 4
    # the report is the window's, read while K=4 still ran
    assert st.insights.draft_length is not None and st.insights.draft_length.configured_k == 4

    cond["now"] = BAD  # the first failing window at the trial K puts the last good K back
    _run(rec, clock, 1)
    assert k_of(apiserver) == 4
    reverted = _events(apiserver, "DraftLengthReverted")
    assert len(reverted) == 1 and reverted[0][0] == "Warning" and "3 -> 4" in reverted[0][1]
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.insights is not None and st.insights.tuning is not None
    assert st.insights.tuning.last_change == "revert" and st.insights.tuning.cooldown_until


def test_a_trial_k_is_confirmed_and_kept(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver, cr=canary_cr(draftLength=TUNING))
    clock = Clock()
    rec = _reconciler(kube, ChainSource(apiserver, lambda: GOOD), clock)
    _run(rec, clock, 5)
    assert k_of(apiserver) == 3
    _run(rec, clock, 3)
    confirmed = _events(apiserver, "DraftLengthConfirmed")
    assert len(confirmed) == 1 and "num_speculative_tokens 3" in confirmed[0][1]
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.insights is not None and st.insights.tuning is not None
    assert st.insights.tuning.good_k == 3 and not st.insights.tuning.trial
    assert k_of(apiserver) == 3 and st.state == "On"


def test_without_tuning_k_stays_and_the_diagnosis_event_is_emitted_once(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver, cr=canary_cr(draftLength={"costPerPosition": 0.3}))
    clock = Clock()
    rec = _reconciler(kube, ChainSource(apiserver, lambda: GOOD), clock)
    _run(rec, clock, 8)
    assert k_of(apiserver) == 4
    assert not _events(apiserver, "DraftLengthChanged")
    diag = _events(apiserver, "LatencyDiagnosis")
    assert len(diag) == 1 and diag[0][0] == "Warning", diag  # deduplicated across 8 windows
    assert diag[0][1].startswith("draftTooLong:")
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    assert st.insights is not None and st.insights.findings == ["draftTooLong"]
    assert st.insights.tuning is None


def test_no_probe_while_outputs_are_too_short(apiserver: ApiServer, kube: Kube) -> None:
    short = Buckets((10.0, 20.0, 50.0, float("inf")), (10.0, 30.0, 40.0, 40.0), 900.0)
    seed(apiserver, cr=canary_cr(outputs={"withholdProbes": True}))
    clock = Clock()
    rec = _reconciler(kube, ChainSource(apiserver, lambda: GOOD, lengths=short), clock)
    _run(rec, clock, 3)
    assert k_of(apiserver) is None  # never enabled: 22 tokens a request
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    cond = {c.type: c for c in st.conditions}["OutputsLongEnough"]
    assert cond.status == "False" and cond.reason == "ShortOutputs"
    assert "22 tokens on average" in cond.message and st.state == "Off"


def test_causes_that_come_and_go_are_told_once(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver, cr=canary_cr(draftLength={"costPerPosition": 0.3}))
    clock = Clock()
    calls = {"n": 0}

    def cond() -> tuple[float, ...]:
        calls["n"] += 1
        return GOOD if calls["n"] % 2 else (0.95, 0.95, 0.95, 0.95)  # draftTooLong, then none

    rec = _reconciler(kube, ChainSource(apiserver, cond), clock)
    _run(rec, clock, 8)
    assert len(_events(apiserver, "LatencyDiagnosis")) == 1
