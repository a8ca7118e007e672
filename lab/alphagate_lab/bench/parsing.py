"""Parsing off the fetch loop: do other tenants' GETs stay on time beside one tenant's heavy pages?

One hostile canary's 32 pods each serve a 1.8 MB page of a new shape every scrape (a label
whose value changes per request: the shape cache never helps, every line goes the careful
path); four victim canaries of 8 pods each serve the real vLLM capture. All five are read
together, cycle after cycle, through the real wave (`sources.cycle.observe_each`), the pages
served by a separate process (so serving costs this one nothing). Three ways to parse:

* ``loop``: on the fetch loop itself, as before (an executor that runs each job at once, on the
  loop's thread);
* ``threads``: the shipped pool (`sources.parsepool`), 2 worker threads, canaries in turn;
* ``processes``: the same pool over 2 worker processes (spawned; pages and Pages pickled);
* ``alone``: the victims with no heavy canary at all (threads): the reference.

Printed per way: the victims' read time (wave start to their Observation, median and worst),
their failed pods, the attacker's pages parsed, this process's CPU seconds and peak RSS.

    python -m alphagate_lab.bench.parsing [--cycles N] [--victim-timeout S]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

QUICK_ARGS = ["--cycles", "1", "--ways", "threads"]

REAL = Path(__file__).resolve().parents[3] / "tests" / "sources" / "data" / "vllm-real-metrics.txt"
HEAVY_PODS = 32
VICTIMS = 4
VICTIM_PODS = 8


def heavy_page(scrape: int) -> bytes:
    """~1.8 MB, ~18,000 lines, 1,000 series: a counter and an ITL histogram each, every line
    carrying a label whose value is this scrape's number (a new shape each time)."""
    from alphagate import vllm

    out = []
    for i in range(1000):
        labels = f'engine="{i}",model_name="m",scrape="{scrape}",pad="xxxxxxxxxxxxxxxxxxxxxxxx"'
        out.append(f"vllm:generation_tokens_total{{{labels}}} {i * 7}")
        total = 0
        for b in (*vllm.ITL_BUCKETS[:13], "+Inf"):
            total += 3
            out.append(f'vllm:inter_token_latency_seconds_bucket{{{labels},le="{b}"}} {total}')
        out.append(f"vllm:inter_token_latency_seconds_sum{{{labels}}} 1.5")
        out.append(f"vllm:inter_token_latency_seconds_count{{{labels}}} {total}")
    return ("\n".join(out) + "\n").encode()


def serve(kind: str, port_file: str) -> None:
    """Pods of one kind (a process each, so serving one never slows the other): ``heavy``
    serves a page of a new shape on every request (made before, served in turn), ``real``
    the capture."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pages = [heavy_page(n) for n in range(2 * HEAVY_PODS + 1)] if kind == "heavy" else []
    real = REAL.read_bytes()
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            count[0] += 1
            body = pages[count[0] % len(pages)] if pages else real
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the reader gave up (its deadline)
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    Path(port_file).write_text(str(server.server_address[1]))
    deadline = time.monotonic() + 900  # bounded even if nobody stops it
    server.timeout = 0.5
    while time.monotonic() < deadline:
        server.handle_request()


class Inline(Executor):
    """Runs each job at once on the submitting thread (the fetch loop): parsing as before."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def _warm() -> int:
    """Imports the parser in a worker process (its first job would otherwise pay for it)."""
    import alphagate.sources.scrape  # noqa: F401

    return 0


def executor_for(way: str) -> Executor:
    if way == "loop":
        return Inline()
    if way in ("threads", "alone", "threads-1ms"):
        return ThreadPoolExecutor(2, thread_name_prefix="alphagate-parse")
    import multiprocessing

    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    concurrent.futures.wait([pool.submit(_warm) for _ in range(2)])
    return pool


def spec(timeout: float) -> Any:
    """One slice's canary read by pod scrapes, each pod within `timeout` s."""
    from alphagate.config import SpeculativeCanarySpec

    pool = {"matchLabels": {"app": "x"}}
    return SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "c"},
            "baseline": {"name": "b"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [{"name": "chat", "canary": pool, "baseline": pool}],
            "source": {"kind": "podScrape", "scrape": {"timeoutSeconds": timeout}},
        }
    )


