"""The `alphagate` command line: one Typer app, each command group in its own module.

The controller's commands are listed here. The lab's (`demo`, `sim`, `backtest`, `plan`,
`whatif`, `bench`) come with the `alphagate-lab` distribution, which registers them under the
entry-point group `alphagate.commands`; the controller never imports the lab. When the lab is
not installed (the controller image), its commands are still listed, and asking for one says
which package to install.

`main` builds the app with only the command it is asked for (most of start-up is imports);
help, `--version` and a name it does not know get every command.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final

import typer

from alphagate import __version__
from alphagate.errors import AlphagateError

COMMANDS: Final = {
    "policy": "alphagate.commands.policy",
    "inspect": "alphagate.commands.inspect",
    "evaluate": "alphagate.commands.evaluate",
    "run": "alphagate.commands.run",
    "pause": "alphagate.commands.control",
    "resume": "alphagate.commands.control",
    "enable": "alphagate.commands.control",
    "disable": "alphagate.commands.control",
    "promote": "alphagate.commands.control",
    "status": "alphagate.commands.status",
    "crd": "alphagate.commands.crd",
}
"""Each controller command, and the module that registers it."""
COMMAND_MODULES: Final = tuple(dict.fromkeys(COMMANDS.values()))


ENTRY_POINT_GROUP: Final = "alphagate.commands"

# The lab's commands, named so that asking for one without the lab says what to install.
LAB_COMMANDS: Final = ("whatif", "plan", "sim", "backtest", "demo", "bench")
LAB_DISTRIBUTION: Final = "alphagate-lab"
_INSTALL_LAB: Final = (
    f"install it with: pip install {LAB_DISTRIBUTION} (from a checkout: pip install ./lab)"
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"alphagate {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """alphagate: measure alpha first, flip the flag after."""


def _new_app() -> typer.Typer:
    app = typer.Typer(
        name="alphagate",
        help="Gate vLLM speculative decoding on measured acceptance (alpha) and P99 latency.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    return app


def _stand_in(command: str, why: str, doc: str) -> Any:
    """A command that cannot run in this install: it prints `why` on one line and exits 1."""

    def stand_in(ctx: typer.Context) -> None:
        typer.echo(f"error: `alphagate {command}` {why}", err=True)
        raise typer.Exit(1)

    stand_in.__doc__ = doc
    return stand_in


def _add_stand_in(app: typer.Typer, command: str, why: str, doc: str) -> None:
    app.command(
        command,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(_stand_in(command, why, doc))


def _registered(app: typer.Typer) -> set[str]:
    names = {c.name for c in app.registered_commands if c.name}
    return names | {g.name for g in app.registered_groups if g.name}


def _register_plugin(app: typer.Typer, ep: EntryPoint) -> None:
    """An entry point that fails to import names itself under its own command instead of
    taking the CLI down."""
    try:
        module = ep.load()
    except ImportError as exc:
        why = f"comes with the lab, which does not import here ({exc}); {_INSTALL_LAB}"
        _add_stand_in(app, ep.name, why, f"(the lab does not import: {_INSTALL_LAB})")
        return
    module.register(app)


def _lab_stand_ins(app: typer.Typer, commands: Iterable[str]) -> None:
    for command in commands:
        if command not in _registered(app):
            why = f"comes with the lab, which this install lacks; {_INSTALL_LAB}"
            _add_stand_in(app, command, why, f"(needs the lab: pip install {LAB_DISTRIBUTION})")


def build(command: str | None = None) -> typer.Typer:
    """The app with every command, or with only `command`'s when it names one: a command
    imports its own module alone (`alphagate policy check` does not import the kubernetes
    client, nor `status` the lab), which is most of the CLI's start-up time."""
    app = _new_app()
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command]).register(app)
        return app
    plugins = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    named = [ep for ep in plugins if ep.name == command]
    if named or command in LAB_COMMANDS:
        for ep in named:
            _register_plugin(app, ep)
        _lab_stand_ins(app, [command] if command else [])
        return app
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    for ep in plugins:
        _register_plugin(app, ep)
    _lab_stand_ins(app, LAB_COMMANDS)
    return app


@functools.cache
def _whole() -> typer.Typer:
    return build()


def __getattr__(name: str) -> typer.Typer:
    """`alphagate.cli.app`: the app with every command, built on first use."""
    if name == "app":
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Entry point: AlphagateError becomes one clear line on stderr and exit status 1.

    Click's standalone mode handles usage errors (exit 2), typer.Exit codes and Ctrl-C.
    """
    first = sys.argv[1] if len(sys.argv) > 1 else None
    app = build(first if first and not first.startswith("-") else None)
    try:
        app()
    except AlphagateError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
