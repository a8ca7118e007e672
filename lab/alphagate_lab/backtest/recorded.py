"""Recorded pod snapshots as a metrics source: the pod-scrape source, fed from a recording.

A simulator recording holds, every few seconds, what a scrape of every pod would have
returned. :class:`RecordingSource` is the live :class:`~alphagate.sources.scrape.ScrapeSource`
with two parts swapped: discovery lists the ready pods of the current snapshot whose labels
carry the pool's ``matchLabels`` (as ``KubeDiscovery`` would select them), and a "scrape"
returns the pod's snapshot as a parsed page instead of fetching it over HTTP. Everything after
that -- reset-safe per-pod increments, the ring buffer, summing increments over the window,
one acceptance batch per pod and interval, pod failures -- is the live source's own code, so a
backtest observes exactly what a pod-scraping controller would have observed.

:func:`page_of` builds the page straight from the snapshot; :func:`page_via_text` renders the
real ``/metrics`` text and parses it (slower, used to check the two agree).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alphagate import vllm
from alphagate.config import ScrapeSettings, SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import PolicyError
from alphagate.sources.common import SERIES_LABELS, PoolRef, pools_of
from alphagate.sources.discovery import Target
from alphagate.sources.page import Counter, Gauge, Hist, Histogram, Page, Series
from alphagate.sources.pageread import Scraped
from alphagate.sources.scrape import ScrapeSource
from alphagate_lab.sim.pod import PodSnapshot

URL_SCHEME = "recording://"
_ENGINE = "0"  # the simulator's pods run one engine, as vLLM's default does


# --------------------------------------------------------------------------- pages


def page_of(snap: PodSnapshot) -> Page:
    """The parsed page a scrape of this pod would give (only the families alphagate reads)."""
    key = tuple(sorted(((vllm.ENGINE, _ENGINE), (vllm.MODEL_NAME, snap.model_name))))
    series = Series(key)
    created = snap.started
    for c in Counter:
        value = snap.counters.get(c.value)
        if value is not None:
            series.counters[c] = float(value)
            series.created[c] = created
    if snap.spec_k is not None:
        for pos in range(snap.spec_k):
            series.per_position[pos] = float(snap.per_pos[pos]) if pos < len(snap.per_pos) else 0.0
            series.per_position_created[pos] = created
    for h in Hist:
        hist = snap.histograms.get(h.value)
        if hist is None:
            continue
        bounds = (*hist.bounds, math.inf)
        series.histograms[h] = Histogram(
            buckets={b: float(n) for b, n in zip(bounds, hist.buckets, strict=True)},
            count=float(hist.count),
            sum=float(hist.sum),
            created=created,
        )
    for g in Gauge:
        value = snap.gauges.get(g.value)
        if value is not None:
            series.gauges[g] = float(value)
    return Page({key: series})


def page_via_text(snap: PodSnapshot) -> Page:
    """The same page through the simulator's renderer and the sources' parser."""
    from alphagate.sources import exposition
    from alphagate_lab.sim.exposition import render

    return exposition.parse(render(snap).decode("utf-8"), target=snap.name)


# --------------------------------------------------------------------------- selectors


def pod_selector(match_labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a pod must carry; ``model_name``/``engine`` select series, not pods."""
    return {k: v for k, v in match_labels.items() if k not in SERIES_LABELS}


