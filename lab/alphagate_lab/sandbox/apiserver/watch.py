"""The double's watch: the history of changes (the last N, by resourceVersion) and a watch's
event stream, from a resourceVersion or from a list of what is there, until its timeout, the
server's stop, or a 410 Expired when the history no longer reaches back that far.

Apart from the store because a watch is a reader of the store's changes with its own clock
(the timeout) and its own failure (410); the store only records each change here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from alphagate_lab.sandbox.apiserver.resources import ApiError, ResourceType
from alphagate_lab.sandbox.apiserver.selectors import field_selector, label_selector

LabelTest = Callable[[Mapping[str, str]], bool]
FieldTest = Callable[[Mapping[str, Any]], bool]


@dataclass(slots=True)
class WatchEvent:
    rv: int
    type_key: str
    namespace: str
    kind: str  # ADDED / MODIFIED / DELETED
    obj: dict[str, Any]


class WatchHistory:
    """The last ``size`` changes, oldest first; the store records each under its lock."""

    def __init__(self, size: int) -> None:
        self._events: deque[WatchEvent] = deque(maxlen=size)

    def record(self, event: WatchEvent) -> None:
        self._events.append(event)

    def oldest(self, head: int) -> int:
        """The resourceVersion of the oldest change kept (``head + 1`` when none is)."""
        return self._events[0].rv if self._events else head + 1

    def after(self, cursor: int) -> list[WatchEvent]:
        """The changes newer than ``cursor``, oldest first."""
        pending = []
        for ev in reversed(self._events):  # newest first; stop at the cursor
            if ev.rv <= cursor:
                break
            pending.append(ev)
        pending.reverse()
        return pending


def watch_stream(
    history: WatchHistory,
    cond: threading.Condition,
    stopping: threading.Event,
    rtype: ResourceType,
    ns: str | None,
    query: Mapping[str, str],
    *,
    default_timeout: float,
    head: Callable[[], int],
    select: Callable[[LabelTest, FieldTest], list[dict[str, Any]]],
) -> Iterator[dict[str, Any]]:
    """Yield watch events (dicts) until timeoutSeconds, server stop, or a 410. ``head`` is the
    store's resourceVersion and ``select`` the objects both selectors pick, both read under
    ``cond`` (the store's lock, notified on every change)."""
    lsel = label_selector(query.get("labelSelector", ""))
    fsel = field_selector(query.get("fieldSelector", ""))
    timeout = float(query.get("timeoutSeconds") or default_timeout)
    deadline = time.monotonic() + timeout
    rv_text = query.get("resourceVersion", "")

    def matches(ev: WatchEvent) -> bool:
        return (
            ev.type_key == rtype.key
            and (ns is None or ev.namespace == ns)
            and lsel(ev.obj["metadata"].get("labels") or {})
            and fsel(ev.obj)
        )

    with cond:
        if rv_text in ("", "0"):
            initial = select(lsel, fsel)
            cursor = head()
        else:
            try:
                cursor = int(rv_text)
            except ValueError:
                cursor = -1
            oldest = history.oldest(head())
            if cursor < 0 or (cursor < oldest - 1 and cursor < head()):
                gone = ApiError(
                    410, f"too old resource version: {rv_text} ({oldest - 1})", reason="Expired"
                )
                yield {"type": "ERROR", "object": gone.status()}
                return
            initial = []
    for obj in initial:
        yield {"type": "ADDED", "object": obj}
    while not stopping.is_set():
        with cond:
            pending = history.after(cursor)
            if not pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                cond.wait(timeout=min(remaining, 0.5))
                continue
            cursor = pending[-1].rv
        for ev in pending:
            if matches(ev):
                yield {"type": ev.kind, "object": ev.obj}  # stored, never changed: no copy
        if time.monotonic() >= deadline:
            return
