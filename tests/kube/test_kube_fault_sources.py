"""The fault matrix, metrics side: a canary that is On meets broken pods and a broken
Prometheus. The real reconciler, the real sources over HTTP on 127.0.0.1, the API double:
every fault is an Error or Inconclusive verdict with its kind, SourceHealthy=False, and never
a flip (missing data never flips anything). docs/reliability.md tabulates these."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kube_support import NS, Clock, FakeSource, canary_cr, seed, speculating

from alphagate import vllm
from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Evaluation, Observation, Role, Verdict
from alphagate.errors import SourceErrorKind
from alphagate.kube.client import Kube
from alphagate.kube.events import EventRecorder
from alphagate.kube.status.resource import parse_status
from alphagate.shell.reconciler import Reconciler
from alphagate.shell.reporting import NullRecorder
from alphagate.sources import Source, make_source
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.endpoints import SourcesConfig
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sandbox.apiserver import ApiServer

HANG_SECONDS = 2.0  # a hanging pod or Prometheus answers after this; the deadlines are 1 s, 0.5 s
ARABIC_INDIC_12 = "\u0661\u0662"


# ---------------------------------------------------------------- pods and a Prometheus


def vllm_page(n: int, *, on: bool, alpha: float = 0.7) -> str:
    """A vLLM /metrics page after `n` scrapes' worth of traffic (counters grow with n)."""
    lines = []
    if on:
        lines += [
            f"{vllm.SPEC_DRAFTS} {100 * n}",
            f"{vllm.SPEC_DRAFT_TOKENS} {400 * n}",
            f"{vllm.SPEC_ACCEPTED} {round(alpha * 400 * n)}",
        ]
    lines.append(f"{vllm.GENERATION_TOKENS} {1000 * n}")
    for family in (vllm.TPOT, vllm.ITL):
        for le in vllm.ITL_BUCKETS:
            lines.append(f'{family}_bucket{{le="{le}"}} {100 * n if le >= 0.05 else 0}')
        lines += [f'{family}_bucket{{le="+Inf"}} {100 * n}', f"{family}_sum {3.0 * n}"]
        lines.append(f"{family}_count {100 * n}")
    return "\n".join(lines) + "\n"


@dataclass
class Pod:
    """One simulated vLLM pod on 127.0.0.1 whose answers a test can break."""

    on: bool
    mode: str = "ok"  # ok | malformed | nan | non_ascii | json | hang
    scrapes: int = 0
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None
    url: str = ""

    def body(self) -> tuple[str, bytes]:
        self.scrapes += 1
        text = vllm_page(self.scrapes, on=self.on)
        if self.mode == "malformed":
            text = text.replace(f"{vllm.GENERATION_TOKENS} ", f'{vllm.GENERATION_TOKENS}{{x="1" ')
        elif self.mode == "nan":
            text = text.replace(f"{vllm.GENERATION_TOKENS} {1000 * self.scrapes}", "")
            text += f"{vllm.GENERATION_TOKENS} NaN\n"
        elif self.mode == "non_ascii":
            text += f'{vllm.SPEC_PER_POS}{{position="0"}} {ARABIC_INDIC_12}\n'
        elif self.mode == "json":
            return "application/json", b'{"status": "success", "data": {"result": []}}'
        elif self.mode == "hang":
            time.sleep(HANG_SECONDS)
        return "text/plain; version=0.0.4", text.encode()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # a short poll: shutdown() waits for it, and each test stops four of these
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    return server, thread


def start_pod(pod: Pod) -> Pod:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            ctype, body = pod.body()
            try:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the scraper gave up on a hanging answer
                pass

    pod.server, pod.thread = serve(Handler)
    pod.url = f"http://127.0.0.1:{pod.server.server_address[1]}/metrics"
    return pod


