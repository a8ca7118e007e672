"""Namespaces in turn: the control loop's one thread serves tenants round robin, not in the
order their work happened to come.

The loop decides the canaries whose reads have arrived on one thread. In arrival order, twenty
canaries of one namespace whose reads ended together held another namespace's decision for about
a second. Here each namespace waits for at most one decision of every other namespace with work
ready; inside a namespace, the canary that fell due first goes first. The same order admits the
due canaries (`WatchLoop.due`), so a namespace with many due canaries cannot take the whole
overall API budget ahead of another.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Turns(Generic[T]):
    """Items waiting to be served, handed out one namespace at a time (round robin over the
    namespaces with items; inside one, the lowest rank first)."""

    __slots__ = ("_count", "_order", "_queues")

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[tuple[int, int, T]]] = {}
        self._order: deque[Hashable] = deque()  # namespaces with items, next to serve first
        self._count = 0  # ties broken by insertion: a heap never compares items

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def push(self, namespace: Hashable, rank: int, item: T) -> None:
        """Queue `item` of `namespace`; a namespace new to the rotation takes the last turn."""
        q = self._queues.get(namespace)
        if q is None:
            q = self._queues[namespace] = []
            self._order.append(namespace)
        self._count += 1
        heapq.heappush(q, (rank, self._count, item))

    def pop(self) -> T:
        """The next namespace's lowest-ranked item (IndexError when empty)."""
        namespace = self._order.popleft()
        q = self._queues[namespace]
        _, _, item = heapq.heappop(q)
        if q:
            self._order.append(namespace)
        else:
            del self._queues[namespace]
        return item


def in_turn(keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """`keys` (namespace, name), ordered round robin by namespace: each namespace in the order
    of its first key, and inside one namespace the order of `keys`."""
    turns: Turns[tuple[str, str]] = Turns()
    for rank, key in enumerate(keys):
        turns.push(key[0], rank, key)
    return [turns.pop() for _ in range(len(turns))]
