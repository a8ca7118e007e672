"""Many fake vLLM pods in one process: one asyncio loop serving /metrics on N loopback ports.

Why one loop: a benchmark of 1,000-5,000 pods on 2 cores cannot afford a process or a thread
per pod, and a minimal HTTP/1.1 protocol costs the scrapers' host far less than a framework.
Why one port per pod: each scraper then opens one connection per pod, as against real pods,
so connection reuse is measured honestly (one port with paths would let a client pool share
connections across "pods").

The page is the real capture's shape (every line of it). Counter-like samples (``_total``,
``_bucket``, ``_count``, ``_sum``) grow with each tick of ``tick_seconds``, by a monotone map
that keeps histogram buckets cumulative; ``_created`` stamps and gauges stay. Pods fall into a
few variants that grow at different rates; each (variant, tick) page is rendered and gzipped
once and shared. Idle keep-alive connections are closed after ``idle_seconds`` (5 s: vLLM's
uvicorn default). Compression is as vLLM 0.32 serves it: ``/metrics`` (its
prometheus-fastapi-instrumentator route, ``should_gzip`` off) is always plain, whatever
``Accept-Encoding`` asks; ``/metrics/`` (the prometheus_client ASGI app vLLM mounts behind it)
is gzipped when asked. Requests and bytes are tallied per client kind (``prometheus`` by its
User-Agent, ``other``); ``GET /stats`` on the control port returns the tallies as JSON.

Run as ``python -m alphagate_lab.sandbox.pageserver --pods N --page FILE``: it prints one JSON line
(``{"control": port, "ports": [...]}``) and serves until its stdin closes or ``--max-seconds``.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from alphagate import vllm

HOST: Final = "127.0.0.1"
IDLE_SECONDS: Final = 5.0
MAX_HEAD: Final = 16 * 1024
OURS_PATH: Final = b"/metrics/alphagate"
"""Serves only the families alphagate reads (a cheap page for a Prometheus that stores only
those: the query cost is the same as with whole pages, the scraping far lower)."""
PATHS: Final = (b"/metrics", b"/metrics/", OURS_PATH)
"""Served paths: plain always, gzip when asked, ours only (gzip when asked)."""
FAMILIES: Final = (
    vllm.SPEC_PREFIX + "num_",
    vllm.base(vllm.GENERATION_TOKENS),
    vllm.ITL,
    vllm.TPOT,
)
"""Name stems of the families alphagate reads."""
_GROWS: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:_total|_bucket|_count|_sum)(?=[{ \t])")


class Pages:
    """The capture as a template; pages per (variant, tick), rendered once, plain and gzipped."""

    def __init__(
        self, text: str, *, variants: int = 8, tick_seconds: float = 10.0, level: int = 6
    ) -> None:
        self.parts: list[tuple[str, float | None, bool]] = []  # (before value, value, ours)
        for line in text.splitlines():
            ours = any(f in line for f in FAMILIES)
            head, sep, value = line.rpartition(" ")
            if line.startswith("#") or not sep or not _GROWS.match(line):
                self.parts.append((line + "\n", None, ours))
                continue
            try:
                self.parts.append((head + " ", float(value), ours))
            except ValueError:
                self.parts.append((line + "\n", None, ours))
        self.variants = max(1, variants)
        self.tick_seconds = tick_seconds
        self.level = level
        self.start = time.time()
        self._cache: dict[tuple[int, int, bool], tuple[bytes, bytes]] = {}

    def render(self, variant: int, tick: int, *, only_ours: bool = False) -> str:
        """The page; `only_ours` keeps only the families alphagate reads."""
        grow = 0.05 * tick * (1 + variant / self.variants)
        out: list[str] = []
        for before, value, ours in self.parts:
            if only_ours and not ours:
                continue
            if value is None:
                out.append(before)
            elif value.is_integer():
                out.append(f"{before}{value + math.floor(value * grow):.1f}\n")
            else:
                out.append(f"{before}{value * (1 + grow)!r}\n")
        return "".join(out)

    def page(self, pod: int, now: float, *, only_ours: bool = False) -> tuple[bytes, bytes]:
        """(plain, gzipped) page of `pod` at `now`; keeps only the current tick's pages."""
        tick = max(0, int((now - self.start) // self.tick_seconds))
        key = (pod % self.variants, tick, only_ours)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) >= 8 * self.variants:
                self._cache = {k: v for k, v in self._cache.items() if k[1] >= tick}
            plain = self.render(key[0], tick, only_ours=only_ours).encode()
            got = self._cache[key] = (plain, gzip.compress(plain, self.level, mtime=0))
        return got


class Tally:
    """Requests and bytes served, by client kind."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, kind: str, nbytes: int) -> None:
        c = self.counts.setdefault(kind, {"requests": 0, "bytes": 0, "connections": 0})
        c["requests"] += 1
        c["bytes"] += nbytes

    def connected(self, kind: str) -> None:
        self.counts.setdefault(kind, {"requests": 0, "bytes": 0, "connections": 0})
        self.counts[kind]["connections"] += 1


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection to one pod (or the control port when `pod` is None)."""

    def __init__(self, pages: Pages, tally: Tally, pod: int | None, idle: float) -> None:
        self.pages, self.tally, self.pod, self.idle = pages, tally, pod, idle
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.idle, self._close)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._close()
                return
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            self._respond(head)
            self._arm()

    def _respond(self, head: bytes) -> None:
        assert self.transport is not None
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip().lower()
        path = parts[1] if len(parts) > 1 else b""
        kind = "prometheus" if b"prometheus" in headers.get(b"user-agent", b"") else "other"
        if not self.counted:
            self.counted = True
            self.tally.connected(kind)
        close = headers.get(b"connection") == b"close"
        if self.pod is None and path == b"/stats":
            body, ctype, encoding = json.dumps(self.tally.counts).encode(), b"application/json", b""
        elif self.pod is not None and path.split(b"?")[0] in PATHS:
            path = path.split(b"?")[0]
            plain, zipped = self.pages.page(self.pod, time.time(), only_ours=path == OURS_PATH)
            if path != b"/metrics" and b"gzip" in headers.get(b"accept-encoding", b""):
                body, encoding = zipped, b"Content-Encoding: gzip\r\n"
            else:
                body, encoding = plain, b""
            ctype = b"text/plain; version=0.0.4; charset=utf-8"
        else:
            body, ctype, encoding = b"not found\n", b"text/plain", b""
        status = b"200 OK" if not body.startswith(b"not found") else b"404 Not Found"
        out = (
            b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\n" + encoding
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            + (b"Connection: close\r\n" if close else b"")
            + b"\r\n" + body
        )  # fmt: skip
        self.transport.write(out)
        if self.pod is not None:
            self.tally.add(kind, len(out))
        if close:
            self.transport.close()


