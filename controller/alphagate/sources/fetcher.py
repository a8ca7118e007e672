"""GET many pods' pages at once on one event loop (aiohttp), each within one deadline.

Why aiohttp and one loop: at 1,000 pods the HTTP layer was most of a cycle's CPU. Measured side
by side (1,000 GETs of the 54 KiB gzipped capture, 32 at a time): httpx over 32 threads 2.2
CPU s, httpx's AsyncClient 2.4 s, aiohttp on one loop 0.5 s (its HTTP parser is C; no threads,
no GIL convoy, no pool locks). aiohttp is in the image anyway (the kubernetes client needs it).

One daemon thread runs the loop for the whole process; callers block on :meth:`Fetcher.get_all`
from any thread. Each Fetcher owns a session whose pool keeps connections alive (HTTP/1.1
keep-alive) for :data:`KEEPALIVE_SECONDS`, under uvicorn's 5 s idle close, so a connection is
reused when the interval is short and never reused as the pod closes it.

Every GET gets one deadline (connect, headers and body: ``asyncio.timeout``) and the caps of
:class:`alphagate.sources.http.BodyReader`; no redirects, no proxies from the environment, at
most one content encoding, decoded here in bounded steps. Each page is handed to `on_body` as
soon as it is read; the scrape source's `on_body` parses it on a worker, off this loop
(`sources.parsepool`).

Several Fetchers (one per scrape source, each with its own headers, caps, pool and
``maxConcurrency``) GET side by side: :meth:`Fetcher.fetch` coroutines started with
:func:`submit`. A read's budgets travel with its call (`sources.budget`): a deadline for all its
GETs and parses, and an account its bodies are charged to while held.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, Final, Literal, TypeVar

import aiohttp

from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources import http
from alphagate.sources.budget import FIRST_PAGE_BYTES, Account
from alphagate.sources.common import redact_url
from alphagate.sources.discovery import Target
from alphagate.sources.getshare import GET_SHARE, Hold

KEEPALIVE_SECONDS: Final = 4.0
"""Idle connections are dropped after this; vLLM's uvicorn closes them after 5 s."""

R = TypeVar("R")

