"""Benchmark: one evaluation cycle over a simulated fleet, side by side with Prometheus.

Run ``python -m alphagate_lab.bench.fleet`` (``--quick`` for a smoke run). In one run it measures:

* the page parser on the real capture: ``prometheus_client`` (whole page and pre-filtered), the
  fast path (warm, and on the first page of its shape), and ``str.splitlines`` as the ceiling;
* one evaluation cycle (fetch, parse, aggregate, decide: every canary's pods scraped in one
  wave as the controller does, ``sources.cycle.observe_each``, and the core's ``evaluate`` for
  every canary) over 100, 1,000 and 5,000 pods served by
  :mod:`alphagate_lab.sandbox.pageserver` (one asyncio process, a loopback port per pod, the real
  capture's page growing each interval), each size in a fresh process: CPU seconds and wall
  time per cycle, peak RSS, bytes read;
* the same cycle through the Prometheus path (``PrometheusSource`` against Debian's Prometheus
  scraping the same pods): the controller's CPU, Prometheus' CPU for the queries (its CPU over
  the cycle minus its scraping rate), bytes read;
* Debian's Prometheus 2.42 scraping the same 1,000 pods at the same interval, its CPU seconds
  from ``/proc`` over the same minutes the controller's 1,000-pod cycles ran;
* what compression, scrape concurrency and one wave for every canary buy (1,000-pod
  variants; "one canary at a time" is ``ScrapeSource.observe`` per canary).

Canaries own ``--per-canary`` pods each (a fifth canary, the rest baseline). It prints numbers
and ratios; it asserts nothing about speed. Every loop is bounded; everything binds 127.0.0.1.

Each row also prints its decisions (actions, verdicts, the typed causes of what held), made
comparable across sources by `fleet_cycle.worker`: every canary starts Probing, pod scraping
is measured once its increments cover the window, Prometheus-path policies evaluate every two
scrape intervals (one holds too few scrapes for a raw ``increase()``), and the window is four
intervals (two such steps, four scrape increments: the same seconds for every source). The
pages' alpha is the capture's (0.14 on every pod), far below the gate: a source that reads the
window rolls back (or fails a first window and holds), one that cannot holds with its cause.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from alphagate.errors import SandboxError
from alphagate_lab.bench.fleet_cycle import (
    fetch_only,
    proc_cpu,
    run_worker,
    targets,
    try_worker,
    worker,
)
from alphagate_lab.bench.fleet_pages import page_costs, parser_ratios
from alphagate_lab.sandbox.pageserver import OURS_PATH

QUICK_ARGS = ["--pods", "20,40", "--prometheus-pods", "20", "--interval", "2", "--cycles", "2"]
"""What `python -m alphagate_lab.bench --quick` passes: 20 and 40 pods (the second through the
Prometheus that stores only alphagate's families and records the rates), 2 s interval, two
cycles."""

CAPTURE = (
    Path(__file__).resolve().parents[3] / "tests" / "sources" / "data" / "vllm-real-metrics.txt"
)
RULES = Path(__file__).resolve().parents[3] / "deploy/monitoring/rules/alphagate-batches.yaml"
RECORDED = "alphagate:vllm_generation_tokens:rate"
"""A series the shipped rules record per pod (`promql.recorded_name`)."""


SETTLE_INTERVALS = 3
"""Intervals Prometheus scrapes before it is measured (its first scrapes create the series)."""
SIDE_BY_SIDE_CYCLES = 6
"""At least this many measured cycles (and Prometheus intervals) in the side-by-side run."""


# --------------------------------------------------------------------------- the run


class _IntervalCpu(list[float]):
    """A process's CPU seconds per interval, sampled by a daemon thread while in the block."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__()
        self._pid, self._interval = pid, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = proc_cpu(self._pid)
        while not self._stop.wait(self._interval):  # ends when the block does
            now = proc_cpu(self._pid)
            self.append(now - last)
            last = now

    def __enter__(self) -> _IntervalCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)


def _page(path: str | None) -> tuple[Path, str]:
    if path:
        return Path(path), path
    if CAPTURE.exists():
        return CAPTURE, "real vLLM capture (tests/sources/data)"
    raise SystemExit("no page to serve: pass --page (the real capture is kept with the tests)")


