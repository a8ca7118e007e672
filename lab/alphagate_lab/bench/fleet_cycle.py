"""The fleet benchmark's measured part: one evaluation cycle over a simulated fleet.

Each run of :func:`worker` (pod scraping or the Prometheus path) or :func:`fetch_only` (the
HTTP layer alone) happens in a fresh process (:func:`run_worker`), so its CPU seconds and
peak RSS are its own. The fleet's shape (:func:`layout`) is shared with the Prometheus that
scrapes the same pods (:func:`targets`). Every loop is bounded in count and time.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from alphagate.sources.endpoints import PodScrapeConfig
from alphagate.sources.http import DeadlineTransport

DEFAULT_ENCODING = PodScrapeConfig().accept_encoding
"""What the controller asks pods for unless its admin chose otherwise (`podScrape`)."""

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- measuring


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Counted(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, add: Callable[[int], None]) -> None:
        self.inner, self.add = inner, add

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.add(len(chunk))
            yield chunk

    def close(self) -> None:
        self.inner.close()


class CountingTransport(DeadlineTransport):
    """The sources' own transport (deadline-bounded sockets), counting bytes read off the wire
    (compressed, as sent)."""

    def __init__(self, *, limits: httpx.Limits | None = None) -> None:
        super().__init__(limits=limits)
        self.bytes = 0
        self.requests = 0
        self._lock = threading.Lock()

    def _add(self, n: int) -> None:
        with self._lock:
            self.bytes += n

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        with self._lock:
            self.requests += 1
        assert isinstance(resp.stream, httpx.SyncByteStream)
        resp.stream = _Counted(resp.stream, self._add)
        return resp


# --------------------------------------------------------------------------- the fleet


def pod_name(i: int) -> str:
    return f"pod-{i:05d}"


def layout(pods: int, per_canary: int) -> list[tuple[str, list[int], list[int]]]:
    """(canary name, its canary pods, its baseline pods): a fifth of each group is canary."""
    per = max(2, min(per_canary, pods))
    out = []
    for j, first in enumerate(range(0, pods, per)):
        group = list(range(first, min(first + per, pods)))
        cut = max(1, len(group) // 5)
        out.append((f"c{j}", group[:cut], group[cut:] or group[:cut]))
    return out


def targets(
    ports: list[int], pods: int, per_canary: int, *, path: str = "/metrics"
) -> list[dict[str, Any]]:
    """File-SD target groups for Prometheus: one per pod, labelled pod, canary and role."""
    out = []
    for name, canary, baseline in layout(pods, per_canary):
        for role, group in (("canary", canary), ("baseline", baseline)):
            for i in group:
                labels = {"pod": pod_name(i), "canary": name, "role": role}
                labels["__metrics_path__"] = path
                out.append({"targets": [f"127.0.0.1:{ports[i]}"], "labels": labels})
    return out


def spec_for(name: str, source: dict[str, Any], interval: float, window: float) -> Any:
    from alphagate.config import SpeculativeCanarySpec

    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": name},
            "baseline": {"name": f"{name}-base"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "s",
                    "canary": {"matchLabels": {"canary": name, "role": "canary"}},
                    "baseline": {"matchLabels": {"canary": name, "role": "baseline"}},
                }
            ],
            "source": source,
            "timing": {"intervalSeconds": interval, "windowSeconds": window},
        }
    )


# --------------------------------------------------------------------------- the worker


def worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run `cycles` measured evaluation cycles (after warm-up ones) in this process; numbers
    as a dict.

    The decisions are comparable across sources: every canary starts each run Probing (a
    probe under way, its warm-up over), so every measured cycle is a judged window, and a
    window is only measured once the source covers it. Pod scraping first reads
    ceil(window / interval) warm-up cycles (a scrape gives increments from the second on, so
    its first window would hold one interval); the Prometheus path reads one (its history
    covers the window: `fleet` waits for it). Prometheus-path policies evaluate every
    MIN_SCRAPES scrape intervals (`core.timing`): over one scrape interval a raw increase() is
    mostly empty (sparse-scrapes, held), which made the raw rows hold where the recorded rates
    (a rate over three scrape intervals) decided. Tallies: actions, verdicts, and the typed
    cause of every Inconclusive or Error check."""
    from alphagate.config import ScrapeSettings
    from alphagate.core.evaluate import evaluate
    from alphagate.core.model import Memory, Role, Rollout, State, Verdict
    from alphagate.core.timing import MIN_SCRAPES
    from alphagate.sources.cycle import Read, observe_each
    from alphagate.sources.discovery import StaticDiscovery, Target
    from alphagate.sources.endpoints import PrometheusEndpoint
    from alphagate.sources.prombatch import observe_many
    from alphagate.sources.prometheus import PrometheusSource
    from alphagate.sources.scrape import ScrapeSource

    interval, window = cfg["interval"], cfg["window"]
    scraping = cfg["source"] == "scrape"
    # the policy's interval: a pod scrape's batch is one scrape; a raw increase() needs two
    judged = interval if scraping else MIN_SCRAPES * interval
    conc = cfg.get("concurrency", 32)
    encoding = cfg.get("encoding", DEFAULT_ENCODING)
    rss_start = peak_rss_mb()
    transport = CountingTransport(
        limits=httpx.Limits(max_connections=conc, max_keepalive_connections=conc),
    )
    units: list[tuple[Any, Any]] = []
    shared: Any = None  # the Prometheus path: one source for every canary (batched queries)
    for name, canary, baseline in layout(cfg["pods"], cfg["per_canary"]):
        if scraping:
            settings = ScrapeSettings(max_concurrency=conc, timeout_seconds=10)
            spec = spec_for(name, {"kind": "podScrape"}, judged, window)
            urls = {
                ("s", Role.CANARY): [_target(cfg, i, Target) for i in canary],
                ("s", Role.BASELINE): [_target(cfg, i, Target) for i in baseline],
            }
            src: Any = ScrapeSource(
                StaticDiscovery(urls), settings=settings, accept_encoding=encoding
            )
        else:
            block = {"kind": "prometheus", "prometheus": {}}
            spec = spec_for(name, block, judged, window)
            if shared is None or not cfg.get("batched", True):
                # the rules record every scrape interval (`fleet` scales them so)
                every = int(interval) if cfg.get("recorded") else None
                endpoint = PrometheusEndpoint(
                    url=cfg["prometheus_url"],
                    recorded_rules_interval_seconds=every,
                    timeout_seconds=cfg.get("prometheus_timeout", 10.0),
                )
                shared = src = PrometheusSource(endpoint, transport=transport)
            src = shared
        units.append((spec, src))
    rollout = Rollout(completed_at=0.0, speculation_on=True)
    probing = Memory(state=State.PROBING, probe_deadline=float("inf"))
    memories = [probing for _ in units]
    prom_pid = cfg.get("prometheus_pid")

    def read() -> int:  # bytes off the wire: the Prometheus client's, the scrapers'
        return transport.bytes + sum(getattr(src, "bytes_read", 0) for _, src in units)

    cycles = []
    errors: dict[str, int] = {}
    actions: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    causes: dict[str, int] = {}
    deadline = time.monotonic() + cfg.get("max_seconds", 600)
    next_at = time.time()
    warmup = math.ceil(window / interval - 1e-9) if scraping else 1
    for n in range(cfg["cycles"] + warmup):
        measured = n >= warmup
        time.sleep(max(0.0, next_at - time.time()))
        next_at = time.time() + interval
        b0, c0, w0 = read(), self_cpu(), time.perf_counter()
        q0 = transport.requests
        p0 = proc_cpu(prom_pid) if prom_pid else 0.0
        now = time.time()
        if not scraping and cfg.get("batched", True):
            seen = observe_many(
                shared,
                [u[0] for u in units],
                start=now - window,
                end=now,
                interval_seconds=judged,
            )
        elif cfg.get("batched", True):  # pod scraping as the controller does: one wave
            seen = observe_each([Read(src, spec, now - window, now, judged) for spec, src in units])
        else:
            seen = [
                src.observe(spec, start=now - window, end=now, interval_seconds=judged)
                for spec, src in units
            ]
        for k, ((spec, _), obs) in enumerate(zip(units, seen, strict=True)):
            ev = evaluate(spec, obs, memories[k], rollout, now=now)
            if not measured:
                continue  # warm-up: read, not judged
            # cycles are one interval apart over a window of several: move the end of the last
            # judged window back so the next cycle's window is judged too, right after it
            # (the machine would only look at it)
            streak_end = now - window + interval / 2
            memories[k] = ev.memory.model_copy(update={"streak_end": streak_end})
            for pool in obs.pools:
                if pool.error:
                    kind = pool.error_kind.value if pool.error_kind else "unknown"
                    errors[kind] = errors.get(kind, 0) + 1
            _tally(actions, ev.action.value)
            _tally(verdicts, ev.verdict.value)
            for check in ev.checks:
                if check.verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR):
                    _tally(causes, f"{check.kind.value}:{_cause(check.evidence)}")
        wall = time.perf_counter() - w0
        if measured:
            cycle = {"cpu": self_cpu() - c0, "wall": wall, "bytes": read() - b0}
            cycle["queries"] = transport.requests - q0
            if prom_pid:
                cycle["prometheus_cpu"] = proc_cpu(prom_pid) - p0
            cycles.append(cycle)
        if time.monotonic() > deadline:
            break
    for _, src in units:
        src.close()  # a shared source closes more than once: harmless
    return {
        "pods": cfg["pods"],
        "canaries": len(units),
        "cycles": cycles,
        "median": {k: statistics.median(c[k] for c in cycles) for k in cycles[0]} if cycles else {},
        "rss_start_mb": rss_start,
        "peak_rss_mb": peak_rss_mb(),
        "errors": errors,
        "actions": actions,
        "verdicts": verdicts,
        "causes": causes,
    }