@dataclass
class Prometheus:
    """A Prometheus HTTP API on 127.0.0.1 that answers what the test scripts (`mode`)."""

    mode: str = "empty"  # empty | partial | nan | error500 | redirect | hang
    queries: int = 0
    server: ThreadingHTTPServer | None = None
    url: str = ""

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        self.queries += 1
        vector = '{"status":"success","data":{"resultType":"vector","result":%s}%s}'
        if self.mode == "empty":
            return 200, {}, (vector % ("[]", "")).encode()
        if self.mode == "partial":
            result = '[{"metric":{"pod":"p"},"value":[1,"5"]}]'
            return 200, {}, (vector % (result, ',"warnings":["store down"]')).encode()
        if self.mode == "nan":
            return 200, {}, (vector % ('[{"metric":{"pod":"p"},"value":[1,"NaN"]}]', "")).encode()
        if self.mode == "redirect":
            return 302, {"Location": "http://127.0.0.1:1/elsewhere"}, b""
        if self.mode == "hang":
            time.sleep(HANG_SECONDS)
        return 500, {}, b'{"status":"error","errorType":"internal","error":"boom"}'


def start_prometheus(prom: Prometheus) -> Prometheus:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            code, headers, body = prom.answer()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass

        do_POST = do_GET

    prom.server, _ = serve(Handler)
    prom.url = f"http://127.0.0.1:{prom.server.server_address[1]}"
    return prom


# ---------------------------------------------------------------- the loop


class Switch:
    """The reconciler keeps one source per generation: this one lets a test swap it."""

    def __init__(self, current: Source) -> None:
        self.current = current

    def observe(
        self, spec: SpeculativeCanarySpec, *, start: float, end: float, interval_seconds: float
    ) -> Observation:
        return self.current.observe(spec, start=start, end=end, interval_seconds=interval_seconds)


@dataclass
class Kinds(NullRecorder):
    """Records the kind of every source failure the reconciler reports (typed, for asserts)."""

    seen: list[SourceErrorKind | None] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def source_error(self, kind: SourceErrorKind | None, *, namespace: str, canary: str) -> None:
        self.seen.append(kind)

    def record(self, evaluation: Evaluation, **kw: Any) -> None:
        self.verdicts.append(evaluation.verdict)


@dataclass
class Rig:
    apiserver: ApiServer
    rec: Reconciler
    switch: Switch
    clock: Clock
    kinds: Kinds
    pods: dict[Role, list[Pod]]

    def step(self, n: int = 1) -> Any:
        out = None
        for _ in range(n):
            self.clock.tick()
            out = self.rec.reconcile(NS, "chat")
        return out

    def spec_patches(self) -> int:
        return sum(
            1
            for r in self.apiserver.requests_matching(method="PATCH", name="chat-canary")
            if r.status == 200 and "spec" in (r.body or {})
        )


@pytest.fixture
def rig(apiserver: ApiServer, kube: Kube) -> Iterator[Rig]:
    """A canary that is On (brought there by the controller itself), its pods serving."""
    # under HANG_SECONDS so a hang times out; 1 s, not 0.5: under the suite's load a healthy
    # loopback read once took longer than 0.5 s and the rig's healthy start failed
    cr = canary_cr(source={"kind": "podScrape", "scrape": {"timeoutSeconds": 1.0}})
    seed(apiserver, cr=cr)
    clock = Clock()
    switch = Switch(FakeSource(apiserver, lambda s: 0.7))
    kinds = Kinds()
    rec = Reconciler(
        kube,
        source_factory=lambda spec, ns, name: switch,
        events=EventRecorder(kube.api_client, clock=clock),
        clock=clock,
        recorder=kinds,
    )
    pods = {
        Role.CANARY: [start_pod(Pod(on=True)) for _ in range(2)],
        Role.BASELINE: [start_pod(Pod(on=False)) for _ in range(2)],
    }
    r = Rig(apiserver, rec, switch, clock, kinds, pods)
    r.step(3)
    assert parse_status(apiserver.get("speculativecanaries", NS, "chat")).state == "On"
    targets = {
        ("chat", role): [Target(p.url, pod=f"{role.value}-{i}") for i, p in enumerate(ps)]
        for role, ps in pods.items()
    }
    switch.current = ScrapeSource(StaticDiscovery(targets), clock=clock)
    r.step(2)  # healthy pods: read without errors
    assert not [k for k in kinds.seen if k is not None]
    try:
        yield r
    finally:
        for ps in pods.values():
            for p in ps:
                p.stop()


