"""The reconciler against the API server double, with a fake Source: flips, rollbacks,
restarts, conflicts, errors, dry-run and manual commands, end to end over real HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from kube_support import (
    BASE_ARGS,
    CFG,
    INTERVAL,
    NS,
    Clock,
    FakeSource,
    args_of,
    canary_cr,
    seed,
    speculating,
)

from alphagate.core.model import Memory, State
from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.commands import ANN_COMMAND, ANN_COMMAND_ID
from alphagate.kube.status.resource import decode_memories, parse_status
from alphagate.kube.workload import ANN_MEMORY
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate


def reconciler(kube: Kube, source: FakeSource, clock: Clock, **kw: Any) -> Reconciler:
    return Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
        **kw,
    )


def status(apiserver: ApiServer, name: str = "chat") -> Any:
    return parse_status(apiserver.get("speculativecanaries", NS, name))


def events(apiserver: ApiServer) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"]) for e in apiserver.objects("events", NS, group="")
    ]


def reasons(apiserver: ApiServer) -> list[str]:
    return [r for _, r, _ in events(apiserver)]


def step(rec: Reconciler, n: int = 1) -> Any:
    """`n` evaluations, one interval apart."""
    clock = rec.clock
    assert isinstance(clock, Clock)
    out = None
    for _ in range(n):
        clock.tick()
        out = rec.reconcile(NS, "chat")
    return out


def flips(apiserver: ApiServer) -> int:
    """PATCHes that changed the canary's container args."""
    return sum(
        1
        for r in apiserver.requests_matching(method="PATCH", name="chat-canary")
        if r.status == 200 and "spec" in (r.body or {})
    )


def test_alpha_falls_then_rolls_back_and_a_good_mix_re_enables(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver)
    alpha = {"chat": 0.7}
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: alpha[s]), clock)

    out = step(rec)  # a new canary starts probing: speculation on
    assert out.evaluation.action.value == "enable"
    assert speculating(apiserver, "chat-canary")
    assert argsmod.read(args_of(apiserver)) == CFG
    assert args_of(apiserver)[:4] == ["--model", "/models/tiny", "--port", "8000"]
    step(rec, 2)
    st = status(apiserver)
    assert st.state == "On", st.last_decision
    assert st.combined_alpha == pytest.approx(0.7, abs=0.01)
    assert st.slices[0].drafts == 600

    alpha["chat"] = 0.4
    out = step(rec, 2)
    assert out.evaluation.action.value == "disable"
    assert not speculating(apiserver, "chat-canary")
    assert args_of(apiserver) == ["--model", "/models/tiny", "--port", "8000"]
    st = status(apiserver)
    assert st.state == "RolledBack"
    assert st.speculation_on is False
    assert st.last_decision.action == "disable" and st.last_decision.applied
    # why, with the numbers: the interval and the gate it fell below
    assert "alpha 0.4 [0.3" in st.last_decision.why
    assert "upper bound below disableBelow 0.55" in st.last_decision.why
    assert st.last_decision.summary.startswith("disable: alpha 0.4 [0.3")
    assert float(st.history[-1].evidence["alpha_upper"]) < 0.55
    assert st.history[-1].from_state == "On" and st.history[-1].to_state == "RolledBack"
    assert float(st.history[-1].evidence["alpha"]) == pytest.approx(0.4, abs=0.01)
    assert st.history[-1].cause == "policy-fail"
    disabled = [e for e in events(apiserver) if e[1] == "SpeculationDisabled"]
    assert len(disabled) == 1 and disabled[0][0] == "Warning"
    assert "alpha 0.40" in disabled[0][2]
    # the latency guard's P99 at its buckets (kube_support's ~10% layout): what it can see
    assert "(latency: P99 effective margin +" in disabled[0][2] and "within shown" in disabled[0][2]
    cond = {c.type: c for c in st.conditions}
    assert cond["Ready"].status == "True" and cond["SourceHealthy"].status == "True"

    # The traffic turns good again; the cooldown must pass first: 30 s, three backoff steps
    # deeper because alpha fell three bands (0.05) below the gate, so maxSeconds (120 s).
    alpha["chat"] = 0.72
    waited = 0
    for _ in range(20):
        step(rec)
        waited += 1
        if speculating(apiserver, "chat-canary"):
            break
    assert speculating(apiserver, "chat-canary"), status(apiserver).last_decision
    assert waited * INTERVAL >= 120
    assert status(apiserver).state == "Probing"
    step(rec, 2)
    assert status(apiserver).state == "On"
    assert reasons(apiserver).count("SpeculationEnabled") == 2
    assert flips(apiserver) == 3  # on, off, on: every flip exactly once


