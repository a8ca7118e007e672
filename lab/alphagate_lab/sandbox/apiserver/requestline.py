"""The double's reading of a request's head (its request line and headers), without the
`email` parser `http.server` hands headers to: that parser cost ~200 us a request, a sixth of
what serving a small object costs, and the double serves tens of thousands of requests in a
test run. What clients send (`METHOD /path HTTP/1.1` and `Name: value` lines) is read here;
any other request line goes to `http.server`'s own parsing, and a header line that is not
`Name: value` (obsolete line folding included) is refused with 400, as kube-apiserver
refuses it.
"""

from __future__ import annotations

import http.client
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Final

MAX_LINE: Final = 65536  # http.client's limits
MAX_HEADERS: Final = 100


class FastHead(BaseHTTPRequestHandler):
    """A request handler whose `parse_request` reads HTTP/1.x heads without `email`."""

    raw_requestline: bytes  # set by handle_one_request before it parses

    def parse_request(self) -> bool:
        """`BaseHTTPRequestHandler.parse_request` for ``METHOD PATH HTTP/1.x``: the same
        fields (command, path, request_version, headers, close_connection), the same
        Connection and Expect handling, the same errors for too long or too many headers."""
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.1", "HTTP/1.0"):
            return bool(super().parse_request())
        self.requestline = requestline
        command, path, version = words
        self.request_version = version
        self.close_connection = not (version == "HTTP/1.1" and self.protocol_version >= version)
        self.command, self.path = command, path
        if path.startswith("//"):  # as http.server does (gh-87389)
            self.path = "/" + path.lstrip("/")
        headers = self._read_headers()
        if headers is None:
            return False
        self.headers = headers
        conntype = headers.get("Connection", "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive" and self.protocol_version >= "HTTP/1.1":
            self.close_connection = False
        expect = headers.get("Expect", "").lower()
        if (
            expect == "100-continue"
            and self.protocol_version >= "HTTP/1.1"
            and version == "HTTP/1.1"
        ):
            return bool(self.handle_expect_100())
        return True

    def _read_headers(self) -> http.client.HTTPMessage | None:
        """The header lines up to the blank one, or None once an error is sent."""
        message = http.client.HTTPMessage()
        for _ in range(MAX_HEADERS):  # the blank line counts, as in http.client
            raw = self.rfile.readline(MAX_LINE + 1)
            if len(raw) > MAX_LINE:
                self.send_error(
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", "header line"
                )
                return None
            if raw in (b"\r\n", b"\n", b""):
                return message
            line = raw.decode("iso-8859-1")
            name, colon, value = line.partition(":")
            if not colon or not name or name[0] in " \t":
                self.send_error(HTTPStatus.BAD_REQUEST, f"Malformed header line {line!r}")
                return None
            message.set_raw(name, value.lstrip(" \t").rstrip("\r\n"))  # as email.parser does
        self.send_error(
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
            "Too many headers",
            f"got more than {MAX_HEADERS} headers",
        )
        return None
