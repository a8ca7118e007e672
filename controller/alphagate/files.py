"""Read a file a person named on the command line (a policy, the controller's config, a saved
page, a recording) without ever blocking on it.

`open()` on a FIFO waits for a writer, forever; a character device (`/dev/zero`, a tty) never
ends or waits for input. So the file is opened non-blocking, checked to be a regular file on
the descriptor that was opened (no window between a check and the open), and only then read,
up to a bound. What is not a regular file is an `OSError` subclass naming what it is, so every
caller's existing "cannot read" path reports it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Final

_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFileError(OSError):
    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file: {kind}", path)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open(path: str | Path) -> int:
    """Opened without blocking, then made blocking for reads."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(str(path), _kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | Path) -> BinaryIO:
    """For files read as a stream, such as a recording."""
    return os.fdopen(_open(path), "rb")


def read_regular(path: str | Path, limit: int) -> bytes:
    """At most `limit + 1` bytes, so a caller can tell a file over its bound."""
    fd = _open(path)
    try:
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


__all__ = ["NotRegularFileError", "open_regular", "read_regular"]
