"""What travels between alphagate and Prometheus: the secrets a request carries (files that
may rotate, read with a size bound), the failures worth retrying, and the answers decoded into
points or a classified SourceError (a redirect, a status, bad JSON, a query error, partial
data)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx

from alphagate.errors import BudgetError, BudgetKind, SourceError, SourceErrorKind
from alphagate.sources.common import (
    redact_url,
)
from alphagate.sources.page_builder import parse_number

MAX_SECRET_BYTES: Final = 64 * 1024
"""A token or password file is read up to this size: a file that never ends is refused."""
TRANSIENT_STATUS: Final = frozenset((502, 503, 504))


class WatchedFile:
    """A secret file re-read whenever it changes (kubelet rotates projected tokens by swapping
    a symlink, so the stat of the target changes)."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._stamp: tuple[int, int, int] | None = None
        self._value = ""

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise SourceError(
                    SourceErrorKind.UNREACHABLE,
                    f"{self.what} {self.path} is not a regular file",
                )
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                with open(self.path, "rb") as fh:
                    raw = fh.read(MAX_SECRET_BYTES + 1)
                if len(raw) > MAX_SECRET_BYTES:
                    raise SourceError(
                        SourceErrorKind.UNREACHABLE,
                        f"{self.what} {self.path} is larger than {MAX_SECRET_BYTES} bytes",
                    )
                self._value = raw.decode("utf-8", errors="strict").strip()
                self._stamp = stamp
        except OSError as exc:
            raise SourceError(
                SourceErrorKind.UNREACHABLE,
                f"cannot read {self.what} {self.path}: {exc.strerror or exc}",
            ) from exc
        except UnicodeDecodeError:
            raise SourceError(
                SourceErrorKind.UNREACHABLE, f"{self.what} {self.path} is not UTF-8 text"
            ) from None
        return self._value


class FileAuth(httpx.Auth):
    """Bearer token or basic auth whose secret lives in a file that may rotate."""

    def __init__(
        self, *, token: WatchedFile | None, username: str | None, password: WatchedFile | None
    ) -> None:
        self.token = token
        self.username = username
        self.password = password

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.token is not None:
            request.headers["Authorization"] = f"Bearer {self.token.read()}"
        elif self.username is not None and self.password is not None:
            basic = httpx.BasicAuth(self.username, self.password.read())
            request.headers["Authorization"] = basic._auth_header
        yield request


class StatusError(SourceError):
    """HTTP status failure; `status` decides whether it is retried."""

    def __init__(self, status: int, message: str, *, target: str, kind: SourceErrorKind) -> None:
        self.status = status
        super().__init__(kind, message, target=target)


class TransientError(SourceError):
    """A connect error or timeout: worth another attempt."""


class QueryTimeout(StatusError):
    """The server gave up on the query (503, errorType timeout): the query's own cost, so it
    is not asked again as it is; a batch asks its halves instead (`prombatch`)."""


def transient(exc: BaseException) -> bool:
    if isinstance(exc, QueryTimeout):
        return False
    if isinstance(exc, StatusError):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, TransientError)


class Asker(Protocol):
    """What answers a pool's queries: a PrometheusSource, or a batch of pools."""

    def query(self, expr: str, *, at: float | None = None) -> list[Point]: ...

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Point]: ...


@dataclass(frozen=True, slots=True)
class Point:
    """One value of one series at one time."""

    labels: Mapping[str, str]
    at: float
    value: float


def ts(value: float) -> str:
    return repr(float(value))


def pod_of(labels: Mapping[str, str]) -> str:
    """A batch's pod: the `pod` label when relabelling adds one, else the scrape instance."""
    return labels.get("pod") or labels.get("instance") or ""


MAX_ANSWER_POINTS: Final = 250_000
"""Points one answer may hold (a pool of 1,000 pods over 10 steps of 20 buckets is 200,000)."""
MAX_ANSWER_LABELS: Final = 250_000
"""Label pairs one answer may hold (some 10 a series)."""


