"""`alphagate bench [--quick] [MODULE ...]`: run the benchmarks (`python -m alphagate_lab.bench`).

Each benchmark prints its own numbers and ratios measured side by side; a table of what ran
ends the run. Nothing here asserts anything about speed.
"""

from __future__ import annotations

import typer

from alphagate_lab.bench import __main__ as runner


def bench(
    names: list[str] = typer.Argument(
        None, help="benchmark modules to run (default: all of alphagate_lab.bench)"
    ),
    quick: bool = typer.Option(False, "--quick", help="smoke run with small inputs"),
) -> None:
    """Run the benchmarks and print their numbers (ratios measured side by side)."""
    argv = [*(names or []), *(["--quick"] if quick else [])]
    raise typer.Exit(runner.main(argv))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
