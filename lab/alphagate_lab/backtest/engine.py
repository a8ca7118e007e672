"""Replay a policy through the decision core over recorded metrics, decision by decision.

The loop is the controller's: every ``intervalSeconds`` of recorded time, for each decision
unit (every slice together for combined aggregation, each slice alone for perSlice), it asks
the core's window rule (:func:`~alphagate.core.window.shared_window`, the one the live
reconciler follows) which window to read, observes the unit's pools over it through a metrics
source, and calls :func:`~alphagate.core.evaluate.evaluate`
with the unit's Memory and a Rollout that follows the unit's own decisions: a flip starts a
rollout that completes ``rollout_seconds`` later with the new config.

Recorded data cannot be changed by those decisions. So while the policy has speculation off,
the canary's acceptance batches are hidden from the core (a pod without
``--speculative-config`` exports no spec-decode series); everything else -- traffic, latency,
restarts -- is what was recorded. The result answers "what would this policy have decided on
this traffic", not "what would the fleet have done under this policy".

Two drivers share :class:`~alphagate_lab.backtest.replay.UnitReplay` (``replay``; what they
return is in ``results``): :func:`run_recording` streams a simulator recording
(through :class:`~alphagate_lab.backtest.recorded.RecordingSource`, the pod-scrape source fed from
snapshots, and scores the decisions against the recorded truth), and :func:`run_range` steps a
`Source` such as the Prometheus source over a historical range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from alphagate.config import SpeculativeCanarySpec
from alphagate.core.model import Role
from alphagate.errors import ScenarioError
from alphagate.sources import Source
from alphagate_lab.backtest import truth as truth_mod
from alphagate_lab.backtest.recorded import (
    PageCache,
    PoolMembers,
    RecordingSource,
    check_selectors,
    header_label_sets,
    members,
)
from alphagate_lab.backtest.replay import EPS, Options, UnitReplay, read_window, units_of
from alphagate_lab.backtest.results import BacktestResult, RecordedEvent, UnitResult
from alphagate_lab.sim.fleet import FleetEvent, FleetSnapshot
from alphagate_lab.sim.recording import iter_recording

MAX_EVALUATIONS: Final = 1_000_000
"""A range that would need more evaluations than this is refused (a typo in --step)."""

SHOWN_EVENTS: Final = frozenset({"timeline", "restart"})

DISCLAIMER: Final = (
    "A backtest cannot change recorded data: it answers what this policy would have decided "
    "on this traffic, not what the fleet would have done under it. After a simulated flip the "
    "recorded pods kept running as recorded; while the policy had speculation off, the "
    "canary's recorded spec-decode series were hidden from the core (a pod without "
    "--speculative-config exports none), and latency and traffic stayed as recorded."
)


def _common_notes(spec: SpeculativeCanarySpec, options: Options) -> list[str]:
    t = spec.timing
    return [
        DISCLAIMER,
        f"Evaluated every {t.interval_seconds:g} s over windows of up to {t.window_seconds:g} s "
        "(cut to start after each warm-up, as the live controller cuts them), starting from "
        + ("On (the canary already speculating)." if options.initial_on else "Off (a new canary).")
        + f" A flip's rollout is modelled to complete {options.rollout_seconds:g} s after the "
        "decision; the policy's warm-up follows it.",
    ]


# --------------------------------------------------------------------------- recordings


def _truth_slices(
    found: Mapping[tuple[str, Role], PoolMembers],
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each slice's (canary, baseline) pods, ready or loading, for the truth."""
    out: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for (slice_name, role), m in found.items():
        c, b = out.get(slice_name, ((), ()))
        pods = (*m.ready, *m.loading)
        out[slice_name] = (pods, b) if role is Role.CANARY else (c, pods)
    return out


