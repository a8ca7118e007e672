"""Peak memory of one pod-scrape round at full concurrency, against hostile pages.

Each case runs in a fresh interpreter: a page server on 127.0.0.1 answers every scrape with
the same page, and one :class:`~alphagate.sources.scrape.ScrapeSource` round reads
`concurrency` distinct URLs at once (the default `scrape.maxConcurrency`). The number printed
is the growth of the process' peak RSS over its RSS just before the round, i.e. what the pages
in flight cost; compare it with the controller's memory limit (512 Mi in deploy/).

Cases: a real vLLM page; pages at the byte cap made of the lines that cost the parser most (our
own families, each line a new series); at the line cap with tiny lines; a gzip bomb; stacked
encodings. The caps refuse the last ones while decoding, which is what keeps them small.

    python -m alphagate_lab.bench.memory [--concurrency N] [--case NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The environment the image runs the controller in (Dockerfile ENV) that changes memory:
# glibc arenas; the --shared case runs its children with it, as the pod would.
IMAGE_ENV = {"MALLOC_ARENA_MAX": "2"}
QUICK_ARGS = ["--concurrency", "8", "--case", "real", "--case", "series-at-byte-cap"]

REAL = Path(__file__).resolve().parents[3] / "tests" / "sources" / "data" / "vllm-real-metrics.txt"


def _real() -> bytes:
    if REAL.exists():
        return REAL.read_bytes()
    line = 'vllm:generation_tokens_total{engine="0",model_name="m"} 100\n'
    return line.encode() * 600


def _series_page(limit: int, max_lines: int) -> bytes:
    """Distinct series of a family the parser keeps, up to the byte and line caps."""
    out = bytearray()
    i = 0
    while i < max_lines - 1:
        line = f'vllm:generation_tokens_total{{engine="{i}",model_name="m"}} {i}\n'.encode()
        if len(out) + len(line) > limit:
            break
        out += line
        i += 1
    return bytes(out)


def _histogram_page(limit: int, max_lines: int) -> bytes:
    """As many full series (a counter and an ITL histogram each) as the caps allow: the
    largest page that is accepted, and what the source then keeps per pod."""
    from alphagate import vllm

    out = bytearray()
    lines = 0
    for i in range(10_000):
        labels = f'engine="{i}",model_name="m"'
        block = [f"vllm:generation_tokens_total{{{labels}}} {i}"]
        total = 0
        for b in (*vllm.ITL_BUCKETS, "+Inf"):
            total += 1
            block.append(f'vllm:inter_token_latency_seconds_bucket{{{labels},le="{b}"}} {total}')
        block.append(f"vllm:inter_token_latency_seconds_sum{{{labels}}} 1.5")
        block.append(f"vllm:inter_token_latency_seconds_count{{{labels}}} {total}")
        text = ("\n".join(block) + "\n").encode()
        if len(out) + len(text) > limit or lines + len(block) >= max_lines:
            break
        out += text
        lines += len(block)
    return bytes(out)


def _cases(max_bytes: int, max_lines: int) -> dict[str, Callable[[], tuple[dict[str, str], bytes]]]:
    text = {"Content-Type": "text/plain; version=0.0.4"}
    return {
        "real": lambda: (text, _real()),
        "series-at-byte-cap": lambda: (text, _series_page(max_bytes, max_lines)),
        "histograms-at-caps": lambda: (text, _histogram_page(max_bytes, max_lines)),
        "tiny-lines-at-line-cap": lambda: (text, b"\n" * (max_lines - 1)),
        "gzip-bomb": lambda: (
            {**text, "Content-Encoding": "gzip"},
            gzip.compress(b"#" * (256 << 20), compresslevel=9),
        ),
        "double-gzip": lambda: (
            {**text, "Content-Encoding": "gzip, gzip"},
            gzip.compress(gzip.compress(_real())),
        ),
    }


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so the round's own peak is measured."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def _serve(headers: dict[str, str], body: bytes) -> tuple[ThreadingHTTPServer, str]:
    """A loopback server answering every GET with `body`; the server and its /metrics URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


def one(case: str, concurrency: int) -> dict[str, Any]:
    """Run one case in this process; the numbers as a dict."""
    from alphagate.config import ScrapeSettings, SpeculativeCanarySpec
    from alphagate.core.model import Role
    from alphagate.sources.discovery import StaticDiscovery, Target
    from alphagate.sources.scrape import ScrapeSource

    settings = ScrapeSettings(max_concurrency=concurrency)
    headers, body = _cases(settings.max_body_bytes, settings.max_lines)[case]()

    server, base = _serve(headers, body)
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
    targets = [Target(f"{base}?pod={i}", pod=f"p{i}") for i in range(concurrency)]
    discovery = StaticDiscovery({("s", Role.CANARY): targets})
    gc.collect()
    reset = _reset_peak()
    before = _status_kib("VmRSS")
    t0 = time.perf_counter()
    with ScrapeSource(discovery, settings=settings, since_start=True) as src:
        src.observe(spec, start=0.0, end=time.time(), interval_seconds=10.0)
        failures = src.failures.get(("s", Role.CANARY), [])
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    server.shutdown()
    kinds = sorted({e.kind.value for e in failures})
    return {
        "case": case,
        "concurrency": concurrency,
        "failed_pods": len(failures),
        "kinds": kinds,
        "rss_before_mib": before / 1024,
        "peak_mib": peak / 1024,
        "growth_mib": (peak - before) / 1024,
        "seconds": seconds,
        "max_body_bytes": settings.max_body_bytes,
        "max_lines": settings.max_lines,
    }


