"""The clock seam of the loops that wait: the watch loop's schedule (`shell.watch`) and leader
election (`kube.lease`) read the time and wait through it, so tests can run them on virtual
time (a schedule of minutes in milliseconds) instead of waiting on the real clock.

A loop takes `clock` (seconds now) and `wait` (block until an event is set or some seconds
pass; True when it was set). Production passes the defaults here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

Clock = Callable[[], float]
Wait = Callable[[threading.Event, float], bool]

MONOTONIC: Final[Clock] = time.monotonic


def wait(event: threading.Event, seconds: float) -> bool:
    """Block until `event` is set or `seconds` of real time pass; True when it was set."""
    return event.wait(seconds)
