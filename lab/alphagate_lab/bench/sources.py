"""Benchmark: parsing a vLLM /metrics page, prometheus_client's parser against ours.

Run ``python -m alphagate_lab.bench.sources [--file PAGE] [--repeat N] [--pods N]``;
``python -m alphagate_lab.bench --quick`` runs it with ``QUICK_ARGS`` (2 rounds, 20 pods). It times,
interleaved so the machine's state affects all alike, the three ways to read the families
alphagate needs:
``prometheus_client`` on the whole page, ``prometheus_client`` on pre-filtered lines, and the
fast path in ``alphagate.sources.exposition``; then it prints per-page times, the ratios, and
what one interval costs at 1000 pods. With ``--pods N`` (default 200) it also scrapes N pods
serving that page from one local HTTP server through `ScrapeSource` (concurrency 32) and
prints pages per second end to end (HTTP, parse, increments). It prints numbers; it asserts
nothing about speed.

The page defaults to the real vLLM capture kept with the tests (55 KB, ~650 lines).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from alphagate.sources import exposition
from alphagate_lab.testing import client_parse

QUICK_ARGS = ["--repeat", "2", "--pods", "20"]
"""What `python -m alphagate_lab.bench --quick` passes: two rounds, a 20-pod scrape."""

CAPTURE = (
    Path(__file__).resolve().parents[3] / "tests" / "sources" / "data" / "vllm-real-metrics.txt"
)


def _page(path: str | None) -> tuple[str, str]:
    if path:
        return Path(path).read_text(encoding="utf-8"), path
    if CAPTURE.exists():
        return CAPTURE.read_text(encoding="utf-8"), "real vLLM capture (tests/sources/data)"
    from alphagate_lab.sim.exposition import render
    from alphagate_lab.sim.fleet import Fleet
    from alphagate_lab.sim.scenario import Scenario

    scenario = Scenario.model_validate(
        {
            "name": "bench",
            "slices": {"chat": {"alpha": 0.7}},
            "pools": [
                {
                    "name": "c",
                    "role": "canary",
                    "slice": "chat",
                    "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
                }
            ],
        }
    )
    fleet = Fleet(scenario)
    fleet.advance_to(30.0)
    return render(fleet.snapshot().pods[0]).decode(), "simulated pod page (capture not found)"


def _time(fn: Callable[[], object], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def run(text: str, *, repeat: int = 7, budget_seconds: float = 20.0) -> dict[str, float]:
    """Median seconds per page for each parser, measured in interleaved rounds."""
    contenders: dict[str, Callable[[], object]] = {
        "prometheus_client": lambda: client_parse.parse(text),
        "prometheus_client+prefilter": lambda: client_parse.parse(text, prefilter=True),
        "alphagate fast path": lambda: exposition.parse(text),
    }
    # Same answer first: a fast wrong parser is worth nothing.
    reference = client_parse.parse(text)
    for name, fn in contenders.items():
        if fn() != reference:
            raise SystemExit(f"{name} disagrees with prometheus_client on this page")
    # Calibrate so one round of the slowest takes ~0.2 s.
    slowest = max(_time(fn, 1) for fn in contenders.values())
    number = max(1, int(0.2 / max(slowest, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    deadline = time.monotonic() + budget_seconds
    for _ in range(repeat):
        for name, fn in contenders.items():
            samples[name].append(_time(fn, number * (10 if "fast" in name else 1)))
        if time.monotonic() > deadline:
            break
    return {name: statistics.median(v) for name, v in samples.items()}


def scrape_rate(text: str, pods: int, *, rounds: int = 3) -> tuple[float, int]:
    """Pages per second through ScrapeSource over `pods` local URLs, and failures seen."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from alphagate.config import ScrapeSettings, SpeculativeCanarySpec
    from alphagate.core.model import Role
    from alphagate.sources.discovery import StaticDiscovery
    from alphagate.sources.scrape import ScrapeSource

    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    port = server.server_address[1]
    spec = SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "c"},
            "baseline": {"name": "b"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [
                {
                    "name": "s",
                    "canary": {"matchLabels": {"r": "c"}},
                    "baseline": {"matchLabels": {"r": "b"}},
                }
            ],
            "source": {"kind": "podScrape"},
        }
    )
    urls = [f"http://127.0.0.1:{port}/pod/{i}/metrics" for i in range(pods)]
    settings = ScrapeSettings(max_concurrency=32, timeout_seconds=10)
    failures = 0
    try:
        with ScrapeSource(StaticDiscovery({("s", Role.CANARY): urls}), settings=settings) as src:
            # the policy's default interval: the read's deadline (twice the timeout) is the
            # pages', not a share of an interval shorter than a round of 1000 pages
            every = 30.0
            src.observe(spec, start=0, end=time.time(), interval_seconds=every)  # warm up
            t0 = time.perf_counter()
            for _ in range(rounds):
                now = time.time()
                src.observe(spec, start=now - 10, end=now, interval_seconds=every)
                failures += len(src.failures.get(("s", Role.CANARY), []))
            elapsed = time.perf_counter() - t0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    return pods * rounds / elapsed, failures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", help="a saved /metrics page (default: the real capture)")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--pods", type=int, default=200, help="pods for the scrape run (0: skip)")
    args = parser.parse_args(argv)
    text, where = _page(args.file)
    lines = text.count("\n")
    print(f"page: {where}: {len(text.encode()) / 1024:.1f} KiB, {lines} lines")
    result = run(text, repeat=max(1, args.repeat))
    base = result["prometheus_client"]
    print(f"{'parser':<30} {'ms/page':>9} {'x faster':>9} {'s/interval @1000 pods':>22}")
    for name, secs in result.items():
        print(f"{name:<30} {secs * 1e3:>9.3f} {base / secs:>9.1f} {secs * 1000:>22.2f}")
    if args.pods > 0:
        rate, failures = scrape_rate(text, min(args.pods, 5000))
        print(
            f"ScrapeSource over {args.pods} local pods (concurrency 32): {rate:.0f} pages/s"
            f" ({1000 / rate:.2f} s per 1000 pods), {failures} failed scrapes"
        )


if __name__ == "__main__":
    main()
