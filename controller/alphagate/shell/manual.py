"""A manual command (`alphagate.io/command` annotation) for one evaluation, and its record.

An unknown command is refused with a Warning Event and recorded; a known one is handed to
the core with the evaluation, and what it came to is recorded in status (`lastCommand`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alphagate.core.model import Command
from alphagate.kube.events import EventRecorder, ObjectRef, Reason
from alphagate.kube.status.commands import COMMANDS, command_forced, pending_command
from alphagate.kube.status.fields import rfc3339
from alphagate.kube.status.resource import CanaryStatus, CommandRecord
from alphagate.kube.units import UnitOutcome


@dataclass
class Manual:
    """The pending command (text, id), the one to give the core, and the record so far."""

    pending: tuple[str, str] | None
    command: Command | None
    force: bool
    record: CommandRecord | None

    def handled(self, units: Sequence[UnitOutcome], now: float) -> CommandRecord | None:
        """The record once the command went through the units (their errors, else reasons)."""
        if self.command is None or self.pending is None:
            return self.record
        results = [u.evaluation.reason for u in units if u.evaluation is not None]
        failed = [str(u.error) for u in units if u.error is not None]
        return CommandRecord(
            command=self.pending[0],
            id=self.pending[1],
            handled_at=rfc3339(now),
            result="; ".join(failed) if failed else ("; ".join(results) or "no change"),
            forced=self.force,
        )


def manual_command(
    obj: dict[str, Any],
    previous: CanaryStatus,
    events: EventRecorder,
    ref: ObjectRef,
    now: float,
) -> Manual:
    """The command pending on the resource, if any; an unknown one is refused here."""
    command: Command | None = None
    record: CommandRecord | None = previous.last_command
    pending = pending_command(obj, previous)
    force = False
    if pending is not None:
        text, ident = pending
        if text in COMMANDS:
            command = Command(text)
            force = command_forced(obj)
        else:
            record = CommandRecord(
                command=text,
                id=ident,
                handled_at=rfc3339(now),
                result=f"refused: unknown command; one of {', '.join(COMMANDS)}",
            )
            events.warning(ref, Reason.FLIP_REFUSED, f"unknown command {text!r}")
    return Manual(pending, command, force, record)