def _tally(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _cause(evidence: Any) -> str:
    """A held check's typed cause: its no-data cause, its undecided cause(s), the kinds of
    its source errors; "not-judged" without evidence (speculation off, warm-up)."""
    if evidence is None:
        return "not-judged"
    for name in ("no_data", "undecided"):
        got = getattr(evidence, name, None)
        if got:
            return "+".join(str(u) for u in got) if isinstance(got, tuple) else str(got)
    kinds = getattr(evidence, "failures", None)
    if kinds:
        return "+".join(sorted({str(k) for k, _ in kinds}))
    return type(evidence).__name__


def fetch_only(cfg: dict[str, Any]) -> dict[str, Any]:
    """Only GET every page (body decompressed), with httpx over threads (how ScrapeSource
    fetched until it moved to aiohttp) or with the `Fetcher` ScrapeSource uses (aiohttp, one
    event loop): the HTTP layer's cost."""
    urls = [_url(cfg, i) for i in range(cfg["pods"])]
    conc = cfg.get("concurrency", 32)
    encoding = cfg.get("encoding", DEFAULT_ENCODING)
    runs: list[dict[str, float]] = []
    if cfg["source"] == "fetch-httpx":
        from concurrent.futures import ThreadPoolExecutor

        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        headers = {"Accept-Encoding": encoding}
        with httpx.Client(limits=limits, timeout=10, headers=headers) as client:
            for _ in range(cfg["cycles"] + 1):
                c0, w0 = self_cpu(), time.perf_counter()
                with ThreadPoolExecutor(conc) as pool:
                    size = sum(pool.map(lambda u: len(client.get(u).content), urls))
                runs.append(
                    {"cpu": self_cpu() - c0, "wall": time.perf_counter() - w0, "decoded": size}
                )
    else:
        from alphagate.sources.discovery import Target
        from alphagate.sources.fetcher import Fetcher

        fetcher = Fetcher(headers={}, concurrency=conc, accept_encoding=encoding)
        targets = [Target(url) for url in urls]
        try:
            for _ in range(cfg["cycles"] + 1):
                c0, w0 = self_cpu(), time.perf_counter()
                sizes = fetcher.get_all(
                    targets,
                    timeout=10,
                    max_bytes=64 << 20,
                    max_lines=None,
                    on_body=lambda t, body, ctype: len(body),
                    on_error=lambda t, err: 0,
                )
                wall = time.perf_counter() - w0
                runs.append({"cpu": self_cpu() - c0, "wall": wall, "decoded": sum(sizes)})
        finally:
            fetcher.close()
    measured = runs[1:]
    return {
        "pods": cfg["pods"],
        "canaries": 0,
        "cycles": measured,
        "median": {k: statistics.median(c[k] for c in measured) for k in measured[0]},
        "rss_start_mb": 0.0,
        "peak_rss_mb": peak_rss_mb(),
        "errors": {},
        "actions": {},
    }


def _url(cfg: dict[str, Any], i: int) -> str:
    """Pod `i`'s page: ``/metrics`` is plain whatever is asked, as vLLM serves it; ``/metrics/``
    is gzipped when asked (`alphagate_lab.sandbox.pageserver`)."""
    return f"http://127.0.0.1:{cfg['ports'][i]}{cfg.get('path', '/metrics')}"


def _target(cfg: dict[str, Any], i: int, target: Any) -> Any:
    return target(url=_url(cfg, i), pod=pod_name(i))


def try_worker(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """`run_worker`, a failure reported as a row (the rest of the run still counts)."""
    try:
        return run_worker(cfg, timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"pods": cfg["pods"], "failed": str(exc)[-300:]}


def run_worker(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run a worker in a fresh process (so its peak RSS and CPU are its own)."""
    proc = subprocess.run(
        [sys.executable, "-m", "alphagate_lab.bench.fleet", "--worker"],
        input=json.dumps(cfg),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
