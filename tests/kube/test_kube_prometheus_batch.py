"""The live reconciler batches its Prometheus queries across the canaries due in one cycle.

Against a real Prometheus (1 s scrapes of simulated vLLM pods) and two identical API-server
doubles, one reconciler evaluates four canaries one at a time and another evaluates them in one
`reconcile_many`, at the same `now`: every decision is the same, field by field, the batched
cycle sends far fewer queries, and the canary whose selector Prometheus refuses (a label name
that is not one) is an Error alone in both, while the other three read their pools.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from kube_support import CFG, NS, canary_cr

from alphagate.core.model import CheckKind, Evaluation, Verdict
from alphagate.errors import SourceErrorKind
from alphagate.kube import args as argsmod
from alphagate.kube.client import Kube
from alphagate.shell.outcome import Outcome
from alphagate.shell.reconciler import Reconciler
from alphagate.shell.reporting import NullRecorder
from alphagate.sources.endpoints import PrometheusEndpoint, SourcesConfig
from alphagate.sources.prometheus import PrometheusSource
from alphagate_lab.sandbox.apiserver import ApiServer, DeploymentTemplate, Rbac
from alphagate_lab.sandbox.apiserver.deployments import deployment_status
from alphagate_lab.testing.prometheus import PrometheusServer, available
from fleets import BATCH_ALPHAS, BATCH_INTERVAL, BATCH_SLICES

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed"),
]

INTERVAL = BATCH_INTERVAL
SLICES = BATCH_SLICES
ALPHAS = BATCH_ALPHAS


def resource(slice_name: str, *, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A canary over one simulated slice; `selector`: extra Prometheus matchers."""
    prometheus: dict[str, Any] = {"timeoutSeconds": 5}
    if selector:
        prometheus["matchLabels"] = selector
    data = slice_name if selector is None else "chat"
    return canary_cr(
        slice_name,
        target={"name": f"{slice_name}-canary", "container": "vllm"},
        baseline={"name": f"{slice_name}-baseline", "container": "vllm"},
        slices=[
            {
                "name": data,
                "canary": {"matchLabels": {"role": "canary", "slice": data}},
                "baseline": {"matchLabels": {"role": "baseline", "slice": data}},
            }
        ],
        source={"kind": "prometheus", "prometheus": prometheus},
        # seconds of a simulated fleet: one judged window of a hundred drafts decides
        acceptance={"minDrafts": 100, "consecutiveWindows": 1},
        timing={
            "intervalSeconds": INTERVAL,  # compressed: the test runs minutes at most
            "windowSeconds": 4 * INTERVAL,  # compressed with the interval
            "warmupSeconds": 0,  # sandbox pods need no warm-up
            "minDwellSeconds": 0,  # flips follow the verdicts at once
        },
    )


NAMES = (*SLICES, "broken")
AGO = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
RESOURCES = [resource(s) for s in SLICES] + [resource("broken", selector={"9bad": "x"})]


class Counting(httpx.HTTPTransport):
    """Counts the queries sent (not the scrape-interval probe of the targets API)."""

    def __init__(self) -> None:
        super().__init__()
        self.queries = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/v1/query"):
            self.queries += 1
        return super().handle_request(request)


@pytest.fixture
def prom(fleet_prometheus: PrometheusServer) -> PrometheusServer:
    """The session's Prometheus over BATCH_FLEET (1 s scrapes, a window of history)."""
    return fleet_prometheus


def reconciler(kube: Kube, url: str, transport: Counting, recorder: Kinds) -> Reconciler:
    config = SourcesConfig(prometheus=[PrometheusEndpoint(url=url)])
    return Reconciler(
        kube,
        namespace=NS,
        dry_run=True,
        recorder=recorder,
        source_factory=lambda spec, ns, name: PrometheusSource.from_spec(
            spec, config, transport=transport
        ),
    )


