"""Backtests: replay a policy through the same decision core over recorded metrics.

``run_recording(spec, path)`` streams a simulator recording (``alphagate sim --fast --record``)
through the pod-scrape source's own increment logic and scores the decisions against the
recorded truth (detection delay, false flips); ``run_range(spec, source, start=, end=)`` steps
a metrics source such as Prometheus over a historical range. ``alphagate backtest`` is the
command line over both (``alphagate_lab.commands.backtest``).
"""

from alphagate_lab.backtest.engine import DISCLAIMER, run_range, run_recording
from alphagate_lab.backtest.replay import Options, units_of
from alphagate_lab.backtest.results import BacktestResult, RecordedEvent, UnitResult
from alphagate_lab.backtest.truth import Episode, FalseFlip, Score, TruthSample

__all__ = [
    "DISCLAIMER",
    "BacktestResult",
    "Episode",
    "FalseFlip",
    "Options",
    "RecordedEvent",
    "Score",
    "TruthSample",
    "UnitResult",
    "run_range",
    "run_recording",
    "units_of",
]
