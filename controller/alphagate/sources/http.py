"""HTTP with one deadline per request and bodies capped while they are read.

httpx's timeouts apply to each socket operation: a server that sends its headers or body a
byte at a time, each just inside the read timeout, is never timed out, and one such pod stalls
every canary evaluated after it. Here every socket operation (connect, TLS handshake, each read
and write) gets the time left before one deadline set per scrape or query with
:func:`deadline`, so the whole exchange ends by then.

:func:`read_body` reads a response within a byte cap and a line cap, decoding at most one
content encoding (gzip or deflate) in bounded steps, so a compression bomb or a page of empty
lines is refused before it is held in memory, not after.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import threading
import time
import typing
import zlib
from collections.abc import Iterable, Iterator

import httpcore
import httpx

from alphagate.errors import SourceError, SourceErrorKind

ACCEPT_ENCODING = "gzip"
"""The only encoding asked for: one layer, decoded here in bounded steps."""

STEP_BYTES = 64 * 1024
"""Decompressed at most this much per step."""

_local = threading.local()


@contextlib.contextmanager
def deadline(seconds: float, *, budget: str | None = None) -> Iterator[float]:
    """Every socket operation of this thread ends within `seconds` from now (nested: the
    earlier deadline wins). Yields the absolute monotonic deadline. `budget`: this is a
    canary's read deadline (its description, for `budget_spent`), not one request's."""
    outer: float | None = getattr(_local, "deadline", None)
    outer_budget: str | None = getattr(_local, "budget", None)
    mine = time.monotonic() + seconds
    if outer is None or mine < outer:
        _local.deadline, _local.budget = mine, budget
    try:
        yield _local.deadline
    finally:
        _local.deadline, _local.budget = outer, outer_budget


def current() -> tuple[float | None, str | None]:
    """This thread's deadline (absolute, monotonic) and its budget's description, to carry to
    a thread that works for the same read (`carry`)."""
    return getattr(_local, "deadline", None), getattr(_local, "budget", None)


@contextlib.contextmanager
def carry(held: tuple[float | None, str | None]) -> Iterator[None]:
    """Run under another thread's deadline (`current()`), as if it were this thread's."""
    end, budget = held
    if end is None:
        yield
        return
    with deadline(end - time.monotonic(), budget=budget):
        yield


def budget_spent() -> str | None:
    """When this thread's binding deadline is a read's budget (`deadline(budget=...)`) and has
    (all but) passed: its description; else None (a request's own deadline, or time left)."""
    why: str | None = getattr(_local, "budget", None)
    left = remaining()
    return why if why is not None and left is not None and left <= 0.05 else None


def remaining() -> float | None:
    """Seconds left before this thread's deadline; None without one."""
    end: float | None = getattr(_local, "deadline", None)
    return None if end is None else end - time.monotonic()


def _bounded(timeout: float | None, timeout_error: type[Exception]) -> float | None:
    left = remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise timeout_error("deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)
        )
        return _Stream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(
            self._inner.connect_tcp(host, port, bounded, local_address, socket_options or ())
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - never used for scrapes
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:  # pragma: no cover
        self._inner.sleep(seconds)


@functools.cache
def _system_trust() -> ssl.SSLContext:
    """The system's trust store, loaded once per process and never changed after: loading it
    costs tens of milliseconds of CPU, which every source and transport used to pay again."""
    return ssl.create_default_context()


def tls_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """`verify` as a context: the caller's own, the shared system trust store, or (False) one
    that checks nothing."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify:
        return _system_trust()
    insecure = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    return insecure


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport whose sockets honour :func:`deadline`; proxies are not used."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        context = tls_context(verify)
        super().__init__(verify=context, limits=limits, trust_env=False)
        self._pool.close()
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_Backend(),
        )


def client(
    *,
    verify: ssl.SSLContext | bool = True,
    limits: httpx.Limits | None = None,
    transport: httpx.BaseTransport | None = None,
    **kwargs: typing.Any,
) -> httpx.Client:
    """An httpx.Client on a DeadlineTransport (or `transport`, for tests), no redirects, no
    proxies from the environment, asking for at most one content encoding."""
    headers = {"Accept-Encoding": ACCEPT_ENCODING, **kwargs.pop("headers", {})}
    return httpx.Client(
        transport=transport or DeadlineTransport(verify=verify, limits=limits),
        follow_redirects=False,
        trust_env=False,
        headers=headers,
        **kwargs,
    )


# --------------------------------------------------------------------------- bodies


class _Decoder:
    """Identity, gzip or deflate, decompressed at most `room` bytes at a time."""

    def __init__(self, encoding: str, where: str) -> None:
        self.where = where
        self._z: typing.Any = None
        if encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            raise SourceError(
                SourceErrorKind.PARSE, f"unsupported Content-Encoding {encoding!r}", target=where
            )

    def feed(self, data: bytes, room: int) -> Iterator[bytes]:
        """Decoded pieces of `data`, each at most room+1 bytes (the caller stops past room)."""
        if self._z is None:
            yield data
            return
        try:
            while data:
                # Small steps: a bomb never holds more than one step beyond the cap.
                out = self._z.decompress(data, min(room + 1, STEP_BYTES))
                data = self._z.unconsumed_tail
                if self._z.eof and (data or self._z.unused_data):
                    raise SourceError(
                        SourceErrorKind.PARSE,
                        "data after the end of the compressed stream",
                        target=self.where,
                    )
                yield out
        except zlib.error as exc:
            raise SourceError(
                SourceErrorKind.PARSE, f"bad compressed body: {exc}", target=self.where
            ) from None

    def finish(self) -> None:
        if self._z is not None and not self._z.eof:
            raise SourceError(
                SourceErrorKind.PARSE, "compressed body is truncated", target=self.where
            )


def single_encoding(values: Iterable[str], where: str) -> str:
    """The one content encoding named by Content-Encoding header values ('' for none);
    stacked encodings are refused."""
    raw = [part for value in values for part in value.split(",")]
    codings = [c.strip().lower() for c in raw if c.strip() and c.strip().lower() != "identity"]
    if len(codings) > 1:
        raise SourceError(
            SourceErrorKind.PARSE,
            f"Content-Encoding {', '.join(codings)}: more than one encoding is refused",
            target=where,
        )
    return codings[0] if codings else ""


def content_encoding(resp: httpx.Response, where: str) -> str:
    """The one content encoding of a response ('' for none); stacked encodings are refused."""
    return single_encoding(resp.headers.get_list("content-encoding"), where)


class BodyReader:
    """Decodes a body fed chunk by chunk (as received), refused (TOO_LARGE) as soon as it
    crosses `max_bytes` received or decoded bytes or `max_lines` lines. Shared by the httpx
    (Prometheus) and aiohttp (pod scrape) paths, so both have the same caps and errors."""

    __slots__ = (
        "_body", "_counted", "_decoder", "_lines", "max_bytes", "max_lines", "received", "where",
    )  # fmt: skip

    def __init__(
        self,
        *,
        encoding: str,
        content_length: str,
        max_bytes: int,
        max_lines: int | None,
        where: str,
    ) -> None:
        declared = content_length
        if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
            raise SourceError(
                SourceErrorKind.TOO_LARGE,
                f"Content-Length {declared} exceeds the cap of {max_bytes} bytes",
                target=where,
            )
        self._decoder = _Decoder(encoding, where)
        self.max_bytes, self.max_lines, self.where = max_bytes, max_lines, where
        self._body = bytearray()
        self._lines = 0
        self._counted = 0  # newlines of body[:_counted] are in _lines
        self.received = 0

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.max_bytes:  # compressed bytes count too: never past the cap
            raise SourceError(
                SourceErrorKind.TOO_LARGE, f"body exceeds {self.max_bytes} bytes", target=self.where
            )
        body = self._body
        for piece in self._decoder.feed(chunk, self.max_bytes - len(body)):
            body += piece
            if len(body) > self.max_bytes:
                raise SourceError(
                    SourceErrorKind.TOO_LARGE,
                    f"decoded body exceeds {self.max_bytes} bytes",
                    target=self.where,
                )
            # Counting newlines costs a pass over the page: skipped while the body is too
            # short to hold more than max_lines of them.
            if self.max_lines is not None and len(body) > self.max_lines:
                self._lines += body.count(b"\n", self._counted)
                self._counted = len(body)
                if self._lines > self.max_lines:
                    raise SourceError(
                        SourceErrorKind.TOO_LARGE,
                        f"body has more than {self.max_lines} lines",
                        target=self.where,
                    )

    @property
    def decoded(self) -> int:
        """Bytes decoded so far (what the body holds)."""
        return len(self._body)

    def finish(self) -> bytes:
        self._decoder.finish()
        return bytes(self._body)


def read_body(
    resp: httpx.Response, *, max_bytes: int, max_lines: int | None = None, where: str
) -> bytes:
    """The decoded body of a streamed response, refused (TOO_LARGE) past `max_bytes` decoded
    bytes or `max_lines` lines as soon as the cap is crossed."""
    consumed = resp.is_stream_consumed  # already read into memory (httpx.MockTransport)
    reader = BodyReader(
        encoding="" if consumed else content_encoding(resp, where),
        content_length=resp.headers.get("content-length", ""),
        max_bytes=max_bytes,
        max_lines=max_lines,
        where=where,
    )
    for chunk in [resp.content] if consumed else resp.iter_raw():
        reader.feed(chunk)
    return reader.finish()