def selects(match_labels: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """`labels` carry every label of `pod_selector(match_labels)` (asked per pod and pool at
    every snapshot: tested in place, without building the selector)."""
    return all(labels.get(k) == v for k, v in match_labels.items() if k not in SERIES_LABELS)


def _show(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(labels.items())) + "}"


def check_selectors(
    spec: SpeculativeCanarySpec, label_sets: Sequence[Mapping[str, str]], *, where: str, source: str
) -> None:
    """Refuse a policy some of whose pools select none of the recorded pods.

    The error names the policy field (``spec.slices[i].canary.matchLabels``), the selector and
    the label sets the recording does have, so the fix is obvious.
    """
    unique = sorted({tuple(sorted(ls.items())) for ls in label_sets})
    problems: list[str] = []
    first_path = ""
    for i, s in enumerate(spec.slices):
        for role, selector in (("canary", s.canary), ("baseline", s.baseline)):
            ml = selector.match_labels
            if any(selects(ml, dict(ls)) for ls in unique):
                continue
            path = f"spec.slices[{i}].{role}.matchLabels"
            first_path = first_path or path
            problems.append(f"{path} {_show(ml)} (slice {s.name}, {role})")
    if not problems:
        return
    shown = [_show({k: v for k, v in ls if k != "pod"}) for ls in unique]
    distinct = list(dict.fromkeys(shown))
    more = f"; ... ({len(distinct)} in all)" if len(distinct) > 6 else ""
    sample = "; ".join(distinct[:6]) + more
    raise PolicyError(
        f"{'; '.join(problems)}: no recorded pod in {source} carries these labels. "
        f"The recorded pods are labelled like: {sample or 'none (no pods)'} "
        f"(each also has its own `pod` label)",
        where=where,
        path=first_path,
    )


# --------------------------------------------------------------------------- the source


@dataclass(frozen=True, slots=True)
class PoolMembers:
    """Which recorded pods a policy pool selected at one snapshot (ready or not)."""

    ready: tuple[str, ...]
    loading: tuple[str, ...]


class _SnapshotDiscovery:
    """Discovery over the current snapshot: ready pods whose labels match the pool's."""

    def __init__(self, owner: RecordingSource) -> None:
        self.owner = owner

    def targets(self, spec: SpeculativeCanarySpec, pool: PoolRef) -> list[Target]:
        out = []
        for pod in self.owner.pods:
            if pod.ready and selects(pool.match_labels, pod.labels):
                out.append(
                    Target(
                        url=URL_SCHEME + pod.name,
                        pod=pod.name,
                        namespace=pod.labels.get("namespace", ""),
                    )
                )
        return sorted(out, key=lambda t: t.pod)


class RecordingSource(ScrapeSource):
    """The pod-scrape source over recorded snapshots. Call :meth:`feed` before each observe.

    The clock is the snapshot's time, so retention and pruning behave as they do live.
    """

    def __init__(self, *, pages: PageCache | None = None) -> None:
        self.pods: Sequence[PodSnapshot] = ()
        self.now = 0.0
        self.pages = pages if pages is not None else PageCache()
        super().__init__(
            _SnapshotDiscovery(self), settings=ScrapeSettings(), clock=lambda: self.now
        )

    def feed(self, pods: Sequence[PodSnapshot], at: float) -> None:
        """The snapshot the next observe reads (what a scrape at `at` would return)."""
        self.pods = pods
        self.now = at

    def scrape(self, targets: Iterable[Target], settings: ScrapeSettings) -> dict[str, Scraped]:
        by_name = {p.name: p for p in self.pods}
        out: dict[str, Scraped] = {}
        for t in targets:
            pod = by_name[t.pod]
            out[t.url] = Scraped(t, pod.time, page=self.pages.get(pod))
        return out


class PageCache:
    """Pages of the current snapshot, built once even when several units read the same pod."""

    def __init__(self, *, via_text: bool = False) -> None:
        self.via_text = via_text
        self._at: float | None = None
        self._pages: dict[str, Page] = {}

    def get(self, pod: PodSnapshot) -> Page:
        if pod.time != self._at:
            self._at = pod.time
            self._pages = {}
        page = self._pages.get(pod.name)
        if page is None:
            page = page_via_text(pod) if self.via_text else page_of(pod)
            self._pages[pod.name] = page
        return page


def members(
    spec: SpeculativeCanarySpec, pods: Iterable[PodSnapshot]
) -> dict[tuple[str, Role], PoolMembers]:
    """For each (slice, role) pool of `spec`, the recorded pods it selects."""
    pods = list(pods)
    out: dict[tuple[str, Role], PoolMembers] = {}
    for ref in pools_of(spec):
        chosen = [p for p in pods if selects(ref.match_labels, p.labels)]
        out[(ref.slice, ref.role)] = PoolMembers(
            ready=tuple(p.name for p in chosen if p.ready),
            loading=tuple(p.name for p in chosen if not p.ready),
        )
    return out


def header_label_sets(header: Mapping[str, Any]) -> list[dict[str, str]]:
    """Label sets of the pods a recording's scenario creates (pools that may scale up later)."""
    spec = header.get("scenario_spec")
    out: list[dict[str, str]] = []
    if not isinstance(spec, dict):
        return out
    for pool in spec.get("pools") or ():
        if not isinstance(pool, dict) or "name" not in pool:
            continue
        base = {
            "namespace": str(pool.get("namespace", "default")),
            "deployment": str(pool["name"]),
            "role": str(pool.get("role", "")),
            "slice": str(pool.get("slice", "")),
        }
        for i in range(max(1, int(pool.get("replicas") or 1))):
            out.append({**base, "pod": f"{pool['name']}-{i}"})
    return out


__all__ = [
    "PageCache",
    "PoolMembers",
    "RecordingSource",
    "check_selectors",
    "header_label_sets",
    "members",
    "page_of",
    "page_via_text",
    "pod_selector",
    "selects",
]
