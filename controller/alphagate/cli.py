"""The `alphagate` command line: one Typer app, each command group in its own module.

Modules are imported lazily-by-list so a broken optional part names itself instead of
taking the whole CLI down.
"""

from __future__ import annotations

import importlib
import sys
from typing import Final

import typer

from alphagate import __version__
from alphagate.errors import AlphagateError

COMMAND_MODULES: Final = (
    "alphagate.commands.policy",
    "alphagate.commands.whatif",
    "alphagate.commands.plan",
    "alphagate.commands.sim",
    "alphagate.commands.inspect",
    "alphagate.commands.evaluate",
    "alphagate.commands.run",
    "alphagate.commands.control",
    "alphagate.commands.crd",
    "alphagate.commands.backtest",
    "alphagate.commands.demo",
)

app = typer.Typer(
    name="alphagate",
    help="Gate vLLM speculative decoding on measured acceptance (alpha) and P99 latency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"alphagate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """alphagate: measure alpha first, flip the flag after."""


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not written yet: skip quietly
                continue
            raise
        module.register(app)


_register_all()


def main() -> None:
    """Entry point: AlphagateError becomes one clear line on stderr and exit status 1.

    Click's standalone mode handles usage errors (exit 2), typer.Exit codes and Ctrl-C.
    """
    try:
        app()
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
