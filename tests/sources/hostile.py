"""A raw-socket HTTP server on 127.0.0.1 that answers the way a broken or hostile pod would:
headers or body a byte at a time, bombs, stacked encodings. Every loop is bounded."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

Answer = Callable[[socket.socket, threading.Event], None]

DRIP_LIMIT_SECONDS = 8.0
"""A dripping answer stops after this long whatever happens (the test bound)."""


def _read_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(rest) < length:
            chunk = conn.recv(4096)
            if not chunk:
                return
            rest += chunk


class HostileServer:
    """Serves `answer(conn, stop)` to every connection until stopped."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.stop_event = threading.Event()
        self.requests = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.base = f"http://127.0.0.1:{self.port}/"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop_event.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.requests += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            _read_request(conn)
            self.answer(conn, self.stop_event)

    def close(self) -> None:
        self.stop_event.set()
        self.sock.close()
        self.thread.join(timeout=2)


@contextlib.contextmanager
def serving(answer: Answer) -> Iterator[HostileServer]:
    server = HostileServer(answer)
    try:
        yield server
    finally:
        server.close()


def drip(data: bytes, every: float = 0.2) -> Answer:
    """Send `data` one byte per `every` seconds (each read is quick; the whole is not)."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        end = time.monotonic() + DRIP_LIMIT_SECONDS
        for i in range(len(data)):
            if stop.is_set() or time.monotonic() > end:
                return
            conn.sendall(data[i : i + 1])
            stop.wait(every)

    return answer


def whole(status: str, headers: dict[str, str], body: bytes) -> Answer:
    """One complete answer."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        conn.sendall(head.encode() + body)

    return answer


def slow_body(body_prefix: bytes, every: float = 0.2) -> Answer:
    """Headers at once announcing a long body, then the body a byte at a time."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
        )
        drip(body_prefix, every)(conn, stop)

    return answer
