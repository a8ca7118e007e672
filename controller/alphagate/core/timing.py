"""Is the policy's timing long enough for the scrape interval? Pure advice, no verdicts.

PromQL `increase(x[R])` needs two samples inside its range R: with a scrape every S seconds a
range shorter than 2 S is empty some or all of the time (and one of S or less always is).
alphagate reads its acceptance batches as `increase(...[interval])` and latency and traffic as
`increase(...[window])`, so both must span at least two scrape intervals. A pod scrape source
scrapes once per evaluation: its scrape interval is intervalSeconds, and the window must hold
at least two of those increments.

Both `alphagate policy check` and the controller call `advise`; the warnings are typed so
Events, conditions, logs and the CLI derive their words from the fields. `policy check` also
calls `batches_advice`: whether a window of one canary pod (the common canary) can hold two
blocks of alpha at all; the controller learns that from the data (CanaryJudgeable).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from alphagate.config import SourceKind, SpeculativeCanarySpec

MIN_SCRAPES: Final = 2.0
"""A range spanning fewer scrape intervals than this gives an empty increase() at times."""


class TimingProblem(StrEnum):
    """What a timing warning is about; values are stable labels (metrics, Events)."""

    INTERVAL_TOO_SHORT = "interval-too-short"  # each batch's increase()[intervalSeconds]
    WINDOW_TOO_SHORT = "window-too-short"  # the window's increase()[windowSeconds]
    STALENESS_TOO_SHORT = "staleness-too-short"  # afterSeconds below window + warm-up
    PROBE_TOO_SHORT = "probe-too-short"  # probeSeconds ends before the earliest confirmation
    # one canary pod's window holds fewer than two blocks of alpha (policy check only)
    BLOCKS_TOO_LONG = "blocks-too-long"  # acceptance.batchSeconds over half the window
    WINDOW_ONE_BLOCK = "window-one-block"  # window under two samples of a pod


@dataclass(frozen=True, slots=True)
class TimingWarning:
    """One policy duration too short for what it must hold."""

    problem: TimingProblem
    field: str  # the policy field to change, as written in YAML
    seconds: float  # its value
    needed_seconds: float  # the advised minimum
    scrape_interval_seconds: float | None = None  # the scrape interval it was judged against
    scrapes: float | None = None  # how many scrapes the range holds (seconds / scrape interval)

    @property
    def message(self) -> str:
        """One line for people (nothing parses it)."""
        if self.problem is TimingProblem.BLOCKS_TOO_LONG:
            return (
                f"{self.field} {self.seconds:g} s leaves fewer than two blocks of one pod in a "
                f"window, so one canary pod is never judged: make timing.windowSeconds at "
                f"least {self.needed_seconds:g} s or leave batchSeconds out (sized from the "
                f"requests' decode times)"
            )
        if self.problem is TimingProblem.WINDOW_ONE_BLOCK:
            return (
                f"{self.field} {self.seconds:g} s holds fewer than two samples of a pod (one "
                f"range step of intervalSeconds each), so one canary pod is never judged: make "
                f"it at least {self.needed_seconds:g} s"
            )
        if self.problem is TimingProblem.PROBE_TOO_SHORT:
            return (
                f"{self.field} {self.seconds:g} s ends before a probe can first be confirmed "
                f"(a rollout interval, warmupSeconds and the passing windows it needs: "
                f"{self.needed_seconds:g} s), so every healthy probe is reported stalled: make "
                f"it longer than that"
            )
        if self.problem is TimingProblem.STALENESS_TOO_SHORT:
            return (
                f"{self.field} {self.seconds:g} s is shorter than windowSeconds + warmupSeconds "
                f"({self.needed_seconds:g} s): every probe would be reported stale"
            )
        return (
            f"{self.field} {self.seconds:g} s spans {self.scrapes or 0:.1f} scrape intervals of "
            f"{self.scrape_interval_seconds or 0:g} s, so increase() is empty at times (read as "
            f"no data): make it at least {self.needed_seconds:g} s or scrape more often"
        )


def scrape_interval(spec: SpeculativeCanarySpec, prometheus_seconds: float | None) -> float | None:
    """The scrape interval the policy's reads see: the controller's own evaluation interval for
    podScrape, else the Prometheus scrape interval given (None: unknown)."""
    if spec.source.kind is SourceKind.POD_SCRAPE:
        return spec.timing.interval_seconds
    return prometheus_seconds


def earliest_confirmation(spec: SpeculativeCanarySpec) -> float:
    """Seconds from an enable to the earliest confirmation a healthy probe can reach: a rollout
    of one interval, the warm-up, then whole judged windows in a row for both checks."""
    t = spec.timing
    windows = max(spec.acceptance.consecutive_windows, spec.latency.consecutive_windows)
    return t.interval_seconds + t.warmup_seconds + windows * t.window_seconds


def advise(
    spec: SpeculativeCanarySpec, scrape_interval_seconds: float | None
) -> tuple[TimingWarning, ...]:
    """Timing warnings for `spec` against the scrape interval its source sees (None: unknown,
    only the checks that need none). See the module docstring for the rules."""
    t = spec.timing
    out: list[TimingWarning] = []
    s = scrape_interval(spec, scrape_interval_seconds)
    if s is not None and s > 0:
        needed = MIN_SCRAPES * s
        ranges = [(TimingProblem.WINDOW_TOO_SHORT, "spec.timing.windowSeconds", t.window_seconds)]
        if spec.source.kind is not SourceKind.POD_SCRAPE:  # a pod scrape's batch is one scrape
            ranges.insert(
                0,
                (
                    TimingProblem.INTERVAL_TOO_SHORT,
                    "spec.timing.intervalSeconds",
                    t.interval_seconds,
                ),
            )
        for problem, field, seconds in ranges:
            if seconds < needed:
                out.append(TimingWarning(problem, field, seconds, needed, s, seconds / s))
    earliest = earliest_confirmation(spec)
    if t.probe_seconds <= earliest:
        out.append(
            TimingWarning(
                TimingProblem.PROBE_TOO_SHORT, "spec.timing.probeSeconds", t.probe_seconds, earliest
            )
        )
    floor = t.window_seconds + t.warmup_seconds
    if spec.staleness.after_seconds < floor:
        out.append(
            TimingWarning(
                TimingProblem.STALENESS_TOO_SHORT,
                "spec.staleness.afterSeconds",
                spec.staleness.after_seconds,
                floor,
            )
        )
    return tuple(out)


def batches_advice(
    spec: SpeculativeCanarySpec, scrape_interval_seconds: float | None
) -> tuple[TimingWarning, ...]:
    """Can a window of one canary pod hold two blocks of alpha? An explicit batchSeconds must
    fit twice in the window; automatic blocks are at least one sample of the pod (one range
    step of intervalSeconds), so the window must hold two of those. (Whether requests live
    short enough only the data can say: the controller's CanaryJudgeable condition.)"""
    t = spec.timing
    configured = spec.acceptance.batch_seconds
    if configured is not None:
        if t.window_seconds < 2.0 * configured:
            return (
                TimingWarning(
                    TimingProblem.BLOCKS_TOO_LONG,
                    "spec.acceptance.batchSeconds",
                    configured,
                    2.0 * configured,
                ),
            )
        return ()
    if spec.source.kind is SourceKind.POD_SCRAPE:
        return ()  # a pod scrape's sample is one interval: `advise` holds the window to two
    # a sample is one range step (intervalSeconds); two scrapes per window are `advise`'s
    s = scrape_interval(spec, scrape_interval_seconds)
    block = t.interval_seconds
    if t.window_seconds < 2.0 * block:
        return (
            TimingWarning(
                TimingProblem.WINDOW_ONE_BLOCK,
                "spec.timing.windowSeconds",
                t.window_seconds,
                2.0 * block,
                s,
            ),
        )
    return ()