def test_killed_between_patch_and_status_write_resumes_with_one_flip(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver)
    clock = Clock()
    source = FakeSource(apiserver, lambda s: 0.7)
    first = reconciler(kube, source, clock)
    step(first, 3)
    assert status(apiserver).state == "On"
    source.alpha = lambda s: 0.3
    step(first)  # first failing window: hold
    # the status write after the flip is lost (the controller dies right after patching)
    fault = apiserver.faults.add("PATCH", r"/speculativecanaries/chat/status$", 500, times=1)
    out = step(first)
    assert fault.hits == 1 and not out.status_written
    assert out.evaluation.action.value == "disable"
    assert not speculating(apiserver, "chat-canary")
    assert status(apiserver).state == "On"  # status never heard of the rollback
    ann = apiserver.get("deployments", NS, "chat-canary", group="apps")["metadata"]["annotations"]
    assert Memory.model_validate_json(ann[ANN_MEMORY]).state is State.ROLLED_BACK
    before = flips(apiserver)

    second = reconciler(kube, source, clock)  # a fresh process: no memory of its own
    out = step(second)
    assert out.units[0].memory_origin == "record on chat-canary"
    assert out.evaluation.action.value == "hold"
    assert flips(apiserver) == before  # no second flip
    st = status(apiserver)
    assert st.state == "RolledBack"
    assert decode_memories(st.memory)[""].state is State.ROLLED_BACK


def test_conflict_storm_ends_in_condition_and_event_then_applies(
    apiserver: ApiServer, kube: Kube
) -> None:
    seed(apiserver)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    rec.actuator.wait_initial = rec.actuator.wait_max = 0.001
    storm = apiserver.faults.add(
        "PATCH", r"/deployments/chat-canary$", 409, times=None, reason="Conflict"
    )
    out = step(rec)
    assert out.units[0].error is not None
    assert not speculating(apiserver, "chat-canary")
    st = status(apiserver)
    ready = st.condition("Ready")
    assert ready.status == "False" and ready.reason == "ConflictRetriesExhausted"
    assert st.last_decision.action == "enable" and not st.last_decision.applied
    assert "NOT APPLIED" in st.last_decision.reason
    assert st.state in (None, "Off")  # the decision was not persisted as done
    assert "ConflictRetriesExhausted" in reasons(apiserver)
    apiserver.faults.remove(storm)
    step(rec)  # the same decision is made again, and now applied
    assert speculating(apiserver, "chat-canary")
    assert status(apiserver).condition("Ready").status == "True"
    assert status(apiserver).state == "Probing"


@pytest.mark.parametrize(("fault", "reason"), [(500, "PatchFailed"), (403, "Forbidden")])
def test_server_errors_and_missing_rbac_end_in_condition_and_event(
    apiserver: ApiServer, kube: Kube, fault: int, reason: str
) -> None:
    seed(apiserver)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    if fault == 403:
        apiserver.rbac.deny("patch", "apps", "deployments")
    else:
        apiserver.faults.add("PATCH", r"/deployments/chat-canary$", 500, times=None)
    for _ in range(3):  # no crash loop: each interval records the same clear failure
        step(rec)
    st = status(apiserver)
    assert st.condition("Ready").status == "False" and st.condition("Ready").reason == reason
    assert str(fault) in st.condition("Ready").message
    assert reasons(apiserver).count(reason) == 1  # repeats are counted, not re-created
    assert not speculating(apiserver, "chat-canary")