Stage = Literal["queued", "share", "get", "parse"]
"""Where a page was when its read's deadline passed: waiting for a slot of its source, for its
namespace's share of the fetch loop (`sources.getshare`), being read, parsed."""

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _the_loop() -> asyncio.AbstractEventLoop:
    """The process's fetch loop, started on first use in a daemon thread."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="alphagate-fetch", daemon=True).start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, R]) -> R:
    """Run `coro` on the fetch loop and wait for it (cancelled if the wait is interrupted)."""
    future: Future[R] = asyncio.run_coroutine_threadsafe(coro, _the_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def submit(coro: Coroutine[Any, Any, R]) -> Future[R]:
    """Start `coro` on the fetch loop; its Future (wait on it from any thread)."""
    return asyncio.run_coroutine_threadsafe(coro, _the_loop())


def where_of(target: Target) -> str:
    return f"{target.pod} {target.url}" if target.pod else target.url


class Fetcher:
    """An aiohttp session on the fetch loop; :meth:`get_all` GETs pages concurrently."""

    def __init__(
        self,
        *,
        headers: dict[str, str],
        concurrency: int,
        accept_encoding: str = http.ACCEPT_ENCODING,
    ) -> None:
        self.concurrency = max(1, concurrency)
        self._headers = {**headers, "Accept-Encoding": accept_encoding}
        self._session: aiohttp.ClientSession | None = None
        self.bytes_read = 0
        """Bytes received off the wire (compressed, as sent), summed over every GET."""

    async def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.concurrency, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                auto_decompress=False,  # decoded in bounded steps by BodyReader
                timeout=aiohttp.ClientTimeout(total=None),  # one deadline per GET, below
                trust_env=False,
            )
        return self._session

    def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            run(session.close())

    def get_all(
        self,
        targets: Sequence[Target],
        *,
        timeout: float,
        max_bytes: int,
        max_lines: int | None,
        on_body: Callable[[Target, bytes, str], R],
        on_error: Callable[[Target, SourceError], R],
    ) -> list[R]:
        """GET every target, at most `concurrency` at a time, each within `timeout` seconds
        in total; `on_body(target, body, content_type)` or `on_error(target, error)` for
        each, in the order of `targets`. Failures are classified, never raised."""
        if not targets:
            return []
        return run(
            self.fetch(
                targets,
                timeout=timeout,
                max_bytes=max_bytes,
                max_lines=max_lines,
                on_body=on_body,
                on_error=on_error,
            )
        )

    async def fetch(
        self,
        targets: Sequence[Target],
        *,
        timeout: float,
        max_bytes: int,
        max_lines: int | None,
        on_body: Callable[[Target, bytes, str], R | Awaitable[R]],
        on_error: Callable[[Target, SourceError], R],
        deadline: float | None = None,
        late: Callable[[Target, Stage], SourceError] | None = None,
        account: Account | None = None,
        expected: Callable[[], int] = lambda: FIRST_PAGE_BYTES,
        owner: str | None = None,
    ) -> list[R]:
        """:meth:`get_all` as a coroutine on the fetch loop, so several Fetchers' GETs run
        beside one another (each Fetcher at most `concurrency` at a time: no other source's
        settings lower it). `on_body` may return an awaitable (the page parsed on a worker).

        A read's budgets: `deadline` (the fetch loop's clock) ends every GET and parse of
        this call, each target then `on_error(target, late(target, stage))`; `account` is
        charged the bytes each body holds until `on_body` is done with it, and a GET starts
        only once a page of `expected()` bytes fits in the account; `owner` (``namespace/name``):
        and once it fits the namespace's share of the loop's receiving (`sources.getshare`),
        held until its body is read. A GET that raises anyway (a bug) raises here once every
        GET has ended."""
        session = await self._open()
        slots = asyncio.Semaphore(self.concurrency)

        async def one(target: Target) -> R:
            stage: list[Stage] = ["queued"]
            try:
                async with asyncio.timeout_at(deadline):
                    async with slots:
                        # its canary's memory first (its own), then its namespace's share of
                        # the loop: a GET waiting for memory holds no share from its namespace
                        held = await account.room(expected()) if account is not None else 0
                        stage[0] = "share"
                        try:
                            share = (
                                None
                                if owner is None
                                else await GET_SHARE.enter(owner, expected(), target.url)
                            )
                        except BaseException:
                            if account is not None:
                                account.release(held)
                            raise
                        try:
                            stage[0] = "get"
                            return await self._read(
                                session, target, timeout, max_bytes, max_lines,
                                on_body, on_error, account, stage, held, share,
                            )  # fmt: skip
                        finally:
                            if share is not None:
                                GET_SHARE.leave(share)
            except TimeoutError:  # the read's deadline, not this GET's own timeout
                assert late is not None and deadline is not None
                return on_error(target, late(target, stage[0]))

        out: list[R] = []
        for r in await asyncio.gather(*(one(t) for t in targets), return_exceptions=True):
            if isinstance(r, BaseException):
                raise r
            out.append(r)
        return out

    async def _read(
        self,
        session: aiohttp.ClientSession,
        target: Target,
        timeout: float,
        max_bytes: int,
        max_lines: int | None,
        on_body: Callable[[Target, bytes, str], R | Awaitable[R]],
        on_error: Callable[[Target, SourceError], R],
        account: Account | None,
        stage: list[Stage],
        held: int = 0,
        share: Hold | None = None,
    ) -> R:
        """One GET, then its body handed to `on_body` (awaited), the body's bytes charged to
        `account` until then (`held` of them before it started); `share` let go once the body
        is read, before parsing (the loop's receiving is done)."""
        charged = [held]
        try:
            got = await self._one(
                session, target, timeout, max_bytes, max_lines, account, charged, share
            )
            if share is not None:
                GET_SHARE.leave(share)
            if isinstance(got, SourceError):
                return on_error(target, got)
            stage[0] = "parse"
            body, ctype = got
            result = on_body(target, body, ctype)
            if inspect.isawaitable(result):
                return await result
            return result
        finally:
            if account is not None:
                account.release(charged[0])

    async def _one(
        self,
        session: aiohttp.ClientSession,
        target: Target,
        timeout: float,
        max_bytes: int,
        max_lines: int | None,
        account: Account | None = None,
        charged: list[int] | None = None,
        share: Hold | None = None,
    ) -> tuple[bytes, str] | SourceError:
        """One GET within its own timeout: the body and its content type, or the failure."""
        try:
            async with asyncio.timeout(timeout):
                return await self._get(
                    session,
                    target,
                    max_bytes=max_bytes,
                    max_lines=max_lines,
                    account=account,
                    charged=charged,
                    share=share,
                )
        except SourceError as exc:
            return exc
        except TimeoutError:
            return SourceError(
                SourceErrorKind.TIMEOUT,
                f"page not complete within {timeout}s",
                target=where_of(target),
            )
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError) or (
                exc.os_error.errno == errno.ECONNREFUSED
            )
            kind = SourceErrorKind.POD_GONE if refused else SourceErrorKind.UNREACHABLE
            return SourceError(kind, str(exc), target=where_of(target))
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return SourceError(
                SourceErrorKind.UNREACHABLE,
                f"{type(exc).__name__}: {exc}",
                target=where_of(target),
            )

    async def _get(
        self,
        session: aiohttp.ClientSession,
        target: Target,
        *,
        max_bytes: int,
        max_lines: int | None,
        account: Account | None = None,
        charged: list[int] | None = None,
        share: Hold | None = None,
    ) -> tuple[bytes, str]:
        where = where_of(target)
        async with session.get(target.url, allow_redirects=False) as resp:
            if resp.status != 200:
                location = resp.headers.get("Location", "")
                hint = f" (redirect to {redact_url(location)}, not followed)" if location else ""
                raise SourceError(
                    SourceErrorKind.HTTP_STATUS, f"HTTP {resp.status}{hint}", target=where
                )
            reader = http.BodyReader(
                encoding=http.single_encoding(resp.headers.getall("Content-Encoding", ()), where),
                content_length=resp.headers.get("Content-Length", ""),
                max_bytes=max_bytes,
                max_lines=max_lines,
                where=where,
            )
            try:
                async for chunk in resp.content.iter_any():
                    reader.feed(chunk)
                    if share is not None:
                        GET_SHARE.grow(share, reader.decoded)
                    if account is not None and charged is not None:
                        grown = reader.decoded - charged[0]
                        if grown > 0:  # past what was held for it
                            account.charge(grown, where)  # past the canary's share: MEMORY
                            charged[0] += grown
            finally:
                self.bytes_read += reader.received
            return reader.finish(), resp.headers.get("Content-Type", "")
