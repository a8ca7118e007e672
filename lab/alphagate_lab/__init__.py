"""alphagate's lab: the tools that build and judge the controller, never shipped in its image.

The simulator (`sim`), the sandbox (an API-server double, a kubelet, vLLM runners, the demo),
the benchmarks (`bench`), the planners (`planning`), the backtester (`backtest`), reports
(`report`), the dashboard generator (`dashboard`), the Prometheus launcher tests use
(`testing`), and their commands (`commands`: demo, sim, backtest, plan, whatif, bench), which
join the `alphagate` CLI through the `alphagate.commands` entry points.

It depends on the controller (`alphagate`); the controller never imports it (an import-linter
contract, and a test that imports every controller module with this package absent).
"""

__version__ = "0.1.0"
