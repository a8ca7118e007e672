"""A KServe InferenceService as the canary target: where the flag goes, what is refused and why,
and how the actuator writes (a JSON patch through CustomObjectsApi; the record only with a
flip), over real HTTP to the API server double."""

from __future__ import annotations

from typing import Any

import pytest

from alphagate.config import WorkloadKind, WorkloadRef
from alphagate.kube import args as argsmod
from alphagate.kube import invocation
from alphagate.kube.actuator import Actuator
from alphagate.kube.client import Kube
from alphagate.kube.inferenceservice import isvc_state
from alphagate.kube.workload import ANN_OWNER, json_patch
from alphagate_lab.sandbox.apiserver import ApiServer, InferenceServiceTemplate

CFG = {"method": "ngram", "num_speculative_tokens": 4}
NS = "llm"
REF = WorkloadRef(name="chat", kind=WorkloadKind.INFERENCE_SERVICE)


def body(predictor: dict[str, Any], mode: str | None = "RawDeployment") -> dict[str, Any]:
    ann = {"serving.kserve.io/deploymentMode": mode} if mode else {}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": NS, "annotations": ann},
        "spec": {"predictor": predictor},
    }


def hf(*args: str) -> dict[str, Any]:
    return {"model": {"modelFormat": {"name": "huggingface"}, "args": list(args)}}


def test_the_hugging_face_runtime_counts_on_its_vllm_backend_only() -> None:
    state = isvc_state(body(hf("--backend=vllm")), "vllm", None)
    assert state.pointer == "/spec/predictor/model"
    assert state.anchor == ("/spec/predictor/model/modelFormat/name", "huggingface")
    assert not state.rollout_complete  # no predictor Deployment rendered yet
    for args in ((), ("--backend=auto",), ("--backend", "huggingface")):
        with pytest.raises(argsmod.ArgsError, match="add --backend=vllm"):
            isvc_state(body(hf(*args)), "vllm", None)


def test_a_runtime_whose_command_alphagate_cannot_see_is_refused() -> None:
    sklearn = {"model": {"modelFormat": {"name": "sklearn"}, "args": []}}
    with pytest.raises(argsmod.ArgsError, match="ServingRuntime's command"):
        isvc_state(body(sklearn), "vllm", None)
    # a model with its own command is checked like any container
    own = {"model": {"modelFormat": {"name": "vllm"}, "command": ["vllm", "serve"], "args": []}}
    assert isvc_state(body(own), "kserve-container", None).args_field == "args"
    with pytest.raises(argsmod.ArgsError, match="names none"):
        isvc_state(body(hf("--backend=vllm")), "sidecar", None)


@pytest.mark.parametrize(
    ("mode", "why"),
    [("Serverless", "serverless mode"), ("Knative", "serverless mode"), (None, "not reported")],
)
def test_modes_other_than_raw_are_refused(mode: str | None, why: str) -> None:
    with pytest.raises(argsmod.ArgsError, match=why):
        isvc_state(body(hf("--backend=vllm"), mode), "vllm", None)
    assert isvc_state(body(hf("--backend=vllm"), "Standard"), "vllm", None).kind == (
        "InferenceService"
    )


def test_the_patch_edits_the_model_args_and_tests_the_model_format() -> None:
    state = isvc_state(body(hf("--backend=vllm")), "vllm", None)
    new = argsmod.edit(state.args, CFG)
    ops = json_patch(state, {"alphagate.io/state": "Probing"}, new)
    assert {"op": "test", "path": state.anchor[0], "value": "huggingface"} in ops
    assert {"op": "add", "path": "/spec/predictor/model/args", "value": new} in ops


def test_hugging_face_server_argv_checks() -> None:
    ok = ["python", "-m", "huggingfaceserver", "--model_name=m", "--backend=vllm"]
    invocation.check(ok, [], "")
    with pytest.raises(invocation.InvocationError, match="--backend=auto"):
        invocation.check(ok[:-1], [], "")
    invocation.check([], ["--model_name=m", "--backend", "vllm"], "kserve/huggingfaceserver:v0.16")
    with pytest.raises(invocation.InvocationError, match="--backend=auto"):
        invocation.check([], ["--model_name=m"], "kserve/huggingfaceserver:v0.16")


@pytest.fixture
def api() -> Any:
    with ApiServer() as server:
        yield server


def test_claiming_writes_nothing_until_the_first_flip(api: ApiServer) -> None:
    api.put(InferenceServiceTemplate("chat", NS).build())
    kube = Kube.from_configuration(api.configuration())
    actuator = Actuator(kube.api_client)
    try:
        dep, stale = actuator.claim(NS, REF, owner=f"{NS}/a", owner_exists=lambda o: True)
        assert stale == "" and dep.owner == ""
        assert api.requests_matching(method="PATCH") == []  # a restart saved
        # a canary that is gone is taken over in writing: once
        isvc = api.get("inferenceservices", NS, "chat", group="serving.kserve.io")
        isvc["metadata"]["annotations"][ANN_OWNER] = f"{NS}/gone"
        api.put(isvc)
        dep, stale = actuator.claim(NS, REF, owner=f"{NS}/a", owner_exists=lambda o: False)
        assert stale == f"{NS}/gone" and dep.owner == f"{NS}/a"
    finally:
        kube.close()


def test_a_record_alone_is_never_written(api: ApiServer) -> None:
    api.put(InferenceServiceTemplate("chat", NS).build())
    kube = Kube.from_configuration(api.configuration())
    actuator = Actuator(kube.api_client)
    try:
        on = actuator.apply(NS, REF, speculative_config=CFG, state="Probing", memory=None, now=1.0)
        assert on.patched and on.args_changed
        same = actuator.apply(NS, REF, speculative_config=CFG, state="On", memory=None, now=2.0)
        assert not same.patched  # the state moved, the flag did not: no write, no restart
        off = actuator.apply(
            NS, REF, speculative_config=None, state="RolledBack", memory=None, now=3.0
        )
        assert off.patched and off.deployment.state == "RolledBack"
    finally:
        kube.close()
    assert len(api.requests_matching(method="PATCH", resource="inferenceservices")) == 2
