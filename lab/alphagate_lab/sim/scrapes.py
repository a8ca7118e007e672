"""What a Prometheus would have scraped from the fleet: each ready pod once per scrape
interval, at its own phase (Prometheus spreads its targets), kept for a retention, and
visible to queries only ``lag`` after its scrape. A loading pod fails its scrape (a gap).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Mapping

from alphagate_lab.sim.pod import PodSnapshot, SimPod


class ScrapeHistory:
    """The samples a Prometheus holds of each pod, scraped on the fleet's ticks."""

    def __init__(
        self, *, tick: float, scrape_interval: float, lag: float, retention: float
    ) -> None:
        self.lag = lag
        self._every = max(1, round(scrape_interval / tick))
        self._keep = max(2, round(retention / scrape_interval) + 1)
        self._samples: dict[str, deque[PodSnapshot]] = {}

    def _slot(self, name: str) -> int:
        """Which tick of each scrape interval scrapes this pod."""
        return zlib.crc32(name.encode()) % self._every

    def scrape(self, ticks: int, now: float, pods: Mapping[str, SimPod]) -> None:
        """Scrape the pods whose turn it is after tick number ``ticks``; forget deleted ones."""
        phase = ticks % self._every
        for name in [n for n in self._samples if n not in pods]:
            del self._samples[name]
        for pod in pods.values():
            if pod.ready and self._slot(pod.name) == phase:
                samples = self._samples.get(pod.name)
                if samples is None:
                    samples = self._samples[pod.name] = deque(maxlen=self._keep)
                samples.append(pod.snapshot(now))

    def visible(self, name: str, now: float) -> list[PodSnapshot]:
        """Samples of a pod a query could see at ``now``, oldest first."""
        horizon = now - self.lag + 1e-9
        return [s for s in self._samples.get(name, ()) if s.t <= horizon]
