"""A pod-scraped pool's kept increments, added up into its PoolObservation.

The scrape source (`sources/scrape.py`) keeps each pod's increments (`sources/increments.py`);
here those of one pool that fall in the window become its batches (each increment with drafts
one AcceptanceSample), its histograms, its running requests and its decode times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from alphagate.core.model import (
    AcceptanceSample,
    LatencySample,
    NoData,
    PoolObservation,
    RequestLives,
    Role,
)
from alphagate.sources.common import HistSum, PoolRef, sorted_samples
from alphagate.sources.increments import PodState, acceptance_batch
from alphagate.sources.page import Hist


def assemble(
    states: Mapping[tuple[str, Role, str], PodState], ref: PoolRef, start: float, ok: set[str]
) -> PoolObservation:
    """Pool `ref`'s observation from its pods' kept increments whose midpoint is after `start`
    (like PromQL ``increase`` over the window); `ok`: the pods read this time."""
    samples: list[AcceptanceSample] = []
    tpot_samples: list[LatencySample] = []
    gen = 0.0
    hists = {h: HistSum() for h in Hist}
    running: dict[str, list[float]] = {}
    pods = set(ok)
    spec_series = False  # spec-decode series on a pod now, or in an increment of the window
    spec_increments = 0
    for (slice_name, role, pod), state in states.items():
        if slice_name != ref.slice or role is not ref.role:
            continue
        if pod in ok and state.last is not None:
            spec_series = spec_series or any(s.speculating for s in state.last.values())
        for inc in state.ring:
            if (inc.start + inc.end) / 2 <= start:
                continue
            pods.add(pod)
            gen += inc.generation_tokens
            if inc.running is not None:
                running.setdefault(pod, []).append(inc.running)
            for h, (buckets, total) in inc.histograms.items():
                hists[h].add(buckets, total)
            if inc.tpot is not None:
                tpot_samples.append(inc.tpot)
            if not inc.speculating:
                continue
            spec_series = True
            spec_increments += 1
            sample = acceptance_batch(inc)
            if sample is not None:
                samples.append(sample)
    no_data: NoData | None = None
    if spec_series and not samples:
        no_data = NoData.NO_TRAFFIC if spec_increments else NoData.SPARSE_SCRAPES
    return PoolObservation(
        slice=ref.slice,
        role=ref.role,
        acceptance=sorted_samples(samples),
        generation_tokens=gen,
        itl=hists[Hist.ITL].to_buckets(),
        tpot=hists[Hist.TPOT].to_buckets(),
        tpot_samples=tuple(sorted(tpot_samples, key=lambda t: (t.pod, t.start))),
        pods=len(pods),
        spec_series=spec_series,
        no_data=no_data,
        output_lengths=hists[Hist.OUTPUT_LENGTH].to_buckets(),
        lives=_lives(hists[Hist.DECODE_TIME]) if ref.role is Role.CANARY and samples else None,
        running=(
            math.fsum(math.fsum(v) / len(v) for v in running.values()) / len(running)
            if running
            else None
        ),
    )


def _lives(decode: HistSum) -> RequestLives | None:
    """The pool's decode times over the window (what sizes alpha's blocks); None when the
    pods export none or no request finished."""
    h = decode.to_buckets()
    return RequestLives(h) if h is not None and h.total > 0 else None


__all__ = ["assemble"]
