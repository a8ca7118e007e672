"""The router in front of a slice's pods: which ready pod gets each replayed request.

Two policies, as real LLM routers do:

* ``round-robin`` (the default): smooth weighted round robin (nginx's), so a pod of weight 1.4
  beside one of 0.6 gets 70% and 30% of the requests, interleaved, burst or not. A Kubernetes
  Service with pods of equal weight behaves like it over many requests.
* ``least-outstanding``: each request goes to the ready pod with the fewest requests in
  flight or queued per unit of weight, counting those dealt earlier in the same tick (the
  engines' state is known at tick boundaries only).

A pod that is not ready (loading after a restart) gets nothing; its share goes to the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

RouterKind = Literal["round-robin", "least-outstanding"]
ROUTERS: tuple[RouterKind, ...] = ("round-robin", "least-outstanding")


class Router:
    """Deals requests to pods; keeps the round robin's state between ticks."""

    def __init__(self, kind: RouterKind = "round-robin") -> None:
        self.kind = kind
        self._current: dict[str, float] = {}

    def deal(
        self,
        n: int,
        pods: Sequence[str],
        weights: Sequence[float],
        outstanding: Sequence[int] = (),
    ) -> IntArray:
        """The index into ``pods`` of each of ``n`` requests, in arrival order."""
        out = np.zeros(n, dtype=np.int64)
        if n == 0 or not pods:
            return out
        w = [max(float(x), 1e-9) for x in weights]
        if self.kind == "least-outstanding":
            load = [float(o) for o in outstanding] if outstanding else [0.0] * len(pods)
            for r in range(n):
                best = min(range(len(pods)), key=lambda i: ((load[i] + 1.0) / w[i], i))
                out[r] = best
                load[best] += 1.0
            return out
        if max(w) == min(w):  # equal weights: plain rotation, where the last tick left it
            start = int(self._current.get("", 0.0)) % len(pods)
            out = (np.arange(n, dtype=np.int64) + start) % len(pods)
            self._current = {"": float((start + n) % len(pods))}
            return out
        total = sum(w)
        cur = [self._current.get(p, 0.0) for p in pods]
        for r in range(n):
            for i in range(len(cur)):
                cur[i] += w[i]
            best = max(range(len(cur)), key=lambda i: (cur[i], -i))
            cur[best] -= total
            out[r] = best
        self._current = dict(zip(pods, cur, strict=True))
        return out