def iter_snapshots(
    path: str | Path, events: list[RecordedEvent]
) -> tuple[dict[str, Any], Iterator[FleetSnapshot]]:
    """The header and a stream of snapshots; events are appended to `events` as met."""
    it = iter_recording(path)
    header = next(it, None)
    if not isinstance(header, dict):
        raise ScenarioError(f"{path}: empty recording (no header line)")
    epoch = float(header.get("start_epoch", 0.0))

    def snaps() -> Iterator[FleetSnapshot]:
        for item in it:
            if isinstance(item, FleetSnapshot):
                yield item
            elif isinstance(item, FleetEvent) and item.kind in SHOWN_EVENTS:
                events.append(RecordedEvent(epoch + item.t, item.kind, item.message, item.pod))

    return header, snaps()


def run_recording(
    spec: SpeculativeCanarySpec,
    path: str | Path,
    *,
    policy: str = "policy",
    where: str = "",
    options: Options = Options(),
    progress: Callable[[float], None] | None = None,
) -> BacktestResult:
    """Backtest `spec` over a simulator recording, streaming it (memory stays flat).

    Raises ScenarioError for a missing, empty or garbled recording (naming the line) and
    PolicyError when a pool of the policy selects none of the recorded pods.
    """
    interval = spec.timing.interval_seconds
    events: list[RecordedEvent] = []
    header, snaps = iter_snapshots(path, events)
    pages = PageCache(via_text=options.via_text)
    replays: list[UnitReplay] = []
    sources: list[RecordingSource] = []
    start = math.nan
    next_eval = -math.inf
    last_time = math.nan
    gaps = 0
    ever_ready: dict[tuple[str, Role], bool] = {}
    count = 0
    for snap in snaps:
        if count == 0:
            labels = [p.labels for p in snap.pods] + header_label_sets(header)
            check_selectors(spec, labels, where=where, source=str(path))
            start = snap.time
            replays = [UnitReplay(spec, u, start=start, options=options) for u in units_of(spec)]
            sources = [RecordingSource(pages=pages) for _ in replays]
        elif snap.time < last_time - EPS:
            raise ScenarioError(
                f"{path}: snapshot at t={snap.t:g} s goes back in time "
                f"(previous at {last_time - start:g} s)"
            )
        count += 1
        if count > 1 and snap.time - last_time > interval + EPS:
            gaps += 1
        last_time = snap.time
        due = snap.time + EPS >= next_eval
        rollouts = [r.rollout(snap.time) for r in replays]
        w_start, w_end = read_window(spec, replays, rollouts, snap.time)
        for replay, source, rollout in zip(replays, sources, rollouts, strict=True):
            found = members(replay.view, snap.pods)
            for key, m in found.items():
                ever_ready[key] = ever_ready.get(key, False) or bool(m.ready)
            sample = truth_mod.unit_truth(
                snap.time - start,
                snap.truth,
                _truth_slices(found),
                max_regression_ratio=spec.latency.max_regression_ratio,
            )
            replay.truth.append(sample)
            if not due:
                continue
            source.feed(snap.pods, snap.time)
            obs = source.observe(replay.view, start=w_start, end=w_end, interval_seconds=interval)
            replay.step(obs, rollout, snap.time, sample.alpha)
        if due:
            next_eval = max(next_eval, start)
            while next_eval <= snap.time + EPS:
                next_eval += interval
            if progress is not None:
                progress(snap.time - start)
    if count == 0:
        raise ScenarioError(f"{path}: the recording has no snapshots")

    notes = _common_notes(spec, options)
    rec_interval = header.get("interval")
    if gaps or (isinstance(rec_interval, int | float) and rec_interval > interval + EPS):
        notes.append(
            f"The recording's snapshots ({rec_interval} s apart) are coarser than the policy's "
            f"{interval:g} s interval: evaluations happened at each snapshot instead."
        )
    never = [f"{s}/{r.value}" for (s, r), ok in ever_ready.items() if not ok]
    if never:
        notes.append(
            "Pools that matched recorded pods but never a ready one (every read was an error): "
            + ", ".join(never)
        )
    units: list[UnitResult] = []
    gate = spec.acceptance.disable_below
    for replay in replays:
        sc = truth_mod.score(
            replay.truth,
            replay.points,
            gate=gate,
            window=spec.timing.window_seconds,
            initial_on=options.initial_on,
        )
        units.append(
            UnitResult(
                replay.unit.name,
                replay.unit.slices,
                replay.points,
                replay.truth,
                sc,
                replay.unspeculating,
            )
        )
        if replay.unspeculating:
            notes.append(
                f"{replay.unit.name or 'combined'}: in {replay.unspeculating} evaluations the "
                "policy had speculation on but the recorded canary pods had no drafts (they did "
                "not speculate, or had no traffic): those windows were not judged on alpha."
            )
    notes.append(
        "True alpha: traffic-weighted alpha the selected canary pods were set to (scenario "
        "slice alpha + pod offset). True latency regression: a canary pod's verify passes split "
        "while the baseline's did not, or its mean time per token exceeded the baseline's by "
        "more than maxRegressionRatio (a heuristic on the simulator's truth)."
    )
    source_info = {
        "kind": "recording",
        "path": str(path),
        "scenario": header.get("scenario"),
        "seed": header.get("seed"),
        "recording_interval_seconds": rec_interval,
        "snapshots": count,
        "duration_seconds": last_time - start,
    }
    return BacktestResult(policy, spec, source_info, start, units, events, notes)


