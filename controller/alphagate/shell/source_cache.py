"""One `Source` per SpeculativeCanary, kept while its policy generation holds.

A new generation (the policy changed) closes the old source and makes a new one; a resource
gone or handed to another replica closes its source.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from alphagate.config import SpeculativeCanarySpec
from alphagate.sources import Source

SourceFactory = Callable[[SpeculativeCanarySpec, str, str], Source]


class SourceCache:
    """The sources in use, by (namespace, name), each with the generation it was made for."""

    def __init__(self, factory: SourceFactory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._sources: dict[tuple[str, str], tuple[int, Source]] = {}

    def get(
        self, spec: SpeculativeCanarySpec, namespace: str, name: str, generation: int
    ) -> Source:
        key = (namespace, name)
        with self._lock:
            held = self._sources.get(key)
        if held is not None and held[0] == generation:
            return held[1]
        if held is not None:
            close_source(held[1])
        source = self._factory(spec, namespace, name)
        with self._lock:
            self._sources[key] = (generation, source)
        return source

    def drop(self, namespace: str, name: str) -> None:
        """Close and forget the resource's source, if any."""
        with self._lock:
            held = self._sources.pop((namespace, name), None)
        if held is not None:
            close_source(held[1])

    def close(self) -> None:
        """Close every source."""
        with self._lock:
            sources = [s for _, s in self._sources.values()]
            self._sources.clear()
        for s in sources:
            close_source(s)


def close_source(source: Source) -> None:
    """Close a source that can be closed; a socket or pool already shut is no error."""
    close = getattr(source, "close", None)
    if callable(close):
        with contextlib.suppress(OSError, RuntimeError):  # sockets, a pool already shut
            close()
