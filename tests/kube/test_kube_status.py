"""Status model and writer, Events, over the API server double."""

from __future__ import annotations

from typing import Any

import pytest

from alphagate import vllm
from alphagate.config import GROUP, VERSION, LatencyMetric
from alphagate.core import resolution
from alphagate.core.model import (
    AcceptanceEvidence,
    Action,
    Cause,
    CheckKind,
    CheckResult,
    Estimate,
    Evaluation,
    ExceedanceTest,
    LatencyEvidence,
    Memory,
    PoolLatency,
    State,
    TailGuard,
    Transition,
    Verdict,
)
from alphagate.core.resolution import TailWithin
from alphagate.errors import ForbiddenError, KubeError, NotFoundError
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder, ObjectRef, list_events
from alphagate.kube.status.evidence import latency_evidence, p99_ratio, slice_evidence
from alphagate.kube.status.fields import ConditionType, rfc3339, set_condition
from alphagate.kube.status.resource import (
    CanaryStatus,
    Decision,
    decode_memories,
    encode_memories,
    history_entries,
    parse_status,
)
from alphagate.kube.status.writer import StatusWriter
from alphagate_lab.sandbox.apiserver import ApiServer

NOW = 1_800_000_000.0


def make_cr(apiserver: ApiServer, name: str = "chat") -> dict[str, Any]:
    return apiserver.put(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SpeculativeCanary",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"x": 1},
        }
    )


def evaluation() -> Evaluation:
    est = Estimate(
        value=0.41,
        lower=0.38,
        upper=0.44,
        confidence=0.95,
        drafts=900.0,
        draft_tokens=3600.0,
        accepted_tokens=1476.0,
        batches=12,
        method="batch-means",
    )
    checks = (
        CheckResult(
            CheckKind.ACCEPTANCE,
            Verdict.FAIL,
            "alpha 0.41 [0.38, 0.44] < 0.55",
            AcceptanceEvidence(disable_below=0.55, enable_above=0.6, min_drafts=200, estimate=est),
            slice="code",
        ),
        CheckResult(
            CheckKind.LATENCY,
            Verdict.PASS,
            "within limit",
            LatencyEvidence(
                metric=LatencyMetric.PER_TOKEN,
                quantile=0.99,
                max_regression_ratio=0.1,
                significance=0.01,
                min_count=1000,
                canary=PoolLatency(5000.0, 0.052, 0.05, 0.075),
                baseline=PoolLatency(5000.0, 0.05, 0.025, 0.05),
                limit_seconds=0.0275,
                tail=TailGuard(
                    quantile=0.99,
                    resolution=resolution.relative(vllm.TPOT_BUCKETS, 0.025, 0.05, 0.1),
                    within=TailWithin.UNRESOLVABLE,
                    fail_test=ExceedanceTest(0.075, 20.0, 0.004, 0.01, 0.9),
                ),
            ),
            slice="code",
        ),
    )
    t = Transition(
        from_state=State.ON,
        to_state=State.ROLLED_BACK,
        reason="alpha fell",
        at=NOW,
        evidence={"alpha": 0.41},
        cause=Cause.POLICY_FAIL,
    )
    memory = Memory(state=State.ROLLED_BACK, since=NOW, history=(t,), last_flip_at=NOW)
    return Evaluation(
        at=NOW,
        estimates={"code": est},
        weights={"code": 1.0},
        combined=est,
        checks=checks,
        verdict=Verdict.FAIL,
        action=Action.DISABLE,
        reason="alpha 0.41 [0.38, 0.44] < 0.55 for 2 windows",
        memory=memory,
        transition=t,
    )


def raw_latency(apiserver: ApiServer) -> dict[str, Any]:
    entry: dict[str, Any] = apiserver.get("speculativecanaries", "ns", "chat")["status"]["latency"][
        0
    ]
    return entry


