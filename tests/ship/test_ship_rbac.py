"""RBAC coverage: the shipped Roles allow every Kubernetes API call the controller makes, in the
namespace it makes it, and nothing it does not make.

The real controller (`alphagate run`'s `Controller`: leader election, list+watch, the
reconciler, the pod-scrape source, events, status) runs against the API server double over
real HTTP, scraping simulated vLLM pods; afterwards the double's request log is compared with
deploy/rbac/namespaced/role.yaml (the watched namespace) and
deploy/base/role-leader-election.yaml (the controller's own namespace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import ship_support as ship

from alphagate.config import API_VERSION, KIND
from alphagate.shell.controller import Controller, RunOptions
from alphagate_lab.sandbox.apiserver import ApiServer, ArgoRolloutTemplate, DeploymentTemplate, Rbac
from alphagate_lab.sim.fleet import Fleet
from alphagate_lab.sim.scenario import parse_scenario
from alphagate_lab.sim.server import SimServer

if TYPE_CHECKING:
    from conftest import WaitFor


pytestmark = pytest.mark.slow

WATCHED = "llm"
OWN = "alphagate-system"

SCENARIO = """
name: ship-rbac
seed: 5
duration: 2h
traffic: {rate: 12}
slices:
  chat: {share: 1.0, alpha: 0.75, prompt_tokens: 128, output_tokens: 64}
pools:
  - {name: chat-baseline, role: baseline, slice: chat, replicas: 1}
  - name: chat-canary
    role: canary
    slice: chat
    replicas: 1
    speculative_config: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 4}