def test_source_errors_hold_and_alert(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    source = FakeSource(apiserver, lambda s: 0.7)
    rec = reconciler(kube, source, clock)
    step(rec, 3)
    assert status(apiserver).state == "On"
    source.error = "unreachable: http://prometheus:9090: connection refused"
    step(rec, 3)
    st = status(apiserver)
    assert st.state == "On" and speculating(apiserver, "chat-canary")  # errors never flip
    assert st.condition("SourceHealthy").status == "False"
    assert "connection refused" in st.condition("SourceHealthy").message
    # one Event, counted up while the source keeps failing (not one per interval)
    (ev,) = [e for e in apiserver.objects("events", NS, group="") if e["reason"] == "SourceErrors"]
    assert ev["count"] >= 2 and "connection refused" in ev["message"]


def test_invalid_spec_is_reported_not_acted_on(apiserver: ApiServer, kube: Kube) -> None:
    cr = canary_cr()
    cr["spec"]["acceptance"]["disableBelow"] = 0.9  # above enableAbove: inverted band
    seed(apiserver, cr=cr)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    out = step(rec, 2)
    assert out.spec_error and "enableAbove" in out.spec_error
    st = status(apiserver)
    assert st.condition("SpecValid").status == "False"
    assert st.condition("Ready").status == "False"
    assert reasons(apiserver) == ["InvalidSpec"]
    assert not speculating(apiserver, "chat-canary")


def test_dry_run_decides_and_records_but_never_patches(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver, cr=canary_cr(mode="dryRun"))
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    step(rec, 2)
    assert apiserver.requests_matching(method="PATCH", resource="deployments") == []
    st = status(apiserver)
    assert st.last_decision.dry_run and st.mode == "dryRun"
    assert "DryRunWouldFlip" in reasons(apiserver)
    assert st.condition("Ready").message.startswith("dry-run")


def test_manual_command_through_annotations(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    step(rec, 3)
    obj = apiserver.get("speculativecanaries", NS, "chat")
    obj["metadata"]["annotations"] = {ANN_COMMAND: "disable", ANN_COMMAND_ID: "req-1"}
    apiserver.put(obj)
    step(rec)
    st = status(apiserver)
    assert not speculating(apiserver, "chat-canary")
    assert st.last_command.id == "req-1" and st.last_command.result
    assert st.history[-1].cause == "manual" and st.history[-1].to_state == "RolledBack"
    assert st.state == "RolledBack"
    step(rec)  # handled once: the same annotation does nothing more
    assert status(apiserver).last_command.handled_at == st.last_command.handled_at
    obj = apiserver.get("speculativecanaries", NS, "chat")
    obj["metadata"]["annotations"] = {ANN_COMMAND: "pause", ANN_COMMAND_ID: "req-2"}
    apiserver.put(obj)
    step(rec)
    assert status(apiserver).state == "Paused"
    assert "Paused" in reasons(apiserver)


def test_per_slice_canaries_flip_alone(apiserver: ApiServer, kube: Kube) -> None:
    cr = canary_cr(
        aggregation="perSlice",
        slices=[
            {
                "name": "chat",
                "canary": {"matchLabels": {"slice": "chat"}},
                "baseline": {"matchLabels": {"slice": "chat-b"}},
                "deployment": {"name": "chat-canary"},
            },
            {
                "name": "code",
                "canary": {"matchLabels": {"slice": "code"}},
                "baseline": {"matchLabels": {"slice": "code-b"}},
                "deployment": {"name": "code-canary"},
            },
        ],
    )
    seed(apiserver, "chat-canary", "code-canary", "chat-baseline", cr=cr)
    clock = Clock()
    alpha = {"chat": 0.72, "code": 0.72}
    source = FakeSource(apiserver, lambda s: alpha[s], deployment_of=lambda s: f"{s}-canary")
    rec = reconciler(kube, source, clock)
    step(rec, 3)
    assert speculating(apiserver, "chat-canary") and speculating(apiserver, "code-canary")
    alpha["code"] = 0.4
    step(rec, 2)
    assert speculating(apiserver, "chat-canary")
    assert not speculating(apiserver, "code-canary")
    st = status(apiserver)
    units = {u.name: u for u in st.units}
    assert units["chat"].state == "On" and units["code"].state == "RolledBack"
    assert st.state == "Mixed"
    assert set(decode_memories(st.memory)) == {"chat", "code"}


def test_deleted_canary_is_forgotten(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    step(rec)
    apiserver.delete("speculativecanaries", NS, "chat")
    out = step(rec)
    assert out.gone


def test_manual_edit_of_the_flag_is_patched_back(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    step(rec, 3)
    assert status(apiserver).state == "On"
    dep = apiserver.get("deployments", NS, "chat-canary", group="apps")
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = ["--model", "/models/tiny"]
    apiserver.put(dep)
    step(rec)
    assert speculating(apiserver, "chat-canary")
    assert args_of(apiserver)[:2] == ["--model", "/models/tiny"]
    (drift,) = [e for e in events(apiserver) if e[1] == "DriftCorrected"]
    assert drift[0] == "Warning" and "ran off; state On needs" in drift[2]


def test_promote_copies_the_config_to_the_stable_deployment(
    apiserver: ApiServer, kube: Kube
) -> None:
    cr = canary_cr(
        promotion={"enabled": True, "bakeSeconds": 86400, "stable": {"name": "chat-stable"}}
    )
    seed(apiserver, "chat-canary", "chat-baseline", "chat-stable", cr=cr)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    step(rec, 3)
    assert not speculating(apiserver, "chat-stable")
    obj = apiserver.get("speculativecanaries", NS, "chat")
    obj["metadata"]["annotations"] = {ANN_COMMAND: "promote", ANN_COMMAND_ID: "p-1"}
    apiserver.put(obj)
    out = step(rec)
    assert out.evaluation.action.value == "promote"
    assert argsmod.read(args_of(apiserver, "chat-stable")) == CFG
    assert speculating(apiserver, "chat-canary")
    assert status(apiserver).state == "Promoted"
    assert "Promoted" in reasons(apiserver)


def test_label_selector_shards_the_work(apiserver: ApiServer, kube: Kube) -> None:
    seed(apiserver)
    other = canary_cr("other")
    other["metadata"]["labels"] = {"shard": "b"}
    apiserver.put(other)
    mine = apiserver.get("speculativecanaries", NS, "chat")
    mine["metadata"]["labels"] = {"shard": "a"}
    apiserver.put(mine)
    clock = Clock()
    rec = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock, label_selector="shard=a")
    rec.loop.relist()
    assert rec.loop.due(float("inf")) == [(NS, "chat")]
    everywhere = reconciler(kube, FakeSource(apiserver, lambda s: 0.7), clock)
    everywhere.loop.relist()
    assert everywhere.loop.due(float("inf")) == [(NS, "chat"), (NS, "other")]


def test_a_new_canary_running_the_config_is_not_turned_off_while_its_reads_fail(
    apiserver: ApiServer, kube: Kube
) -> None:
    """Missing data never flips anything: a canary created with the config already in its
    template, whose first reads fail, is held Off without a patch (no restart), and enabled
    as an annotation once data comes."""
    seed(apiserver, "chat-baseline")
    apiserver.put(
        DeploymentTemplate("chat-canary", NS, args=argsmod.edit(BASE_ARGS, CFG), replicas=2).build()
    )
    apiserver.put(canary_cr())
    source = FakeSource(apiserver, lambda s: 0.75)
    source.error = "the source is down"
    clock = Clock()
    rec = reconciler(kube, source, clock)
    before = args_of(apiserver)
    for _ in range(3):
        clock.tick()
        out = rec.reconcile(NS, "chat")
        assert out.evaluation is not None and out.evaluation.memory.state is State.OFF
        assert args_of(apiserver) == before and speculating(apiserver, "chat-canary")
    source.error = None
    clock.tick()
    out = rec.reconcile(NS, "chat")
    assert out.evaluation is not None and out.evaluation.memory.state is State.PROBING
    assert args_of(apiserver) == before  # the enable restarted nothing
