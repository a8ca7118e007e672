"""The noisy-neighbour benchmark's pods: healthy and hostile vLLM pods on loopback ports, and
a slow Prometheus in front of a real one. One asyncio process.

Pod kinds (`--pods KIND:COUNT,...`, one port each, in order):

    normal    the real capture's page, growing each tick (`sandbox.pageserver.Pages`), after
              `--latency` seconds (a network between the controller and the pod)
    slow      accepts and reads the request, never answers
    heavy     a valid page of ~1.6 MB: the capture with its ITL histogram in 900 label sets
              (18,000 lines, inside the 1,024-series and 20,000-line caps) whose values
              change at every scrape (a new shape each time)
    buckets   the capture with its TPOT histogram in 19,000 `le` buckets (~1.7 MB)
    series    the capture plus 4,000 series of a vLLM family (one `engine` label each): cheap to
              serve, costly for Prometheus to read back

`--prometheus URL --delay S` also serves a proxy that answers every request to that Prometheus
`S` seconds late (a slow, loaded Prometheus). It prints one JSON line (`{"ports": [...],
"proxy": port}`) and serves until stdin closes or `--max-seconds`. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Final

from alphagate import vllm
from alphagate_lab.sandbox.pageserver import HOST, Pages

KINDS: Final = ("normal", "slow", "heavy", "buckets", "series")
MAX_HEAD: Final = 16 * 1024
HEAVY_SETS: Final = 900
BUCKETS: Final = 19_000
SERIES: Final = 4_000


class Pod:
    """One pod's answers; `n` counts its scrapes (a heavy page's shape changes with it)."""

    def __init__(self, kind: str, index: int, pages: Pages, latency: float) -> None:
        self.kind, self.index, self.pages, self.latency = kind, index, pages, latency
        self.n = 0

    def page(self, now: float) -> bytes:
        self.n += 1
        plain, _ = self.pages.page(self.index, now)
        if self.kind == "heavy":
            return _without(plain, vllm.ITL) + _heavy(self.index, self.n)
        if self.kind == "buckets":
            return _without(plain, vllm.TPOT) + _buckets(self.n)
        if self.kind == "series":
            return plain + _series(self.n)
        return plain


def _without(page: bytes, family: str) -> bytes:
    """The page less one histogram family (its samples and its HELP/TYPE lines)."""
    name = family.encode()
    return b"".join(
        line
        for line in page.splitlines(keepends=True)
        if not (line.startswith(name + b"_") or (line.startswith(b"# ") and name + b" " in line))
    )


def _histogram(family: str, labels: list[str], bounds: list[float], n: int) -> bytes:
    """A cumulative histogram of `family`, one label set per entry of `labels`."""
    out = [f"# TYPE {family} histogram\n"]
    for lab in labels:
        for i, le in enumerate(bounds):
            out.append(f'{family}_bucket{{{lab},le="{le:.6g}"}} {n * (i + 1)}\n')
        top = n * (len(bounds) + 1)
        out.append(f'{family}_bucket{{{lab},le="+Inf"}} {top}\n')
        out.append(f"{family}_count{{{lab}}} {top}\n{family}_sum{{{lab}}} {n}.5\n")
    return "".join(out).encode()


def _heavy(pod: int, n: int) -> bytes:
    """The ITL histogram in HEAVY_SETS label sets, new label values at every scrape."""
    labels = [f'engine="{i}",model_name="m-p{pod}-s{n}-{i:04d}"' for i in range(HEAVY_SETS)]
    return _histogram(vllm.ITL, labels, [0.01 * (i + 1) for i in range(16)], n)


def _buckets(n: int) -> bytes:
    """The TPOT histogram with BUCKETS `le` bounds, growing with each scrape."""
    bounds = [0.0001 * (i + 1) for i in range(BUCKETS)]
    return _histogram(vllm.TPOT, ['engine="0",model_name="tiny-chat"'], bounds, n)


def _series(n: int) -> bytes:
    name = "vllm:spec_decode_num_draft_tokens_total"
    lines = (f'{name}{{engine="e{i}",model_name="m"}} {n * 10 + i}\n' for i in range(SERIES))
    return "".join(lines).encode()


async def _serve_pod(pod: Pod, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:  # keep-alive: one request after another until the client closes
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_HEAD:
                break
            if pod.kind == "slow":
                await asyncio.Event().wait()  # never answers; ends when the server stops
            if pod.latency > 0:
                await asyncio.sleep(pod.latency)
            body = pod.page(time.time())
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    except asyncio.CancelledError:  # the server stops: the connection ends with it, quietly
        pass
    finally:
        writer.close()


async def _proxy(
    target: str, delay: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One connection to the slow Prometheus: each request forwarded `delay` seconds late."""
    import aiohttp

    host, _, port = target.removeprefix("http://").partition(":")
    try:
        async with aiohttp.ClientSession() as session:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = dict(h.split(": ", 1) for h in lines[1:] if ": " in h)
                length = int(headers.get("Content-Length", headers.get("content-length", "0")))
                body = await reader.readexactly(length) if length else b""
                await asyncio.sleep(delay)
                ctype = headers.get("Content-Type", headers.get("content-type", ""))
                async with session.request(
                    method,
                    f"http://{host}:{port}{path}",
                    data=body or None,
                    headers={"Content-Type": ctype} if ctype else None,
                ) as got:
                    data = await got.read()
                    writer.write(
                        f"HTTP/1.1 {got.status} {got.reason}\r\nContent-Type: "
                        f"{got.headers.get('Content-Type', 'application/json')}\r\n"
                        f"Content-Length: {len(data)}\r\n\r\n".encode()
                        + data
                    )
                await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    except aiohttp.ClientError:
        pass
    finally:
        writer.close()


async def _main(args: argparse.Namespace) -> None:
    pages = Pages(Path(args.page).read_text(encoding="utf-8"), tick_seconds=args.tick_seconds)
    kinds = [
        kind
        for part in args.pods.split(",")
        if part.strip()
        for kind in itertools.repeat(part.split(":")[0], int(part.split(":")[1]))
    ]
    if any(k not in KINDS for k in kinds):
        raise SystemExit(f"--pods: kinds are {', '.join(KINDS)}")
    servers, ports = [], []
    for i, kind in enumerate(kinds):
        pod = Pod(kind, i, pages, args.latency)

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter, pod: Pod = pod) -> None:
            await _serve_pod(pod, r, w)

        srv = await asyncio.start_server(handle, HOST, 0, backlog=128, limit=MAX_HEAD * 2)
        servers.append(srv)
        ports.append(srv.sockets[0].getsockname()[1])
    proxy = 0
    if args.prometheus:

        async def forward(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _proxy(args.prometheus, args.delay, r, w)

        srv = await asyncio.start_server(forward, HOST, 0, backlog=128)
        servers.append(srv)
        proxy = srv.sockets[0].getsockname()[1]
    print(json.dumps({"ports": ports, "proxy": proxy}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(args.max_seconds, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    await stop.wait()
    for srv in servers:
        srv.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", required=True, help="KIND:COUNT,... (normal, slow, heavy, ...)")
    parser.add_argument("--page", required=True, help="the capture a normal page grows from")
    parser.add_argument("--tick-seconds", type=float, default=1.0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--prometheus", default="", help="a Prometheus URL to serve slowly")
    parser.add_argument("--delay", type=float, default=0.0, help="the slow Prometheus's delay")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="hard lifetime bound")
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