async def serve(
    pages: Pages,
    pods: int,
    *,
    idle: float = IDLE_SECONDS,
    ready: Callable[[int, list[int]], None],
    stop: asyncio.Event,
) -> None:
    """Listen on a port per pod and a control port; call `ready(control, ports)`; serve."""
    loop = asyncio.get_running_loop()
    tally = Tally()
    servers = []
    ports: list[int] = []
    for pod in range(pods):
        srv = await loop.create_server(
            lambda p=pod: _Conn(pages, tally, p, idle),  # type: ignore[misc]
            HOST,
            0,
            backlog=64,
        )
        servers.append(srv)
        ports.append(srv.sockets[0].getsockname()[1])
    control = await loop.create_server(lambda: _Conn(pages, tally, None, 60.0), HOST, 0)
    servers.append(control)
    ready(control.sockets[0].getsockname()[1], ports)
    try:
        await stop.wait()
    finally:
        for srv in servers:
            srv.close()


async def _main(args: argparse.Namespace) -> None:
    pages = Pages(
        Path(args.page).read_text(encoding="utf-8"),
        variants=args.variants,
        tick_seconds=args.tick_seconds,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(args.max_seconds, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)

    def ready(control: int, ports: list[int]) -> None:
        print(json.dumps({"control": control, "ports": ports}), flush=True)

    await serve(pages, args.pods, idle=args.idle_seconds, ready=ready, stop=stop)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--page", required=True, help="a /metrics page to serve (the template)")
    parser.add_argument("--variants", type=int, default=8)
    parser.add_argument("--tick-seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS)
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="hard lifetime bound")
    args = parser.parse_args(argv)
    if not 1 <= args.pods <= 10000:
        parser.error("--pods must be within 1..10000")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
