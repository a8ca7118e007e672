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
    """Entry point: AlphagateError becomes one clear line on stderr and exit status 1."""
    try:
        # standalone_mode=False makes click *return* the code of typer.Exit instead of exiting.
        result = app(standalone_mode=False)
        if isinstance(result, int) and not isinstance(result, bool) and result != 0:
            sys.exit(result)
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here with standalone_mode=False
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
