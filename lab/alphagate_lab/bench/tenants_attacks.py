"""The noisy-neighbour benchmark's tenants: the healthy victims and one hostile tenant per
attack class (issue 22), as the objects the API double holds and the pods that serve them.

Victims live in namespace `llm`, the attacker in `hostile`. Every policy is a valid
SpeculativeCanary a namespace user could write: the attacks use only what the schema allows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from alphagate.config import API_VERSION, KIND, SpeculativeCanarySpec

VICTIMS_NS: Final = "llm"
HOSTILE_NS: Final = "hostile"


@dataclass
class PodSpec:
    """A pod the pod server serves (`kind`: tenants_pods.KINDS) and the API double lists."""

    name: str
    namespace: str
    labels: dict[str, str]
    kind: str = "normal"


@dataclass
class Tenant:
    """Canaries, their Deployments and their pods, in one namespace."""

    namespace: str
    canaries: list[dict[str, Any]] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)
    pods: list[PodSpec] = field(default_factory=list)


@dataclass(frozen=True)
class Attack:
    """One attack class: the hostile tenant it builds and what it needs around it."""

    name: str
    title: str
    build: Callable[[float], Tenant]  # the victims' interval in, the attacker out
    prometheus: bool = False  # victims and attacker read through Prometheus
    max_samples: int = 0  # Prometheus' --query.max-samples (0: its default)
    # what a condition of the attacker's must name (in its reason): the budget it exceeded,
    # or, for a policy refused outright, the refusal
    named: str = "budget"
    # False: the class makes the attacker spend nothing shared past a budget (docs/reliability.md
    # says what each spends, measured), so "typed with the budget it exceeded" cannot apply: it
    # is judged contained instead (its canaries judged on their own data or naming a budget
    # they did exceed, no victim Error)
    exceeds: bool = True


def canary(
    name: str,
    namespace: str,
    *,
    interval: float,
    source: dict[str, Any],
    slices: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A SpeculativeCanary: one slice selecting `canary: name` pods by role, unless `slices`."""
    body: dict[str, Any] = {
        "target": {"name": f"{name}-canary", "container": "vllm"},
        "baseline": {"name": f"{name}-baseline", "container": "vllm"},
        "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
        "slices": slices or [_slice("chat", name)],
        # Compressed: the attack runs for seconds of wall time, at the interval under test;
        # probe and cooldown longer than any run, so no re-probe adds load of its own.
        "timing": {
            "intervalSeconds": interval,  # the variable of the benchmark
            "windowSeconds": 4 * interval,  # a few intervals: each read spans several scrapes
            "warmupSeconds": 0,  # sandbox pods need no warm-up
            "minDwellSeconds": 0,  # flips follow the verdicts at once
            "probeSeconds": 3600,  # longer than any run
            "cooldown": {"initialSeconds": 3600, "maxSeconds": 7200},  # longer than any run
        },
        "source": source,
    }
    body.update(copy.deepcopy(spec))
    SpeculativeCanarySpec.model_validate(body)  # a hostile tenant still writes valid policies
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def _slice(slice_name: str, selects: str) -> dict[str, Any]:
    return {
        "name": slice_name,
        "canary": {"matchLabels": {"canary": selects, "role": "canary"}},
        "baseline": {"matchLabels": {"canary": selects, "role": "baseline"}},
    }


def _scrape(**settings: Any) -> dict[str, Any]:
    return {"kind": "podScrape", "scrape": {"timeoutSeconds": 5, **settings}}


PROMETHEUS: Final = {"kind": "prometheus", "prometheus": {}}


def _pods(tenant: Tenant, selects: str, per_role: int, kind: str = "normal") -> None:
    for role in ("canary", "baseline"):
        for i in range(per_role):
            labels = {"canary": selects, "role": role}
            tenant.pods.append(PodSpec(f"{selects}-{role}-{i}", tenant.namespace, labels, kind))


def _one(
    interval: float,
    *,
    canary_kind: str = "normal",
    baseline_kind: str = "normal",
    per_role: int = 1,
    source: dict[str, Any] | None = None,
    **spec: Any,
) -> Tenant:
    """One hostile canary `h0` with its Deployments and pods of the given kinds."""
    t = Tenant(HOSTILE_NS, deployments=["h0-canary", "h0-baseline"])
    t.canaries.append(canary("h0", HOSTILE_NS, interval=interval, source=source or _scrape(),
                             **spec))  # fmt: skip
    for role, kind in (("canary", canary_kind), ("baseline", baseline_kind)):
        for i in range(per_role):
            labels = {"canary": "h0", "role": role}
            t.pods.append(PodSpec(f"h0-{role}-{i}", HOSTILE_NS, labels, kind))
    return t


