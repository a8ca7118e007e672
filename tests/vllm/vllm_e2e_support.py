"""Helpers for the real-vLLM end-to-end test: traffic that follows restarted pods, a sampler of
the canary's own counters, a timeline printed for CI logs, and a stand-in vLLM home.

The traffic driver and the sampler find the current pod of a Deployment through the
:class:`~alphagate_lab.sandbox.vllm_runtime.VllmRuntime`, so they keep working across the restarts
the controller causes. Every loop here is bounded by a stop event and a hard deadline.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.load import LoadResult, Mix, run_load
from alphagate_lab.sandbox.vllm_runtime import (
    MetricsPage,
    VllmRuntime,
    alpha_between,
    scrape_metrics,
)

# ---------------------------------------------------------------- timeline


@dataclass(frozen=True, slots=True)
class Line:
    at: float  # unix seconds
    source: str
    text: str


class Timeline:
    """What happened, from every part, in order; rendered relative to the test's start."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self._lines: list[Line] = []
        self._lock = threading.Lock()
        self.phases: list[tuple[str, float, float | None]] = []

    def add(self, source: str, text: str, *, at: float | None = None) -> None:
        with self._lock:
            self._lines.append(Line(time.time() if at is None else at, source, text))

    def phase(self, name: str) -> None:
        """Close the running phase and open `name`."""
        now = time.time()
        with self._lock:
            if self.phases and self.phases[-1][2] is None:
                label, start, _ = self.phases[-1]
                self.phases[-1] = (label, start, now)
            self.phases.append((name, now, None))
            self._lines.append(Line(now, "test", f"== phase: {name}"))

    def close(self) -> None:
        self.phase("teardown")

    def rel(self, at: float) -> float:
        return at - self.t0

    def render(self, *, width: int = 220) -> str:
        with self._lock:
            lines = sorted(self._lines, key=lambda ln: ln.at)
            phases = list(self.phases)
        out = ["", "=" * 30 + " alphagate on real vLLM: timeline " + "=" * 30]
        for ln in lines:
            text = f"  +{self.rel(ln.at):7.1f}s  {ln.source:<10} {ln.text}"
            out.append(text if len(text) <= width else text[: width - 3] + "...")
        out.append("-" * 30 + " phase durations " + "-" * 30)
        end = time.time()
        for name, start, stop in phases:
            out.append(f"  {name:<58} {((stop or end) - start):7.1f} s")
        out.append(f"  {'total':<58} {end - self.t0:7.1f} s")
        return "\n".join(out)


# ---------------------------------------------------------------- traffic


@dataclass(slots=True)
class TrafficStats:
    ok: int = 0
    failed: int = 0
    completion_tokens: int = 0
    cycles: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, r: LoadResult) -> None:
        self.ok += r.ok
        self.failed += r.failed
        self.completion_tokens += r.completion_tokens
        self.cycles += 1
        for e in r.errors:
            if len(self.errors) < 5:
                self.errors.append(e)


class TrafficDriver:
    """Completions to each Deployment's ready pod at a fixed concurrency, in short bounded
    cycles so a mix switch takes effect within `cycle_s` and a restarted pod is followed.

    `hold_while_unready` maps a Deployment to another one that must have a ready pod for it
    to get traffic. On a cluster the canary restarts on its own node; here both pods share 2
    cores, and a busy baseline more than doubles a vLLM restart (measured: 237-254 s instead
    of ~95 s), so the baseline's load pauses while the canary restarts. Nothing is judged
    during a rollout, so the controller sees no difference.
    """

    def __init__(
        self,
        runtime: VllmRuntime,
        *,
        model: str,
        concurrency: Mapping[str, int],
        mix: Mix = Mix.REPETITIVE,
        cycle_s: float = 2.0,
        max_tokens: int = 64,
        max_total_s: float = 1500.0,
        timeline: Timeline | None = None,
        hold_while_unready: Mapping[str, str] | None = None,
    ) -> None:
        self.runtime = runtime
        self.hold_while_unready = dict(hold_while_unready or {})
        self.model = model
        self.concurrency = dict(concurrency)
        self._mix = mix
        self.cycle_s = cycle_s
        self.max_tokens = max_tokens
        self.deadline = time.monotonic() + max_total_s
        self.timeline = timeline
        self.switches: list[tuple[float, Mix]] = [(time.time(), mix)]
        self.stats: dict[tuple[str, Mix], TrafficStats] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def mix(self) -> Mix:
        with self._lock:
            return self._mix

    def set_mix(self, mix: Mix) -> float:
        """Switch the prompt mix; returns when (unix seconds) it was switched."""
        now = time.time()
        with self._lock:
            self._mix = mix
            self.switches.append((now, mix))
        if self.timeline is not None:
            self.timeline.add("load", f"prompt mix -> {mix.value}")
        return now

    def mix_at(self, t: float) -> Mix:
        with self._lock:
            current = self.switches[0][1]
            for at, mix in self.switches:
                if at <= t:
                    current = mix
            return current

    def pure(self, start: float, end: float, *, margin_s: float | None = None) -> Mix | None:
        """The mix if [start, end] saw only one, else None. Requests of the old mix still in
        flight after a switch (a cycle plus one slow request: 64 tokens at up to ~75 ms)
        count as the old mix, hence the margin."""
        margin = self.cycle_s + 8.0 if margin_s is None else margin_s
        with self._lock:
            inside = [(at, m) for at, m in self.switches[1:] if start - margin < at <= end]
        if inside:
            return None
        return self.mix_at(start)

    def start(self) -> TrafficDriver:
        for dep in self.concurrency:
            th = threading.Thread(target=self._run, args=(dep,), name=f"load-{dep}", daemon=True)
            self._threads.append(th)
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=60)

    def _run(self, deployment: str) -> None:
        seed = 0
        held = False
        other = self.hold_while_unready.get(deployment)
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            hold = other is not None and self.runtime.ready_url(other) is None
            if hold != held and self.timeline is not None:
                self.timeline.add(
                    "load",
                    f"{deployment}: load paused while {other} restarts"
                    if hold
                    else f"{deployment}: load resumed",
                )
            held = hold
            url = None if hold else self.runtime.ready_url(deployment)
            if url is None:
                self._stop.wait(0.2)
                continue
            mix = self.mix
            seed += 1
            try:
                res = run_load(
                    url,
                    model=self.model,
                    mix=mix,
                    concurrency=self.concurrency[deployment],
                    duration_s=self.cycle_s,
                    max_tokens=self.max_tokens,
                    seed=seed,
                    request_timeout_s=30.0,
                    stop_event=self._stop,
                )
            except SandboxError as exc:  # pragma: no cover - bad arguments only
                res = LoadResult(mix=mix, failed=1, errors=[str(exc)])
            with self._lock:
                self.stats.setdefault((deployment, mix), TrafficStats()).add(res)
            if res.ok == 0:
                self._stop.wait(0.2)  # the pod is going away: do not spin

    def summary(self) -> str:
        with self._lock:
            items = sorted(self.stats.items(), key=lambda kv: (kv[0][0], kv[0][1].value))
        return "; ".join(
            f"{dep}/{mix.value}: {s.ok} ok, {s.failed} failed, {s.completion_tokens} tokens"
            for (dep, mix), s in items
        )


