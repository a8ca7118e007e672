"""A vLLM command alphagate cannot edit safely (a shell wrapper, a script) is refused with
SpecValid=False and an Event, and the canary is never reported On."""

from __future__ import annotations

from typing import Any

import pytest
from kube_support import NS, Clock, FakeSource, canary_cr

from alphagate.kube import args as argsmod
from alphagate.kube.args import ArgsError
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status import parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

SERVE = ["--model", "m", "--port", "8000"]


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ([], SERVE),  # the image's entrypoint (vLLM's images run `vllm serve`)
        (["vllm", "serve"], SERVE),
        (["/usr/local/bin/vllm", "serve", "m"], []),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], SERVE),
        (["tini", "--", "vllm", "serve"], SERVE),
        (["env", "VLLM_LOGGING_LEVEL=DEBUG", "vllm", "serve"], SERVE),
    ],
)
def test_direct_invocations_are_editable(command: list[str], args: list[str]) -> None:
    argsmod.check_invocation(command, args)


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (["sh", "-c", "vllm serve m --port 8000"], []),
        (["/bin/bash", "-lc"], ["exec vllm serve m"]),
        ([], ["sh", "-c", "vllm serve m"]),
        (["env", "bash", "-c", "vllm serve m"], []),
        (["/app/start.sh"], SERVE),
        (["python3", "/app/serve.py"], SERVE),
    ],
)
def test_shells_and_scripts_are_refused(command: list[str], args: list[str]) -> None:
    with pytest.raises(ArgsError):
        argsmod.check_invocation(command, args)


def _shell_deployment(name: str) -> dict[str, Any]:
    dep = DeploymentTemplate(name, NS, args=[], replicas=2).build()
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["sh", "-c", "vllm serve m --port 8000"]
    return dep


def test_shell_wrapped_canary_is_refused_and_never_on(apiserver: ApiServer, kube: Kube) -> None:
    apiserver.put(_shell_deployment("chat-canary"))
    apiserver.put(DeploymentTemplate("chat-baseline", NS, args=list(SERVE), replicas=2).build())
    apiserver.put(canary_cr())
    clock = Clock()
    source = FakeSource(apiserver, alpha=lambda s: 0.9)
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: source,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
    )
    for _ in range(4):
        clock.tick()
        rec.reconcile(NS, "chat")
    dep = apiserver.get("deployments", NS, "chat-canary", group="apps")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c", "vllm serve m --port 8000"]
    assert not container.get("args")  # nothing appended after the shell string
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    spec_valid = [c for c in st.conditions if c.type == "SpecValid"]
    assert spec_valid and spec_valid[0].status == "False"
    assert spec_valid[0].reason == "ArgsUneditable"
    assert st.state != "On"
    reasons = [e["reason"] for e in apiserver.objects("events", NS, group="")]
    assert "ArgsUneditable" in reasons