def test_status_write_roundtrip_through_the_status_subresource(
    apiserver: ApiServer, kube: Kube
) -> None:
    make_cr(apiserver)
    ev = evaluation()
    lat = latency_evidence(ev.checks)
    status = CanaryStatus(
        state="RolledBack",
        observed_generation=1,
        combined_alpha=0.41,
        p99_ratio=p99_ratio(lat),
        slices=slice_evidence(ev),
        latency=lat,
        last_decision=Decision(
            at=rfc3339(NOW), action="disable", verdict="Fail", reason=ev.reason, state="RolledBack"
        ),
        conditions=set_condition([], ConditionType.READY, True, "Evaluated", now=NOW),
        history=history_entries(ev.memory.history),
        memory=encode_memories({"": ev.memory}),
    )
    writer = StatusWriter(kube.api_client)
    out = writer.write("ns", "chat", status)
    assert out["spec"] == {"x": 1}
    back = parse_status(writer.read("ns", "chat"))
    assert back == status
    assert back.memories() == {"": ev.memory}
    assert back.slices[0].alpha == 0.41 and back.slices[0].verdict == "Fail"
    assert back.latency[0].canary_p99_seconds == 0.052
    assert back.latency[0].canary_bucket_upper_seconds == 0.075
    assert back.latency[0].exceedance == 0.004
    assert back.p99_ratio == 1.04
    assert back.history[0].from_state == "On" and back.history[0].evidence == {"alpha": "0.41"}
    assert back.history[0].cause == "policy-fail"
    assert back.latency[0].slice == "code" and back.latency[0].check == "latency:code"
    assert back.latency[0].details["fail_p_value"] == "0.9"
    # the tail at the layout's resolution: a Fail needs more than 1% above 75 ms, so a P99
    # regression below 3x the bucket's lower edge (25 ms) can go unseen
    assert back.latency[0].tail_within == "unresolvable"
    assert back.latency[0].effective_margin == 2.0 and back.latency[0].fail_edge_seconds == 0.075
    assert raw_latency(apiserver)["effectiveMargin"] == 2.0
    raw = apiserver.get("speculativecanaries", "ns", "chat")["status"]
    assert raw["lastDecision"]["action"] == "disable"
    assert raw["combinedAlpha"] == 0.41
    # a smaller status replaces the old one entirely (no stale fields left behind)
    writer.write("ns", "chat", CanaryStatus(state="Off"))
    left = apiserver.get("speculativecanaries", "ns", "chat")["status"]
    assert left["state"] == "Off"
    assert not {"lastDecision", "memory", "combinedAlpha"} & set(left)
    assert left["slices"] == []


def test_status_write_errors_are_classified(apiserver: ApiServer, kube: Kube) -> None:
    writer = StatusWriter(kube.api_client)
    with pytest.raises(
        NotFoundError, match=r"write status of speculativecanaries\.alphagate\.io ns/nope"
    ):
        writer.write("ns", "nope", CanaryStatus())
    make_cr(apiserver)
    apiserver.rbac.deny("patch", GROUP, "speculativecanaries/status")
    with pytest.raises(ForbiddenError):
        writer.write("ns", "chat", CanaryStatus())
    apiserver.faults.add("GET", "speculativecanaries/chat", 500, times=1)
    with pytest.raises(KubeError, match="HTTP 500"):
        writer.read("ns", "chat")


def test_condition_transition_time_moves_only_on_flip() -> None:
    c1 = set_condition([], ConditionType.SOURCE_HEALTHY, True, "Scraped", now=NOW)
    c2 = set_condition(c1, ConditionType.SOURCE_HEALTHY, True, "Scraped", "again", now=NOW + 60)
    assert c2[0].last_transition_time == rfc3339(NOW) and c2[0].message == "again"
    c3 = set_condition(c2, ConditionType.SOURCE_HEALTHY, False, "SourceErrors", now=NOW + 120)
    assert c3[0].status == "False" and c3[0].last_transition_time == rfc3339(NOW + 120)
    c4 = set_condition(c3, ConditionType.READY, None, "Starting", now=NOW)
    assert [c.type for c in c4] == ["Ready", "SourceHealthy"]
    assert c4[0].status == "Unknown"


def test_memories_encoding() -> None:
    a, b = Memory(state=State.ON), Memory(state=State.OFF, cooldown_index=2)
    assert decode_memories(encode_memories({"": a})) == {"": a}
    assert decode_memories(encode_memories({"chat": a, "code": b})) == {"chat": a, "code": b}
    assert decode_memories("{not json") == {}
    assert decode_memories(None) == {}


def test_unreadable_status_is_empty_not_a_crash() -> None:
    assert parse_status({"status": {"conditions": "nonsense"}}) == CanaryStatus()
    assert parse_status({}) == CanaryStatus()


def test_events_are_created_and_repeats_counted(
    apiserver: ApiServer, kube: Kube, person: Kube
) -> None:
    obj = make_cr(apiserver)
    rec = EventRecorder(kube.api_client, instance="test")
    ref = ObjectRef.of(obj)
    assert rec.warning(ref, "SourceErrors", "prometheus unreachable 3 times")
    assert rec.warning(ref, "SourceErrors", "prometheus unreachable 3 times")
    assert rec.normal(ref, "SpeculationDisabled", "alpha 0.41 [0.38, 0.44] < 0.55")
    evs = apiserver.objects("events", "ns", group="")
    assert sorted((e["reason"], e["count"]) for e in evs) == [
        ("SourceErrors", 2),
        ("SpeculationDisabled", 1),
    ]
    assert all(e["involvedObject"]["uid"] == obj["metadata"]["uid"] for e in evs)
    listed = list_events(person.api_client, "ns", "chat")  # `alphagate status`: a person
    assert {e["reason"] for e in listed} == {"SourceErrors", "SpeculationDisabled"}


def test_event_failure_never_raises(apiserver: ApiServer, kube: Kube) -> None:
    rec = EventRecorder(kube.api_client)
    apiserver.rbac.deny("create", "", "events")
    assert rec.normal(ObjectRef("ns", "chat"), "SpeculationEnabled", "x") is False
    assert rec.failures == 1
