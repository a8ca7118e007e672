"""vLLM-like pods for scrape tests: real prometheus_client metrics served over HTTP on
127.0.0.1, and a clock the tests move."""

from __future__ import annotations

import contextlib
import threading

from loopback import Handler, Loopback
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from alphagate import vllm
from alphagate.core.model import Role
from alphagate.sources.discovery import StaticDiscovery, Target


class FakePod(Loopback):
    """A vLLM-like pod: real prometheus_client metrics, served over HTTP on 127.0.0.1.

    `mode` switches the answer: "ok", "hang" (never answers within the test bound),
    "garbage", "huge", "status" (HTTP 500)."""

    def __init__(self, name: str, *, speculating: bool = True, model: str = "m") -> None:
        self.name = name
        self.model = model
        self.speculating = speculating
        self.mode = "ok"
        self.release = threading.Event()
        self.restart()
        pod = self

        class PodHandler(Handler):
            def do_GET(self) -> None:
                if pod.mode == "hang":
                    pod.release.wait(10)
                    return
                if pod.mode == "status":
                    self.send_response(500)
                    self.end_headers()
                    return
                with contextlib.suppress(OSError):
                    self.answer(pod.body())

        super().__init__(PodHandler)
        self.url = f"{self.url}/metrics"

    def restart(self) -> None:
        """A new process: fresh registry, counters from zero, new _created stamps."""
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.registry = reg
        if self.speculating:
            self.drafts = Counter(vllm.base(vllm.SPEC_DRAFTS), "h", labels, registry=reg)
            self.tokens = Counter(vllm.base(vllm.SPEC_DRAFT_TOKENS), "h", labels, registry=reg)
            self.accepted = Counter(vllm.base(vllm.SPEC_ACCEPTED), "h", labels, registry=reg)
            self.per_pos = Counter(
                vllm.base(vllm.SPEC_PER_POS), "h", [*labels, "position"], registry=reg
            )
        self.gen = Counter(vllm.base(vllm.GENERATION_TOKENS), "h", labels, registry=reg)
        self.itl = Histogram(vllm.ITL, "h", labels, buckets=vllm.ITL_BUCKETS, registry=reg)

    def work(self, drafts: int, accepted_per_draft: int, k: int = 4, itl: float = 0.02) -> None:
        """`drafts` drafts of K tokens with `accepted_per_draft` accepted each."""
        if self.speculating:
            self.drafts.labels(self.model, "0").inc(drafts)
            self.tokens.labels(self.model, "0").inc(drafts * k)
            self.accepted.labels(self.model, "0").inc(drafts * accepted_per_draft)
            for i in range(accepted_per_draft):
                self.per_pos.labels(self.model, "0", str(i)).inc(drafts)
        self.gen.labels(self.model, "0").inc(drafts * (1 + accepted_per_draft))
        for _ in range(drafts):
            self.itl.labels(self.model, "0").observe(itl)

    def body(self) -> bytes:
        if self.mode == "garbage":
            return b'vllm:generation_tokens_total{engine="0" 12\n'
        if self.mode == "huge":
            return b"# padding\n" * 200_000
        return generate_latest(self.registry)

    def stop(self) -> None:
        self.release.set()
        super().stop()


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def static(canary: list[FakePod], baseline: list[FakePod]) -> StaticDiscovery:
    """One slice, "chat": these pods as its canary and baseline pools."""
    return StaticDiscovery(
        {
            ("chat", Role.CANARY): [Target(p.url, pod=p.name) for p in canary],
            ("chat", Role.BASELINE): [Target(p.url, pod=p.name) for p in baseline],
        }
    )