def victims(n: int, interval: float, *, prometheus: bool) -> Tenant:
    """`n` healthy canaries, two pods a pool, the shipped scrape settings."""
    t = Tenant(VICTIMS_NS)
    for i in range(n):
        name = f"v{i}"
        source = PROMETHEUS if prometheus else _scrape()
        t.canaries.append(canary(name, VICTIMS_NS, interval=interval, source=source))
        t.deployments += [f"{name}-canary", f"{name}-baseline"]
        _pods(t, name, 2)
    return t


def _shared_pods(interval: float) -> Tenant:
    """20 canaries, each selecting the same 4 heavy pods."""
    t = Tenant(HOSTILE_NS)
    _pods(t, "shared", 2, "heavy")
    for i in range(20):
        name = f"h{i}"
        slices = [_slice("chat", "shared")]
        t.canaries.append(
            canary(name, HOSTILE_NS, interval=interval, source=_scrape(), slices=slices)
        )
        t.deployments += [f"{name}-canary", f"{name}-baseline"]
    return t


def _windows(interval: float) -> Tenant:
    """24 canaries on Prometheus, each with its own window (a batch each)."""
    t = Tenant(HOSTILE_NS)
    _pods(t, "win", 1)
    for i in range(24):
        name = f"h{i}"
        c = canary(name, HOSTILE_NS, interval=interval, source=PROMETHEUS,
                   slices=[_slice("chat", "win")])  # fmt: skip
        c["spec"]["timing"]["windowSeconds"] = 4 * interval + i  # a distinct window each
        t.canaries.append(c)
        t.deployments += [f"{name}-canary", f"{name}-baseline"]
    return t


def _slice_flood(interval: float) -> Tenant:
    """One canary of 64 slices, each its own Deployment, at the 0.1 s interval floor."""
    t = Tenant(HOSTILE_NS, deployments=["h0-baseline"])
    slices = []
    for i in range(64):
        s = _slice(f"s{i}", f"flood{i}")
        s["deployment"] = {"name": f"h0-s{i}", "container": "vllm"}
        slices.append(s)
        t.deployments.append(f"h0-s{i}")
        _pods(t, f"flood{i}", 1)
    c = canary("h0", HOSTILE_NS, interval=0.1, source=_scrape(), slices=slices,
               aggregation="perSlice")  # fmt: skip
    c["spec"]["target"]["name"] = "h0-s0"
    c["spec"]["timing"]["windowSeconds"] = 4 * interval
    t.canaries.append(c)
    return t


MAX_BODY: Final = 64 * 1024 * 1024

ATTACKS: Final = (
    Attack(
        "slow-pod",
        "one pod that accepts and never answers, scrape.timeoutSeconds 300",
        lambda i: _one(i, canary_kind="slow", source=_scrape(timeoutSeconds=300)),
    ),
    Attack(
        "heavy-pages",
        "32 pods of valid 1.6 MB pages, a new shape each scrape",
        lambda i: _one(i, canary_kind="heavy", baseline_kind="heavy", per_role=16),
    ),
    Attack(
        "concurrency-collapse",
        "maxConcurrency 1 with maxBodyBytes 64 MiB",
        lambda i: _one(i, per_role=2, source=_scrape(maxConcurrency=1, maxBodyBytes=MAX_BODY)),
        exceeds=False,
    ),
    Attack(
        "many-buckets",
        "one TPOT histogram of 19,000 le buckets, read every 0.5 s",
        lambda i: _one(0.5, canary_kind="buckets"),
    ),
    Attack("shared-pods", "20 canaries selecting the same 4 heavy pods", _shared_pods),
    Attack(
        "prometheus-pools",
        "pools that push the shared query past what Prometheus will load",
        lambda i: _one(
            i, canary_kind="series", baseline_kind="series", per_role=4, source=PROMETHEUS
        ),
        prometheus=True,
        max_samples=100_000,
        exceeds=False,
    ),
    Attack(
        "many-windows",
        "24 canaries with distinct windows, a slow Prometheus",
        _windows,
        prometheus=True,
        exceeds=False,
    ),
    Attack("slice-flood", "64 slices at the 0.1 s interval floor", _slice_flood),
    Attack(
        "cross-namespace",
        "a Prometheus policy with matchLabels {namespace: llm} selecting a victim's pods",
        lambda i: _one(
            i,
            source={"kind": "prometheus", "prometheus": {"matchLabels": {"namespace": VICTIMS_NS}}},
            slices=[_slice("chat", "v0")],
        ),
        prometheus=True,
        named="CrossNamespace",
    ),
)
BY_NAME: Final = {a.name: a for a in ATTACKS}