def shared(canaries: int, pods: int, cycles: int, budgets: bool) -> dict[str, Any]:
    """`canaries` canaries, each its own source, all selecting the same `pods` pods serving the
    largest accepted page (the histogram case), read together `cycles` times (the wave): what
    the sources keep, with the shipped budgets or with none (every budget at its maximum)."""
    from alphagate.config import SpeculativeCanarySpec
    from alphagate.core.model import Role
    from alphagate.errors import BudgetKind
    from alphagate.sources import budget
    from alphagate.sources.cycle import Read, observe_each
    from alphagate.sources.discovery import StaticDiscovery, Target
    from alphagate.sources.scrape import ScrapeSource

    if not budgets:
        most = 4096 * budget.MiB
        budget.configure(
            budget.ScrapeBudgets(in_flight_bytes=most, per_canary_bytes=most, kept_bytes=most)
        )
    body = _histogram_page(2 << 20, 20_000)

    server, base = _serve({"Content-Type": "text/plain; version=0.0.4"}, body)
    pool = {"matchLabels": {"r": "c"}}
    spec = SpeculativeCanarySpec.model_validate(
        {
            "target": {"name": "c"},
            "baseline": {"name": "b"},
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4},
            "slices": [{"name": "s", "canary": pool, "baseline": pool}],
            # time enough that every page is read and parsed (here: 2 busy cores): this
            # measures what is kept, not what is late
            "source": {"kind": "podScrape", "scrape": {"timeoutSeconds": 30}},
            "timing": {"intervalSeconds": 300, "windowSeconds": 3000},
        }
    )
    targets = [Target(f"{base}?pod={i}", pod=f"p{i}") for i in range(pods)]
    discovery = StaticDiscovery({("s", Role.CANARY): targets, ("s", Role.BASELINE): []})
    sources = [ScrapeSource(discovery, owner=f"c{i}") for i in range(canaries)]
    gc.collect()
    before = _status_kib("VmRSS")
    refused = 0
    failed: list[str] = []
    now = time.time()
    for c in range(cycles):
        at = now + 300 * c
        got = observe_each([Read(src, spec, at - 3000, at, 300.0) for src in sources])
        refused = sum(1 for o in got if any(p.budget is BudgetKind.MEMORY for p in o.pools))
        failed = sorted(
            {f"{e.kind}/{getattr(e, 'budget', '')}" for src in sources
             for errs in src.failures.values() for e in errs}
        )  # fmt: skip
    gc.collect()
    after = _status_kib("VmRSS")
    peak = _status_kib("VmHWM")
    kept = budget.KEPT.total_cells() * budget.CELL_BYTES / budget.MiB
    for src in sources:
        src.close()
    server.shutdown()
    return {
        "refused": refused,
        "kept_mib": kept,
        "rss_mib": after / 1024,
        "growth_mib": (after - before) / 1024,
        "peak_mib": peak / 1024,
        "failed": failed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m alphagate_lab.bench.memory")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument(
        "--shared", type=int, nargs=3, metavar=("CANARIES", "PODS", "CYCLES"),
        help="instead: CANARIES canaries on the same PODS heavy pods, CYCLES cycles, with the "
        "shipped budgets and with none",
    )  # fmt: skip
    parser.add_argument("--budgets", choices=["shipped", "none"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.concurrency)))
        return
    if args.shared and args.budgets:
        canaries, pods, cycles = args.shared
        print(json.dumps(shared(canaries, pods, cycles, budgets=args.budgets == "shipped")))
        return
    if args.shared:
        canaries, pods, cycles = args.shared
        print(f"{canaries} canaries on the same {pods} pods of the largest accepted page, "
              f"{cycles} cycles: what the sources keep")  # fmt: skip
        print(f"{'budgets':<9} {'canaries refused':>16} {'kept MiB':>9} {'RSS MiB':>8} "
              f"{'growth MiB':>11} {'peak MiB':>9}")  # fmt: skip
        for mode in ("none", "shipped"):
            proc = subprocess.run(
                [sys.executable, "-m", "alphagate_lab.bench.memory", "--shared",
                 *map(str, args.shared), "--budgets", mode],
                capture_output=True, text=True, timeout=900, check=False,
                env={**os.environ, **IMAGE_ENV},
            )  # fmt: skip
            if proc.returncode != 0:
                print(f"{mode:<9} failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(
                f"{mode:<9} {r['refused']:>9} of {canaries:<4} {r['kept_mib']:>9.1f} "
                f"{r['rss_mib']:>8.1f} {r['growth_mib']:>11.1f} {r['peak_mib']:>9.1f}  "
                + ",".join(r["failed"]),
                flush=True,
            )
        return
    names = args.case or list(_cases(1, 1))
    print(f"pod-scrape round at concurrency {args.concurrency}: peak RSS growth per case")
    print(f"{'case':<24} {'failed pods':>11} {'kinds':<12} {'peak MiB':>9} {'growth MiB':>11}")
    for name in names:
        proc = subprocess.run(
            [sys.executable, "-m", "alphagate_lab.bench.memory", "--one", name,
             "--concurrency", str(args.concurrency)],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"{name:<24} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{name:<24} {r['failed_pods']:>11} {','.join(r['kinds']) or '-':<12} "
            f"{r['peak_mib']:>9.1f} {r['growth_mib']:>11.1f}"
        )


if __name__ == "__main__":
    main()
