"""The `alphagate` command line: one Typer app, each command group in its own module.

Modules are imported lazily-by-list so a broken optional part names itself instead of
taking the whole CLI down. The controller image installs only the core dependencies: a command
whose module needs an extra (numpy for the simulator and planners, matplotlib for charts) is
still listed, and running it says which extra to install.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Final

import typer

from alphagate import __version__
from alphagate.errors import AlphagateError

COMMAND_MODULES: Final = (
    "alphagate.commands.policy",
    "alphagate_lab.commands.whatif",
    "alphagate_lab.commands.plan",
    "alphagate_lab.commands.sim",
    "alphagate.commands.inspect",
    "alphagate.commands.evaluate",
    "alphagate.commands.run",
    "alphagate.commands.control",
    "alphagate.commands.status",
    "alphagate.commands.crd",
    "alphagate_lab.commands.backtest",
    "alphagate_lab.commands.demo",
)

# Third-party modules that live in an extra, not in the core dependencies (pyproject.toml).
OPTIONAL_MODULES: Final = {"numpy": "sim", "matplotlib": "plot"}

# The commands each module registers (used only when its optional dependency is missing).
MODULE_COMMANDS: Final = {
    "alphagate_lab.commands.whatif": ("whatif",),
    "alphagate_lab.commands.plan": ("plan",),
    "alphagate_lab.commands.sim": ("sim",),
    "alphagate_lab.commands.backtest": ("backtest",),
    "alphagate_lab.commands.demo": ("demo",),
}

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


def _needs_extra(command: str, missing: str, extra: str) -> Any:
    """A stand-in for a command whose optional dependency is not installed."""

    def stand_in(ctx: typer.Context) -> None:
        typer.echo(
            f"error: `alphagate {command}` needs {missing}, which this install lacks; "
            f"install it with: pip install 'alphagate[{extra}]'",
            err=True,
        )
        raise typer.Exit(1)

    stand_in.__doc__ = f"(needs the `{extra}` extra: pip install 'alphagate[{extra}]')"
    return stand_in


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not written yet: skip quietly
                continue
            root = (exc.name or "").split(".", 1)[0]
            if root not in OPTIONAL_MODULES or name not in MODULE_COMMANDS:
                raise
            extra = OPTIONAL_MODULES[root]
            for command in MODULE_COMMANDS[name]:
                app.command(
                    command,
                    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                    add_help_option=False,
                )(_needs_extra(command, root, extra))
            continue
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
