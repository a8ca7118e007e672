"""An Argo Rollout as the canary target: the actuator edits its pod template through the real
`kubernetes` client's CustomObjectsApi, over HTTP to the API server double, with the same record,
preconditions and refusals as on a Deployment."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiException

from alphagate.config import WorkloadKind, WorkloadRef
from alphagate.core.model import Memory, State
from alphagate.errors import ConflictError, OwnerConflictError
from alphagate.kube import args as argsmod
from alphagate.kube import ownership
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.refusals import RejectedConfigError
from alphagate.kube.workload import ANN_LAST_FLIP, ANN_SPECULATION, ANN_STATE, workload_state
from alphagate_lab.sandbox.apiserver import ApiServer

CFG = {"method": "ngram", "num_speculative_tokens": 4}
BASE_ARGS = ["--model", "/m", "--port", "8000"]
REF = WorkloadRef(name="canary", container="vllm", kind=WorkloadKind.ROLLOUT)
NOW = 1_800_000_000.0
ROLLOUTS = "rollouts"
GROUP = "argoproj.io"


def rollout_status(generation: int, *, replicas: int = 2, **extra: Any) -> dict[str, Any]:
    """What Argo Rollouts reports once a generation is fully promoted (observedGeneration is a
    string in Argo's API)."""
    return {
        "observedGeneration": str(generation),
        "phase": "Healthy",
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "currentPodHash": "abc",
        "stableRS": "abc",
        "conditions": [
            {
                "type": "Completed",
                "status": "True",
                "reason": "RolloutCompleted",
                "lastTransitionTime": "2027-01-15T07:00:00Z",
            }
        ],
        **extra,
    }


def rollout(*, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "canary", "namespace": "ns", "annotations": annotations or {}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "canary"}},
            "strategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {"duration": 10}}]}},
            "template": {
                "metadata": {"labels": {"app": "canary"}},
                "spec": {
                    "containers": [
                        {"name": "sidecar", "image": "envoy", "args": ["--speculative-config-x"]},
                        {"name": "vllm", "image": "vllm/vllm-openai:v0.32.0", "args": BASE_ARGS},
                    ]
                },
            },
            **spec,
        },
        "status": rollout_status(1),
    }


@pytest.fixture
def seeded(apiserver: ApiServer) -> dict[str, Any]:
    apiserver.argo = None  # these tests write Argo's status themselves
    return apiserver.put(rollout())


def actuator(kube: Kube) -> Actuator:
    return Actuator(kube.api_client, wait_initial=0.001, wait_max=0.01)


def stored(apiserver: ApiServer) -> dict[str, Any]:
    return apiserver.get(ROLLOUTS, "ns", "canary", group=GROUP)


def args_of(obj: dict[str, Any]) -> dict[str, list[str]]:
    return {c["name"]: c.get("args", []) for c in obj["spec"]["template"]["spec"]["containers"]}


def test_enable_edits_the_rollouts_template_with_one_json_patch(
    apiserver: ApiServer, kube: Kube, seeded: dict[str, Any]
) -> None:
    act = actuator(kube)
    before = act.read("ns", REF)
    assert before.kind == "Rollout" and before.rollout_complete and not before.speculation_on
    memory = Memory(state=State.PROBING, since=NOW, last_flip_at=NOW)
    apiserver.clear_requests()
    result = act.apply(
        "ns", REF, speculative_config=CFG, state=State.PROBING, memory=memory, now=NOW
    )
    patches = apiserver.requests_matching(method="PATCH", resource=ROLLOUTS)
    assert len(patches) == 1 and patches[0].status == 200
    # a custom resource takes no strategic merge; a merge patch would replace `containers`
    assert patches[0].content_type == "application/json-patch+json"
    ops = patches[0].body
    assert ops[0] == {
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": seeded["metadata"]["resourceVersion"],
    }
    assert {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "vllm"} in ops
    obj = stored(apiserver)
    assert args_of(obj)["vllm"] == [*BASE_ARGS, "--speculative-config", argsmod.render(CFG)]
    assert args_of(obj)["sidecar"] == ["--speculative-config-x"]
    assert obj["spec"]["template"]["spec"]["containers"][1]["image"] == "vllm/vllm-openai:v0.32.0"
    ann = obj["metadata"]["annotations"]
    assert ann[ANN_STATE] == "Probing" and ann[ANN_SPECULATION] == "on" and ANN_LAST_FLIP in ann
    assert result.patched and result.args_changed
    after = act.read("ns", REF)
    assert after.speculative_config == CFG and after.last_flip == NOW
    assert after.memory == memory.model_copy(update={"record": 1}) and after.record == 1
    # the template changed: Argo has a new generation to roll out, not judged until it has
    assert after.generation == 2 and not after.rollout_complete
    assert act.rollout(after, now=NOW).in_progress
    # idempotent: nothing to change, nothing sent
    apiserver.clear_requests()
    again = act.apply(
        "ns", REF, speculative_config=CFG, state=State.PROBING, memory=memory, now=NOW + 1
    )
    assert not again.patched and apiserver.requests_matching(method="PATCH") == []


