"""The `alphagate` command line: one Typer app, each command group in its own module.

The controller's commands are listed here. The lab's (`demo`, `sim`, `backtest`, `plan`,
`whatif`, `bench`) come with the `alphagate-lab` distribution, which registers them under the
entry-point group `alphagate.commands`; the controller never imports the lab. When the lab is
not installed (the controller image), its commands are still listed, and asking for one says
which package to install.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from typing import Any, Final

import typer

from alphagate import __version__
from alphagate.errors import AlphagateError

COMMAND_MODULES: Final = (
    "alphagate.commands.policy",
    "alphagate.commands.inspect",
    "alphagate.commands.evaluate",
    "alphagate.commands.run",
    "alphagate.commands.control",
    "alphagate.commands.status",
    "alphagate.commands.crd",
)


ENTRY_POINT_GROUP: Final = "alphagate.commands"

# The lab's commands, named so that asking for one without the lab says what to install.
LAB_COMMANDS: Final = ("whatif", "plan", "sim", "backtest", "demo", "bench")
LAB_DISTRIBUTION: Final = "alphagate-lab"
_INSTALL_LAB: Final = (
    f"install it with: pip install {LAB_DISTRIBUTION} (from a checkout: pip install ./lab)"
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


def _stand_in(command: str, why: str, doc: str) -> Any:
    """A command that cannot run in this install: it prints `why` on one line and exits 1."""

    def stand_in(ctx: typer.Context) -> None:
        typer.echo(f"error: `alphagate {command}` {why}", err=True)
        raise typer.Exit(1)

    stand_in.__doc__ = doc
    return stand_in


def _add_stand_in(command: str, why: str, doc: str) -> None:
    app.command(
        command,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(_stand_in(command, why, doc))


def _registered() -> set[str]:
    names = {c.name for c in app.registered_commands if c.name}
    return names | {g.name for g in app.registered_groups if g.name}


def _register_plugins() -> None:
    """One entry point that fails to import names itself under its own command instead of
    taking the CLI down."""
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            module = ep.load()
        except ImportError as exc:
            why = f"comes with the lab, which does not import here ({exc}); {_INSTALL_LAB}"
            _add_stand_in(ep.name, why, f"(the lab does not import: {_INSTALL_LAB})")
            continue
        module.register(app)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    _register_plugins()
    for command in LAB_COMMANDS:
        if command not in _registered():
            why = f"comes with the lab, which this install lacks; {_INSTALL_LAB}"
            _add_stand_in(command, why, f"(needs the lab: pip install {LAB_DISTRIBUTION})")


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