def check_answer(raw: bytes, target: str, *, max_points: int, max_labels: int) -> None:
    """Refuse (ANSWER) an answer whose decoding would cost more than the caps allow, before
    decoding it: a 16 MiB answer of tiny points or labels decodes into some 300 MB of Python
    objects and tens of CPU seconds. Counted in C on the raw bytes, as upper bounds: every
    point opens a ``[``, every label pair holds ``":"``."""
    points = raw.count(b"[")
    labels = raw.count(b'":"')
    if points > max_points or labels > max_labels:
        raise BudgetError(
            BudgetKind.ANSWER,
            f"the answer ({len(raw)} bytes) holds up to {points} points and {labels} labels; "
            f"the controller decodes at most {max_points} points and {max_labels} labels "
            "per answer",
            target=target,
        )


def decode(
    status_code: int,
    headers: httpx.Headers,
    raw: bytes,
    result_type: str,
    target: str,
    *,
    max_points: int = MAX_ANSWER_POINTS,
    max_labels: int = MAX_ANSWER_LABELS,
) -> list[Point]:
    if 200 <= status_code < 300:
        check_answer(raw, target, max_points=max_points, max_labels=max_labels)
    text = raw[:400].decode("utf-8", errors="replace")  # for the errors below
    body: Any = None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if 300 <= status_code < 400:
        location = headers.get("location", "")
        raise StatusError(
            status_code,
            f"HTTP {status_code} redirect"
            + (f" to {redact_url(location)}" if location else "")
            + ": redirects are not followed; configure the endpoint's final URL",
            target=target,
            kind=SourceErrorKind.HTTP_STATUS,
        )
    if status_code >= 400 or status_code < 200:
        detail = ""
        if isinstance(body, dict):
            detail = f" {body.get('errorType', '')}: {body.get('error', '')}".rstrip(": ")
        kind = SourceErrorKind.HTTP_STATUS
        snippet = detail or f" {text[:200]!r}"
        if status_code in (400, 422) and isinstance(body, dict) and "error" in body:
            kind = SourceErrorKind.QUERY_ERROR
        elif (
            status_code in TRANSIENT_STATUS
            and isinstance(body, dict)
            and body.get("errorType") == "timeout"
        ):
            raise QueryTimeout(
                status_code,
                f"HTTP {status_code}{snippet}",
                target=target,
                kind=SourceErrorKind.TIMEOUT,
            )
        raise StatusError(status_code, f"HTTP {status_code}{snippet}", target=target, kind=kind)
    if not isinstance(body, dict):
        raise SourceError(
            SourceErrorKind.BAD_JSON,
            f"response is not a JSON object: {text[:200]!r}",
            target=target,
        )
    status = body.get("status")
    if status == "error":
        raise SourceError(
            SourceErrorKind.QUERY_ERROR,
            f"{body.get('errorType', 'error')}: {body.get('error', '')}",
            target=target,
        )
    data = body.get("data")
    if status != "success" or not isinstance(data, dict):
        raise SourceError(
            SourceErrorKind.BAD_JSON, f"unexpected response shape: {str(body)[:200]}", target=target
        )
    warnings = body.get("warnings")
    if warnings:
        raise SourceError(
            SourceErrorKind.PARTIAL, f"warnings: {'; '.join(map(str, warnings))}", target=target
        )
    if data.get("resultType") != result_type or not isinstance(data.get("result"), list):
        raise SourceError(
            SourceErrorKind.BAD_JSON,
            f"expected a {result_type}, got resultType={data.get('resultType')!r}",
            target=target,
        )
    try:
        return list(_points(data["result"], result_type))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SourceError(
            SourceErrorKind.BAD_JSON, f"malformed {result_type}: {exc!r}", target=target
        ) from exc


def _points(result: list[Any], result_type: str) -> Generator[Point, None, None]:
    for item in result:
        metric = item["metric"]
        if not isinstance(metric, dict):
            raise TypeError("metric is not an object")
        labels = {str(k): str(v) for k, v in metric.items()}
        pairs = [item["value"]] if result_type == "vector" else item["values"]
        for at, value in pairs:
            if not isinstance(value, str):  # the API sends sample values as strings
                raise TypeError(f"sample value {value!r} is not a string")
            yield Point(labels, float(at), parse_number(value))
