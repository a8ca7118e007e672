"""Manual commands: what `alphagate pause NAME` (or `kubectl annotate`) writes on the
SpeculativeCanary, and which command is still to be handled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from alphagate.kube.status.resource import CanaryStatus

# The id makes a repeated command a new request; without one, the command text is its id.
ANN_COMMAND: Final = "alphagate.io/command"
ANN_COMMAND_ID: Final = "alphagate.io/command-id"
ANN_COMMAND_BY: Final = "alphagate.io/command-by"
# "true": past the guards the command would obey (`alphagate enable --force`)
ANN_COMMAND_FORCE: Final = "alphagate.io/command-force"
COMMANDS: Final = ("pause", "resume", "enable", "disable", "promote")


def pending_command(obj: Mapping[str, Any], status: CanaryStatus) -> tuple[str, str] | None:
    """(command, id) not yet handled, else None; an unknown command too, to refuse it visibly."""
    annotations = ((obj.get("metadata") or {}).get("annotations")) or {}
    command = str(annotations.get(ANN_COMMAND, "")).strip().lower()
    if not command:
        return None
    ident = str(annotations.get(ANN_COMMAND_ID) or command)
    if status.last_command is not None and status.last_command.id == ident:
        return None
    return command, ident


def command_forced(obj: Mapping[str, Any]) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANN_COMMAND_FORCE, "")).strip().lower() == "true"
