"""Where the controller's logs go during the demo: a file, so the live view stays clean."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class _SafeStream(io.TextIOBase):
    """A log file that drops writes after it is closed: a thread that outlives the demo's
    shutdown must not crash on its last log line."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if self._fh.closed:
                return len(text)
            return int(self._fh.write(text))

    def flush(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()
        super().close()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def logging_to(path: Path | None) -> Iterator[None]:
    """Send structlog, stdlib logging and stray stderr output (HTTP servers' tracebacks) to
    `path` for the demo's duration, then restore."""
    if path is None:
        yield
        return
    import logging

    import structlog

    from alphagate import logs

    saved = structlog.get_config()
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = _SafeStream(path.open("a", encoding="utf-8"))
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_level = root.level
    try:
        logs.configure(fmt="json", level="INFO", stream=stream)
        for h in saved_handlers:
            root.removeHandler(h)
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stderr(stream):
            yield
    finally:
        root.removeHandler(handler)
        for h in saved_handlers:
            root.addHandler(h)
        root.setLevel(saved_level)
        structlog.configure(**saved)
        stream.close()
