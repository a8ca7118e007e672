"""The state machine's fast, core-only benchmark: false rollbacks per simulated day and time
to roll back, on generated traffic independent of the simulator (`python -m
alphagate_lab.bench.machine`)."""

from alphagate_lab.bench.machine.cli import QUICK_ARGS, main

__all__ = ["QUICK_ARGS", "main"]
