"""Virtual time for the loops that wait through the clock seam (`alphagate.clock`): the watch
loop's schedule and leader election.

Kopf's looptime idea, for threads. The threads that wait through a `VirtualClock` are its
participants. Time moves only when every live participant is waiting: then it jumps to the
earliest deadline among them, and that waiter returns. So while one participant works (a
request to the API double, a reconcile) time stands still for all of them, and a Lease that
expires after 15 s of nobody renewing, or a canary due every 30 s, costs the real time of the
requests alone. A waiter also returns as soon as its event is set, by anyone.

Threads that block elsewhere without the clock (a watch stream, a server) are no participants;
a participant that blocks elsewhere holds time still while it does (as it should: it is
working, not waiting).
"""

from __future__ import annotations

import threading
import time

# Real pause between checks while waiting: events set by other threads are seen within it, and
# it bounds how fast an idle loop spins through virtual time.
POLL_SECONDS = 0.002


class VirtualClock:
    """`clock=vc.now, wait=vc.wait` for `LeaderElector`, `Reconciler` / `WatchLoop`."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._cond = threading.Condition()
        self._participants: set[threading.Thread] = set()
        self._waiting: dict[threading.Thread, float] = {}  # thread -> its deadline

    def now(self) -> float:
        with self._cond:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by hand (for a test thread that is no participant)."""
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        me = threading.current_thread()
        with self._cond:
            self._participants.add(me)
            deadline = self._now + max(seconds, 0.0)
            self._waiting[me] = deadline
            try:
                while True:
                    if event.is_set():
                        return True
                    if self._now >= deadline:
                        return False
                    if self._everyone_waits():
                        self._now = max(self._now, min(self._waiting.values()))
                        self._cond.notify_all()
                    # a real pause even after a jump: an idle loop costs little CPU, and the
                    # threads that are no participants (servers, watches) get to run
                    self._cond.wait(POLL_SECONDS)
            finally:
                del self._waiting[me]

    def _everyone_waits(self) -> bool:
        self._participants = {t for t in self._participants if t.is_alive()}
        return all(t in self._waiting for t in self._participants)
