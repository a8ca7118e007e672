"""One pod's page: its bytes into a Page (or the classified reason it cannot be read), and
`inspect`'s one-off read of a URL or a file.

What is wrong with a page fails that pod only: every parser exception becomes a PARSE error
naming where. The scrape source (`sources/scrape.py`) calls :func:`scraped` for each body its
GETs receive, on the parse pool (`sources/parsepool.py`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from typing import Final

from alphagate import files, vllm_compat
from alphagate.errors import SourceError, SourceErrorKind
from alphagate.sources import exposition
from alphagate.sources import layout as pagelayout
from alphagate.sources.discovery import Target
from alphagate.sources.fetcher import Fetcher, where_of
from alphagate.sources.increments import check_page
from alphagate.sources.page import Page
from alphagate.sources.podmemory import check_buckets

ACCEPT: Final = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
"""Ask for the classic text format: no OpenMetrics name escaping (vllm-metrics.md §5)."""


@dataclass(frozen=True, slots=True)
class Scraped:
    """One scrape: the page or the classified failure."""

    target: Target
    at: float
    page: Page | None = None
    error: SourceError | None = None
    layout: vllm_compat.Layout | None = None  # only for a page lacking a latency histogram


def scraped(target: Target, body: bytes, content_type: str, at: float) -> Scraped:
    """A page's bytes -> Scraped: the page, or the classified reason it cannot be read.
    Whatever is wrong with this page fails this pod only."""
    where = where_of(target)
    try:
        page = parse_page(body, content_type=content_type, where=where)
        check_buckets(page, where)  # each bucket is kept per pod per interval
        if not pagelayout.needs_layout(page):
            return Scraped(target, at, page=page)
        text = exposition.decode(body, target=where)
        return Scraped(target, at, page=page, layout=pagelayout.page_layout(page, text))
    except SourceError as exc:
        return Scraped(target, at, error=exc)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # The parser met something it did not expect (e.g. a non-ASCII digit in a label it
        # converts): this page is bad, the other pods are not.
        bad = SourceError(SourceErrorKind.PARSE, f"cannot read the page: {exc!r}", target=where)
        return Scraped(target, at, error=bad)


def parse_page(body: bytes, *, content_type: str = "", where: str, strict: bool = False) -> Page:
    """A page's bytes -> Page, refusing what is not the text format and bad values."""
    _not_json(body, content_type, where)
    page = exposition.parse(exposition.decode(body, target=where), target=where, strict=strict)
    check_page(page.series.values(), where)
    return page


def _not_json(body: bytes, content_type: str, where: str) -> None:
    """A JSON body (an API endpoint, a Prometheus answer) parses as an empty page: refuse it."""
    if "json" in content_type.lower():
        raise SourceError(
            SourceErrorKind.PARSE,
            f"got {content_type.split(';')[0].strip()}, not the Prometheus text format "
            "(is this the /metrics path?)",
            target=where,
        )
    head = body[:64].lstrip()
    if head[:1] in (b"{", b"[") and body.rstrip()[-1:] in (b"}", b"]"):
        try:
            json.loads(body)
        except ValueError:
            return
        raise SourceError(
            SourceErrorKind.PARSE,
            "the body is JSON, not the Prometheus text format (is this the /metrics path?)",
            target=where,
        )


def read_page(
    target: str,
    *,
    timeout_seconds: float = 10.0,
    max_body_bytes: int = 64 << 20,
    max_lines: int = 1_000_000,
) -> Page:
    """One page from a URL or a file path (for `inspect`). Raises SourceError."""
    return read_page_layout(
        target, timeout_seconds=timeout_seconds, max_body_bytes=max_body_bytes, max_lines=max_lines
    )[0]


def read_page_layout(
    target: str,
    *,
    timeout_seconds: float = 10.0,
    max_body_bytes: int = 64 << 20,
    max_lines: int = 1_000_000,
) -> tuple[Page, vllm_compat.Layout]:
    """One page from a URL or a file path, and its vLLM layout (the text searched too, so an
    old family the parser does not keep is seen). Raises SourceError."""
    if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
        raise SourceError(
            SourceErrorKind.TIMEOUT,
            f"timeout must be a positive number of seconds, got {timeout_seconds}",
            target=target,
        )
    if target.startswith(("http://", "https://")):
        fetcher = Fetcher(headers={"Accept": ACCEPT}, concurrency=1)
        try:
            (result,) = fetcher.get_all(
                [Target(url=target)],
                timeout=timeout_seconds,
                max_bytes=max_body_bytes,
                max_lines=max_lines,
                on_body=lambda t, body, ctype: _with_layout(
                    scraped(t, body, ctype, time.time()), body
                ),
                on_error=lambda t, err: Scraped(t, time.time(), error=err),
            )
        finally:
            fetcher.close()
        if result.error is not None:
            raise result.error
        assert result.page is not None and result.layout is not None
        return result.page, result.layout
    try:
        body = files.read_regular(target, max_body_bytes)
    except OSError as exc:
        raise SourceError(
            SourceErrorKind.UNREACHABLE, f"cannot read: {exc.strerror or exc}", target=target
        ) from exc
    if len(body) > max_body_bytes:
        raise SourceError(
            SourceErrorKind.TOO_LARGE, f"file exceeds {max_body_bytes} bytes", target=target
        )
    if body.count(b"\n") > max_lines:
        raise SourceError(
            SourceErrorKind.TOO_LARGE, f"file has more than {max_lines} lines", target=target
        )
    try:
        page = parse_page(body, where=target, strict=True)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SourceError(
            SourceErrorKind.PARSE, f"cannot read the page: {exc!r}", target=target
        ) from exc
    return page, pagelayout.page_layout(page, exposition.decode(body, target=target))


def _with_layout(result: Scraped, body: bytes) -> Scraped:
    """`result` with its page's whole layout (the text searched even when nothing is missing)."""
    if result.page is None:
        return result
    text = exposition.decode(body, target=result.target.url)
    return replace(result, layout=pagelayout.page_layout(result.page, text))


__all__ = ["ACCEPT", "Scraped", "parse_page", "read_page", "read_page_layout", "scraped"]