def seed(api: ApiServer) -> None:
    for name in NAMES:
        on = ["--model", "m", "--speculative-config", argsmod.render(CFG)]
        for dep, args in ((f"{name}-canary", on), (f"{name}-baseline", ["--model", "m"])):
            api.put(DeploymentTemplate(dep, NS, args=args, replicas=2).build())
            # rolled out a minute ago: the window after the probe is judged at once
            done = deployment_status(
                name=dep, generation=1, replicas=2, updated=2, ready=2, complete=True, stamp=AGO
            )
            api.set_deployment_status(NS, dep, done)
    for cr in RESOURCES:
        api.put(cr)


@dataclass
class Kinds(NullRecorder):
    """The source-error kinds reported, by canary."""

    kinds: dict[str, set[SourceErrorKind | None]] = field(default_factory=dict)

    def source_error(self, kind: SourceErrorKind | None, *, namespace: str, canary: str) -> None:
        self.kinds.setdefault(canary, set()).add(kind)


def decision(ev: Evaluation) -> tuple[object, ...]:
    """An evaluation's typed decision: action, target, state, and each check's verdict."""
    checks = tuple((c.kind, c.slice, c.verdict) for c in ev.checks)
    return (ev.action, ev.target_speculation_on, ev.memory.state, checks)


def test_one_cycle_batches_the_queries_and_decides_as_one_canary_at_a_time(
    prom: PrometheusServer, shipped_rbac: Rbac
) -> None:
    now = time.time() - 1.5  # Prometheus has scraped past it
    outcomes: list[list[Outcome]] = []
    counts: list[int] = []
    kinds: list[dict[str, set[SourceErrorKind | None]]] = []
    for batched in (False, True):
        with ApiServer(rbac=shipped_rbac) as api:
            seed(api)
            kube = Kube.from_configuration(api.configuration())
            transport, recorder = Counting(), Kinds()
            rec = reconciler(kube, prom.url, transport, recorder)
            try:
                for at in (now - INTERVAL, now):  # the probe, then its first judged window
                    if batched:
                        outs = rec.reconcile_many([(NS, n) for n in NAMES], now=at)
                    else:
                        outs = [rec.reconcile(NS, n, now=at) for n in NAMES]
                outcomes.append(outs)
                counts.append(transport.queries)
                kinds.append(recorder.kinds)
            finally:
                rec.close()
                kube.close()
    alone, together = outcomes
    for a, b in zip(alone, together, strict=True):
        assert a.spec_error is None and b.spec_error is None
        ea, eb = a.evaluation, b.evaluation
        assert ea is not None and eb is not None
        assert decision(ea) == decision(eb)
        assert a.status_written and b.status_written
    # real decisions, not only first probes: 0.7 passes the gate, 0.5 does not
    verdicts = [{c.kind: c.verdict for c in o.evaluation.checks} for o in together if o.evaluation]
    assert verdicts[0][CheckKind.ACCEPTANCE] is not Verdict.FAIL
    assert verdicts[1][CheckKind.ACCEPTANCE] is not Verdict.PASS
    assert any(v[CheckKind.ACCEPTANCE] in (Verdict.PASS, Verdict.FAIL) for v in verdicts)
    assert verdicts[3][CheckKind.SOURCE] is Verdict.ERROR
    # the broken canary's pools are query errors, both ways; nobody else has an error
    assert kinds[0] == kinds[1] == {"broken": {SourceErrorKind.QUERY_ERROR}}
    # the good canaries' alpha as measured: the same both ways, near each slice's truth
    for k, (slice_name, truth) in enumerate(zip(SLICES, ALPHAS, strict=True)):
        one, two = alone[k].evaluation, together[k].evaluation
        assert one is not None and two is not None
        got, want = two.estimates[slice_name], one.estimates[slice_name]
        assert got.batches == want.batches >= 3
        assert (got.value, got.draft_tokens) == pytest.approx(
            (want.value, want.draft_tokens), rel=1e-9
        )
        assert got.value == pytest.approx(truth, abs=0.1)
    # one query per family for the three good canaries, plus the broken one's own queries
    assert counts[1] < counts[0] / 2, counts
