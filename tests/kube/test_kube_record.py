"""The Deployment's record and claim, through the actuator over real HTTP: every write of the
record bumps its generation, a decision made from an older record is never applied, and one
SpeculativeCanary owns a Deployment."""

from __future__ import annotations

from typing import Any

import pytest

from alphagate.config import DeploymentRef
from alphagate.core.model import Memory, State
from alphagate.errors import ClaimedError, RecordChangedError
from alphagate.kube import args as argsmod
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder, ObjectRef
from alphagate.kube.record import Origin, resume, written
from alphagate.kube.workload import ANN_MEMORY, ANN_OWNER, ANN_RECORD, WorkloadState
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

CFG = {"method": "ngram", "num_speculative_tokens": 4}
REF = DeploymentRef(name="canary", container="vllm")
NOW = 1_800_000_000.0
A, B = "ns/chat", "ns/other"


@pytest.fixture
def deployment(apiserver: ApiServer) -> dict[str, Any]:
    tmpl = DeploymentTemplate("canary", "ns", args=["--model", "/m"], replicas=1)
    return apiserver.put(tmpl.build())


def actuator(kube: Kube) -> Actuator:
    return Actuator(
        kube.api_client,
        wait_initial=0.001,
        wait_max=0.01,
        events=EventRecorder(kube.api_client),
    )


def apply(act: Actuator, on: bool, *, owner: str = A, expect: int | None = None) -> Any:
    state = State.PROBING if on else State.ROLLED_BACK
    return act.apply(
        "ns",
        REF,
        speculative_config=CFG if on else None,
        state=state,
        memory=Memory(state=state, since=NOW),
        now=NOW,
        owner=owner,
        involved=ObjectRef("ns", owner.split("/")[1]),
        expect_record=expect,
    )


def patches(apiserver: ApiServer) -> int:
    return len(apiserver.requests_matching(method="PATCH", resource="deployments"))


def running(apiserver: ApiServer) -> bool:
    dep = apiserver.get("deployments", "ns", "canary", group="apps")
    return argsmod.read(dep["spec"]["template"]["spec"]["containers"][0]["args"]) is not None


