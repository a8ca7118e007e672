"""A vLLM command alphagate cannot edit safely (a shell wrapper, a script) is refused with
SpecValid=False and an Event, and the canary is never reported On."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kube_support import NS, Clock, FakeSource, canary_cr

from alphagate.kube import args as argsmod
from alphagate.kube.args import ArgsError
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.kube.workload import workload_state
from alphagate.shell.reconciler import Reconciler
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate

SERVE = ["--model", "m", "--port", "8000"]


VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"


@pytest.mark.parametrize(
    ("command", "args", "image"),
    [
        ([], SERVE, VLLM_IMAGE),  # the image's entrypoint (vLLM's images run `vllm serve`)
        ([], SERVE, "registry.example.com:5000/rocm/vllm@sha256:" + "a" * 64),
        ([], SERVE, "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.9"),
        ([], [], VLLM_IMAGE),
        (["vllm", "serve"], SERVE, "mycorp/llm-server:1.2"),  # the command says vLLM
        (["/usr/local/bin/vllm", "serve", "m"], [], ""),
        (["vllm"], ["serve", "m"], ""),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], SERVE, ""),
        (["python3.12", "-u", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server"], SERVE, ""),
        (["tini", "--", "vllm", "serve"], SERVE, ""),
        (["tini", "-s", "-e", "143", "--", "vllm", "serve"], SERVE, ""),
        (["/usr/bin/env", "VLLM_LOGGING_LEVEL=DEBUG", "vllm", "serve"], SERVE, ""),
        (["env", "-u", "HOME", "-i", "A=1", "--", "B=2", "vllm", "serve"], SERVE, ""),
        (["dumb-init", "--rewrite", "15:2", "--", "vllm", "serve"], SERVE, ""),
        (["nice", "-n", "0", "vllm", "serve"], SERVE, ""),
        (["nice", "-n5", "vllm", "serve"], SERVE, ""),
        (["nice", "-10", "vllm", "serve"], SERVE, ""),
        (["numactl", "--interleave=all", "-N", "0", "vllm", "serve"], SERVE, ""),
        (["taskset", "-c", "0-7", "vllm", "serve"], SERVE, ""),
        (["timeout", "-s", "TERM", "1d", "vllm", "serve"], SERVE, ""),
        (["exec", "tini", "--", "nice", "-n", "0", "env", "A=1", "vllm", "serve"], SERVE, ""),
        (["gosu", "vllm", "vllm", "serve"], SERVE, ""),  # user `vllm`, then the program
    ],
)
def test_direct_invocations_are_editable(command: list[str], args: list[str], image: str) -> None:
    argsmod.check_invocation(command, args, image)


@pytest.mark.parametrize(
    ("command", "args", "image", "says"),
    [
        (["sh", "-c", "vllm serve m --port 8000"], [], VLLM_IMAGE, "runs a shell"),
        (["/bin/bash", "-lc"], ["exec vllm serve m"], VLLM_IMAGE, "runs a shell"),
        ([], ["sh", "-c", "vllm serve m"], VLLM_IMAGE, "runs a shell"),
        (["env", "bash", "-c", "vllm serve m"], [], VLLM_IMAGE, "runs a shell"),
        # wrappers before the shell: the old check looked at the first non-launcher token only
        (["tini", "--", "sh", "-c", "vllm serve m"], [], VLLM_IMAGE, "runs a shell"),
        (["nice", "-n", "0", "sh", "-c", "vllm serve m"], [], VLLM_IMAGE, "runs a shell"),
        (["dumb-init", "--", "bash", "-c", "vllm serve m"], [], VLLM_IMAGE, "runs a shell"),
        (["exec", "env", "A=1", "sh", "-c", "vllm serve"], [], VLLM_IMAGE, "runs a shell"),
        (["timeout", "1d", "busybox", "sh", "-c", "vllm serve"], [], VLLM_IMAGE, "runs a shell"),
        (["env", "-S", "vllm serve m"], [], VLLM_IMAGE, "-S turns a string"),
        (["env", "--split-string=vllm serve m"], [], VLLM_IMAGE, "--split-string turns"),
        (["tini", "-x", "vllm", "serve"], SERVE, VLLM_IMAGE, "option '-x'"),
        (["tini", "--"], [], VLLM_IMAGE, "starts no program"),
        (["/app/start.sh"], SERVE, VLLM_IMAGE, "does not run vLLM"),
        (["python3", "/app/serve.py"], SERVE, VLLM_IMAGE, "does not run vLLM"),
        (["python3", "-c", "import vllm"], SERVE, VLLM_IMAGE, "does not run vLLM"),
        (["python3", "-m", "myserver"], SERVE, VLLM_IMAGE, "does not run vLLM"),
        (["vllm", "bench", "serve"], [], VLLM_IMAGE, "does not run vLLM"),
        # not vLLM at all: a postgres Deployment named as the target
        ([], [], "postgres:16", "not a vLLM image"),
        ([], ["-c", "max_connections=200"], "docker.io/library/postgres:16", "not a vLLM image"),
        (["postgres"], ["-c", "max_connections=200"], "postgres:16", "does not run vLLM"),
        ([], SERVE, "vllm.example.com/team/server:1", "not a vLLM image"),  # only the registry
        ([], SERVE, "", "not a vLLM image"),
    ],
)
def test_what_does_not_visibly_run_vllm_is_refused(
    command: list[str], args: list[str], image: str, says: str
) -> None:
    with pytest.raises(ArgsError, match=re.escape(says)):
        argsmod.check_invocation(command, args, image)


def test_the_refusal_names_the_workload_and_container() -> None:
    dep = DeploymentTemplate("db", NS, args=[], replicas=1).build()
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "postgres:16"
    with pytest.raises(ArgsError, match=r"Deployment .*/db, container 'vllm': no command, and"):
        workload_state(dep, "vllm", "Deployment")


def _deployment(name: str, container: dict[str, Any]) -> dict[str, Any]:
    dep = DeploymentTemplate(name, NS, args=[], replicas=2).build()
    dep["spec"]["template"]["spec"]["containers"][0].update(container)
    return dep


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["sh", "-c", "vllm serve m --port 8000"]},
        {"command": ["tini", "--", "sh", "-c", "vllm serve m --port 8000"]},
        {"command": ["nice", "-n", "0", "sh", "-c", "vllm serve m --port 8000"]},
        {"image": "postgres:16", "args": ["-c", "max_connections=200"]},
    ],
    ids=["sh-c", "tini-sh-c", "nice-sh-c", "postgres"],
)
def test_a_canary_that_does_not_visibly_run_vllm_is_refused_and_never_on(
    apiserver: ApiServer, kube: Kube, container: dict[str, Any]
) -> None:
    apiserver.put(_deployment("chat-canary", container))
    apiserver.put(DeploymentTemplate("chat-baseline", NS, args=list(SERVE), replicas=2).build())
    apiserver.put(canary_cr())
    before = apiserver.get("deployments", NS, "chat-canary", group="apps")
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
    assert dep["spec"] == before["spec"]  # nothing added: the flag would never reach vLLM
    st = parse_status(apiserver.get("speculativecanaries", NS, "chat"))
    spec_valid = [c for c in st.conditions if c.type == "SpecValid"]
    assert spec_valid and spec_valid[0].status == "False"
    assert spec_valid[0].reason == "ArgsUneditable"
    assert "chat-canary" in spec_valid[0].message and "'vllm'" in spec_valid[0].message
    assert st.state != "On"
    reasons = [e["reason"] for e in apiserver.objects("events", NS, group="")]
    assert "ArgsUneditable" in reasons