# --------------------------------------------------------------------------- ranges


def run_range(
    spec: SpeculativeCanarySpec,
    source: Source,
    *,
    start: float,
    end: float,
    step: float | None = None,
    policy: str = "policy",
    options: Options = Options(),
    describe: Mapping[str, Any] | None = None,
    progress: Callable[[float], None] | None = None,
) -> BacktestResult:
    """Backtest `spec` over historical times start, start + step, ... <= end from `source`.

    `step` defaults to the policy's interval. No truth: nothing is scored.
    """
    step = spec.timing.interval_seconds if step is None else step
    if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
        raise ValueError(f"the range must have end > start (start={start}, end={end})")
    if not step > 0:
        raise ValueError(f"step must be > 0, got {step}")
    n = math.floor((end - start) / step + EPS) + 1
    if n > MAX_EVALUATIONS:
        raise ValueError(
            f"{n} evaluations (range {end - start:g} s / step {step:g} s) is more than "
            f"{MAX_EVALUATIONS}: use a larger step"
        )
    replays = [UnitReplay(spec, u, start=start, options=options) for u in units_of(spec)]
    interval = spec.timing.interval_seconds
    errors = 0
    pool_errors: dict[str, tuple[int, str]] = {}  # pool -> (failed evaluations, first error)
    for i in range(n):
        now = start + i * step
        rollouts = [r.rollout(now) for r in replays]
        w_start, w_end = read_window(spec, replays, rollouts, now)
        for replay, rollout in zip(replays, rollouts, strict=True):
            obs = source.observe(replay.view, start=w_start, end=w_end, interval_seconds=interval)
            if obs.source_error is not None or any(p.error for p in obs.pools):
                errors += 1
            for p in obs.pools:
                if p.error is not None:
                    key = f"{p.slice}/{p.role.value}"
                    count, first = pool_errors.get(key, (0, p.error))
                    pool_errors[key] = (count + 1, first)
            replay.step(obs, rollout, now, math.nan)
        if progress is not None:
            progress(now - start)
    notes = _common_notes(spec, options)
    if errors:
        notes.append(
            f"{errors} unit evaluations had source errors (missing series, Prometheus "
            "errors): they held, as missing data never flips."
        )
    for key, (count, first) in sorted(pool_errors.items()):
        if count == n:
            notes.append(f"Pool {key} returned no data in any evaluation; first error: {first}")
    if step != interval:
        notes.append(
            f"Evaluated every {step:g} s (--step) instead of the policy's {interval:g} s: "
            "consecutive-window counts and timers follow the evaluations made."
        )
    units = [
        UnitResult(r.unit.name, r.unit.slices, r.points, r.truth, None, r.unspeculating)
        for r in replays
    ]
    info = {"kind": "range", "start": start, "end": end, "step_seconds": step, **(describe or {})}
    return BacktestResult(policy, spec, info, start, units, [], notes)
