"""The decision benchmark: alphagate against the canary tools in use today, closed loop.

``python -m alphagate_lab.bench.decisions`` runs a scenario suite x seeds x policies in simulated
time; a policy's flip restarts the simulated canary pods and changes what they serve. See
``cli`` for the options, ``score`` for what each number means and docs/benchmarks.md for the
latest table.
"""

from alphagate_lab.bench.decisions.cli import QUICK_ARGS, main

__all__ = ["QUICK_ARGS", "main"]
