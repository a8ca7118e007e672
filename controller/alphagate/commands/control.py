"""`alphagate pause|resume|enable|disable|promote NAME`: manual control of a canary.

Manual control goes through annotations on the SpeculativeCanary (`alphagate.io/command` and
a fresh `alphagate.io/command-id`), never around the controller: the controller applies the
command on its next evaluation, records it in status (`lastCommand`) and as a transition with
reason "manual: ...", and the same path works with plain `kubectl annotate`.

A manual enable obeys the policy's guards (the rollback cooldown, the minimum dwell, room in
the flip budget) and a promote needs `promotion.enabled`: the controller refuses otherwise and
says which guard. `--force` is the escape hatch; the transition then records `forced` and the
guards it overrode, and the Event says so. Installed as `kubectl-alphagate`, the same commands
run as `kubectl alphagate ...`.
"""

from __future__ import annotations

import getpass
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from alphagate.commands.kubeopts import (
    CONTEXT,
    KUBECONFIG,
    NAMESPACE,
    SERVER,
    connect,
    read_canary,
    resolve_namespace,
)
from alphagate.config import GROUP, PLURAL, VERSION
from alphagate.errors import KubeError
from alphagate.kube.status.commands import (
    ANN_COMMAND,
    ANN_COMMAND_BY,
    ANN_COMMAND_FORCE,
    ANN_COMMAND_ID,
    COMMANDS,
)
from alphagate.kube.status.resource import parse_status

if TYPE_CHECKING:
    from alphagate.kube.client import Kube

FORCIBLE = ("enable", "promote")
"""Commands with guards `--force` may override."""


def send_command(
    kube: Kube, namespace: str, name: str, command: str, *, by: str = "", force: bool = False
) -> str:
    if command not in COMMANDS:
        raise KubeError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    from alphagate.kube.client import call  # the client loads when a command connects

    ident = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"
    # merge patch: None removes a force flag an earlier command left
    annotations: dict[str, str | None] = {
        ANN_COMMAND: command,
        ANN_COMMAND_ID: ident,
        ANN_COMMAND_FORCE: "true" if force else None,
    }
    if by:
        annotations[ANN_COMMAND_BY] = by
    call(
        f"annotate {PLURAL}.{GROUP} {namespace}/{name}",
        lambda: kube.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        ),
    )
    return ident


_FORCE_HELP = {
    "enable": "Go past the cooldown, the minimum dwell and the flip budget (recorded as forced).",
    "promote": "Promote even though the policy does not enable promotion (recorded as forced).",
}


def _make_command(command: str, verb: str) -> Any:
    def run(
        name: str = typer.Argument(..., help="SpeculativeCanary name."),
        namespace: str | None = NAMESPACE,
        wait: float = typer.Option(
            0.0, "--wait", help="Seconds to wait for the controller to handle it (0: don't)."
        ),
        force: bool = typer.Option(
            False,
            "--force",
            hidden=command not in FORCIBLE,
            help=_FORCE_HELP.get(command, "Has no guards to override."),
        ),
        server: str | None = SERVER,
        kubeconfig: str | None = KUBECONFIG,
        context: str | None = CONTEXT,
    ) -> None:
        if force and command not in FORCIBLE:
            raise typer.BadParameter(
                f"{command} has no guards to override; --force applies to {' and '.join(FORCIBLE)}",
                param_hint="--force",
            )
        namespace = resolve_namespace(namespace, server, kubeconfig, context)
        kube = connect(server, kubeconfig, context)
        try:
            by = f"{getpass.getuser()}@{socket.gethostname()}"
            ident = send_command(kube, namespace, name, command, by=by, force=force)
            forced = " with --force" if force else ""
            typer.echo(
                f"{namespace}/{name}: {command} requested{forced} (id {ident}); the controller "
                "applies it on its next evaluation"
            )
            if wait > 0:
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline:
                    status = parse_status(read_canary(kube, namespace, name))
                    if status.last_command is not None and status.last_command.id == ident:
                        typer.echo(f"handled: {status.last_command.result}")
                        return
                    time.sleep(min(0.5, max(0.05, wait / 20)))
                typer.echo(
                    f"error: not handled within {wait:g} s (is the controller running?)", err=True
                )
                raise typer.Exit(1)
        finally:
            kube.close()

    run.__doc__ = f"{verb} (through an annotation the controller acts on)."
    return run


_VERBS = {
    "pause": "Hold the canary in its current state until resumed",
    "resume": "Resume automatic control after a pause",
    "enable": (
        "Turn speculation on now (a probe, judged like any other); obeys cooldown, dwell and "
        "flip budget unless --force"
    ),
    "disable": "Turn speculation off now (cooldown before the next probe)",
    "promote": (
        "Copy the speculative config to the stable Deployment; needs promotion in the policy "
        "unless --force"
    ),
}


def register(app: typer.Typer) -> None:
    for command in COMMANDS:
        app.command(
            command, help=f"{_VERBS[command]} (through an annotation the controller acts on)."
        )(_make_command(command, _VERBS[command]))
