"""The HTTP side of the double: one handler class that routes, applies faults and RBAC, calls
the store, answers JSON (or a chunked watch stream) and logs every request."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from alphagate_lab.sandbox.apiserver.access import (
    CONTROLLER_TOKEN,
    CONTROLLER_USER,
    RecordedRequest,
)
from alphagate_lab.sandbox.apiserver.requestline import FastHead
from alphagate_lab.sandbox.apiserver.resources import JSON, ApiError
from alphagate_lab.sandbox.apiserver.reviews import REVIEWS
from alphagate_lab.sandbox.apiserver.routes import discovery, route, verb_of

if TYPE_CHECKING:
    from alphagate_lab.sandbox.apiserver.server import ApiServer


def make_handler(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(FastHead):
        protocol_version = "HTTP/1.1"
        server_version = "alphagate-apiserver-double"
        # Headers and body leave in one segment (handle_one_request flushes): without this,
        # Nagle plus delayed ACKs add ~40 ms to every keep-alive request.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, code: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", JSON)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> tuple[Any, bytes]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return None, raw
            try:
                return json.loads(raw), raw
            except json.JSONDecodeError as exc:
                raise ApiError(400, f"request body is not valid JSON: {exc}") from exc

        def _handle(self, method: str) -> None:
            split = urlsplit(self.path)
            path = split.path
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            body: Any = None
            verb = resource = group = ns = name = ""
            code = 200
            try:
                body, _ = self._body()
                routed = route(server.types, path)
                if routed is None:
                    if method != "GET":
                        raise ApiError(405, f"{method} is not allowed on {path}")
                    self._send(200, discovery(server.types, path))
                    return
                rtype, ns_or_all, name, sub = routed
                ns = ns_or_all or ""
                group = rtype.group
                resource = rtype.plural + (f"/{sub}" if sub else "")
                verb = verb_of(method, name, query)
                fault = server.faults.fire(method, path)
                if fault is not None and not fault.after:
                    raise ApiError(fault.status, fault.message, reason=fault.reason)
                controller = self.headers.get("Authorization") == f"Bearer {CONTROLLER_TOKEN}"
                rbac = server.rbac if controller else server.people_rbac
                if not rbac.allows(verb, group, resource):
                    where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
                    user = CONTROLLER_USER if controller else "system:anonymous"
                    raise ApiError(
                        403,
                        f'{rtype.key} "{name}" is forbidden: User "{user}" cannot {verb} '
                        f'resource "{resource}" in API group "{group}"{where}',
                    )
                if verb == "watch":
                    self._stream(server._watch_events(rtype, ns_or_all, query))
                    return
                if verb == "list":
                    result = server._list(rtype, ns_or_all, query)
                elif verb == "get":
                    result = server._read(rtype, ns, name)
                elif verb == "create" and rtype.key in REVIEWS:  # answered, never stored
                    result = server.users.review(rtype, body)
                    code = 201
                elif verb == "create":
                    if name:
                        raise ApiError(405, "POST to a named resource")
                    result = server._create(rtype, ns, body)
                    code = 201
                elif verb == "update":
                    result = server._update(rtype, ns, name, sub, body)
                elif verb == "patch":
                    result = server._update(rtype, ns, name, sub, None, patch=(ctype, body))
                elif verb == "delete":
                    result = server._delete_http(rtype, ns, name, body)
                else:
                    raise ApiError(405, f"{method} {path} is not supported by the double")
                if fault is not None and fault.after:  # served; the reply is lost
                    if fault.status == 0:  # dropped once the request is logged (finally)
                        code = 0
                        return
                    raise ApiError(fault.status, fault.message, reason=fault.reason)
                self._send(code, result)
            except ApiError as err:
                code = err.code
                self._send(err.code, err.status())
            except Exception as exc:
                # last resort: one request must not take the server thread down; whatever
                # escaped is a bug in the double, answered as a 500 Status naming its type
                code = 500
                text = f"API server double: {type(exc).__name__}: {exc}"
                self._send(500, ApiError(500, text).status())
            finally:
                server._record(
                    RecordedRequest(
                        method=method,
                        path=path,
                        query=query,
                        content_type=ctype,
                        body=body,
                        status=code,
                        verb=verb,
                        resource=resource,
                        group=group,
                        namespace=ns,
                        name=name,
                    )
                )
                if code == 0:
                    self._drop()

        def _drop(self) -> None:
            """Close the connection without an answer (the client sees it reset)."""
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", JSON)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for ev in events:
                    line = json.dumps(ev).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    return Handler