def test_every_write_of_the_record_bumps_its_generation(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    act = actuator(kube)
    assert act.read("ns", REF).record == 0
    first = apply(act, True, expect=0)
    assert first.patched and first.record == 1
    again = apply(act, True, expect=1)  # nothing to change: no request, the record stays
    assert not again.patched and again.record == 1
    second = apply(act, False, expect=1)
    assert second.patched and second.record == 2
    dep = act.read("ns", REF)
    assert dep.record == 2 and dep.memory is not None and dep.memory.record == 2
    assert dep.memory.state is State.ROLLED_BACK


def test_a_decision_from_an_older_record_is_never_applied(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    act = actuator(kube)
    apply(act, True, expect=0)  # record 1: speculation on
    apply(act, False, expect=1)  # record 2: off (say, a reply this process never saw)
    before = patches(apiserver)
    with pytest.raises(RecordChangedError) as caught:
        apply(act, True, expect=1)  # a decision made from record 1 would turn it back on
    assert caught.value.reason == "RecordChanged"
    assert patches(apiserver) == before  # nothing sent
    assert not running(apiserver)


def test_a_record_annotation_that_is_not_a_number_reads_as_none(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    obj = apiserver.get("deployments", "ns", "canary", group="apps")
    for junk in ("\u0661\u0662", "-3", "9" * 40, "x"):
        obj["metadata"].setdefault("annotations", {})[ANN_RECORD] = junk
        obj = apiserver.put(obj)
        assert actuator(kube).read("ns", REF).record == 0


def test_one_canary_claims_a_deployment_and_a_second_is_refused(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    act = actuator(kube)
    rv = apiserver.get("deployments", "ns", "canary", group="apps")["metadata"]["resourceVersion"]
    dep, took_over = act.claim("ns", REF, owner=A, owner_exists=lambda o: True)
    assert dep.owner == A and took_over == ""
    claim_body = apiserver.requests_matching(method="PATCH", resource="deployments")[-1].body
    assert claim_body["metadata"]["resourceVersion"] == rv  # of two claims at once, one wins
    again, _ = act.claim("ns", REF, owner=A, owner_exists=lambda o: True)
    assert again.owner == A

    before = patches(apiserver)
    with pytest.raises(ClaimedError):
        act.claim(
            "ns", REF, owner=B, owner_exists=lambda o: o == A, involved=ObjectRef("ns", "other")
        )
    with pytest.raises(ClaimedError):  # and the actuator never flips it for B either
        apply(act, True, owner=B)
    assert patches(apiserver) == before and not running(apiserver)
    assert act.read("ns", REF).owner == A
    warned = [
        e for e in apiserver.objects("events", "ns", group="") if e["reason"] == "TargetClaimed"
    ]
    assert warned and all(e["involvedObject"]["name"] == "other" for e in warned)


def test_a_claim_by_a_canary_that_is_gone_is_taken_over(
    apiserver: ApiServer, kube: Kube, deployment: dict[str, Any]
) -> None:
    obj = apiserver.get("deployments", "ns", "canary", group="apps")
    obj["metadata"].setdefault("annotations", {})[ANN_OWNER] = "ns/deleted"
    apiserver.put(obj)
    dep, took_over = actuator(kube).claim("ns", REF, owner=A, owner_exists=lambda o: False)
    assert dep.owner == A and took_over == "ns/deleted"


# ---------------------------------------------------------------- resuming from the record


def recorded(name: str, memory: Memory | None, record: int) -> WorkloadState:
    annotations = {ANN_RECORD: str(record)} if record else {}
    if memory is not None:
        annotations[ANN_MEMORY] = memory.model_dump_json()
    return WorkloadState(
        namespace="ns",
        name=name,
        container="vllm",
        resource_version="1",
        generation=1,
        observed_generation=1,
        replicas=1,
        updated_replicas=1,
        ready_replicas=1,
        available_replicas=1,
        args=(),
        args_field="args",
        speculative_config=None,
        annotations=annotations,
    )


ON = Memory(state=State.ON, since=NOW, record=3)
BACK = Memory(state=State.ROLLED_BACK, since=NOW + 30, record=4)


def test_a_newer_record_wins_over_this_process_and_the_status() -> None:
    # a lost reply: this process still holds record 3, the Deployment was written at 4
    got = resume(ON, ON, [recorded("canary", BACK, 4)])
    assert got.origin is Origin.RECORD and got.deployment == "canary"
    assert got.memory.state is State.ROLLED_BACK and got.memory.record == 4
    # a crash before the status write: a new process, the status at 3
    got = resume(None, ON, [recorded("canary", BACK, 4)])
    assert got.origin is Origin.RECORD and got.memory == BACK


def test_the_record_this_memory_continues_does_not_replace_it() -> None:
    later = ON.model_copy(update={"pass_streak": 5})  # evaluations since the write
    got = resume(later, None, [recorded("canary", ON, 3)])
    assert got.origin is Origin.PROCESS and got.memory == later
    got = resume(None, later, [recorded("canary", ON, 3)])
    assert got.origin is Origin.STATUS and got.memory == later


def test_the_newest_of_several_deployments_wins() -> None:
    deps = [recorded("a", ON, 3), recorded("b", BACK, 4)]
    got = resume(ON, None, deps)
    assert got.deployment == "b" and got.memory.record == 4


def test_a_newer_record_that_cannot_be_read_keeps_the_memory_at_its_generation() -> None:
    got = resume(ON, None, [recorded("canary", None, 7)])
    assert got.origin is Origin.PROCESS and got.unreadable == "canary"
    assert got.memory.state is State.ON and got.memory.record == 7
    assert resume(None, None, []).origin is Origin.NEW
    fresh = resume(None, None, [recorded("canary", None, 0)])
    assert fresh.origin is Origin.NEW and fresh.unreadable == ""


def test_written_moves_the_memory_to_the_newest_write() -> None:
    assert written(ON, [5, 4]).record == 5
    assert written(ON, []) == ON and written(ON, [2]) == ON
