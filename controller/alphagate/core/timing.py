"""Is the policy's timing long enough for the scrape interval? Pure advice, no verdicts.

PromQL `increase(x[R])` needs two samples inside its range R: with a scrape every S seconds a
range shorter than 2 S is empty some or all of the time (and one of S or less always is).
alphagate reads its acceptance batches as `increase(...[interval])` and latency and traffic as
`increase(...[window])`, so both must span at least two scrape intervals. A pod scrape source
scrapes once per evaluation: its scrape interval is intervalSeconds, and the window must hold
at least two of those increments.

Both `alphagate policy check` and the controller call `advise`; the warnings are typed so
Events, conditions, logs and the CLI derive their words from the fields.
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