def run_way(way: str, bases: dict[str, str], cycles: int, victim_timeout: float) -> dict[str, Any]:
    from alphagate.core.model import Role
    from alphagate.sources import parsepool
    from alphagate.sources.cycle import Read, observe_each
    from alphagate.sources.discovery import StaticDiscovery, Target
    from alphagate.sources.scrape import ScrapeSource

    executor = executor_for(way)
    switch = sys.getswitchinterval()
    if way == "threads-1ms":
        sys.setswitchinterval(0.001)
    old = parsepool.use_pool(parsepool.FairPool(executor, 2 if way != "loop" else 1))
    if old is not None:
        old.executor.shutdown(wait=False)

    def source(kind: str, n: int, owner: str) -> ScrapeSource:
        pods = [Target(f"{bases[kind]}/{owner}/{i}", pod=f"{owner}-{i}") for i in range(n)]
        return ScrapeSource(
            StaticDiscovery({("chat", Role.CANARY): pods, ("chat", Role.BASELINE): []}),
            owner=owner,
        )

    attacker = (spec(timeout=10.0), source("heavy", HEAVY_PODS, "attacker"))
    victims: list[tuple[Any, ScrapeSource]] = [
        (spec(timeout=victim_timeout), source("real", VICTIM_PODS, f"victim{v}"))
        for v in range(VICTIMS)
    ]
    fleet = victims if way == "alone" else [attacker, *victims]
    first = 0 if way == "alone" else 1
    latencies: list[float] = []
    at: dict[int, float] = {}

    def arrived(i: int, obs: Any) -> None:
        at.setdefault(i, time.monotonic())

    failed = 0
    kinds: collections.Counter[str] = collections.Counter()
    cpu0 = time.process_time()
    try:
        for _ in range(cycles):
            began = time.monotonic()
            at.clear()
            now = time.time()
            reads = [Read(src, s, now - 300, now, 30.0) for s, src in fleet]
            got = observe_each(reads, on_done=arrived)
            for i in range(first, len(fleet)):
                latencies.append(at[i] - began)
                for errs in fleet[i][1].failures.values():
                    failed += len(errs)
                    kinds.update(str(e.kind) for e in errs)
            del got
        workers_mib = _workers_mib(executor)
    finally:
        sys.setswitchinterval(switch)
        for _, src in (attacker, *victims):
            src.close()
        pool = parsepool.use_pool(None)
        if pool is not None:
            pool.executor.shutdown(wait=True)
    return {
        "median": statistics.median(latencies),
        "worst": max(latencies),
        "failed": failed,
        "pods": len(latencies) * VICTIM_PODS,
        "cpu": time.process_time() - cpu0,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "workers": workers_mib,
        "kinds": dict(kinds),
    }


def _workers_mib(executor: Executor) -> float:
    """Peak RSS of a process pool's workers, summed (0 for threads)."""
    total = 0.0
    for pid in getattr(executor, "_processes", None) or {}:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--victim-timeout", type=float, default=2.0)
    parser.add_argument(
        "--ways", nargs="+", default=["alone", "loop", "threads", "processes"],
        choices=["alone", "loop", "threads", "threads-1ms", "processes"],
        help="alone: the victims without the heavy canary (threads), the reference",
    )  # fmt: skip
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        servers: list[subprocess.Popen[bytes]] = []
        bases: dict[str, str] = {}
        try:
            for kind in ("heavy", "real"):
                port_file = Path(tmp) / kind
                cmd = [
                    sys.executable,
                    "-m",
                    "alphagate_lab.bench.parsing",
                    "--serve",
                    kind,
                    str(port_file),
                ]
                servers.append(subprocess.Popen(cmd))
                for _ in range(600):  # the heavy server makes its pages first
                    if port_file.exists() and port_file.read_text():
                        break
                    time.sleep(0.05)
                bases[kind] = f"http://127.0.0.1:{port_file.read_text()}"
            print(
                f"{HEAVY_PODS} pods of 1.8 MB pages of a new shape each scrape, beside {VICTIMS} "
                f"canaries of {VICTIM_PODS} real vLLM pages (victims' timeout "
                f"{args.victim_timeout:g} s), {args.cycles} cycles"
            )
            head = f"{'parse on':<10} {'victim read s (median / worst)':>31}"
            print(
                f"{head} {'victim pods failed':>19} {'CPU s':>7} {'peak RSS MiB':>13}"
                f" {'+ workers MiB':>14}"
            )
            for way in args.ways:
                r = run_way(way, bases, args.cycles, args.victim_timeout)
                print(
                    f"{way:<10} {r['median']:>15.2f} / {r['worst']:<13.2f}"
                    f" {int(r['failed']):>8} of {int(r['pods']):<8} {r['cpu']:>7.1f}"
                    f" {r['rss']:>13.0f} {r['workers']:>14.0f}  {r['kinds'] or ''}",
                    flush=True,
                )
        finally:
            for server in servers:
                server.terminate()
                server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