# ---------------------------------------------------------------- the canary's own counters


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    pod: str
    page: MetricsPage


class CounterSampler:
    """Scrapes the Deployment's current ready pod every `period_s`, independently of
    Prometheus, so alpha over any window can be recomputed from the server's own counters."""

    def __init__(
        self,
        runtime: VllmRuntime,
        deployment: str,
        *,
        period_s: float = 0.5,
        max_total_s: float = 1500.0,
    ) -> None:
        self.runtime = runtime
        self.deployment = deployment
        self.period_s = period_s
        self.deadline = time.monotonic() + max_total_s
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CounterSampler:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            inc = self.runtime.current(self.deployment)
            if inc is not None and inc.ready_at is not None:
                with contextlib.suppress(SandboxError):
                    page = scrape_metrics(f"{inc.url}/metrics", timeout_s=5.0)
                    with self._lock:
                        self.samples.append(Sample(page.at, inc.pod, page))
            self._stop.wait(self.period_s)

    def _nearest(self, t: float) -> Sample | None:
        with self._lock:
            samples = list(self.samples)
        if not samples:
            return None
        best = min(samples, key=lambda s: abs(s.at - t))
        # a scrape of a busy vLLM on 2 shared cores can take seconds: allow that much slack
        return best if abs(best.at - t) <= 2 * self.period_s + 4.0 else None

    def alpha_over(self, start: float, end: float) -> tuple[float, float, float] | None:
        """(alpha, accepted, drafted tokens) over [start, end] from one pod's counters; None
        when there are no samples near both ends or they come from different pods."""
        a, b = self._nearest(start), self._nearest(end)
        if a is None or b is None or a.pod != b.pod or b.at <= a.at:
            return None
        return alpha_between(a.page, b.page)


# ---------------------------------------------------------------- a stand-in vLLM home

FAKE_SERVER = textwrap.dedent(
    """
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    spec = any(a.startswith("--speculative-config") for a in args)
    name = args[args.index("--served-model-name") + 1]
    started = time.monotonic()
    tokens = 0

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body, ctype="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200 if time.monotonic() - started > 0.2 else 503, "")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": name}]}))
            elif self.path == "/metrics":
                lines = [
                    "# TYPE vllm:generation_tokens_total counter",
                    f'vllm:generation_tokens_total{{model_name="{name}"}} {tokens}',
                ]
                if spec:
                    lines += [
                        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                        f'vllm:spec_decode_num_draft_tokens_total{{model_name="{name}"}} {tokens}',
                        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{name}"}}'
                        f" {tokens // 2}",
                    ]
                self._send(200, "\\n".join(lines) + "\\n", "text/plain")
            else:
                self._send(404, "{}")

        def do_POST(self):
            global tokens
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            tokens += body["max_tokens"]
            usage = {"prompt_tokens": 3, "completion_tokens": body["max_tokens"]}
            self._send(200, json.dumps({"usage": usage}))

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def fake_vllm_home(root: Path) -> Path:
    """A vLLM home as setup.sh leaves it, whose "python" runs a tiny stand-in server that
    exposes spec-decode counters only when started with --speculative-config."""
    home = root / "vllm-home"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "model").mkdir()
    (home / "model" / "config.json").write_text("{}")
    (home / ".stamp").write_text("test\n")
    script = root / "fake_vllm.py"
    script.write_text(FAKE_SERVER)
    python = home / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    python.chmod(0o755)
    return home


def wait_until(what: str, cond: object, timeout_s: float, *, poll_s: float = 0.2) -> float:
    """Poll `cond()` until truthy; returns the seconds it took; AssertionError on timeout."""
    assert callable(cond)
    t0 = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)