def _machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    py = sys.version.split()[0]
    return f"{os.cpu_count()} CPUs ({model or 'unknown'}), load {load:.1f}, Python {py}"


class PageServer:
    """The pageserver subprocess: ports per pod, a control port for tallies."""

    def __init__(self, page: Path, pods: int, tick_seconds: float) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "alphagate_lab.sandbox.pageserver", "--pods", str(pods),
                "--page", str(page), "--tick-seconds", str(tick_seconds), "--max-seconds", "1800",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded: the server prints it or exits
        if not line:
            raise RuntimeError(f"pageserver exited with {self.proc.wait(10)}")
        info = json.loads(line)
        self.control: int = info["control"]
        self.ports: list[int] = info["ports"]

    def stats(self) -> dict[str, dict[str, int]]:
        got: dict[str, dict[str, int]] = httpx.get(
            f"http://127.0.0.1:{self.control}/stats", timeout=10
        ).json()
        return got

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _prometheus_path(
    prom: Any,
    pods: int,
    common: dict[str, Any],
    timeout: float,
    scrape_rate: float | None,
    **extra: Any,
) -> dict[str, Any]:
    """A Prometheus-path worker (`extra`: batched, recorded); Prometheus' CPU for the queries
    is its CPU over each cycle minus its scraping rate (`scrape_rate` CPU s per s, measured
    while nothing queried)."""
    cfg = {**common, "source": "prometheus", "pods": pods, "prometheus_pid": prom.process.pid}
    cfg["prometheus_url"] = prom.url
    cfg.update(extra)
    # Queries take long at fleet size on a shared machine: fewer cycles, bounded; past
    # 1,000 pods the endpoint's timeoutSeconds is 60 (a batch's queries are few and large).
    cfg["cycles"] = min(common["cycles"], 2 if pods <= 1000 else 1)
    cfg["prometheus_timeout"] = 10.0 if pods <= 1000 else 60.0
    cfg["max_seconds"] = 300
    try:
        got = run_worker(cfg, timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:  # report it, keep the rest
        return {"pods": pods, "failed": str(exc)[:200]}
    got["trimmed"] = scrape_rate is not None
    got["how"] = (
        ("recorded" if extra.get("recorded") else "batched")
        if extra.get("batched", True)
        else "per canary"
    )
    rate = scrape_rate if scrape_rate is not None else common["_scrape_rate"]
    for c in got["cycles"]:
        c["prometheus_cpu"] -= rate * c["wall"]
    got["median"]["prometheus_cpu"] = statistics.median(c["prometheus_cpu"] for c in got["cycles"])
    return got


def _trimmed_prometheus(
    server: PageServer, pods: int, args: argparse.Namespace, common: dict[str, Any], timeout: float
) -> list[dict[str, Any]]:
    """The Prometheus path past the side-by-side size: Prometheus scrapes only the families
    alphagate reads (/metrics/alphagate) and evaluates the shipped recording rules (scaled to
    the interval). The queries touch the same series as with whole pages; the scraping costs
    the shared machine a tenth. Batched raw queries, then the recorded rates."""
    from alphagate_lab.testing import prometheus as promtest

    interval, window = common["interval"], common["window"]
    rules = Path(tempfile.mkdtemp(prefix="alphagate-fleet-")) / "alphagate-batches.yaml"
    every = int(interval)
    rules.write_text(
        RULES.read_text()
        .replace("interval: 30s", f"interval: {every}s")
        .replace("[90s]", f"[{3 * every}s]")
    )
    with promtest.PrometheusServer(
        targets=targets(server.ports, pods, args.per_canary, path=OURS_PATH.decode()),
        scrape_interval=interval,
        evaluation_interval=interval,
        rule_files=[rules],
    ) as prom:
        _wait_up(prom, pods, timeout=120 + pods / 5)
        # the recorded rates exist for (nearly) every pod before a window of them is read
        _wait_up(prom, pods, timeout=120 + pods / 5, expr=f"count({RECORDED})")
        up_at = time.time()
        assert prom.process is not None
        c0, t0 = proc_cpu(prom.process.pid), time.monotonic()
        time.sleep(max(0.0, up_at + window + interval - time.time()))
        rate = (proc_cpu(prom.process.pid) - c0) / (time.monotonic() - t0)
        rows = [
            _prometheus_path(prom, pods, common, timeout, rate),
            _prometheus_path(prom, pods, common, timeout, rate, recorded=True),
        ]
        rows[-1]["rules_seconds"] = _rules_seconds(prom)
        return rows


def _rules_seconds(prom: Any) -> float:
    """Seconds Prometheus spent on its last evaluation of the recording rules (wall)."""
    try:
        got = httpx.get(f"{prom.url}/api/v1/rules", timeout=30).json()
        return float(sum(g.get("evaluationTime", 0.0) for g in got["data"]["groups"]))
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return float("nan")


def _wait_up(
    prom: Any, pods: int, *, timeout: float, expr: str = 'count(up{job="vllm"} == 1)'
) -> None:
    """Until Prometheus has scraped 98% of the pods (a busy machine times a few scrapes out),
    or `expr` counts 98% of them; counted in Prometheus (a list of 5,000 `up` series can time
    out), tolerating slow answers. Bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = prom.query(expr)
            if got and float(got[0]["value"][1]) >= 0.98 * pods:
                return
        except SandboxError:
            pass
        time.sleep(1.0)
    raise SandboxError(f"Prometheus: {expr} did not reach {pods} pods within {timeout:.0f} s")


def _kind(stats: dict[str, dict[str, int]], kind: str, key: str) -> int:
    return stats.get(kind, {}).get(key, 0)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the benchmark and print it; returns the numbers (None for a worker run)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", default="100,1000,5000", help="fleet sizes, comma-separated")
    parser.add_argument(
        "--prometheus-pods", type=int, default=1000, help="pods Prometheus scrapes (0: none)"
    )
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between cycles")
    parser.add_argument("--window", type=float, default=0.0, help="window (default 4 intervals)")
    parser.add_argument("--cycles", type=int, default=3, help="measured cycles per run")
    parser.add_argument("--per-canary", type=int, default=50, help="pods per canary")
    parser.add_argument("--page", help="the page to serve (default: the real capture)")
    parser.add_argument("--no-variants", action="store_true", help="skip the tuning variants")
    parser.add_argument("--quick", action="store_true", help="the smoke run (QUICK_ARGS)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:  # what docs/benchmarks.md and `python -m alphagate_lab.bench --quick` run
        args = parser.parse_args(
            [*QUICK_ARGS, *(a for a in argv or sys.argv[1:] if a != "--quick")]
        )
    if args.worker:
        cfg = json.loads(sys.stdin.read())  # the config comes on stdin: 5,000 ports
        run = fetch_only if cfg["source"].startswith("fetch-") else worker
        print(json.dumps(run(cfg)))
        return None
    sizes = sorted({int(s) for s in args.pods.split(",") if s.strip()})
    if not sizes or sizes[0] < 2 or sizes[-1] > 10000:
        parser.error("--pods: sizes within 2..10000")
    interval = max(1.0, args.interval)
    # Four intervals: two steps of the Prometheus path's policy interval (two scrapes each)
    # and four pod-scrape increments span the same seconds, so every source reads the same
    # evidence (with three, a Prometheus step covered two thirds of what pod scraping read).
    window = args.window or 4 * interval
    cycles = max(1, min(args.cycles, 20))
    page, where = _page(args.page)
    text = page.read_text(encoding="utf-8")
    quick = sizes[-1] <= 50
    print(f"machine: {_machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"page: {where}: {len(text.encode()) / 1024:.1f} KiB, {text.count(chr(10))} lines")

    result = parser_ratios(text, rounds=3 if quick else 7)
    base = result["prometheus_client"]
    print(f"\n{'parser (real capture)':<34} {'us/page':>9} {'x prometheus_client':>20}")
    for name, secs in result.items():
        print(f"{name:<34} {secs * 1e6:>9.0f} {base / secs:>20.1f}")

    costs = page_costs(text, rounds=3 if quick else 7)
    print(f"\n{'a page after its GET (real capture)':<34} {'us/page':>9} {'x parse':>20}")
    for name, secs in costs.items():
        print(f"{name:<34} {secs * 1e6:>9.0f} {secs / costs['parse (alphagate)']:>20.2f}")

    from alphagate_lab.testing import prometheus as promtest

    prom_pods = min(args.prometheus_pods, sizes[-1])
    use_prom = prom_pods > 0 and promtest.available()
    server = PageServer(page, sizes[-1], interval)
    rows: list[tuple[str, dict[str, Any]]] = []
    variants: list[tuple[str, dict[str, Any]]] = []
    prom_scrape: dict[str, float] = {}
    prom_intervals: list[float] = []
    common = {"interval": interval, "window": window, "cycles": cycles, "ports": server.ports}
    common["per_canary"] = args.per_canary
    timeout = 120 + (cycles + 2) * (interval + 60)
    prom = None
    try:
        if use_prom:
            prom = promtest.PrometheusServer(
                targets=targets(server.ports, prom_pods, args.per_canary),
                scrape_interval=interval,
                evaluation_interval=interval,
            ).start(timeout=60)
            _wait_up(prom, prom_pods, timeout=120 + prom_pods / 20)
            up_at = time.time()
            assert prom.process is not None
            pid = prom.process.pid
            # Its first scrapes create every series: measure from the steady state on.
            time.sleep((1 if quick else SETTLE_INTERVALS) * interval)
            # Prometheus scraping, measured over the same minutes as the controller's cycles,
            # interval by interval (its Go GC comes in bursts: the mean counts them, the spread
            # shows them).
            s0, c0, t0 = server.stats(), proc_cpu(pid), time.monotonic()
            with _IntervalCpu(pid, interval) as per_interval:
                side = cycles if quick else max(cycles, SIDE_BY_SIDE_CYCLES)
                cfg = {**common, "source": "scrape", "pods": prom_pods, "cycles": side}
                rows.append(("scrape", run_worker(cfg, timeout + side * interval)))
            s1, c1, t1 = server.stats(), proc_cpu(pid), time.monotonic()
            scrapes = _kind(s1, "prometheus", "requests") - _kind(s0, "prometheus", "requests")
            prom_scrape = {
                "cpu_per_interval": (c1 - c0) / ((t1 - t0) / interval),
                "cpu_per_second": (c1 - c0) / (t1 - t0),
                "scrapes_per_interval": scrapes / ((t1 - t0) / interval),
                "bytes_per_interval": (
                    _kind(s1, "prometheus", "bytes") - _kind(s0, "prometheus", "bytes")
                ) / ((t1 - t0) / interval),
            }  # fmt: skip
            prom_intervals = list(per_interval)
            common["_scrape_rate"] = prom_scrape["cpu_per_second"]
            time.sleep(max(0.0, up_at + window + interval - time.time()))  # a full window stored
            for n in sorted({s for s in sizes if s <= prom_pods} | {prom_pods}):
                rows.append(("prometheus", _prometheus_path(prom, n, common, timeout, None)))
            rows.append(("prometheus", _prometheus_path(prom, prom_pods, common, timeout, None,
                                                        batched=False)))  # fmt: skip
            prom.close()
            prom = None
        done = {r["pods"] for kind, r in rows if kind == "scrape"}
        for n in sizes:
            if n not in done:
                rows.append(("scrape", try_worker({**common, "source": "scrape", "pods": n},
                                                  timeout)))  # fmt: skip
        if not args.no_variants and not quick:
            n = prom_pods or sizes[len(sizes) // 2]
            base_cfg = {**common, "source": "scrape", "pods": n, "cycles": max(2, cycles - 1)}
            for label, extra in (
                ("gzip (/metrics/, zlib inflate)", {"encoding": "gzip", "path": "/metrics/"}),
                ("one canary at a time", {"batched": False}),
                ("concurrency 8", {"concurrency": 8}),
                ("concurrency 16", {"concurrency": 16}),
                ("HTTP only: httpx, 32 threads", {"source": "fetch-httpx"}),
                ("HTTP only: aiohttp Fetcher", {"source": "fetch-aiohttp"}),
            ):
                variants.append((label, try_worker({**base_cfg, **extra}, timeout)))
        for n in (s for s in sizes if use_prom and s > prom_pods):
            try:
                for r in _trimmed_prometheus(server, n, args, common, timeout):
                    rows.append(("prometheus", r))
            except (SandboxError, RuntimeError, subprocess.TimeoutExpired) as exc:
                rows.append(("prometheus", {"pods": n, "failed": str(exc)[:200]}))
    finally:
        if prom is not None:
            prom.close()
        server.close()
    _report(rows, variants, prom_scrape, prom_intervals, prom_pods, interval)
    return {
        "parser": result,
        "page_costs": costs,
        "cycles": [{"source": kind, **r} for kind, r in rows],
        "prometheus_scrape": prom_scrape,
        "prometheus_intervals": prom_intervals,
        "variants": dict(variants),
    }


def _report(
    rows: list[tuple[str, dict[str, Any]]],
    variants: list[tuple[str, dict[str, Any]]],
    prom: dict[str, float],
    per: list[float],
    prom_pods: int,
    interval: float,
) -> None:
    print(f"\none evaluation cycle (fetch, parse, aggregate, decide), interval {interval:g} s")
    head = f"{'source':<22} {'pods':>5} {'canaries':>8} {'CPU s':>7} {'wall s':>7} "
    print(head + f"{'peak RSS MB':>11} {'KiB read':>9} {'queries':>7} {'Prom CPU s':>10}  errors")
    for kind, r in rows:
        if "failed" in r:
            print(f"{kind:<22} {r['pods']:>5}  failed: {r['failed']}")
            continue
        m = r["median"]
        kind = kind + (f" ({r['how']})" if "how" in r else "") + ("*" if r.get("trimmed") else "")
        prom_cpu = f"{m['prometheus_cpu']:>10.3f}" if "prometheus_cpu" in m else f"{'':>10}"
        queries = f"{m['queries']:>7.0f}" if m.get("queries") else f"{'':>7}"
        print(
            f"{kind:<22} {r['pods']:>5} {r['canaries']:>8} {m['cpu']:>7.3f} {m['wall']:>7.2f} "
            f"{r['peak_rss_mb']:>11.0f} {m['bytes'] / 1024:>9.0f} {queries} {prom_cpu}  "
            f"{r['errors'] or ''}"
        )
        if "rules_seconds" in r:
            print(f"{'':<22} recording rules: {r['rules_seconds']:.3f} s per evaluation")
        if r.get("actions"):
            held = f", held for {r['causes']}" if r.get("causes") else ""
            print(f"{'':<22} decisions: {r['actions']}, verdicts {r['verdicts']}{held}")
    if any(r.get("trimmed") for _, r in rows):
        print("* Prometheus storing only the families alphagate reads (/metrics/alphagate)")
    if prom:
        print(
            f"\nPrometheus 2.42 scraping the same {prom_pods} pods every {interval:g} s: "
            f"{prom['cpu_per_interval']:.3f} CPU s per interval "
            f"({prom['scrapes_per_interval']:.0f} scrapes, "
            f"{prom['bytes_per_interval'] / 1024:.0f} KiB per interval)"
        )
        if per:
            print(f"  per interval: min {min(per):.3f}, median {statistics.median(per):.3f}, "
                  f"max {max(per):.3f} CPU s over {len(per)} intervals")  # fmt: skip
        mine = next((r for k, r in rows if k == "scrape" and r["pods"] == prom_pods), None)
        if mine is not None and mine.get("cycles") and prom["cpu_per_interval"] > 0:
            cpu = [c["cpu"] for c in mine["cycles"]]
            ratio = statistics.mean(cpu) / prom["cpu_per_interval"]
            print(f"ratio: alphagate cycle CPU / Prometheus scrape CPU at {prom_pods} pods = "
                  f"{ratio:.2f} (target <= 0.5; means over the same {len(cpu)} intervals; "
                  f"cycles {min(cpu):.3f}-{max(cpu):.3f} CPU s)")  # fmt: skip
    if variants:
        print(f"\ntuning (pod scraping, {variants[0][1]['pods']} pods): median per cycle")
        for label, r in variants:
            if "failed" in r:
                print(f"  {label:<28} failed: {r['failed']}")
                continue
            m = r["median"]
            read = (
                f"{m['bytes'] / 1024:.0f} KiB read"
                if "bytes" in m
                else f"{m['decoded'] / 1024:.0f} KiB decoded"
            )
            print(f"  {label:<28} CPU {m['cpu']:.3f} s, wall {m['wall']:.2f} s, {read}, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