def held_on(rig: Rig, steps: int = 2) -> list[Verdict]:
    """Run `steps` evaluations under the fault; the canary must stay On, unpatched. Returns
    the verdicts acted on."""
    before = rig.spec_patches()
    rig.kinds.verdicts.clear()
    for _ in range(steps):
        out = rig.step()
        assert out.evaluation is not None and out.evaluation.action.value == "hold"
    st = parse_status(rig.apiserver.get("speculativecanaries", NS, "chat"))
    assert st.state == "On" and speculating(rig.apiserver, "chat-canary")
    assert rig.spec_patches() == before  # no flip on missing or bad data
    cond = st.condition("SourceHealthy")
    assert cond is not None and cond.status == "False" and cond.reason == "SourceErrors"
    return list(rig.kinds.verdicts)


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("malformed", SourceErrorKind.PARSE),
        ("nan", SourceErrorKind.NAN),
        ("non_ascii", SourceErrorKind.PARSE),
        ("json", SourceErrorKind.PARSE),
        ("hang", SourceErrorKind.TIMEOUT),
    ],
)
def test_a_broken_canary_page_holds(rig: Rig, mode: str, kind: SourceErrorKind) -> None:
    for pod in rig.pods[Role.CANARY]:
        pod.mode = mode
    rig.kinds.seen.clear()
    verdicts = held_on(rig)
    assert kind in rig.kinds.seen
    assert set(verdicts) <= {Verdict.ERROR, Verdict.INCONCLUSIVE} and verdicts


def test_one_bad_pod_of_two_fails_the_pool_not_the_controller(rig: Rig) -> None:
    rig.pods[Role.CANARY][0].mode = "malformed"  # half the pool: above the tolerated 10%
    rig.kinds.seen.clear()
    verdicts = held_on(rig)
    assert set(rig.kinds.seen) == {SourceErrorKind.PARTIAL} and set(verdicts) == {Verdict.ERROR}


def test_a_pod_that_disappears_between_listing_and_scrape_holds(rig: Rig) -> None:
    for pod in rig.pods[Role.CANARY]:
        pod.stop()  # listed (the discovery still names it) but gone: connection refused
    rig.kinds.seen.clear()
    verdicts = held_on(rig)
    assert set(rig.kinds.seen) == {SourceErrorKind.POD_GONE} and set(verdicts) == {Verdict.ERROR}


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("empty", SourceErrorKind.EMPTY),
        ("partial", SourceErrorKind.PARTIAL),
        ("nan", SourceErrorKind.NAN),
        ("error500", SourceErrorKind.HTTP_STATUS),
        ("redirect", SourceErrorKind.HTTP_STATUS),
        ("hang", SourceErrorKind.TIMEOUT),
        ("down", SourceErrorKind.UNREACHABLE),
    ],
)
def test_a_broken_prometheus_holds(rig: Rig, mode: str, kind: SourceErrorKind) -> None:
    prom = start_prometheus(Prometheus(mode=mode))
    assert prom.server is not None
    try:
        if mode == "down":
            prom.server.shutdown()
            prom.server.server_close()
        spec = SpeculativeCanarySpec.model_validate(
            {**canary_cr()["spec"], "source": {"kind": "prometheus", "prometheus": {}}}
        )
        endpoints = SourcesConfig.single(prom.url, timeout_seconds=0.5)
        rig.switch.current = make_source(spec, endpoints=endpoints)
        rig.kinds.seen.clear()
        verdicts = held_on(rig)
        assert kind in rig.kinds.seen
        assert set(verdicts) <= {Verdict.ERROR, Verdict.INCONCLUSIVE}
        assert mode == "down" or prom.queries > 0
    finally:
        if mode != "down":
            prom.server.shutdown()
            prom.server.server_close()