"""

Rule = tuple[str, str, str]  # (verb, apiGroup, resource[/subresource])


def _rules(path_parts: tuple[str, ...]) -> set[Rule]:
    (role,) = ship.load_all(ship.DEPLOY.joinpath(*path_parts))
    out: set[Rule] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((verb, group, resource))
    return out


def _shipped() -> dict[str, set[Rule]]:
    """What the manifests grant, per namespace."""
    return {
        WATCHED: _rules(("rbac", "namespaced", "role.yaml")),
        OWN: _rules(("base", "role-leader-election.yaml")),
    }


def _pod(name: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WATCHED,
            "labels": labels,
            "annotations": {"prometheus.io/port": str(port)},
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest"}]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _rollout(name: str) -> dict[str, Any]:
    """An Argo Rollout carrying vLLM, for the second canary (its target kind is Rollout)."""
    return ArgoRolloutTemplate(name, WATCHED, replicas=1, labels={"slice": "chat"}).build()


def _canary(name: str = "chat", target: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": WATCHED},
        "spec": {
            "target": target or {"name": "chat-canary"},
            "baseline": {"name": "chat-baseline"},
            "speculativeConfig": {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "prompt_lookup_max": 4,
            },
            "slices": [
                {
                    "name": "chat",
                    "canary": {"matchLabels": {"slice": "chat", "role": "canary"}},
                    "baseline": {"matchLabels": {"slice": "chat", "role": "baseline"}},
                }
            ],
            # a few seconds of one tiny pod: ten drafts and one window decide (the test is
            # about what the shipped RBAC lets the controller do, not about the statistics)
            "acceptance": {"minDrafts": 10, "consecutiveWindows": 1},
            # one canary pod: its 0.5 s blocks are the latency batches (60 s > the window)
            "latency": {"minCount": 1, "consecutiveWindows": 1, "batchSeconds": 0.5},  # above
            "timing": {
                "intervalSeconds": 1,  # compressed: the test runs minutes at most
                "windowSeconds": 6,  # several batches of one pod: an interval that can decide
                "warmupSeconds": 0,  # sandbox pods need no warm-up
                "minDwellSeconds": 0,  # flips follow the verdicts at once
                "probeSeconds": 60,  # compressed (900 shipped)
                "rolloutTimeoutSeconds": 30,  # compressed: a sandbox rollout takes seconds
            },
            "errors": {"alertAfter": 1},  # the first forbidden call must alert
            "source": {"kind": "podScrape", "scrape": {"timeoutSeconds": 2}},
        },
    }


def test_rbac_covers_every_api_call_and_nothing_more(wait_for: WaitFor) -> None:
    shipped = _shipped()
    rbac = Rbac()
    for rules in shipped.values():
        for verb, group, resource in rules:
            rbac.allow(verb, group, resource)
    sim = SimServer(Fleet(parse_scenario(SCENARIO)), speed=20.0)
    with ApiServer(rbac=rbac) as api, sim:
        for name, role in (("chat-canary", "canary"), ("chat-baseline", "baseline")):
            labels = {"slice": "chat", "role": role}
            api.put(DeploymentTemplate(name, WATCHED, replicas=1, labels=labels).build())
        for pod_name, port in sim.ports.items():
            role = "canary" if "canary" in pod_name else "baseline"
            api.put(_pod(pod_name, {"slice": "chat", "role": role}, port))
        api.put(_canary())
        # a second canary whose target is an Argo Rollout (get and patch on rollouts)
        api.put(_rollout("chat-rollout"))
        api.put(_canary("chat-argo", {"name": "chat-rollout", "kind": "Rollout"}))
        api.clear_requests()  # seeding bypassed HTTP; only the controller's calls count

        controller = Controller(
            RunOptions(
                server=api.url,
                namespace=WATCHED,
                leader_elect=True,
                lease_namespace=OWN,
                lease_duration=3.0,
                renew_deadline=2.0,
                retry_period=0.3,
                metrics_port=0,
                watch_timeout=2.0,
            )
        )
        controller.start()
        try:

            def canary_args() -> list[str]:
                dep = api.get("deployments", WATCHED, "chat-canary", group="apps")
                return list(dep["spec"]["template"]["spec"]["containers"][0].get("args") or [])

            def state() -> str:
                obj = api.get("speculativecanaries", WATCHED, "chat")
                return str((obj.get("status") or {}).get("state", ""))

            # a new canary is probed (patch), judged on scraped pods, and confirmed
            def rollout_args() -> list[str]:
                ro = api.get("rollouts", WATCHED, "chat-rollout", group="argoproj.io")
                return list(ro["spec"]["template"]["spec"]["containers"][0].get("args") or [])

            # Bounds far above the ~10 s these take in `make test`: on a machine at load 8-10
            # the whole test took 45-73 s and 60 s for state On failed once in five runs.
            wait_for(
                lambda: any("speculative" in a for a in canary_args()), 120, "the probe's patch"
            )
            wait_for(
                lambda: any("speculative" in a for a in rollout_args()), 120, "the Rollout's probe"
            )
            wait_for(lambda: state() == "On", 120, "state On")
            # the pods vanish: the source fails and the same SourceErrors Event repeats,
            # which the recorder counts on the existing Event (a patch), not as new ones
            for pod_name in sim.ports:
                api.delete("pods", WATCHED, pod_name)
            wait_for(
                lambda: bool(api.requests_matching(method="PATCH", resource="events")),
                60,
                "a repeated Event",
            )
        finally:
            controller.stop()  # releases the Lease (an update)

    log = api.requests
    assert log
    denied = [f"{r.verb} {r.group}/{r.resource} in {r.namespace}" for r in log if r.status == 403]
    assert not denied, f"calls the shipped RBAC forbids: {denied}"
    used: dict[str, set[Rule]] = {}
    for r in log:
        used.setdefault(r.namespace, set()).add((r.verb, r.group, r.resource))
    # coverage: every call is granted in the namespace it was made in
    for namespace, calls in used.items():
        missing = calls - shipped.get(namespace, set())
        assert not missing, f"calls in namespace {namespace!r} no Role grants: {sorted(missing)}"
    # least privilege: every granted verb was used
    for namespace, rules in shipped.items():
        unused = rules - used.get(namespace, set())
        assert not unused, f"granted in {namespace!r} but never used: {sorted(unused)}"