def test_a_rollout_counts_as_rolled_out_only_when_argo_says_healthy_and_promoted(
    apiserver: ApiServer, kube: Kube, seeded: dict[str, Any]
) -> None:
    act = actuator(kube)
    cases: list[tuple[dict[str, Any], bool]] = [
        (rollout_status(1), True),
        (rollout_status(1, phase="Progressing"), False),
        (rollout_status(1, phase="Paused"), False),
        (rollout_status(1, currentPodHash="def"), False),  # canary pods not yet stable
        (rollout_status(1, abort=True, phase="Degraded"), False),
        (rollout_status(0), False),  # Argo has not seen this generation yet
        (rollout_status(1, updatedReplicas=1), False),
    ]
    for status, complete in cases:
        apiserver.put(stored(apiserver) | {"status": status})
        state = act.read("ns", REF)
        assert state.rollout_complete is complete, status
        view = act.rollout(state, now=NOW)
        assert view.in_progress is not complete
    apiserver.put(stored(apiserver) | {"status": rollout_status(1)})
    done = act.rollout(act.read("ns", REF), now=NOW)
    assert done.completed_at == NOW - 3600  # Argo's Completed condition, not first sight


def test_a_stale_write_to_a_rollout_is_a_409_and_retried_on_fresh_state(
    apiserver: ApiServer, kube: Kube, seeded: dict[str, Any]
) -> None:
    act = actuator(kube)
    original = act.read
    calls = {"n": 0}

    def racing_read(namespace: str, ref: WorkloadRef) -> Any:
        state = original(namespace, ref)
        calls["n"] += 1
        if calls["n"] == 1:  # someone edits the Rollout between our read and our patch
            obj = stored(apiserver)
            obj["metadata"]["labels"] = {"edited": "by-human"}
            apiserver.put(obj)
        return state

    act.read = racing_read  # type: ignore[method-assign]
    result = act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    assert result.attempts == 2
    assert [r.status for r in apiserver.requests_matching(method="PATCH")] == [409, 200]
    obj = stored(apiserver)
    assert obj["metadata"]["labels"] == {"edited": "by-human"}
    assert argsmod.read(args_of(obj)["vllm"]) == CFG


def test_a_conflict_storm_on_a_rollout_ends_in_a_typed_error(
    apiserver: ApiServer, kube: Kube, seeded: dict[str, Any]
) -> None:
    apiserver.faults.add("PATCH", r"/rollouts/canary$", 409, times=None, reason="Conflict")
    act = Actuator(kube.api_client, wait_initial=0.001, wait_max=0.01, max_attempts=3)
    with pytest.raises(ConflictError, match=r"Rollout ns/canary: still conflicting after 3"):
        act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    assert argsmod.read(args_of(stored(apiserver))["vllm"]) is None


def test_rollout_refusals_match_the_deployments(apiserver: ApiServer, kube: Kube) -> None:
    apiserver.argo = None
    act = actuator(kube)
    # Argo CD tracks this Rollout and reverted the flag alphagate set: yield, do not fight
    argo = {"argocd.argoproj.io/tracking-id": "llm:argoproj.io/Rollout:ns/canary"}
    apiserver.put(rollout(annotations={**argo, ANN_SPECULATION: "on"}))
    with pytest.raises(OwnerConflictError, match=r"Rollout ns/canary: Argo CD changed"):
        act.apply("ns", REF, speculative_config=CFG, state="On", memory=None, now=NOW)
    assert ownership.declared_owner(act.read("ns", REF)) == "Argo CD"
    # a config the image's vLLM would refuse never reaches the template
    bad = {"method": "eagle3", "num_speculative_tokens": 3}
    apiserver.put(rollout())
    with pytest.raises(RejectedConfigError, match=r"Rollout ns/canary: not applying"):
        act.apply("ns", REF, speculative_config=bad, state="On", memory=None, now=NOW)
    assert argsmod.read(args_of(stored(apiserver))["vllm"]) is None


def test_a_rollout_without_its_own_template_is_refused_clearly(
    apiserver: ApiServer, kube: Kube
) -> None:
    obj = rollout(workloadRef={"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"})
    del obj["spec"]["template"]
    apiserver.put(obj)
    with pytest.raises(argsmod.ArgsError, match=r"Rollout ns/canary takes its pod template from"):
        actuator(kube).read("ns", REF)
    with pytest.raises(argsmod.ArgsError, match=r"has no container 'vllm'"):
        workload_state(rollout() | {"spec": {"template": {"spec": {}}}}, "vllm", "Rollout")


def test_why_a_json_patch_the_double_serves_rollouts_as_a_real_server_does(
    apiserver: ApiServer, kube: Kube, seeded: dict[str, Any]
) -> None:
    """A custom resource takes no strategic merge patch (415), and a merge patch of one
    container replaces the whole list: the reasons the actuator sends a JSON patch."""
    one = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["x"]}]}}}}
    with pytest.raises(ApiException) as err:
        kube.custom.patch_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            "ns",
            ROLLOUTS,
            "canary",
            one,
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    kube.custom.patch_namespaced_custom_object(
        GROUP, "v1alpha1", "ns", ROLLOUTS, "canary", one,
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert list(args_of(stored(apiserver))) == ["vllm"]  # the sidecar is gone
